"""End to end: pip-install the real plugin folders into a fresh virtual environment."""

import shutil
import subprocess
import sys
import venv

from conftest import REAL_PLUGINS, REPO, clean_env, run_python

FOLDERS = [".", *(f"devices/{name}" for name in REAL_PLUGINS), "docs/example-plugin"]
# What a fresh clone lacks: setuptools would pack a stale build/ folder's files into the wheel.
LOCAL_ONLY = shutil.ignore_patterns("build", "*.egg-info", "__pycache__", ".git", ".pytest_cache")


def test_pip_installed_plugins_autoload_in_a_fresh_venv(tmp_path):
    # The venv reuses the installed torch through the system site-packages; everything of ours is
    # installed into it for real, offline, with the installed setuptools.
    # pip runs from this interpreter and targets the venv (--python), building with the
    # setuptools it sees through the system site-packages.
    source = tmp_path / "src"
    shutil.copytree(REPO, source, ignore=LOCAL_ONLY)
    venv.create(tmp_path / "venv", system_site_packages=True, with_pip=False)
    bin_dir = tmp_path / "venv" / "bin"
    subprocess.run(
        [sys.executable, "-m", "pip", "--python", bin_dir / "python", "install", "-q", "--no-deps", "--no-index",
         "--no-build-isolation", "--ignore-installed", *(str(source / folder) for folder in FOLDERS)],
        check=True, cwd=tmp_path, env=clean_env(), capture_output=True,
    )
    out = run_python("""
        import torch
        import torchplug, torchplug_cpu, torchplug_example
        print(torchplug.entrypoints.loaded())
        print(torchplug.__file__, torchplug_cpu.__file__, torchplug_example.__file__)
    """, python=str(bin_dir / "python")).stdout.splitlines()
    assert out[0] == str(sorted(REAL_PLUGINS + ["npu"]))
    assert all(path.startswith(str(tmp_path / "venv")) for path in out[1].split()), out[1]

    listing = subprocess.run([bin_dir / "torchplug", "list"], env=clean_env(), capture_output=True, text=True)
    npu = next(line for line in listing.stdout.splitlines() if line.startswith("npu "))
    assert "torchplug-example" in npu and "unavailable" in npu and "'npu_runtime' is not installed" in npu

    doctor = subprocess.run([bin_dir / "torchplug", "doctor"], env=clean_env(), capture_output=True, text=True)
    assert doctor.returncode == 0, doctor.stdout + doctor.stderr
    cpu = next(line for line in doctor.stdout.splitlines() if line.startswith("cpu "))
    assert cpu.split()[:3] == ["cpu", "native", "PASS"] and "fp16 GEMM" in cpu, cpu


