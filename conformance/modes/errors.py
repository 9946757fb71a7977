"""The `errors` mode: a sample the CPU rejects is rejected on the device with the same exception type.

Its cases are OpInfo's `error_inputs` (each with the exception type and a message pattern torch's
own tests hold the CPU to), then error inputs derived generically from the op's valid samples: every
integer tensor argument filled with an index past every dimension (an out-of-range index), kept
only where the CPU rejects it. A device must raise the CPU's exception type (an IndexError stays an
IndexError: programs catch them by type) with a message matching the OpInfo pattern, if any.

Where OpInfo documents another error for the device's type than for the CPU (it asks for error
inputs per device: narrow_copy's CPU kernel words its errors differently from the kernel every
other device runs), the device may raise that one instead.
"""

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from ..cases.opinfo import OpEntry
from ..cases.tiers import TIERS
from ..target import Target, synchronize
from ..verdicts.compare import Verdict, outputs
from .record import Mode
from .sides import Skip, Unsupported, detach, first_line, on_device, on_target, sample_args

DERIVED_FROM = 6  # valid samples per op that out-of-range variants are derived from


@dataclass(frozen=True)
class ErrorCase:
    sample: Any  # a SampleInput, on the CPU
    error_type: type[BaseException]
    error_regex: str | None  # None for derived cases: their message is the CPU's, not a documented one
    origin: str  # "OpInfo error input", or "out-of-range index from sample N"
    on_device: tuple[type[BaseException], str | None] | None = None  # what OpInfo documents for the device instead

    def __str__(self) -> str:
        return f"{self.origin}: expects {self.error_type.__name__}; {self.sample}"


def _is_index(t: Any) -> bool:
    return isinstance(t, torch.Tensor) and not t.is_floating_point() and not t.is_complex() \
        and t.dtype != torch.bool and t.numel() > 0


def _out_of_range(sample: Any) -> Any | None:
    """`sample` with every integer tensor set to one past the largest dimension in the sample, or None."""
    tensors = [t for t in outputs(sample_args(sample)) if isinstance(t, torch.Tensor)]
    if not any(_is_index(t) for t in tensors):
        return None
    past = 1 + max((size for t in tensors for size in t.shape), default=1)
    return sample.transform(lambda t: torch.full_like(t, past) if _is_index(t) else t)


def _call(entry: OpEntry, sample: Any) -> Callable[[], Any]:
    args, kwargs = sample_args(sample)
    return lambda: entry.op(*detach(args), **detach(kwargs))


def _raised(fn: Callable[[], Any]) -> Exception | None:
    try:
        fn()
    except Unsupported:
        raise
    except Exception as err:
        return err
    return None


def _documented(entry: OpEntry, device_type: str) -> list[tuple[type[BaseException], str | None]] | None:
    """The (exception type, pattern) OpInfo gives each error input on `device_type`, None if it cannot say."""
    try:
        return [(e.error_type, e.error_regex or None) for e in entry.error_inputs(device_type)]
    except Exception:  # the device cannot even build the inputs: the CPU's expectations stand
        return None


def error_cases(entry: OpEntry, dtype: torch.dtype, device_type: str = "cpu") -> list[ErrorCase]:
    """The op's error cases for `dtype`, in a fixed order (a case's index is stable across runs)."""
    cpu = entry.error_inputs()
    documented = _documented(entry, device_type) if cpu and device_type != "cpu" else None
    if documented is None or len(documented) != len(cpu):
        documented = [None] * len(cpu)  # not pairable one to one: the CPU's expectations stand
    cases = [ErrorCase(e.sample_input, e.error_type, e.error_regex or None, "OpInfo error input",
                       there if there != (e.error_type, e.error_regex or None) else None)
             for e, there in zip(cpu, documented)]
    for index, sample in enumerate(entry.samples(dtype, DERIVED_FROM if entry.validates_inputs else 0)):
        variant = _out_of_range(sample)
        if variant is not None and (err := _raised(_call(entry, variant))) is not None:
            cases.append(ErrorCase(variant, type(err), None, f"out-of-range index from sample {index}"))
    return cases


def _matches(err: BaseException, error_type: type[BaseException], pattern: str | None) -> bool:
    return isinstance(err, error_type) and (pattern is None or re.search(pattern, str(err)) is not None)


def errors(entry: OpEntry, case: ErrorCase, target: Target) -> Verdict:
    with target.reference():
        cpu = _raised(_call(entry, case.sample))
    if cpu is None:
        raise Skip(f"{case.origin}: the CPU accepts it")
    if not isinstance(cpu, case.error_type):
        raise Skip(f"the CPU raises {type(cpu).__name__}, not the {case.error_type.__name__} OpInfo expects: "
                   f"{first_line(cpu)}")
    dev_args, dev_kwargs = on_target(lambda: on_device(entry, *sample_args(case.sample), target))
    # synchronized: a GPU reports a bad index from inside its kernel, asynchronously (a device-side assert)
    device = _raised(lambda: on_target(lambda: (entry.op(*dev_args, **dev_kwargs), synchronize(target))))
    expected = f"the CPU raises {type(cpu).__name__}: {first_line(cpu)}"
    if device is None:
        return Verdict(False, f"{case.origin}: raised nothing; {expected}")
    if case.on_device is not None and _matches(device, *case.on_device):
        return Verdict(True, f"{case.origin}: raises {type(device).__name__}, as OpInfo documents for "
                             f"{target.device.type} (the CPU differs)")
    if type(device) is not type(cpu):
        return Verdict(False, f"{case.origin}: raised {type(device).__name__}: {first_line(device)}; {expected}")
    if case.error_regex is not None and not re.search(case.error_regex, str(device)):
        return Verdict(False, f"{case.origin}: message {first_line(device)!r} does not match the pattern "
                              f"{case.error_regex!r}")
    return Verdict(True, f"{case.origin}: raises {type(device).__name__} as the CPU does")


# Error inputs hardly depend on the dtype: one dtype in every tier.
MODE = Mode("errors", errors, follows="layout", holds_to="semantics", samples={"smoke": 2, "standard": None},
            inputs=error_cases, one_dtype_in=TIERS, pytorch_test=("TestCommon", "test_errors"), category="error-message")
