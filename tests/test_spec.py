"""BackendSpec validation happens at registration and names every problem."""

import pytest
import torch

from torchplug.entrypoints import BackendSpec, SpecError

GOOD = dict(name="xpu", device_type="xpu", dispatch_key="XPU", dtypes=frozenset({torch.float32, torch.bool, torch.uint8}),
            torch_range=">=2.13,<2.16")


def test_valid_specs_pass():
    BackendSpec(**GOOD).validate("2.13.0+cpu")
    BackendSpec(**{**GOOD, "name": "npu", "device_type": "npu", "dispatch_key": "PrivateUse1"}).validate("2.13.0")


def test_spec_is_frozen_data():
    with pytest.raises(AttributeError):
        BackendSpec(**GOOD).name = "other"


@pytest.mark.parametrize("change, message", [
    ({"name": "X-PU"}, "name 'X-PU' must be lowercase"),
    ({"dispatch_key": "CUDA"}, "device_type 'xpu' dispatches through 'XPU', not 'CUDA'"),
    ({"device_type": "npu"}, "dispatches through 'PrivateUse1'"),
    ({"dtypes": frozenset()}, "dtypes must be a non-empty set of torch.dtype"),
    ({"dtypes": frozenset({"float32"})}, "dtypes must be a non-empty set of torch.dtype"),
    ({"api_version": 2}, "api_version 2 is not the torchplug plugin API 1"),
    ({"torch_range": ">=3.0"}, "supports torch >=3.0, not the installed 2.13.0"),
    ({"torch_range": "latest"}, "torch_range: 'latest'"),
])
def test_invalid_specs_name_the_problem(change, message):
    with pytest.raises(SpecError, match="invalid BackendSpec") as info:
        BackendSpec(**{**GOOD, **change}).validate("2.13.0")
    assert message in str(info.value)


def test_every_problem_is_reported_at_once():
    with pytest.raises(SpecError) as info:
        BackendSpec(**{**GOOD, "name": "Bad", "api_version": 7}).validate("2.13.0")
    assert "name 'Bad'" in str(info.value) and "api_version 7" in str(info.value)


def test_priority_still_loads_but_warns_that_it_has_no_effect():
    with pytest.warns(DeprecationWarning, match="priority=5, which has no effect and will be removed"):
        BackendSpec(**{**GOOD, "priority": 5}).validate("2.13.0")
