"""torch.distributed on emulated devices: real processes on 127.0.0.1, each job under a hard limit."""

import pytest
import torch

from conftest import cli_json
from distributed_helpers import EXAMPLES, ok, run_ranks, run_torchrun, succeeded
from emulation_helpers import run_json

pytestmark = pytest.mark.filterwarnings("ignore")


@pytest.fixture(scope="module", autouse=True)
def built_extensions():
    """Compile the emulated runtime and torchplug.distributed's C++ part here, once, not inside each job's limit."""
    from torchplug.distributed import build
    from torchplug.emulation import build as emulation_build

    emulation_build.load()
    build.load()


@pytest.mark.parametrize("device_type, backend, reported", [
    pytest.param("xpu", "xccl", "cpu:torchplug,xpu:torchplug", id="xpu-xccl"),
    pytest.param("cuda", "nccl", "cpu:torchplug,cuda:torchplug", id="cuda-nccl"),
    # torch's gloo serves cuda tensors; on emulated cuda it gets them as host aliases
    pytest.param("cuda", "gloo", "gloo", id="cuda-gloo", marks=pytest.mark.slow),
    # init_process_group() with no backend (the DDP example covers it on xpu)
    pytest.param("mps", "", "cpu:torchplug,mps:torchplug", id="mps-default", marks=pytest.mark.slow),
])
def test_every_collective_and_dtype_across_two_ranks(device_type, backend, reported):
    results = ok(run_ranks("collectives", device_type, backend, TORCHPLUG_EMULATE=device_type))
    assert [r["failures"] for r in results] == [{}, {}]
    assert {r["backend"] for r in results} == {reported}


def _trained(tmp_path, name: str, script: str, *args: str, emulate: str | None) -> dict:
    """Train with examples/<script> on 2 ranks (torchrun when emulating) and load rank 0's weights."""
    saved = tmp_path / f"{name}.pt"
    if emulate:
        run_torchrun(EXAMPLES / script, *args, "--save", str(saved), TORCHPLUG_EMULATE=emulate)
    else:  # the CPU reference needs no agent: plain ranks start faster
        script_args = [str(EXAMPLES / script), *args, "--device", "cpu", "--save", str(saved)]
        succeeded(run_ranks("without_finalizing", *script_args))
    return torch.load(saved)


_CPU_REFERENCE: dict[str, dict] = {}  # script -> weights trained on the CPU (gloo), once per session


@pytest.mark.parametrize("script, steps", [pytest.param("train_ddp.py", "8", id="ddp"),
                                           pytest.param("train_fsdp.py", "4", id="fsdp2")])
@pytest.mark.parametrize("emulate", ["xpu", "cuda"])
def test_training_on_two_emulated_ranks_matches_cpu_gloo(tmp_path, emulate, script, steps):
    device = _trained(tmp_path, emulate, script, "--steps", steps, emulate=emulate)
    if script not in _CPU_REFERENCE:
        _CPU_REFERENCE[script] = _trained(tmp_path, "cpu", script, "--steps", steps, emulate=None)
    cpu = _CPU_REFERENCE[script]
    assert device.keys() == cpu.keys()
    for name in device:
        torch.testing.assert_close(device[name], cpu[name], rtol=1e-5, atol=1e-6, msg=name)


def test_torchrun_gives_each_local_rank_its_own_emulated_device_unless_told_otherwise():
    from torchplug.emulation.config import from_environ

    assert from_environ({"LOCAL_WORLD_SIZE": "4"}).device_count("xpu") == 4
    assert from_environ({"LOCAL_WORLD_SIZE": "4", "TORCHPLUG_EMULATE_DEVICES": "1"}).device_count("xpu") == 1
    assert from_environ({"LOCAL_WORLD_SIZE": "4", "TORCHPLUG_EMULATE_DEVICES": "mps=2"}).device_count("xpu") == 4
    assert from_environ({}).device_count("xpu") == 1


