"""Defects that running PyTorch's own test harness and test_ops.py on emulated cuda found.

Each test fails on the runtime before its fix (see docs/emulation.md, "PyTorch's own tests").
"""

import pytest

from emulation_helpers import run_json

ACCELERATOR_MEMORY = """
import json, torch
x = torch.ones(1000, device="{device}")  # 4000 bytes, a small-pool block of 4096 (512-byte blocks)
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
    assert found["same"]["allocated_bytes.all.current"][0] == 4096
    assert (found["allocated"], found["peak_before"], found["peak_after_reset"]) == (0, 4096, 0)


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


JITERATOR = """
import json, torch
from torch.cuda.jiterator import _create_jit_fn, _create_multi_output_jit_fn
found = {}
axpy = _create_jit_fn("template <typename T> T axpy(T x, T y, T alpha) { return x + alpha * y; }", alpha=1)
a, b = torch.randn(3, 4), torch.randn(4)
result = axpy(a.cuda(), b.cuda(), alpha=-3.14)
found["broadcast_extra_arg"] = [str(result.device), torch.allclose(result.cpu(), a - 3.14 * b)]
half = axpy(a.half().cuda(), b.half().cuda())  # computed in float, stored as half, as CUDA's jiterator does
found["half"] = [str(half.dtype), torch.equal(half.cpu(), (a.half().float() + b.half().float()).half())]
mixed = axpy(torch.arange(4, device="cuda"), torch.ones(4, dtype=torch.float64, device="cuda"), alpha=2)
found["promotion"] = [str(mixed.dtype), mixed.tolist()]
split = _create_multi_output_jit_fn(
    "template <typename T> void split(T x, T y, T& hi, T& wave) { hi = ::max(x, y); wave = ::sin(x) - y; }", num_outputs=2)
hi, wave = split(a.cuda(), b.cuda())
found["by_reference"] = [torch.equal(hi.cpu(), torch.maximum(a, b)), torch.allclose(wave.cpu(), a.sin() - b)]
found["empty"] = list(axpy(torch.empty(0, 4, device="cuda"), b.cuda()).shape)
try:
    axpy(a.cuda(), b)
except RuntimeError as err:
    found["cpu_input"] = str(err)
try:
    _create_jit_fn("template <typename T> T broken(T x) { return x +; }")(a.cuda())
except RuntimeError as err:
    found["compile_error"] = str(err).splitlines()[0]
print(json.dumps(found))
"""


def test_jiterator_kernels_run_on_emulated_cuda():
    """test_ops' jiterator OpInfos: torch.cuda.jiterator's kernels raised "module 'torch._C' has no attribute
    '_cuda_jiterator_compile_and_launch_kernel'". They compile for the host with CUDA's jiterator's rules."""
    found = run_json(JITERATOR, TORCHPLUG_EMULATE="cuda")
    assert found["broadcast_extra_arg"] == ["cuda:0", True]
    assert found["half"] == ["torch.float16", True]
    assert found["promotion"] == ["torch.float64", [2.0, 3.0, 4.0, 5.0]]
    assert found["by_reference"] == [True, True] and found["empty"] == [0, 4]
    assert "same device" in found["cpu_input"] and "'cpu'" in found["cpu_input"]
    assert found["compile_error"] == "jiterator kernel 'broken' did not compile for emulated cuda's host (c++):"
