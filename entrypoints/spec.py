"""BackendSpec: what a backend declares about itself, as data checked when it registers."""

import re
from dataclasses import dataclass

import torch

from .. import API_VERSION, warn
from .profile import DeviceProfile
from .versions import InvalidRange, check_range, version_in_range

from .torch_devices import dispatch_key_of
_NAME = re.compile(r"^[a-z][a-z0-9_]*$")
TORCH_NEEDS = (torch.bool, torch.uint8)  # dtypes torch's own machinery creates on any device


class SpecError(ValueError):
    """A BackendSpec that cannot be registered; the message lists every problem found."""


@dataclass(frozen=True)
class BackendSpec:
    name: str  # backend name: the plugin's entry point name, e.g. "rocm"
    device_type: str  # torch device type it serves, e.g. "cuda" for rocm
    dispatch_key: str  # torch dispatch key its kernels register under
    dtypes: frozenset[torch.dtype]  # dtypes the device supports
    torch_range: str  # PEP 440 range of torch versions, e.g. ">=2.13,<2.14"
    profile: DeviceProfile = DeviceProfile()  # what the device is like: label, emulated shape, collectives, ...
    # Deprecated, without effect: backends that share a device type never serve it together (a torch
    # build has one runtime for it, and emulation takes one backend per type). Kept so that plugins that
    # pass it still load; validate() warns.
    priority: int = 0
    api_version: int = API_VERSION

    def validate(self, torch_version: str) -> None:
        problems = []
        if not _NAME.match(self.name):
            problems.append(f"name {self.name!r} must be lowercase letters, digits and '_'")
        expected_key = dispatch_key_of(self.device_type)
        if not _NAME.match(self.device_type):
            problems.append(f"device_type {self.device_type!r} is not a device type name")
        elif self.dispatch_key != expected_key:
            problems.append(
                f"device_type {self.device_type!r} dispatches through {expected_key!r}, "
                f"not {self.dispatch_key!r}"
            )
        if not self.dtypes or not all(isinstance(d, torch.dtype) for d in self.dtypes):
            problems.append("dtypes must be a non-empty set of torch.dtype")
        if self.api_version != API_VERSION:
            problems.append(
                f"api_version {self.api_version} is not the torchplug plugin API "
                f"{API_VERSION}; rebuild the plugin against this torchplug"
            )
        try:
            check_range(self.torch_range)
            if not version_in_range(torch_version, self.torch_range):
                problems.append(f"supports torch {self.torch_range}, not the installed {torch_version}")
        except InvalidRange as err:
            problems.append(f"torch_range: {err}")
        models = [shape.model for shape in (self.profile.shape, *self.profile.models)]
        if self.profile.models and (not all(models) or len(set(models)) != len(models)):
            problems.append(f"profile models must each have a distinct model name, got {models}")
        if problems:
            raise SpecError(f"invalid BackendSpec for {self.name!r}: " + "; ".join(problems))
        if self.priority:
            warn(f"torchplug: BackendSpec for {self.name!r} sets priority={self.priority}, which has no effect and "
                 "will be removed (backends sharing a device type never serve it together); drop the argument",
                 DeprecationWarning)
        if missing := [str(d) for d in TORCH_NEEDS if d not in self.dtypes]:
            warn(f"torchplug: BackendSpec for {self.name!r} lacks {' and '.join(missing)}, which torch itself uses "
                 "on every device (comparisons and print(tensor) make bool tensors; torch.save/torch.load move "
                 "storages as uint8): add them to its dtypes")


# The tensor dtypes torch's CPU and CUDA runtimes support; devices declare a subset.
STANDARD_DTYPES = frozenset({
    torch.bool, torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64,
    torch.float16, torch.bfloat16, torch.float32, torch.float64, torch.complex64, torch.complex128,
})
