"""How a value mode runs a sample: the device runs the op, the CPU runs it as the reference, and float64
arbitrates a difference of rounding alone. Shared by the value modes (eager, noncontiguous, edge,
scalar_types, out, compile, autograd).
"""

from collections.abc import Callable, Iterator
from typing import Any

from ..cases.opinfo import OpEntry
from ..target import Target
from ..verdicts.compare import Verdict, compare, outputs, statistics, zero_signs
from .meta import MetaReference
from .sides import Skip, detach, host, misplaced, on_cpu, on_device, on_target, sample_args, widen


def judge(entry: OpEntry, actual: Any, expected: Any, float64: Callable[[], Any] | None) -> Verdict:
    got, want = outputs(host(actual)), outputs(expected)
    if kind := entry.nondeterministic:
        return statistics(got, want, kind)
    return compare(got, want, None if float64 is None else lambda: outputs(float64()))


def float64_reference(call: Callable[..., Any], args: Any, kwargs: dict, target: Target) -> Callable[[], Any]:
    """The op on float64 copies of the inputs, with the reference kernels: the arbiter of a result
    that differs from the CPU's by rounding alone (a GEMM that sums in another order)."""
    def run() -> Any:
        with target.reference():
            return call(*widen(args), **widen(kwargs))
    return run


def run_forward(entry: OpEntry, sample: Any, target: Target, device_op: Callable[..., Any] | None = None,
                layout: Callable[[Any], Any] = lambda x: x, signed_zeros: bool = False) -> Verdict:
    """The device runs `device_op` (default: the op itself); the CPU and float64 run the op eagerly.
    `layout` reshapes the inputs' memory (same values) on both sides; with `signed_zeros` a zero's
    sign must be the CPU's too."""
    call = entry.op
    args, kwargs = sample_args(sample)
    expected = on_cpu(target, lambda: call(*layout(detach(args)), **detach(kwargs)))
    dev_args, dev_kwargs = on_target(lambda: on_device(entry, args, kwargs, target))
    dev_args = on_target(lambda: layout(dev_args))
    actual = on_target(lambda: (device_op or call)(*dev_args, **dev_kwargs))
    if wrong_device := misplaced(actual, target):
        return Verdict(False, wrong_device)

    float64 = float64_reference(call, args, kwargs, target)
    verdict = judge(entry, actual, expected, float64)
    if not verdict.ok:
        # A result shaped or typed as the device's own kernels give it (torch's meta function for the
        # device type says so) is held to the CPU's values only where they can be compared.
        got, want, followed = MetaReference(entry, args, kwargs, target, layout).reconcile(outputs(host(actual)),
                                                                                          outputs(expected))
        if followed:
            verdict = judge(entry, got, want, float64)
            verdict.detail = f"as torch's meta function for {target.device.type} says, {followed}" + \
                (f"; {verdict.detail}" if verdict.detail else "")
    if verdict.ok and signed_zeros and (flipped := zero_signs(outputs(host(actual)), outputs(expected))):
        return Verdict(False, flipped)
    return verdict


def judge_variants(entry: OpEntry, variants: Iterator[tuple[str, Any]], target: Target, signed_zeros: bool,
                   nothing: str) -> Verdict:
    """Each (what, variant sample) held to the CPU's results; the first failure is the verdict. A
    variant the CPU rejects is not judged; `nothing` says why there was nothing to judge."""
    judged = []
    for what, variant in variants:
        try:
            verdict = run_forward(entry, variant, target, signed_zeros=signed_zeros)
        except Skip:
            continue
        if not verdict.ok:
            verdict.detail = f"{what}: {verdict.detail}"
            return verdict
        judged.append(what)
    if not judged:
        raise Skip(nothing)
    return Verdict(True, f"judged: {', '.join(judged)}")
