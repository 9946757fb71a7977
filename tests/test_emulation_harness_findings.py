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
