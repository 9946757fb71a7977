"""The value modes: ways a case runs an op on the device, each held to the CPU running the same sample.

Every mode returns a `Verdict` (compare.py) or raises `Unsupported`/`Skip` (sides.py). The
semantic modes (alias, layout, errors, meta) live in modules of their own; RUNNERS names them all.
`edge` is a value mode on variants of the sample (edge_values.py).
"""

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

import torch
from torch.utils._pytree import tree_map

from .alias import alias
from .compare import Verdict, compare, outputs, statistics, zero_signs
from .edge_values import edge_variants
from .errors import error_cases, errors
from .layout import layout
from .meta import MetaReference, meta
from .scalar_types import scalar_type_variants
from .opinfo import OpEntry
from .sides import (Skip, Target, Unsupported, detach, first_line, has_tensor, host, misplaced, on_cpu, on_device,
                    on_target, sample_args, widen)

__all__ = ["RUNNERS", "Skip", "Target", "Unsupported", "first_line"]


def _judge(entry: OpEntry, actual: Any, expected: Any, float64: Callable[[], Any] | None) -> Verdict:
    got, want = outputs(host(actual)), outputs(expected)
    if kind := entry.nondeterministic:
        return statistics(got, want, kind)
    return compare(got, want, None if float64 is None else lambda: outputs(float64()))


def _float64(call: Callable[..., Any], args: Any, kwargs: dict, target: Target) -> Callable[[], Any]:
    """The op on float64 copies of the inputs, with the reference kernels: the arbiter of a result
    that differs from the CPU's by rounding alone (a GEMM that sums in another order)."""
    def run() -> Any:
        with target.reference():
            return call(*widen(args), **widen(kwargs))
    return run


