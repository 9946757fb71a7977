"""torch.distributed on emulated devices: real processes on 127.0.0.1, each job under a hard limit."""

import pytest

from distributed_helpers import ok, run_ranks

pytestmark = pytest.mark.filterwarnings("ignore")


@pytest.mark.parametrize("device_type, backend", [("xpu", "xccl"), ("cuda", "nccl"), ("xpu", "")],
                         ids=["xpu-xccl", "cuda-nccl", "xpu-default"])
def test_every_collective_and_dtype_across_two_ranks(device_type, backend):
    results = ok(run_ranks("collectives", device_type, backend, TORCHPLUG_EMULATE=device_type))
    assert [r["failures"] for r in results] == [{}, {}]
    assert {r["backend"] for r in results} == {"torchplug"}
