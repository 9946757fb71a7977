"""Defects that running PyTorch's own test harness and test_ops.py on emulated cuda found.

Each test fails on the runtime before its fix (see docs/emulation.md, "PyTorch's own tests").
"""

import pytest

from emulation_helpers import run_json

ACCELERATOR_MEMORY = """
import json, torch
x = torch.ones(1000, device="{device}")  # 4000 bytes, a small-pool block
torch.accelerator.empty_cache()
stats = torch.accelerator.memory_stats()
module = getattr(torch, "{device}")
same = {{key: (stats[key], module.memory_stats()[key]) for key in
         ("allocated_bytes.all.current", "allocation.small_pool.current", "reserved_bytes.all.peak", "num_ooms")}}
peak_before = torch.accelerator.max_memory_allocated()
del x
torch.accelerator.reset_peak_memory_stats()
print(json.dumps({{"initialized": torch._C._accelerator_isAllocatorInitialized(), "same": same,
                   "allocated": torch.accelerator.memory_allocated(), "peak_before": peak_before,
                   "peak_after_reset": torch.accelerator.max_memory_allocated()}}))
"""


@pytest.mark.parametrize("device", ["cuda", "xpu"])
def test_torch_accelerator_memory_functions_read_the_emulated_allocator(device):
    """torch's largeTensorTest calls torch.accelerator.empty_cache(), which needs a c10::DeviceAllocator:
    it raised "Allocator for cuda is not a DeviceAllocator", as did every torch.accelerator memory query."""
    found = run_json(ACCELERATOR_MEMORY.format(device=device), TORCHPLUG_EMULATE=device)
    assert found["initialized"] is True
    assert all(mine == theirs for mine, theirs in found["same"].values()), found["same"]
    assert found["same"]["allocated_bytes.all.current"][0] == 4000
    assert (found["allocated"], found["peak_before"], found["peak_after_reset"]) == (0, 4000, 0)


NONCONTIGUOUS_WRITES = """
import json, warnings, torch
from torch.testing import make_tensor
found = {}
x = torch.randn(2, 3, 3, 4, 4)
expected = torch.nn.functional.avg_pool3d(x, 2)
out = make_tensor(expected.shape, dtype=torch.float32, device="cuda", noncontiguous=True)
strides, pointer = out.stride(), out.data_ptr()
returned = torch._C._nn.avg_pool3d(x.cuda(), 2, out=out)
found["avg_pool3d_out"] = [torch.equal(out.cpu(), expected), out.stride() == strides, out.data_ptr() == pointer,
                           returned is out]
wrong_shape = torch.ones(4, 3, 3, 4, 4, device="cuda").transpose(0, 1)
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    torch._C._nn.avg_pool3d(x.cuda(), 2, out=wrong_shape)
found["resized_out"] = [list(wrong_shape.shape), torch.equal(wrong_shape.cpu(), expected),
                        any("An output with one or more elements was resized" in str(w.message) for w in caught)]
torch.manual_seed(42)
fresh = torch.randn(5, 5, device="cuda")
out = make_tensor((5, 5), dtype=torch.float32, device="cuda", noncontiguous=True)
torch.manual_seed(42)
torch.randn(5, 5, device="cuda", out=out)
found["randn_out"] = torch.equal(out.cpu(), fresh.cpu())
torch.manual_seed(7)
dense = torch.empty(4, 8, device="cuda").normal_()
strided = torch.zeros(4, 16, device="cuda")[:, ::2]
torch.manual_seed(7)
strided.normal_()
found["normal_"] = torch.equal(strided.cpu(), dense.cpu())
print(json.dumps(found))
"""


def test_non_contiguous_out_and_random_fills_are_written_as_a_gpu_writes_them():
    """test_ops' test_out: avg_pool3d's CPU kernel wrote a non-contiguous out= as if it were contiguous
    (CUDA's does not: the OpInfo marks the failure for the CPU only), and randn(out=) drew other numbers
    into a non-contiguous out than into a fresh tensor, because the CPU samplers do (CUDA's fill by element)."""
    found = run_json(NONCONTIGUOUS_WRITES, TORCHPLUG_EMULATE="cuda")
    assert found == {"avg_pool3d_out": [True] * 4, "resized_out": [[2, 3, 1, 2, 2], True, True],
                     "randn_out": True, "normal_": True}, found

