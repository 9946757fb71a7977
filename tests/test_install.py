"""End to end: pip-install the real plugin folders into a fresh virtual environment."""

from conftest import NPU_ROUND_TRIP, NPU_ROUND_TRIP_PRINTS, REAL_PLUGINS, clean_env, run_process, run_python, venv_with

FOLDERS = [".", *(f"devices/{name}" for name in REAL_PLUGINS), "docs/example-plugin"]


def test_pip_installed_plugins_autoload_in_a_fresh_venv(tmp_path):
    # Everything of ours is installed into a fresh venv for real; torch comes from this interpreter's.
    bin_dir = venv_with(tmp_path, FOLDERS)
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
    assert "torchplug-example" in npu and "unavailable" in npu and "binds no device runtime" in npu

    doctor = run_process([bin_dir / "torchplug", "doctor"], check=False, env=clean_env())
    assert doctor.returncode == 0, doctor.stdout + doctor.stderr
    cpu = next(line for line in doctor.stdout.splitlines() if line.startswith("cpu "))
    assert cpu.split()[:3] == ["cpu", "native", "PASS"] and "fp16 GEMM" in cpu, cpu