def _run_forward(entry: OpEntry, sample: Any, target: Target, device_op: Callable[..., Any] | None = None,
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

    float64 = _float64(call, args, kwargs, target)
    verdict = _judge(entry, actual, expected, float64)
    if not verdict.ok:
        # A result shaped or typed as the device's own kernels give it (torch's meta function for the
        # device type says so) is held to the CPU's values only where they can be compared.
        got, want, followed = MetaReference(entry, args, kwargs, target, layout).reconcile(outputs(host(actual)),
                                                                                          outputs(expected))
        if followed:
            verdict = _judge(entry, got, want, float64)
            verdict.detail = f"as torch's meta function for {target.device.type} says, {followed}" + \
                (f"; {verdict.detail}" if verdict.detail else "")
    if verdict.ok and signed_zeros and (flipped := zero_signs(outputs(host(actual)), outputs(expected))):
        return Verdict(False, flipped)
    return verdict


def eager(entry: OpEntry, sample: Any, target: Target) -> Verdict:
    return _run_forward(entry, sample, target)


def noncontiguous(entry: OpEntry, sample: Any, target: Target) -> Verdict:
    """Inputs made non-contiguous (same values, gaps in memory) on the device and on the CPU alike:
    a kernel that rejects such inputs on the CPU too is skipped, not failed."""
    from torch.testing._internal.common_utils import noncontiguous_like

    def spread(x: Any) -> Any:
        return tree_map(lambda t: noncontiguous_like(t) if isinstance(t, torch.Tensor) and t.numel() > 1 else t, x)
    args, _ = sample_args(sample)
    if not any(isinstance(t, torch.Tensor) and t.numel() > 1 for t in outputs(args)):
        raise Skip("no input with more than one element to make non-contiguous")
    return _run_forward(entry, sample, target, layout=spread)


def _variants(entry: OpEntry, variants: Iterator[tuple[str, Any]], target: Target, signed_zeros: bool,
              nothing: str) -> Verdict:
    """Each (what, variant sample) held to the CPU's results; the first failure is the verdict. A
    variant the CPU rejects is not judged; `nothing` says why there was nothing to judge."""
    judged = []
    for what, variant in variants:
        try:
            verdict = _run_forward(entry, variant, target, signed_zeros=signed_zeros)
        except Skip:
            continue
        if not verdict.ok:
            verdict.detail = f"{what}: {verdict.detail}"
            return verdict
        judged.append(what)
    if not judged:
        raise Skip(nothing)
    return Verdict(True, f"judged: {', '.join(judged)}")


def edge(entry: OpEntry, sample: Any, target: Target) -> Verdict:
    """The sample at the edges of values and shapes (edge_values.py), each variant held to the CPU's
    results, a zero's sign included. A variant the CPU rejects (an empty input some ops refuse) is not judged."""
    # resize_, resize_as_ write their input; internal kernels trust their caller for its shape
    variants = edge_variants(sample, fixed_shape=entry.name.endswith("_") or not entry.validates_inputs)
    return _variants(entry, variants, target, True, "the CPU rejects every edge variant of this sample")


def scalar_types(entry: OpEntry, sample: Any, target: Target) -> Verdict:
    """Integer and bool tensors where the sample has floating ones after its first input
    (scalar_types.py): ldexp's integer exponent, a bool mask given as floats."""
    if not entry.validates_inputs:
        raise Skip("an internal kernel trusts its caller for its arguments' dtypes (OpEntry.validates_inputs)")
    variants = list(scalar_type_variants(sample))
    if not variants:
        raise Skip("no floating tensor argument besides the first input")
    return _variants(entry, iter(variants), target, False, "the CPU rejects integer and bool arguments here")


def _scalar_loss(result: Any) -> torch.Tensor | None:
    terms = [torch.view_as_real(t).sum() if t.is_complex() else t.sum()
             for t in outputs(result) if isinstance(t, torch.Tensor) and t.requires_grad]
    return sum(terms) if terms else None


def _gradients(entry: OpEntry, sample: Any, args: list[Any], kwargs: dict[str, Any]) -> list[Any]:
    result = sample.output_process_fn_grad(entry.op(*args, **kwargs))
    inputs = [t for t in outputs([args, kwargs]) if isinstance(t, torch.Tensor) and t.requires_grad]
    loss = _scalar_loss(result)
    if loss is None or not inputs:
        raise Skip("the sample has no differentiable output or input")
    return list(torch.autograd.grad(loss, inputs, allow_unused=True))


def autograd(entry: OpEntry, sample: Any, target: Target) -> Verdict:
    args, kwargs = sample_args(sample)
    expected = on_cpu(target, lambda: _gradients(entry, sample, detach(args, True), detach(kwargs, True)))
    dev_args, dev_kwargs = on_target(lambda: on_device(entry, args, kwargs, target, grad=True))
    actual = on_target(lambda: _gradients(entry, sample, dev_args, dev_kwargs))
    if wrong_device := misplaced(actual, target):
        return Verdict(False, "gradient " + wrong_device)

    def float64() -> list[Any]:
        with target.reference():
            return outputs(_gradients(entry, sample, widen(args, True), widen(kwargs, True)))
    return compare(outputs(host(actual)), outputs(expected), float64)


def out(entry: OpEntry, sample: Any, target: Target) -> Verdict:
    if not entry.supports_out:
        raise Unsupported(f"{entry.name} has no out= variant")
    args, kwargs = sample_args(sample)
    expected = on_cpu(target, lambda: entry.op(*detach(args), **detach(kwargs)))
    leaves = outputs(expected)
    if not leaves or not all(isinstance(t, torch.Tensor) for t in leaves):
        raise Skip("the op's result is not only tensors")

    def buffers(device: torch.device) -> Any:
        made = [torch.empty_like(t, device=device) for t in leaves]
        return made[0] if isinstance(expected, torch.Tensor) else tuple(made)

    cpu_buffers = buffers(torch.device("cpu"))
    cpu_returned = on_cpu(target, lambda: entry.op(*detach(args), **detach(kwargs), **entry.out_kwargs(cpu_buffers)))
    if not (own := _judge(entry, outputs(cpu_buffers), leaves, None)).ok:  # fft.ihfftn(out=) on some samples
        raise Skip(f"the CPU's own out= differs from its result without out= ({own.detail}): nothing to hold the device to")
    dev_args, dev_kwargs = on_target(lambda: on_device(entry, args, kwargs, target))
    out_buffers = on_target(lambda: buffers(target.device))
    returned = on_target(lambda: entry.op(*dev_args, **dev_kwargs, **entry.out_kwargs(out_buffers)))
    written = outputs(out_buffers)
    # Ops whose out= form returns nothing on the CPU (split_with_sizes_copy, ...) may return nothing here.
    if cpu_returned is not None and not all(r is w for r, w in zip(outputs(returned), written)):
        return Verdict(False, "the op did not return the out= tensors it was given")
    verdict = _judge(entry, written, leaves, _float64(entry.op, args, kwargs, target))
    if (verdict.ok and target.device.type != "cpu" and has_tensor(args) and "device" not in kwargs
            and not entry.out_copies):
        wrong = buffers(torch.device("cpu"))
        try:
            entry.op(*dev_args, **dev_kwargs, **entry.out_kwargs(wrong))
        except Exception:
            pass  # refused, as it must be
        else:
            inputs = ", ".join(str(tuple(t.shape)) for t in outputs(dev_args) if isinstance(t, torch.Tensor))
            shapes = ", ".join(str(tuple(t.shape)) for t in outputs(wrong))
            return Verdict(False, f"accepted an out= tensor on the cpu [{shapes}] for inputs on {target.device} [{inputs}]")
    return verdict


@contextlib.contextmanager
def _fresh_dynamo() -> Iterator[None]:
    import torch._dynamo

    torch._dynamo.reset()
    try:
        yield
    finally:
        torch._dynamo.reset()


def _compiled(entry: OpEntry) -> Callable[..., Any]:
    return torch.compile(lambda *a, **k: entry.op(*a, **k), backend="inductor", dynamic=False)


def _compile_fails_on_cpu(entry: OpEntry, sample: Any, target: Target) -> str:
    """Why torch.compile of this sample fails with the CPU's stock kernels too (no meta kernel for an
    internal op, a lowering bug, a decomposition that departs from eager), or '' if it works there."""
    args, kwargs = sample_args(sample)
    with _fresh_dynamo(), target.reference():
        expected = entry.op(*detach(args), **detach(kwargs))
        try:
            actual = _compiled(entry)(*detach(args), **detach(kwargs))
        except Exception as err:
            return f"{type(err).__name__}: {first_line(err)}"
    verdict = _judge(entry, actual, expected, None)
    return "" if verdict.ok else f"compiled on the CPU it differs from eager: {verdict.detail}"


def compile(entry: OpEntry, sample: Any, target: Target) -> Verdict:
    """The device runs the op through torch.compile; the CPU runs it eagerly. Where the device fails,
    the CPU compiles the sample too: if that fails alike, the limit is torch.compile's, not the device's."""
    if target.compile_reason is not None:
        raise Unsupported(target.compile_reason)
    try:
        with _fresh_dynamo():
            verdict = _run_forward(entry, sample, target, device_op=_compiled(entry))
    except (Skip, Unsupported):
        raise
    except Exception:
        if why := _compile_fails_on_cpu(entry, sample, target):
            raise Skip(f"torch.compile fails on the CPU too: {why}") from None
        raise
    if not verdict.ok and (why := _compile_fails_on_cpu(entry, sample, target)):
        raise Skip(f"torch.compile fails on the CPU too: {why}")
    return verdict


RUNNERS: dict[str, Callable[[OpEntry, Any, Target], Verdict]] = {
    "eager": eager, "autograd": autograd, "out": out, "noncontiguous": noncontiguous, "compile": compile,
    "alias": alias, "layout": layout, "errors": errors, "meta": meta, "edge": edge,
    "scalar_types": scalar_types,
}


def _count(indices: list[list[int] | None]) -> int | None:
    """How many inputs cover these modes' indices (None: every input)."""
    return None if None in indices else max((max(i, default=-1) for i in indices), default=-1) + 1


def inputs_for(entry: OpEntry, dtype: torch.dtype, wanted: dict[str, list[int] | None],
               device_type: str = "cpu") -> dict[str, list[Any]]:
    """What each mode's cases run, by index: the errors mode's error inputs (with what OpInfo documents
    for `device_type`), every other mode's samples (generated once and shared). `wanted` gives each
    mode's indices, None for all."""
    sampled = [indices for mode, indices in wanted.items() if mode != "errors"]
    samples = entry.samples(dtype, _count(sampled)) if sampled else []
    errors = error_cases(entry, dtype, device_type)[:_count([wanted["errors"]])] if "errors" in wanted else []
    return {mode: errors if mode == "errors" else samples for mode in wanted}


def case_input(entry: OpEntry, dtype: torch.dtype, mode: str, index: int, target: Target) -> Any:
    """One case's sample (or error input), exactly as the suite generated it (for repro snippets)."""
    return inputs_for(entry, dtype, {mode: [index]}, target.device.type)[mode][index]
