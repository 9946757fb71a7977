"""The host side of torchplug-mps's Metal kernels (metal/*.metal): one function per torchplug op.

Each .metal file is compiled once, on first use, with torch.mps.compile_shader; its kernels are
named <op>_<type> (float, half, bfloat). The host code here checks arguments with torchplug.ops'
own messages, hands the kernels contiguous rows (float32 weights and angles), and gives outputs
the layouts the fake kernels promise. Calls the kernels do not cover (mixed dtypes or devices)
run the plain-torch reference, which gives its results and its errors.
"""

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from functools import cache
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from torchplug.dispatcher import portable as reference

METAL = Path(__file__).resolve().parent / "metal"
TYPE_NAMES = {torch.float32: "float", torch.float16: "half", torch.bfloat16: "bfloat"}
THREADGROUP = 256  # threads per row for the row kernels (8 SIMD groups of 32)


@cache
def library(name: str) -> Any:
    """metal/<name>.metal, compiled for this Mac's GPU (once per process)."""
    return torch.mps.compile_shader((METAL / f"{name}.metal").read_text())


def _kernel(source: str, op: str, dtype: torch.dtype) -> Callable[..., None]:
    return getattr(library(source), f"{op}_{TYPE_NAMES[dtype]}")


def _rows(t: Tensor) -> Tensor:
    return t.contiguous().view(-1, t.shape[-1])


@contextmanager
def _contiguous(out: Tensor) -> Iterator[Tensor]:
    """`out` itself for a kernel to write when it is contiguous, else a buffer copied into it after."""
    if out.is_contiguous():
        yield out
        return
    buffer = torch.empty(out.shape, dtype=out.dtype, device=out.device)
    yield buffer
    out.copy_(buffer)


def _float32(t: Tensor) -> Tensor:
    return t.to(torch.float32).contiguous()


def _one_device(*tensors: Tensor) -> bool:
    return len({t.device for t in tensors}) == 1


def _row_launch(rows: int) -> dict[str, list[int]]:
    return {"threads": [rows * THREADGROUP], "group_size": [THREADGROUP]}


def rms_norm(x: Tensor, weight: Tensor, eps: float) -> Tensor:
    reference.check_norm_args("rms_norm", x, weight)
    if not _one_device(x, weight):
        return reference.rms_norm_ref(x, weight, eps)
    out = torch.empty_like(x)
    if out.numel():
        rows = _rows(x)
        with _contiguous(out) as result:
            _kernel("norms", "rms_norm", x.dtype)(rows, _float32(weight), result, x.shape[-1], eps,
                                                   **_row_launch(rows.shape[0]))
    return out


def fused_add_rms_norm_(x: Tensor, residual: Tensor, weight: Tensor, eps: float) -> None:
    reference.check_residual_args(x, residual, weight)
    if x.dtype != residual.dtype or not _one_device(x, residual, weight):
        reference.fused_add_rms_norm_ref_(x, residual, weight, eps)
        return
    if not x.numel():
        return
    x_rows, res_rows = _rows(x), _rows(residual)  # the tensors themselves when contiguous, else copies
    _kernel("norms", "fused_add_rms_norm", x.dtype)(x_rows, res_rows, _float32(weight), x.shape[-1], eps,
                                                     **_row_launch(x_rows.shape[0]))
    for t, rows in ((x, x_rows), (residual, res_rows)):
        if not t.is_contiguous():  # the kernel updated a copy: write it back
            t.copy_(rows.view(t.shape))


def fused_add_rms_norm(x: Tensor, residual: Tensor, weight: Tensor, eps: float) -> tuple[Tensor, Tensor]:
    out, summed = x.clone(), residual.clone()
    fused_add_rms_norm_(out, summed, weight, eps)
    return out, summed


def rms_norm_backward(grad: Tensor, x: Tensor, weight: Tensor, eps: float,
                      grad_residual: Tensor | None = None) -> tuple[Tensor, Tensor]:
    extra = () if grad_residual is None else (grad_residual,)
    if (not x.numel() or not _one_device(grad, x, weight, *extra)
            or any(t.shape != x.shape or t.dtype != x.dtype for t in (grad, *extra))):
        return reference.rms_norm_backward_ref(grad, x, weight, eps, grad_residual)
    x_rows, g_rows = _rows(x), _rows(grad)
    rows, hidden = x_rows.shape
    dx, inv_rms = torch.empty_like(x), torch.empty(rows, dtype=torch.float32, device=x.device)
    residual_rows = _rows(grad_residual) if grad_residual is not None else g_rows  # unread without it
    with _contiguous(dx) as dx_rows:
        _kernel("norms", "rms_norm_grad_input", x.dtype)(g_rows, x_rows, _float32(weight), residual_rows, dx_rows,
                                                          inv_rms, hidden, eps, int(grad_residual is not None),
                                                          **_row_launch(rows))
    dweight = torch.empty(hidden, dtype=torch.float32, device=x.device)
    _kernel("norms", "rms_norm_grad_weight", x.dtype)(g_rows, x_rows, inv_rms, dweight, rows, hidden,
                                                       threads=[hidden])
    return dx, dweight.to(weight.dtype)


def silu_and_mul(x: Tensor) -> Tensor:
    reference.check_gated(x)
    half = x.shape[-1] // 2
    out = torch.empty((*x.shape[:-1], half), dtype=x.dtype, device=x.device)
    if out.numel():
        _kernel("activations", "silu_and_mul", x.dtype)(_rows(x), out, half, threads=[out.numel()])
    return out


def silu_and_mul_backward(grad: Tensor, x: Tensor) -> Tensor:
    half = x.shape[-1] // 2
    if not x.numel() or grad.shape != (*x.shape[:-1], half) or grad.dtype != x.dtype or not _one_device(grad, x):
        return reference.silu_and_mul_backward_ref(grad, x)
    dx = torch.empty_like(x)
    with _contiguous(dx) as dx_rows:
        _kernel("activations", "silu_and_mul_grad", x.dtype)(grad.contiguous(), _rows(x), dx_rows, half,
                                                              threads=[grad.numel()])
    return dx


def _rotate(x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
    out = torch.empty_like(x)
    if x.numel():
        _, heads, head_dim = x.shape
        with _contiguous(out) as rotated:
            _kernel("rotary", "rotary_embedding", x.dtype)(x.contiguous(), cos, sin, rotated, heads, head_dim // 2,
                                                            threads=[x.numel() // 2])
    return out


def rotary_embedding(q: Tensor, k: Tensor, cos: Tensor, sin: Tensor) -> tuple[Tensor, Tensor]:
    reference.check_rotary(q, k, cos, sin)
    if not _one_device(q, k, cos, sin):
        return reference.rotate(q, cos, sin), reference.rotate(k, cos, sin)
    cos, sin = _float32(cos), _float32(sin)
    return _rotate(q, cos, sin), _rotate(k, cos, sin)


OPS: dict[str, Callable] = {fn.__name__: fn for fn in (
    rms_norm, fused_add_rms_norm_, fused_add_rms_norm, rms_norm_backward, silu_and_mul, silu_and_mul_backward,
    rotary_embedding)}
