"""The core names no device: torch's own device types are described once, in entrypoints/torch_devices.py.

The rule, read from the source: every string constant of the core's Python (the packages the
torchplug distribution installs, as pyproject.toml lists them; the plugins, tests, docs, benchmarks
and examples are not the core), docstrings excluded and the constant parts of f-strings included,
is matched against ACCELERATOR. A constant that is an accelerator's name, its dispatch key, a
dispatch-key spelling built on it (AutocastCUDA, SparseXPU, ...) or a device string ("cuda:1"),
in any case, names a device. Outside the table only ALLOWED may, each with its reason. Prose in
messages ("emulated cuda") is not matched: it describes, it does not branch.
"""

import ast
import re
import tomllib
from pathlib import Path

from conftest import REPO

TABLE = "entrypoints/torch_devices.py"
# torch's accelerator device types and dispatch keys (rocm and hip: cuda on AMD; privateuseone: the
# slot a new name takes), optionally behind a dispatch-key prefix, optionally with a device index.
ACCELERATOR = re.compile(
    r"(autocast|sparse|sparsecsr|quantized|nestedtensor|autograd)?"
    r"(cuda|rocm|hip|xpu|mps|npu|mtia|hpu|privateuse1|privateuseone)(:\d+)?", re.IGNORECASE)
# (file, constant) -> why it may name a device. An entry nothing matches any more fails too.
ALLOWED = {
    ("kernels/__init__.py", name): "deprecated public attributes torchplug.kernels.CUDA/ROCM/XPU (launch configs "
                                   "that moved to the plugins' profiles), kept for plugins outside the repository"
    for name in ("CUDA", "ROCM", "XPU", "cuda", "rocm", "xpu")
}


def core_files() -> list[Path]:
    setuptools = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]
    root = REPO / setuptools["package-dir"]["torchplug"]
    folders = [root.joinpath(*package.split(".")[1:]) for package in setuptools["packages"]]
    return sorted(path for folder in folders for path in folder.glob("*.py"))


def _docstrings(tree: ast.AST) -> set[int]:
    kinds = (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)
    return {id(node.body[0].value) for node in ast.walk(tree)
            if isinstance(node, kinds) and node.body and isinstance(node.body[0], ast.Expr)
            and isinstance(node.body[0].value, ast.Constant) and isinstance(node.body[0].value.value, str)}


def device_names(path: Path) -> list[tuple[int, str]]:
    """(line, constant) for each string constant in `path` that names an accelerator."""
    tree = ast.parse(path.read_text(), str(path))
    docstrings = _docstrings(tree)
    return sorted((node.lineno, node.value) for node in ast.walk(tree)
                  if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings
                  and ACCELERATOR.fullmatch(node.value))


def test_the_rule_sees_device_names_and_leaves_prose_and_docstrings_alone(tmp_path):
    sample = tmp_path / "sample.py"
    sample.write_text('"""Runs on cuda."""\n'
                      'def f(t):\n    """cuda"""\n'
                      '    if t.device.type == "mps": key = "AutocastCUDA"\n'
                      '    name = f"{t}xpu{t}"\n'
                      '    torch.device("cuda:1"); warn("emulated cuda is slow"); slot = "privateuseone"\n'
                      '    return "inputs", "dumps", "chip"\n')
    assert sorted(value for _, value in device_names(sample)) == ["AutocastCUDA", "cuda:1", "mps", "privateuseone", "xpu"]


def test_the_core_names_no_device_outside_the_table_of_torchs_device_types():
    files = core_files()
    assert REPO / TABLE in files and REPO / "emulation" / "hooks.py" in files
    assert not any(part in ("devices", "tests", "docs", "benchmarks", "examples")
                   for path in files for part in path.relative_to(REPO).parts)
    found, used = [], set()
    for path in files:
        relative = path.relative_to(REPO).as_posix()
        if relative == TABLE:
            continue
        for line, value in device_names(path):
            if (relative, value) in ALLOWED:
                used.add((relative, value))
            else:
                found.append(f"{relative}:{line}: {value!r}")
    assert not found, (
        "the core names a device outside entrypoints/torch_devices.py; describe what torch does for the type "
        "there (or in the plugin's DeviceProfile) and look it up instead:\n" + "\n".join(found))
    assert not set(ALLOWED) - used, f"allowed names no longer in the core, remove them: {sorted(set(ALLOWED) - used)}"


def test_the_table_holds_torchs_own_facts():
    """The table is where the names are (else the rule above would pass vacuously), and what it says is
    what this torch says: each type number names its type, the build probes answer as torch.version does."""
    import torch
    from torchplug.entrypoints.torch_devices import (
        CUDA, PRIVATEUSE1, TORCH_DEVICE_TYPES, by_dispatch_key, dispatch_key_of, sharing_backends)

    names = {value for _, value in device_names(REPO / TABLE)}
    assert {"cuda", "rocm", "xpu", "mps", "CUDA", "XPU", "MPS", "PrivateUse1", "privateuseone"} <= names
    for known in (*TORCH_DEVICE_TYPES.values(), PRIVATEUSE1):
        assert torch.Stream(stream_id=0, device_index=0, device_type=known.type_id).device.type == known.name
        assert by_dispatch_key(known.dispatch_key) is known
        assert getattr(torch._C.DispatchKey, known.dispatch_key).name == known.dispatch_key
    assert CUDA.built() == bool(torch.version.cuda or torch.version.hip)
    assert sharing_backends("cuda") == ("cuda", "rocm") and sharing_backends("xpu") == ()
    assert dispatch_key_of("npu") == "PrivateUse1" and dispatch_key_of("mps") == "MPS"
