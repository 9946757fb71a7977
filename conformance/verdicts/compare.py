"""Compare a device's outputs with the CPU's: per-dtype tolerances, float64 arbitration.

A low-precision mismatch is not yet a failure: both results are measured against the same op run
in float64 on the CPU, and the device passes if its error is within ARBITRATION_FACTOR times the
CPU's own error (the CPU's kernel is the standard the device is held to, not exact arithmetic).
"""

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch.utils._pytree import tree_leaves

# (rtol, atol) per dtype: torch.testing.assert_close's defaults.
TOLERANCES: dict[torch.dtype, tuple[float, float]] = {
    torch.float16: (1e-3, 1e-5), torch.bfloat16: (1.6e-2, 1e-5), torch.float32: (1.3e-6, 1e-5),
    torch.float64: (1e-7, 1e-7), torch.complex32: (1e-3, 1e-5), torch.complex64: (1.3e-6, 1e-5),
    torch.complex128: (1e-7, 1e-7),
}
ARBITRATED = (torch.float16, torch.bfloat16, torch.float32, torch.complex32, torch.complex64)
ARBITRATION_FACTOR = 4.0


@dataclass
class Verdict:
    ok: bool
    detail: str = ""
    max_abs: float | None = None
    max_rel: float | None = None
    mismatches: int | None = None
    arbitrated: bool = False


def outputs(value: Any) -> list[Any]:
    """The leaves of an op's result (tensors and plain values), in order."""
    return tree_leaves(value)


def _errors(actual: torch.Tensor, expected: torch.Tensor) -> tuple[float, float]:
    if actual.numel() == 0:
        return 0.0, 0.0
    a, e = actual.to(torch.complex128 if actual.is_complex() else torch.float64), expected.to(
        torch.complex128 if expected.is_complex() else torch.float64)
    both_nan = torch.isnan(a) & torch.isnan(e) if not a.is_complex() else torch.isnan(a.abs()) & torch.isnan(e.abs())
    same = (a == e) | both_nan  # equal infinities and NaN pairs are no error
    diff = torch.where(same, torch.zeros_like(a.real if a.is_complex() else a), (a - e).abs())
    diff = torch.nan_to_num(diff, nan=math.inf)
    rel = diff / e.abs().clamp_min(torch.finfo(torch.float64).tiny)
    return float(diff.max()), float(torch.where(diff == 0, torch.zeros_like(rel), rel).max())


def _values_close(actual: torch.Tensor, expected: torch.Tensor) -> tuple[bool, int, float, float]:
    """(all close, mismatch count, max abs error, max rel error) for same-shape, same-dtype tensors."""
    if expected.layout != torch.strided:
        actual, expected = actual.to_dense(), expected.to_dense()
    if not (expected.is_floating_point() or expected.is_complex()):
        bad = int((actual != expected).sum())
        max_abs, max_rel = (_errors(actual.double(), expected.double()) if expected.dtype != torch.bool
                            else (float(bad > 0), float(bad > 0)))
        return bad == 0, bad, max_abs, max_rel
    rtol, atol = TOLERANCES.get(expected.dtype, (1e-7, 1e-7))
    close = torch.isclose(actual, expected, rtol=rtol, atol=atol, equal_nan=True)
    bad = int((~close).sum())
    max_abs, max_rel = _errors(actual, expected)
    return bad == 0, bad, max_abs, max_rel


def _structure(actual: list[Any], expected: list[Any]) -> str:
    """Why the two output lists cannot be compared value by value, or '' when they can."""
    if len(actual) != len(expected):
        return f"{len(actual)} outputs, the CPU gave {len(expected)}"
    for i, (a, e) in enumerate(zip(actual, expected)):
        if isinstance(e, torch.Tensor) != isinstance(a, torch.Tensor):
            return f"output {i}: {type(a).__name__}, the CPU gave {type(e).__name__}"
        if isinstance(e, torch.Tensor):
            if a.dtype != e.dtype:
                return f"output {i}: dtype {a.dtype}, the CPU gave {e.dtype}"
            if a.shape != e.shape:
                return f"output {i}: shape {tuple(a.shape)}, the CPU gave {tuple(e.shape)}"
    return ""


