"""torch.compile: fp16 CPU GEMMs in Inductor graphs call torchplug's kernels in every wrapper mode.

Inductor's default Python wrapper calls `extern_kernels.mm(..., out=buf)`, which goes through the
dispatcher and so reaches torchplug's kernels anyway. Its C++ wrapper (`cpp_wrapper=True`) calls
torch's kernels through C shims (`at::cpu::mm_out`) that bypass the dispatcher. A post-grad pass
therefore rewrites float16 CPU mm / addmm / bmm / baddbmm nodes to the `torchplug_cpu::` ops (same
schemas), which both wrappers call through the dispatcher. AOTInductor packages are not rewritten,
so they stay portable to machines without torchplug (and run torch's fp16 GEMM).

Importing Inductor costs over a second, so the pass is installed when Inductor's config module is
first imported, not inside ``import torch``. Passes the user set before are kept and run first.
"""

import threading
from collections.abc import Callable
from types import ModuleType
from typing import Any

import torch

from torchplug.codegen.imports import after_import

_CONFIG = "torch._inductor.config"
_GEMMS = ("mm", "addmm", "bmm", "baddbmm")
_lock = threading.Lock()
_kernels_loaded: Callable[[], bool] | None = None  # kernels.loaded: whether the GEMM ops are registered now


def install_when_inductor_loads(kernels_loaded: Callable[[], bool]) -> None:
    """Install the pass into Inductor's config now if it is imported, else right after it is.
    `kernels_loaded` tells the pass whether torchplug-cpu's GEMM ops are registered when it runs."""
    global _kernels_loaded
    with _lock:
        if _kernels_loaded is not None:
            return
        _kernels_loaded = kernels_loaded
    after_import(_CONFIG, _install, "torchplug-cpu's Inductor pass (compiled fp16 GEMMs under cpp_wrapper run torch's kernels)")


def _install(config: ModuleType) -> None:
    from torch._inductor.custom_graph_pass import CustomGraphPass, get_custom_graph_passes

    class Fp16GemmPass(CustomGraphPass):
        def __call__(self, graph: torch.fx.Graph) -> None:
            rewrite_fp16_gemms(graph)

        def uuid(self) -> Any:  # part of Inductor's FX-graph cache key
            from torch._inductor.virtualized import V

            return ("torchplug-cpu-fp16-gemm", 2, _kernels_loaded(), V.aot_compilation)

    _register_fake_kernels()
    # Inductor runs a list of post-grad passes in order: any the user set stay, unchanged, first.
    config.post_grad_custom_post_pass = [*get_custom_graph_passes(config.post_grad_custom_post_pass), Fp16GemmPass()]


def rewrite_fp16_gemms(graph: torch.fx.Graph) -> int:
    """Point float16 CPU mm/addmm/bmm/baddbmm nodes at torchplug_cpu's ops; returns how many.

    AOTInductor packages are left alone: rewritten, they would only run where torchplug-cpu is
    loaded (and torch 2.13's AOTInductor proxy executor rejects these ops' Scalar arguments).
    """
    from torch._inductor.virtualized import V

    if _kernels_loaded is None or not _kernels_loaded() or V.aot_compilation:
        return 0
    targets = {getattr(torch.ops.aten, name).default: getattr(torch.ops.torchplug_cpu, name).default for name in _GEMMS}
    rewritten = 0
    for node in graph.nodes:
        value = node.meta.get("val")
        if (node.op == "call_function" and node.target in targets and isinstance(value, torch.Tensor)
                and value.dtype == torch.float16 and value.device.type == "cpu"):
            node.target = targets[node.target]
            rewritten += 1
    return rewritten


def _register_fake_kernels() -> None:
    # Shapes and dtypes are aten's: the fake kernel of torchplug_cpu::<op> is aten::<op> on fake tensors.
    for name in _GEMMS:
        aten_op = getattr(torch.ops.aten, name).default
        torch.library.register_fake(f"torchplug_cpu::{name}", lambda *args, _op=aten_op, **kwargs: _op(*args, **kwargs))
