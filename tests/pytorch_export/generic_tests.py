"""A device-generic OpInfo test in PyTorch's own style (test_ops.py's TestCommon.test_out), whose every
case fails: what torch's runner does with it shows which expectations an export applied.
Prints {"xfail": [...], "skipped": [...], "failed": [...]} by test name."""

import json, sys, unittest
import torch
from torch.testing._internal.common_device_type import instantiate_device_type_tests, ops
from torch.testing._internal.common_methods_invocations import op_db
from torch.testing._internal.common_utils import TestCase

class TestCommon(TestCase):
    @ops([o for o in op_db if o.name in ("abs", "neg", "exp")], allowed_dtypes=(torch.float32, torch.float64))
    def test_out(self, device, dtype, op):
        raise AssertionError(f"{op.name} fails on {device}")

instantiate_device_type_tests(TestCommon, globals(), only_for="xpu", allow_xpu=True)
result = unittest.TextTestRunner(stream=open("/dev/null", "w")).run(
    unittest.defaultTestLoader.loadTestsFromTestCase(globals()["TestCommonXPU"]))
name = lambda t: t.id().split(".")[-1]
print(json.dumps({"xfail": sorted(name(t) for t, _ in result.expectedFailures),
                  "skipped": sorted(name(t) for t, _ in result.skipped),
                  "failed": sorted(name(t) for t, _ in result.failures)}))
