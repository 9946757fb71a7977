"""The `meta` mode: results shaped as torch's meta functions say the device's kernels shape them.

torch's FakeTensor computes each result's metadata from the op's meta function, for the device type
of its inputs, and meta functions branch on that type where a GPU's kernels lay results out otherwise
than the CPU's (fft's r2c/c2r strides, svd's, eval-mode batch norm's saved statistics). torch.compile
plans its buffers from those answers, so a device whose results differ from them breaks compiled
code that eager runs accept. The mode runs the sample under FakeTensorMode, on fake tensors of the
device's type made from the device inputs, then on the device, and holds every tensor result to its
fake counterpart with torch's own compare_tensor_meta (what PyTorch's TestFakeTensor.test_fake uses):
sizes, dtype, device, the strides of dimensions longer than 1, storage offset, conj and neg bits.

Not judged (skips, with the reason): samples the CPU rejects, ops torch has no meta function for,
results whose shape depends on the data (nonzero, unique) and ops that read tensor data on the host.
"""

from collections.abc import Callable
from typing import Any

import torch
from torch.utils._pytree import tree_map

from ..cases.opinfo import OpEntry
from ..target import Target
from ..verdicts.compare import Verdict, outputs
from .record import Mode
from .sides import Skip, detach, first_line, on_cpu, on_device, on_target, sample_args


def _fake_result(entry: OpEntry, args: list[Any], kwargs: dict[str, Any]) -> Any:
    """The op on fake copies of the device inputs, or Skip where torch's fake tensors cannot say."""
    from torch._subclasses import fake_tensor as fake

    # No fallback kernels: an op without a meta function would otherwise run the device's own kernel
    # on zeros and agree with it by construction.
    if any(isinstance(t, torch.Tensor) and t.layout != torch.strided for t in outputs([args, kwargs])):
        raise Skip("a sparse input: fake tensors are made here for strided inputs only")
    mode = fake.FakeTensorMode(allow_fallback_kernels=False)
    to_fake = lambda t: mode.from_tensor(t) if isinstance(t, torch.Tensor) else t
    fake_args, fake_kwargs = tree_map(to_fake, args), tree_map(to_fake, kwargs)
    try:
        with mode:
            return entry.op(*fake_args, **fake_kwargs)
    except fake.UnsupportedOperatorException as err:
        raise Skip(f"torch has no meta function for {first_line(err)}") from err
    except (fake.DynamicOutputShapeException, fake.DataDependentOutputException) as err:
        raise Skip(f"the result's shape or value depends on the data ({first_line(err)})") from err
    except fake.UnsupportedFakeTensorException as err:
        raise Skip(f"fake tensors cannot represent this sample: {first_line(err)}") from err
    except Exception as err:
        if why := _cannot_say(str(err)):
            raise Skip(f"{why}: {first_line(err)}") from err
        return err


# Errors fake tensors raise where they cannot say what the device returns (not a meta function's verdict).
_CANNOT_SAY = {
    "no fake impl or Meta kernel registered": "torch has no meta function for the op",
    "its data is not allocated yet": "the op reads tensor data on the host, which fake tensors lack",
    "DispatchStub: missing kernel for": "torch's meta function calls a kernel this torch build lacks",
    "An unexpected device type was provided": "torch's meta function calls a kernel this torch build lacks",
}


def _cannot_say(message: str) -> str:
    return next((why for pattern, why in _CANNOT_SAY.items() if pattern in message), "")


def _difference(actual: list[Any], expected: list[Any]) -> str:
    from torch._prims_common import compare_tensor_meta

    if len(actual) != len(expected):
        return f"{len(actual)} results where the meta function gives {len(expected)}"
    for i, (a, e) in enumerate(zip(actual, expected)):
        if not isinstance(e, torch.Tensor):
            continue
        if not isinstance(a, torch.Tensor):
            return f"output {i} is {type(a).__name__} where the meta function gives a tensor"
        try:
            compare_tensor_meta(a, e, check_strides=True)
        except Exception as err:  # MetadataMismatchError
            return (f"output {i}: {first_line(err)} (device: sizes {tuple(a.shape)} strides {tuple(a.stride())} "
                    f"offset {a.storage_offset()}; meta: sizes {tuple(e.shape)} strides {tuple(e.stride())} "
                    f"offset {e.storage_offset()})")
    return ""


