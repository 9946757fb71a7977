"""A GPU-like device added with no change to the core: tests/gpu_like_plugin (torchplug-vgpu), pip-installed.

Its folder declares everything about the device: label, emulated shape, collective library name,
launch configuration and its own torch.compile target. Emulated, it must pass the conformance
smoke tier (eager, autograd, out, noncontiguous and compile), run every collective under its own
collective name and train with DDP.
"""

import json

import pytest
import torch

from conftest import clean_env, run_process, run_python, venv_with
from distributed_helpers import EXAMPLES, ok, run_ranks, run_torchrun, succeeded

pytestmark = pytest.mark.filterwarnings("ignore")
VGPU = {"TORCHPLUG_EMULATE": "vgpu"}


@pytest.fixture(scope="module")
def bin_dir(tmp_path_factory):
    """A venv with torchplug and tests/gpu_like_plugin installed by pip (torch comes from ours)."""
    return venv_with(tmp_path_factory.mktemp("vgpu"), [".", "tests/gpu_like_plugin"])


def test_the_device_is_what_its_profile_says(bin_dir):
    found = json.loads(run_python("""
        import json, torch
        from torchplug.entrypoints import loaded_backend
        p = torch.vgpu.get_device_properties(0)
        backend = loaded_backend("vgpu")
        print(json.dumps([p.name, p.multi_processor_count, p.warp_size, p.gcnArchName, p.max_threads_per_block,
                          backend.codegen().name, str(torch.ones(2, device="vgpu").device)]))
    """, python=str(bin_dir / "python"), **VGPU).stdout.splitlines()[-1])
    assert found == ["torchplug emulated VGPU accelerator (host memory)", 48, 64, "vg1", 512,
                     "vgpu-host-cpp (emulated)", "vgpu:0"]
    listing = json.loads(run_process([bin_dir / "torchplug", "list", "--json"], env=clean_env(**VGPU)).stdout)
    vgpu = next(p for p in listing["plugins"] if p["name"] == "vgpu")
    assert (vgpu["mode"], vgpu["codegen"]) == ("emulated", "inductor: vgpu-host-cpp (emulated)")
    assert vgpu["collectives"].startswith("torchplug")


def test_it_passes_the_smoke_tier_compile_included(bin_dir, tmp_path):
    result = run_process([bin_dir / "torchplug", "check", "vgpu", "--tier", "smoke", "--report", tmp_path],
                         check=False, env=clean_env(**VGPU))
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-4000:]
    report = json.loads((tmp_path / "report.json").read_text())
    compiled = [c for c in report["cases"] if c["mode"] == "compile"]
    assert compiled and {c["status"] for c in compiled} == {"pass"}


def test_collectives_run_under_its_own_collective_name(bin_dir):
    results = ok(run_ranks("collectives", "vgpu", "vccl", python=str(bin_dir / "python"), **VGPU))
    assert [r["failures"] for r in results] == [{}, {}]
    assert {r["backend"] for r in results} == {"cpu:torchplug,vgpu:torchplug"}


def test_ddp_trains_as_on_the_cpu(bin_dir, tmp_path):
    script, steps = str(EXAMPLES / "train_ddp.py"), ("--steps", "6")
    run_torchrun(EXAMPLES / "train_ddp.py", *steps, "--device", "vgpu", "--save", str(tmp_path / "vgpu.pt"),
                 python=str(bin_dir / "python"), **VGPU)
    # The reference: plain torch on the CPU (gloo), as tests/test_distributed.py runs it.
    succeeded(run_ranks("without_finalizing", script, *steps, "--device", "cpu", "--save", str(tmp_path / "cpu.pt")))
    on_vgpu, on_cpu = torch.load(tmp_path / "vgpu.pt"), torch.load(tmp_path / "cpu.pt")
    assert on_vgpu.keys() == on_cpu.keys()
    for name in on_vgpu:
        torch.testing.assert_close(on_vgpu[name], on_cpu[name], rtol=1e-5, atol=1e-6, msg=name)
