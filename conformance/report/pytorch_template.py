"""The text of the test_configs.py that `--export pytorch` writes (export_pytorch.py fills it in)."""

TEST_CONFIGS = '''"""PyTorch device-generic test configuration for torchplug backend '{backend}' ({runtime}).

Written by `torchplug check {backend} --export pytorch` from {manifest}; regenerate it, do not edit.
Use it with PyTorch's own tests, beside disabled_tests.json:

    TORCH_TEST_DEVICES=path/to/test_configs.py python test/test_ops.py
    # or, in your own runner before the test module is imported:
    import test_configs; test_configs.apply()
"""

import unittest

import torch

DEVICE_TYPE = {device_type}
# [action, OpInfo full name, generic test class, test, dtypes ([]: all), "[category] reason"]
EXPECTATIONS = {expectations}
# OpInfo full names that generate tests on the device (None: all); ops the manifest skips outright are left out
OP_ALLOWLIST = {allowlist}


class _Overrides(dict):
    """op_overrides for set_test_configs, built on first use: this file may run while
    common_device_type is still importing (TORCH_TEST_DEVICES), before DecorateInfo can be imported."""

    def _build(self):
        if super().__len__() or not EXPECTATIONS:
            return
        from torch.testing._internal.opinfo.core import DecorateInfo

        for action, op, test_class, test, dtypes, reason in EXPECTATIONS:
            mark = unittest.expectedFailure if action == "xfail" else unittest.skip(reason)
            chosen = tuple(getattr(torch, d) for d in dtypes) or None
            self.setdefault(op, []).append(DecorateInfo(mark, test_class, test, dtypes=chosen))

    def __len__(self):
        return len(EXPECTATIONS)

    def items(self):
        self._build()
        return super().items()


def test_base():
    """The device type's test base in torch.testing._internal.common_device_type."""
    from torch.testing._internal import common_device_type as cdt

    return getattr(cdt, {test_base})


def apply():
    base = test_base()
    base.set_test_configs(op_overrides=_Overrides(), op_allowlist=OP_ALLOWLIST, test_exclusions=None)
    return base


TEST_CLASS = apply()  # TORCH_TEST_DEVICES adds this (already known) base once more: same test names
'''
