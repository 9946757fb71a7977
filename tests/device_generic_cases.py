"""A device-generic TestCase of torchplug's own, instantiated by torch's test harness.

torch.testing._internal.common_device_type turns TestHarness into TestHarnessCUDA / TestHarnessXPU
as it does for PyTorch's own test files: it picks the device classes from torch.cuda.is_available()
and torch.xpu.is_available(), expands @dtypes and @ops, applies @onlyCUDA, @deviceCountAtLeast and
@largeTensorTest, and runs every CUDA test on a non-default stream (CudaNonDefaultStream, through
torch._C._cuda_setStream and _cuda_setDevice) and, with PYTORCH_TEST_CUDA_MEM_LEAK_CHECK=1, inside
its memory-leak check. tests/test_device_generic_harness.py runs this file under pytest with
TORCHPLUG_EMULATE set and checks each test's outcome, so a change that breaks that harness on an
emulated device fails the project's suite. (Not named test_*.py: it runs only in those processes.)
"""

import unittest

import torch
from torch.testing import make_tensor
from torch.testing._internal.common_cuda import SM80OrLater
from torch.testing._internal.common_device_type import (
    deviceCountAtLeast,
    dtypes,
    dtypesIfCUDA,
    instantiate_device_type_tests,
    largeTensorTest,
    onlyCUDA,
    onlyOn,
    onlyXPU,
    ops,
    skipCUDAIfNoCudnn,
    tol,
    toleranceOverride,
)
from torch.testing._internal.common_methods_invocations import op_db
from torch.testing._internal.common_utils import SEED, TestCase, run_tests

OPS = [op for op in op_db if op.name in ("add", "matmul", "softmax", "sum", "nn.functional.layer_norm")
       and not op.variant_test_name]
LEAKED: list[torch.Tensor] = []  # what test_a_leak_is_caught keeps alive past its end


class TestHarness(TestCase):
    @dtypes(torch.float32, torch.float64)
    @dtypesIfCUDA(torch.float32, torch.float16, torch.bfloat16)
    @toleranceOverride({torch.float16: tol(atol=1e-2, rtol=1e-2), torch.bfloat16: tol(atol=8e-2, rtol=2e-2)})
    def test_matmul_matches_cpu(self, device, dtype):
        a, b = make_tensor((8, 16), device=device, dtype=dtype), make_tensor((16, 4), device=device, dtype=dtype)
        result = a @ b
        self.assertEqual(result.device, torch.device(device))
        self.assertEqual(result.cpu(), (a.cpu().double() @ b.cpu().double()).to(dtype))

    @ops(OPS, allowed_dtypes=(torch.float32,))
    def test_op_matches_cpu(self, device, dtype, op):
        for sample in op.sample_inputs(device, dtype):
            expected = op(*(t.cpu() if isinstance(t, torch.Tensor) else t for t in (sample.input, *sample.args)),
                          **{k: v.cpu() if isinstance(v, torch.Tensor) else v for k, v in sample.kwargs.items()})
            self.assertEqual(op(sample.input, *sample.args, **sample.kwargs), expected, atol=1e-4, rtol=1e-4)

    @onlyCUDA
    def test_cuda_tests_run_on_a_non_default_stream(self, device):
        stream = torch.cuda.current_stream()
        self.assertNotEqual(stream, torch.cuda.default_stream())
        x = torch.arange(6.0, device=device)
        done = torch.cuda.Event()
        done.record(stream)
        done.synchronize()
        self.assertEqual((x * 2).cpu(), torch.arange(0.0, 12.0, 2.0))

    @onlyXPU
    def test_xpu_tests_keep_the_default_stream(self, device):
        self.assertEqual(torch.xpu.current_stream(), torch.xpu.default_stream())

    def test_the_device_generator_is_seeded_before_each_test(self, device):
        first = torch.rand(4, device=device)
        torch.manual_seed(SEED)  # what TestCase.setUp did
        self.assertEqual(torch.rand(4, device=device), first)

    @deviceCountAtLeast(2)
    def test_copies_between_devices(self, devices):
        x = torch.arange(5.0, device=devices[0])
        y = x.to(devices[1])
        self.assertEqual(y.device, torch.device(devices[1]))
        self.assertEqual(y.cpu(), x.cpu())

    @deviceCountAtLeast(3)
    def test_needs_three_devices(self, devices):
        self.fail("deviceCountAtLeast(3) ran with fewer devices")

    @largeTensorTest("1GB")
    def test_a_large_tensor_fits(self, device):
        x = torch.ones(1 << 24, dtype=torch.uint8, device=device)
        self.assertEqual(int(x.sum()), 1 << 24)

    @largeTensorTest("4GB")
    def test_a_tensor_larger_than_the_device_is_skipped(self, device):
        self.fail("largeTensorTest('4GB') ran on a device with less free memory")

    @onlyOn(["cuda", "xpu"])
    @skipCUDAIfNoCudnn
    def test_convolution_without_cudnn(self, device):
        x, w = make_tensor((1, 2, 5, 5), device=device, dtype=torch.float32), make_tensor((3, 2, 3, 3), device=device, dtype=torch.float32)
        self.assertEqual(torch.nn.functional.conv2d(x, w).cpu(), torch.nn.functional.conv2d(x.cpu(), w.cpu()))

    @onlyCUDA
    @unittest.skipIf(not SM80OrLater, "needs an Ampere GPU or newer")
    def test_bf16_autocast_on_ampere(self, device):
        a, b = torch.randn(4, 4, device=device), torch.randn(4, 4, device=device)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            self.assertEqual((a @ b).dtype, torch.bfloat16)

    @onlyCUDA
    @unittest.expectedFailure
    def test_a_leak_is_caught(self, device):
        LEAKED.append(torch.ones(1024, device=device))  # CudaMemoryLeakCheck must raise after the body


instantiate_device_type_tests(TestHarness, globals(), only_for=("cuda", "xpu"), allow_xpu=True)

if __name__ == "__main__":
    run_tests()