def compare(actual: list[Any], expected: list[Any],
            float64_reference: Callable[[], list[Any]] | None = None) -> Verdict:
    """`actual` (device results already copied to the CPU) against `expected` (the CPU's results)."""
    if problem := _structure(actual, expected):
        return Verdict(False, problem)
    worst_abs = worst_rel = 0.0
    mismatches, first_bad = 0, None
    for i, (a, e) in enumerate(zip(actual, expected)):
        if not isinstance(e, torch.Tensor):
            same = a == e or (isinstance(e, float) and math.isnan(e) and math.isnan(a))
            if not same:
                mismatches += 1
                first_bad = first_bad if first_bad is not None else (i, f"output {i}: {a!r}, the CPU gave {e!r}")
            continue
        ok, bad, max_abs, max_rel = _values_close(a, e)
        worst_abs, worst_rel, mismatches = max(worst_abs, max_abs), max(worst_rel, max_rel), mismatches + bad
        if not ok and first_bad is None:
            first_bad = (i, f"output {i}: {bad} of {e.numel()} elements differ (max abs {max_abs:.3g}, "
                            f"max rel {max_rel:.3g}, dtype {e.dtype})")
    verdict = Verdict(mismatches == 0, "" if first_bad is None else first_bad[1], worst_abs, worst_rel, mismatches)
    if not verdict.ok and float64_reference is not None and _arbitrable(expected):
        return _arbitrate(verdict, actual, expected, float64_reference)
    return verdict


def zero_signs(actual: list[Any], expected: list[Any]) -> str:
    """'' when every zero the device gives where the CPU gives one has the CPU's sign, else where not."""
    for i, (a, e) in enumerate(zip(actual, expected)):
        if (isinstance(a, torch.Tensor) and isinstance(e, torch.Tensor) and e.is_floating_point()
                and a.dtype == e.dtype and a.shape == e.shape and e.layout == a.layout == torch.strided):
            flipped = int(((a == 0) & (e == 0) & (torch.signbit(a) != torch.signbit(e))).sum())
            if flipped:
                return f"output {i}: {flipped} zeros have the other sign than the CPU's (0.0 against -0.0)"
    return ""


def _arbitrable(expected: list[Any]) -> bool:
    tensors = [e for e in expected if isinstance(e, torch.Tensor)]
    return bool(tensors) and all(e.dtype in ARBITRATED for e in tensors if e.is_floating_point() or e.is_complex())


def _arbitrate(verdict: Verdict, actual: list[Any], expected: list[Any],
               float64_reference: Callable[[], list[Any]]) -> Verdict:
    try:
        reference = float64_reference()
    except Exception as err:  # the op has no float64 kernel, or the sample does not convert
        verdict.detail += f"; no float64 arbitration ({type(err).__name__})"
        return verdict
    if len(reference) != len(expected):
        return verdict
    for a, e, r in zip(actual, expected, reference):
        if not isinstance(e, torch.Tensor) or not (e.is_floating_point() or e.is_complex()):
            continue
        if not isinstance(r, torch.Tensor) or r.shape != e.shape:
            return verdict
        device_error, _ = _errors(a, r)
        cpu_error, _ = _errors(e, r)
        if device_error > ARBITRATION_FACTOR * cpu_error:
            verdict.detail += (f"; float64 arbitration: device error {device_error:.3g} > "
                               f"{ARBITRATION_FACTOR:g} x CPU error {cpu_error:.3g}")
            verdict.arbitrated = True
            return verdict
    verdict.ok, verdict.arbitrated = True, True
    verdict.detail = f"within {ARBITRATION_FACTOR:g}x the CPU's error against float64 ({verdict.detail})"
    return verdict


def statistics(actual: list[Any], expected: list[Any], kind: str) -> Verdict:
    """Checks for ops with undefined ('undefined') or random ('random') values."""
    if problem := _structure(actual, expected):
        return Verdict(False, problem)
    if kind == "random":
        for i, (a, e) in enumerate(zip(actual, expected)):
            if isinstance(e, torch.Tensor) and e.is_floating_point() and e.numel() >= 64:
                a64, e64 = a.double(), e.double()
                if not bool(torch.isfinite(a64).all()) and bool(torch.isfinite(e64).all()):
                    return Verdict(False, f"output {i}: non-finite values where the CPU's are finite")
                spread = max(float(e64.std()), float(a64.std()), 1e-6)
                if abs(float(a64.mean()) - float(e64.mean())) > 6 * spread / math.sqrt(e.numel()) + 0.05 * spread:
                    return Verdict(False, f"output {i}: mean {float(a64.mean()):.4g}, the CPU's {float(e64.mean()):.4g} "
                                          f"(std {spread:.3g}, n={e.numel()})")
    return Verdict(True, f"{kind} values: shape, dtype{', statistics' if kind == 'random' else ''} checked")
