"""c10d, DDP and FSDP2 on docs/example-device through the host route, staged through the device's copies (issue #31).

The example device's memory is PROT_NONE host pages, which the host cannot read outside the
runtime's own copies: gloo must never see its tensors. torchplug copies them to host tensors
through the runtime, runs the CPU collective (gloo), and copies the results back before the work
completes. torchplug and the example device are pip-installed into a fresh venv; every rank is a
real process of that venv, with its own device (exdev:0, exdev:1).
"""

import json
import sys

import pytest
import torch
from conftest import run_cli, venv_with
from distributed_helpers import EXAMPLES, ok, run_ranks, run_torchrun, succeeded

pytestmark = pytest.mark.filterwarnings("ignore")


@pytest.fixture(scope="module")
def python(tmp_path_factory) -> str:
    root = tmp_path_factory.mktemp("example_device_ddp")
    return str(venv_with(root, [".", "docs/example-device"]) / "python")


@pytest.mark.parametrize("backend, reported", [
    pytest.param("gloo", "gloo", id="gloo"),
    pytest.param("", "cpu:torchplug,exdev:torchplug", id="default"),  # init_process_group() with no backend
])
def test_collectives_give_the_cpus_results_and_wrong_devices_are_refused_before_data_moves(python, backend, reported):
    results = ok(run_ranks("staged_collectives", "exdev", backend, python=python, limit=300))
    for rank, result in enumerate(results):
        # Every collective DDP uses, and the others, sync and async_op=True: the CPU's results, on the device.
        assert result["failures"] == {}, result["failures"]
        assert result["backend"] == reported
        errors = result["errors"]
        assert errors["cpu_input"].startswith("ValueError: c10d::_allgather_base_ on the 'exdev' device got "
                                              f"tensors on exdev:{rank}, cpu"), errors["cpu_input"]
        assert errors["other_device_input"].startswith(
            f"ValueError: c10d::_allgather_base_ on the 'exdev' device got tensors on exdev:{rank}, exdev:{1 - rank}")
        # A CPU input with device outputs reaches torch's CPU kernel (c10d dispatches on the flat tensor
        # arguments): gloo refuses the device tensors there, before reading them.
        assert "allgather" in errors["cpu_input_list"] and f"device=exdev:{rank}" in errors["cpu_input_list"]
        assert errors["group_without_the_device"].startswith("ValueError: c10d::allreduce_ got exdev tensors, but "
                                                             "process group '1' has no backend for 'exdev'")
        assert not any("DATA CHANGED" in e for e in errors.values()), errors
        assert result["after"] == [2.0, 2.0, 2.0]  # the ranks are still in step


def test_the_emulated_devices_collective_suite_passes_on_it(python):
    # dist_workers/collectives.py: fp16/bf16 too, an uneven all_gather, a subgroup, a functional collective
    # (DTensor's, torch.compile's) and object collectives, each against its expected values.
    results = ok(run_ranks("collectives", "exdev", "gloo", python=python, limit=300))
    assert [r["failures"] for r in results] == [{}, {}]


@pytest.mark.parametrize("script, steps", [pytest.param("train_ddp.py", "8", id="ddp"),
                                           pytest.param("train_fsdp.py", "4", id="fsdp2")])
def test_training_on_two_ranks_matches_cpu_gloo(python, tmp_path, script, steps):
    args = [str(EXAMPLES / script), "--steps", steps]
    run_torchrun(EXAMPLES / script, *args[1:], "--device", "exdev", "--save", str(tmp_path / "exdev.pt"),
                 python=python, limit=300)
    # The reference: plain gloo on the CPU, in torchplug's own venv (no example device installed).
    succeeded(run_ranks("without_finalizing", *args, "--device", "cpu", "--save", str(tmp_path / "cpu.pt"),
                        python=sys.executable))
    device, cpu = torch.load(tmp_path / "exdev.pt"), torch.load(tmp_path / "cpu.pt")
    assert device.keys() == cpu.keys()
    for name in cpu:  # every op runs the CPU's kernel on the same bytes: the same weights, bit for bit
        assert torch.equal(device[name], cpu[name]), name


def test_torchplug_list_names_the_staged_collective_backend(python):
    plugins = json.loads(run_cli("list", "--json", python=python).stdout)["plugins"]
    listed = {p["name"]: p["collectives"] for p in plugins}
    assert listed["exdev"] == "torchplug (gloo, staged through the device's copies)"
