"""torch.distributed on emulated devices: real processes on 127.0.0.1, each job under a hard limit."""

import pytest
import torch

from distributed_helpers import EXAMPLES, ok, run_ranks, run_torchrun, succeeded

pytestmark = pytest.mark.filterwarnings("ignore")


@pytest.mark.parametrize("device_type, backend", [("xpu", "xccl"), ("cuda", "nccl")],
                         ids=["xpu-xccl", "cuda-nccl"])
def test_every_collective_and_dtype_across_two_ranks(device_type, backend):
    results = ok(run_ranks("collectives", device_type, backend, TORCHPLUG_EMULATE=device_type))
    assert [r["failures"] for r in results] == [{}, {}]
    assert {r["backend"] for r in results} == {"torchplug"}


def _trained(tmp_path, name: str, script: str, *args: str, emulate: str | None) -> dict:
    """Train with examples/<script> on 2 ranks (torchrun when emulating) and load rank 0's weights."""
    saved = tmp_path / f"{name}.pt"
    if emulate:
        run_torchrun(EXAMPLES / script, *args, "--save", str(saved), TORCHPLUG_EMULATE=emulate)
    else:  # the CPU reference needs no agent: plain ranks start faster
        succeeded(run_ranks(EXAMPLES / script, *args, "--device", "cpu", "--save", str(saved)))
    return torch.load(saved)


def test_ddp_on_two_emulated_xpu_ranks_matches_cpu_gloo(tmp_path):
    xpu = _trained(tmp_path, "xpu", "train_ddp.py", "--steps", "8", emulate="xpu")
    cpu = _trained(tmp_path, "cpu", "train_ddp.py", "--steps", "8", emulate=None)
    assert xpu.keys() == cpu.keys()
    for name in xpu:
        torch.testing.assert_close(xpu[name], cpu[name], rtol=1e-5, atol=1e-6, msg=name)


def test_fsdp2_fully_shard_on_two_emulated_xpu_ranks_matches_cpu_gloo(tmp_path):
    xpu = _trained(tmp_path, "xpu", "train_fsdp.py", "--steps", "4", emulate="xpu")
    cpu = _trained(tmp_path, "cpu", "train_fsdp.py", "--steps", "4", emulate=None)
    for name in xpu:
        torch.testing.assert_close(xpu[name], cpu[name], rtol=1e-5, atol=1e-6, msg=name)


def test_torchrun_gives_each_local_rank_its_own_emulated_device_unless_told_otherwise():
    from torchplug.emulation.config import from_environ

    assert from_environ({"LOCAL_WORLD_SIZE": "4"}).device_count("xpu") == 4
    assert from_environ({"LOCAL_WORLD_SIZE": "4", "TORCHPLUG_EMULATE_DEVICES": "1"}).device_count("xpu") == 1
    assert from_environ({"LOCAL_WORLD_SIZE": "4", "TORCHPLUG_EMULATE_DEVICES": "mps=2"}).device_count("xpu") == 4
    assert from_environ({}).device_count("xpu") == 1