def test_ranks_emulating_different_device_types_are_refused_on_every_rank():
    ranks = run_ranks("collectives", "xpu", "", rank_env={1: {"TORCHPLUG_EMULATE": "cuda"}}, TORCHPLUG_EMULATE="xpu")
    for r in ranks:
        assert r.returncode != 0
        assert "MixedDevicesError" in r.stderr and "the same TORCHPLUG_EMULATE" in r.stderr
    assert "rank 0 emulates xpu" in ranks[0].stderr and "rank 1 emulates cuda" in ranks[0].stderr


def test_wrong_device_tensors_are_refused_before_any_data_moves():
    for result in ok(run_ranks("misuse", TORCHPLUG_EMULATE="xpu,cuda")):
        errors = result["errors"]
        assert errors["cpu_input_xpu_output"].startswith("ValueError: c10d::_allgather_base_")
        assert "xpu:0, cpu" in errors["cpu_input_xpu_output"]
        assert errors["cuda_tensor_in_xccl_group"].startswith("ValueError: c10d::allreduce_ got cuda tensors")
        assert not any("DATA CHANGED" in e for e in errors.values())
        assert result["after"] == [3.0, 3.0, 3.0]  # the ranks are still in step


def test_a_rank_that_exits_mid_collective_makes_the_others_raise_naming_it():
    survivor, victim = run_ranks("rank_dies", "xpu", "exit", TORCHPLUG_EMULATE="xpu", pg_timeout=30, limit=90)
    assert victim.returncode == 17
    result = survivor.json()
    assert result["raised"] is not None, "the survivor's all_reduce returned as if it had succeeded"
    assert "c10d::allreduce_ failed on rank 0" in result["message"]
    assert "rank 1 (pid" in result["message"] and "exited" in result["message"]
    assert result["seconds"] < 30  # noticed when the connection closed, not at the timeout


@pytest.mark.slow
def test_a_rank_that_stops_responding_makes_the_others_raise_at_the_timeout_naming_it():
    survivor, _ = run_ranks("rank_dies", "xpu", "hang", TORCHPLUG_EMULATE="xpu", pg_timeout=10, limit=90)
    result = survivor.json()
    assert "rank 1 did not complete it" in result["message"]
    assert 9 < result["seconds"] < 60


def test_destroy_process_group_frees_the_threads_memory_and_state_it_held():
    (result,) = ok(run_ranks("lifecycle", world_size=1, TORCHPLUG_EMULATE="xpu"))
    before, during, after = result["before"], result["during"], result["after"]
    assert during["threads"] > before["threads"] and during["allocated"] > before["allocated"]  # it did hold some
    assert during["kept"] > 0  # work gloo's threads may still hold, kept so their release happens on a Python thread
    assert after == {"threads": before["threads"], "allocated": before["allocated"], "groups": 0, "kept": 0}
    assert result["initialized"] is False


def test_torchplug_list_shows_each_devices_collective_backend():
    listed = {p["name"]: p["collectives"] for p in cli_json("list", TORCHPLUG_EMULATE="xpu")["plugins"]}
    assert listed["xpu"] == "torchplug (gloo on host memory)"
    assert listed["cpu"] == "gloo"
    assert listed["cuda"] == "-"  # unavailable here: a CPU build of torch, not emulated


def test_without_emulation_torch_distributed_is_left_exactly_as_torch_made_it():
    state = run_json("""
        import json, torch, torch.distributed as dist
        from torch.distributed import distributed_c10d as c10d
        print(json.dumps({"map": dist.Backend.default_device_backend_map, "plugins": list(dist.Backend._plugins),
                          "wrapped": hasattr(c10d._new_process_group_helper, "__torchplug__"),
                          "ops": torch._C._dispatch_has_kernel_for_dispatch_key("c10d::allreduce_", "XPU")}))
    """)
    assert state == {"map": {"cpu": "gloo", "cuda": "nccl", "xpu": "xccl", "mps": "gloo"}, "plugins": [],
                     "wrapped": False, "ops": False}
