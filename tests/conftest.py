"""Shared helpers: run Python in a fresh interpreter, and put fake plugin distributions on a path."""

import json
import os
import shutil
import subprocess
import sys
import textwrap
import venv
from collections.abc import Sequence
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
# The repository's plugins: its devices/ folders, the list's one source (entrypoints/loader.py).
REAL_PLUGINS = sorted(path.parent.name for path in (REPO / "devices").glob("*/pyproject.toml"))
_TORCHPLUG_VARS = ("TORCHPLUG_", "TORCH_DEVICE_BACKEND_AUTOLOAD")
_KEPT_VARS = ("TORCHPLUG_CACHE", "TORCHPLUG_VERBOSE_BUILD")  # where and how extensions build, not behaviour
# With the example npu plugin installed and emulated: print a tensor and load a checkpoint onto the
# device (torch moves storages as uint8 tensors, so the plugin must declare uint8).
NPU_ROUND_TRIP = """
import io, torch
x = torch.ones(2, device="npu")
print(x)
checkpoint = io.BytesIO()
torch.save(x, checkpoint)
checkpoint.seek(0)
print(torch.load(checkpoint, map_location="npu").device)
"""
NPU_ROUND_TRIP_PRINTS = ["tensor([1.,", "1.],", "device='npu:0')", "npu:0"]


def pytest_addoption(parser):
    parser.addoption("--runslow", action="store_true", help="also run the tests marked slow")


def pytest_sessionstart(session):
    """Build torchplug-cpu's kernels (and the dispatcher's C++ half) before any test runs.

    Inside ``import torch`` the plugin only loads cached builds, so every test process then finds
    them built and active, whatever order the tests run in.
    """
    try:
        from torchplug_cpu import kernels
    except ImportError:  # the CPU plugin is not installed: its tests skip themselves
        return
    from torchplug.entrypoints import loaded

    if "cpu" in loaded():  # not when it declares another torch than this one (e.g. the kernels' 2.11 runs)
        kernels.load()


# The compatibility tier (`pytest -m compat`, run by .ci/compat on every other supported torch): the
# modules that reach into torch internals and so break first on a new torch release.
COMPAT_MODULES = {
    "test_autoload", "test_versions", "test_spec", "test_emulation", "test_emulation_setup", "test_dispatcher",
    "test_compile", "test_distributed", "test_conformance", "test_emulated_training", "test_emulation_cuda_build",
    "test_cuda_fidelity_collectives", "test_cuda_graphs", "test_cuda_fidelity", "test_cuda_fidelity_results",
    "test_cuda_inventory", "test_example_device", "test_example_device_ddp", "test_example_device_compile",
}


def pytest_collection_modifyitems(config, items):
    for item in items:
        if item.module.__name__ in COMPAT_MODULES:
            item.add_marker(pytest.mark.compat)
    if config.getoption("--runslow"):
        return
    skip = pytest.mark.skip(reason="slow tier: run with --runslow")
    for item in items:
        if "slow" in item.keywords:
            item.add_marker(skip)


# The CPU kernels' instruction-set paths, best first; avx512emu (the AVX-512 path's 16-lane code
# and tiling on AVX2) is last because it is a test path, never the default.
CPU_ISAS = ["avx512", "avx2", "scalar", "avx512emu"]


@pytest.fixture(params=CPU_ISAS)
def isa(request, ext):
    """Each CPU-kernel ISA path this machine can run (`ext` is the test module's extension fixture)."""
    if request.param not in ext.supported_isas():
        pytest.skip(f"this CPU cannot run the {request.param} path (it supports {ext.supported_isas()})")
    from torchplug_cpu import kernels

    previous = ext.current_isa()
    kernels.select_isa(request.param)  # builds the avx512emu test path the first time
    yield request.param
    ext.set_isa(previous)


def clean_env(**overrides: str) -> dict[str, str]:
    """The current environment without torchplug settings (but with its build cache), plus `overrides`."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(_TORCHPLUG_VARS) or k in _KEPT_VARS}
    env.update(overrides)
    return env


def run_process(command: Sequence[str | os.PathLike], *, check: bool = True, timeout: int = 600,
                **kwargs) -> subprocess.CompletedProcess:
    """subprocess.run with text output captured; a failure (with `check`) shows the child's stdout and stderr."""
    result = subprocess.run([str(part) for part in command], capture_output=True, text=True, timeout=timeout, **kwargs)
    if check and result.returncode != 0:
        raise AssertionError(f"{' '.join(map(str, command))} failed ({result.returncode}):\n"
                             f"--- stdout\n{result.stdout}\n--- stderr\n{result.stderr}")
    return result


