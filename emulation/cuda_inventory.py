"""torch.cuda's surface on emulated cuda, name by name: faithful, a documented no-op, or an error saying why.

Covers every public name of torch.cuda and its submodules, torch.backends.cuda and
torch.backends.cudnn, and the private torch._C bindings that torch's own torch.cuda Python and
test harness call. "faithful" means the name answers as on a GPU of the emulated model (torch's own
code running over the emulated runtime, or the runtime's own answer); "no-op" that there is
nothing for it to do on a host-memory device that runs its kernels at once (its documented
answer is in `NO_OP_NAMES`); "raises" that it raises an error naming what the emulated device lacks.

    python -m torchplug.emulation.cuda_inventory     # on emulated cuda: the table of docs/emulation-inventory.md

tests/test_cuda_inventory.py walks the live modules, so a name a new torch release adds fails the
test until it is classified here, and calls each name to check its verdict.
"""

import importlib
import re
import sys
import types
from pathlib import Path

import torch

from ..entrypoints.torch_devices import CUDA
from .cuda_bindings import MODULES, PUBLIC_REFUSED, Bindings

FAITHFUL, NO_OP, RAISES = "faithful", "no-op", "raises"
# The jiterator's whole API is private by name.
EXTRA_NAMES = {"torch.cuda.jiterator": ("_create_jit_fn", "_create_multi_output_jit_fn")}

# Public names with nothing to do on the emulated device, and what they answer.
NO_OP_NAMES = {
    "synchronize": "returns at once: kernels ran when they were issued",
    "ipc_collect": "no memory is shared through CUDA IPC",
    "empty_cache": "nothing is cached: freed memory returns at once",
    "current_blas_handle": "0: no cuBLAS handle", "current_solver_handle": "0: no cuSOLVER handle",
    "set_per_process_memory_fraction": "recorded and reported back; the capacity is TORCHPLUG_EMULATE_MEMORY",
    "set_sync_debug_mode": "recorded and reported back; synchronising calls are not flagged",
    "memory_snapshot": "no segments: blocks are not pooled outside graphs",
    "host_memory_stats": "{}: pinned memory is plain host memory",
    "host_memory_stats_as_nested_dict": "{}: pinned memory is plain host memory",
    "reset_peak_host_memory_stats": "pinned memory is plain host memory",
    "reset_accumulated_host_memory_stats": "pinned memory is plain host memory",
    "caching_allocator_enable": "the emulated allocator does not cache",
    "caching_allocator_disabled": "the emulated allocator does not cache",
    "range_push": "NVTX with no tool attached (-2)", "range_pop": "NVTX with no tool attached (-2)",
    "range_start": "NVTX with no tool attached (0)", "range_end": "NVTX with no tool attached",
    "mark": "NVTX with no tool attached", "range": "NVTX with no tool attached",
}


# Names of the same shape in torch's Python that are not torch._C bindings: its own module globals
# (cuda-python's modules, the runtime libraries it loads) and the allocator class it subclasses.
NOT_BINDINGS = frozenset({"_cuda_bindings_driver", "_cuda_bindings_runtime", "_cuda_bindings_version", "_cuda_debug",
                          "_cuda_driver", "_cuda_runtime", "_cuda_python_bindings_usable", "_cuda_load_module",
                          "_cuda_graph_tools_id_available", "_cuda_CUDAAllocator"})


# The legacy typed tensor classes (torch.cuda.FloatTensor, ...) are type objects a CUDA build
# registers in C++: a CPU wheel refuses to make them with torch's own "Torch not compiled with CUDA".
TYPED_TENSORS = frozenset(f"{kind}Tensor" for kind in ("BFloat16", "Bool", "Byte", "Char", "Double", "Float", "Half",
                                                       "Int", "Long", "Short"))


def public_names(module_name: str) -> list[str]:
    module = importlib.import_module(module_name)
    names = list(getattr(module, "__all__", None) or [n for n in dir(module) if not n.startswith("_")])
    names += EXTRA_NAMES.get(module_name, ())
    return sorted(n for n in set(names)
                  if hasattr(module, n) and not isinstance(getattr(module, n), types.ModuleType))


def referenced_bindings() -> list[str]:
    """The torch._C._cuda_* bindings that torch's installed torch.cuda, torch.backends and test helpers call."""
    root = Path(torch.__file__).parent
    files = [*(root / CUDA.name).rglob("*.py"), root / "backends/cuda/__init__.py", root / "backends/cudnn/__init__.py",
             root / "testing/_internal/common_cuda.py", root / "testing/_internal/common_utils.py"]
    found = {name for path in files if path.exists() for name in re.findall(r"\b_cuda_\w+", path.read_text())}
    return sorted(found - NOT_BINDINGS)


def binding_verdict(name: str) -> tuple[str, str]:
    """The verdict of one private binding, from the emulated runtime's own tables."""
    from . import graph_trees

    if name in Bindings.REFUSED:
        return RAISES, Bindings.REFUSED[name]
    if name in Bindings.NO_OPS:
        return NO_OP, (getattr(Bindings, name).__doc__ or "").strip().split("\n")[0]
    if hasattr(Bindings, name):
        return FAITHFUL, "answered by the emulated runtime"
    if name in graph_trees.BINDINGS or name == "_cuda_isCurrentStreamCapturing":
        return FAITHFUL, "CUDA graphs' pools and capture state (emulation/graphs.py, graph_trees.py)"
    return "unclassified", ""


def verdict(name: str) -> tuple[str, str]:
    if name.startswith("_cuda_"):
        return binding_verdict(name)
    if name in PUBLIC_REFUSED:
        return RAISES, PUBLIC_REFUSED[name]
    if name in TYPED_TENSORS and not CUDA.built():
        return RAISES, "a CPU wheel has no CUDA tensor types (torch's own error); torch.tensor(..., device='cuda') works"
    if name in NO_OP_NAMES:
        return NO_OP, NO_OP_NAMES[name]
    return FAITHFUL, ""


def inventory() -> list[tuple[str, str, str, str]]:
    """(module, name, verdict, note) for every name, the referenced bindings under torch._C."""
    rows = [(module, name, *verdict(name)) for module in MODULES for name in public_names(module)]
    rows += [("torch._C", name, *verdict(name)) for name in referenced_bindings()]
    return rows


def markdown() -> str:
    rows = inventory()
    counts = {kind: sum(1 for row in rows if row[2] == kind) for kind in (FAITHFUL, NO_OP, RAISES)}
    lines = [f"| module | name | on emulated cuda | note |", "|---|---|---|---|"]
    lines += [f"| `{module}` | `{name}` | {kind} | {note} |" for module, name, kind, note in rows]
    summary = ", ".join(f"{count} {kind}" for kind, count in counts.items())
    return f"{len(rows)} names on torch {torch.__version__}: {summary}.\n\n" + "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.stdout.write(markdown())