def _same_metadata(a: torch.Tensor, e: torch.Tensor) -> bool:
    """Sizes, dtype and the strides of dimensions longer than 1 (a's device aside: it may be a host copy)."""
    return a.shape == e.shape and a.dtype == e.dtype and \
        all(sa == se for sa, se, n in zip(a.stride(), e.stride(), a.shape) if n > 1)


class MetaReference:
    """What torch's meta functions say the device's kernels return for a sample, computed once when
    asked: where a device result differs from the CPU's just as they say (the device answers as its own
    kernels do: a GPU's saved statistics, cuFFT's layout), the value and layout modes accept it."""

    def __init__(self, entry: OpEntry, args: list[Any], kwargs: dict[str, Any], target: Target,
                 relayout: Callable[[Any], Any] = lambda x: x) -> None:
        def make() -> Any:
            dev_args, dev_kwargs = on_device(entry, args, kwargs, target)
            return _fake_result(entry, relayout(dev_args), dev_kwargs)
        self._make = make
        self._outputs: list[Any] | None = None

    def outputs(self) -> list[Any]:
        if self._outputs is None:
            try:
                result = self._make()
            except Exception:  # Skip (no meta function, data-dependent) or the sample not moving: nothing said
                result = None
            self._outputs = [] if result is None or isinstance(result, Exception) else outputs(result)
        return self._outputs

    def says(self, index: int, actual: Any) -> bool:
        """Whether the meta function gives output `index` the metadata of the device's `actual`."""
        found = self.outputs()
        return (isinstance(actual, torch.Tensor) and index < len(found) and isinstance(found[index], torch.Tensor)
                and actual.layout == torch.strided and _same_metadata(actual, found[index]))

    def reconcile(self, actual: list[Any], expected: list[Any]) -> tuple[list[Any], list[Any], str]:
        """The pairs made comparable where the device follows the meta function and the CPU does not:
        the device's result in the CPU's dtype, or neither where the shapes differ; and what was done."""
        actual, expected, notes = list(actual), list(expected), []
        for i, (a, e) in enumerate(zip(actual, expected)):
            if not (isinstance(a, torch.Tensor) and isinstance(e, torch.Tensor)) or \
                    (a.shape == e.shape and a.dtype == e.dtype) or not self.says(i, a):
                continue
            if a.shape == e.shape:
                actual[i] = a.to(e.dtype)
                notes.append(f"output {i} is {a.dtype} where the CPU's is {e.dtype}")
            else:
                actual[i] = expected[i] = None
                notes.append(f"output {i} has shape {tuple(a.shape)} where the CPU's has {tuple(e.shape)}")
        return actual, expected, "; ".join(notes)


def meta(entry: OpEntry, sample: Any, target: Target) -> Verdict:
    args, kwargs = sample_args(sample)
    on_cpu(target, lambda: entry.op(*detach(args), **detach(kwargs)))  # a sample the CPU rejects is no case
    dev_args, dev_kwargs = on_target(lambda: on_device(entry, args, kwargs, target))
    expected = _fake_result(entry, dev_args, dev_kwargs)  # before the device run, which may write its inputs
    try:
        actual = on_target(lambda: entry.op(*dev_args, **dev_kwargs))
    except Exception as err:
        if isinstance(expected, Exception):
            raise Skip(f"the meta function refuses the sample too: {type(expected).__name__}: "
                       f"{first_line(expected)}") from err
        raise
    if isinstance(expected, Exception):
        return Verdict(False, f"the device computes a result where the meta function for "
                              f"{target.device.type} raises {type(expected).__name__}: {first_line(expected)}")
    return Verdict(not (problem := _difference(outputs(actual), outputs(expected))), problem)


MODE = Mode("meta", meta, follows="errors", holds_to="semantics", samples={"smoke": 1, "standard": 3},
            pytorch_test=("TestFakeTensor", "test_fake"), category="layout")