# What a fresh clone lacks: setuptools would pack a stale build/ folder's files into the wheel.
LOCAL_ONLY = shutil.ignore_patterns("build", "*.egg-info", "__pycache__", ".git", ".pytest_cache", ".venv*")


def _our_site_packages() -> list[str]:
    """The site-packages folders this interpreter imports from (a venv's own, and any it chains to)."""
    return [p for p in dict.fromkeys(sys.path) if Path(p).name in ("site-packages", "dist-packages")]


def venv_over_ours(root: Path) -> Path:
    """A fresh venv in root/venv that also imports this interpreter's packages; its bin folder.

    A .pth file names our site-packages, so the venv reuses torch and setuptools. (--system-site-packages
    would give it the *base* interpreter's packages: under a venv, no torch and perhaps an old setuptools.)
    What is pip-installed into it comes first on its path.
    """
    venv.create(root / "venv", with_pip=False)
    bin_dir = root / "venv" / "bin"
    inner_site = run_process([bin_dir / "python", "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"])
    (Path(inner_site.stdout.strip()) / "outer.pth").write_text("\n".join(_our_site_packages()) + "\n")
    return bin_dir


def pip_install(bin_dir: Path, folders: Sequence[Path], cwd: Path) -> None:
    """pip-install `folders` into the venv of `bin_dir` for real: offline, without build isolation or dependencies."""
    run_process([sys.executable, "-m", "pip", "--python", bin_dir / "python", "install", "-q", "--no-deps",
                 "--no-index", "--no-build-isolation", "--ignore-installed", *folders], cwd=cwd, env=clean_env())


def run_python(code: str, *, path: Path | None = None, python: str = sys.executable,
               check: bool = True, timeout: int = 600, **env: str) -> subprocess.CompletedProcess:
    """Run `code` in a new interpreter (cwd /, so the checkout is not importable by accident)."""
    environ = clean_env(**env)
    if path is not None:
        environ["PYTHONPATH"] = str(path)
    return run_process([python, "-c", textwrap.dedent(code)], check=check, timeout=timeout, env=environ, cwd="/")


def run_cli(*args: str, path: Path | None = None, python: str = sys.executable, **env: str) -> subprocess.CompletedProcess:
    code = f"import sys; from torchplug.cli import main; sys.exit(main({list(args)!r}))"
    return run_python(code, path=path, python=python, check=False, **env)


def cli_json(*args: str, path: Path | None = None, **env: str) -> dict:
    result = run_cli(*args, "--json", path=path, **env)
    return json.loads(result.stdout)


def make_plugin(root: Path, name: str, module_source: str, *, requires: tuple[str, ...] = (),
                target: str | None = None) -> None:
    """Write an installed-looking distribution: a module plus real dist-info metadata."""
    module = f"tp_fake_{name}"
    dist = f"tp_fake_{name}-0.1.dist-info"
    (root / f"{module}.py").write_text(textwrap.dedent(module_source))
    (root / dist).mkdir()
    metadata = ["Metadata-Version: 2.1", f"Name: tp-fake-{name}", "Version: 0.1"]
    metadata += [f"Requires-Dist: {r}" for r in requires]
    (root / dist / "METADATA").write_text("\n".join(metadata) + "\n")
    (root / dist / "entry_points.txt").write_text(
        f"[torch.backends]\n{module} = torchplug.entrypoints:autoload\n\n"
        f"[torchplug.devices]\n{name} = {target or module + ':backend'}\n"
    )


def plugin_source(name: str, tail: str = "backend = FakeBackend()", spec_extra: str = "") -> str:
    """A well-formed plugin module, then `tail` (which may break it)."""
    return textwrap.dedent(f"""
        import torch
        from torchplug.entrypoints import Backend, BackendSpec

        class FakeBackend(Backend):
            spec = BackendSpec(name={name!r}, device_type="cpu", dispatch_key="CPU",
                               dtypes=frozenset({{torch.float32}}), torch_range=">=2.13,<2.16"{spec_extra})

            def native_unavailable_reason(self):
                return None
    """) + textwrap.dedent(tail)


def venv_with(root: Path, folders: Sequence[str]) -> Path:
    """A fresh venv (venv_over_ours) with the repository `folders` pip-installed from a copy of the
    checkout; its bin folder."""
    source = root / "src"
    shutil.copytree(REPO, source, ignore=LOCAL_ONLY)
    bin_dir = venv_over_ours(root)
    pip_install(bin_dir, [source / f for f in folders], cwd=root)
    return bin_dir
