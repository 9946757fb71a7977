"""End to end: pip-install the real plugin folders into a fresh virtual environment."""

import shutil
import sys
import venv
from pathlib import Path

from conftest import NPU_ROUND_TRIP, NPU_ROUND_TRIP_PRINTS, REAL_PLUGINS, REPO, clean_env, run_process, run_python

FOLDERS = [".", *(f"devices/{name}" for name in REAL_PLUGINS), "docs/example-plugin"]
# What a fresh clone lacks: setuptools would pack a stale build/ folder's files into the wheel.
LOCAL_ONLY = shutil.ignore_patterns("build", "*.egg-info", "__pycache__", ".git", ".pytest_cache", ".venv")


def _our_site_packages() -> list[str]:
    """The site-packages folders this interpreter imports from (a venv's own, and any it chains to)."""
    return [p for p in dict.fromkeys(sys.path) if Path(p).name in ("site-packages", "dist-packages")]


def test_pip_installed_plugins_autoload_in_a_fresh_venv(tmp_path):
    # The inner venv reuses this interpreter's torch and setuptools through a .pth file naming our
    # site-packages. (--system-site-packages would give it the *base* interpreter's packages: under
    # a venv, no torch and perhaps an old setuptools.) Everything of ours is installed into it for
    # real, offline, without build isolation; its own site-packages come first on its path.
    source = tmp_path / "src"
    shutil.copytree(REPO, source, ignore=LOCAL_ONLY)
    venv.create(tmp_path / "venv", with_pip=False)
    bin_dir = tmp_path / "venv" / "bin"
    inner_site = run_process([bin_dir / "python", "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"])
    (Path(inner_site.stdout.strip()) / "outer.pth").write_text("\n".join(_our_site_packages()) + "\n")
    run_process([sys.executable, "-m", "pip", "--python", bin_dir / "python", "install", "-q", "--no-deps",
                 "--no-index", "--no-build-isolation", "--ignore-installed", *(source / f for f in FOLDERS)],
                cwd=tmp_path, env=clean_env())
    out = run_python("""
        import torch
        import torchplug, torchplug_cpu, torchplug_example
        print(torchplug.entrypoints.loaded())
        print(torchplug.__file__, torchplug_cpu.__file__, torchplug_example.__file__)
    """, python=str(bin_dir / "python")).stdout.splitlines()
    assert out[0] == str(sorted(REAL_PLUGINS + ["npu"]))
    printed = run_python(NPU_ROUND_TRIP, python=str(bin_dir / "python"), TORCHPLUG_EMULATE="npu")
    assert printed.stdout.split() == NPU_ROUND_TRIP_PRINTS, printed.stdout + printed.stderr
    assert all(path.startswith(str(tmp_path / "venv")) for path in out[1].split()), out[1]

    listing = run_process([bin_dir / "torchplug", "list"], check=False, env=clean_env())
    npu = next(line for line in listing.stdout.splitlines() if line.startswith("npu "))
    assert "torchplug-example" in npu and "unavailable" in npu and "'npu_runtime' is not installed" in npu

    doctor = run_process([bin_dir / "torchplug", "doctor"], check=False, env=clean_env())
    assert doctor.returncode == 0, doctor.stdout + doctor.stderr
    cpu = next(line for line in doctor.stdout.splitlines() if line.startswith("cpu "))
    assert cpu.split()[:3] == ["cpu", "native", "PASS"] and "fp16 GEMM" in cpu, cpu


