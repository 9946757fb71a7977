"""SwiGLU in Triton: `silu_and_mul`, x = [a, b] on the last dim -> silu(a) * b, and its backward.

Programs tile [rows, blocks of the half width]; any row and column strides are read in place.
Outputs have the layouts the reference and the fake kernels give: a new contiguous tensor forward,
x's layout (torch.empty_like) backward.
"""

import torch
import triton
import triton.language as tl
from torch import Tensor

from ..dispatcher.portable import check_gated, silu_and_mul_backward_ref
from .launch import LaunchConfig, launch_options, next_power_of_2
from .layout import one_device, read_rows, written_rows
from .rounding import to_dtype


@triton.jit
def _sigmoid(a):
    return 1.0 / (1.0 + tl.exp(-a))  # exp overflows to inf for a << 0, giving 0 as torch does


@triton.jit
def _silu_and_mul_rows(x_ptr, out_ptr, x_row_stride, x_col_stride, out_row_stride, half, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    mask = cols < half
    x_row = x_ptr + row * x_row_stride
    a = tl.load(x_row + cols * x_col_stride, mask=mask, other=0.0).to(tl.float32)
    b = tl.load(x_row + (cols + half) * x_col_stride, mask=mask, other=0.0).to(tl.float32)
    silu = a / (1.0 + tl.exp(-a))  # torch's formula for silu
    tl.store(out_ptr + row * out_row_stride + cols, to_dtype(silu * b, out_ptr.dtype.element_ty), mask=mask)


@triton.jit
def _silu_and_mul_grad_rows(g_ptr, x_ptr, dx_ptr, g_row_stride, g_col_stride, x_row_stride, x_col_stride,
                            dx_row_stride, dx_col_stride, half, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    mask = cols < half
    x_row = x_ptr + row * x_row_stride
    dx_row = dx_ptr + row * dx_row_stride
    g = tl.load(g_ptr + row * g_row_stride + cols * g_col_stride, mask=mask, other=0.0).to(tl.float32)
    a = tl.load(x_row + cols * x_col_stride, mask=mask, other=0.0).to(tl.float32)
    b = tl.load(x_row + (cols + half) * x_col_stride, mask=mask, other=0.0).to(tl.float32)
    sigmoid = _sigmoid(a)
    da = g * b * sigmoid * (1 + a * (1 - sigmoid))
    dx_ty = dx_ptr.dtype.element_ty
    tl.store(dx_row + cols * dx_col_stride, to_dtype(da, dx_ty), mask=mask)
    tl.store(dx_row + (cols + half) * dx_col_stride, to_dtype(g * a * sigmoid, dx_ty), mask=mask)


def _grid_and_options(rows: int, half: int, element_bytes: int, config: LaunchConfig):
    block = min(next_power_of_2(half), config.elementwise_block)
    return (rows, triton.cdiv(half, block)), block, launch_options(config, block, element_bytes)


def silu_and_mul(x: Tensor, config: LaunchConfig) -> Tensor:
    check_gated(x)
    half = x.shape[-1] // 2
    out = torch.empty((*x.shape[:-1], half), dtype=x.dtype, device=x.device)
    if not out.numel():
        return out
    rows = read_rows(x)
    grid, block, options = _grid_and_options(rows.shape[0], half, x.element_size(), config)
    _silu_and_mul_rows[grid](rows, out, rows.stride(0), rows.stride(1), half, half, BLOCK=block, **options)
    return out


def silu_and_mul_backward(grad: Tensor, x: Tensor, config: LaunchConfig) -> Tensor:
    half = x.shape[-1] // 2
    if not x.numel() or grad.shape != (*x.shape[:-1], half) or not one_device(grad, x):
        return silu_and_mul_backward_ref(grad, x)
    dx = torch.empty_like(x)
    x_rows, g_rows = read_rows(x), grad.reshape(-1, half)
    grid, block, options = _grid_and_options(x_rows.shape[0], half, x.element_size(), config)
    with written_rows(dx) as dx_rows:
        _silu_and_mul_grad_rows[grid](g_rows, x_rows, dx_rows, g_rows.stride(0), g_rows.stride(1), x_rows.stride(0),
                                      x_rows.stride(1), dx_rows.stride(0), dx_rows.stride(1), half, BLOCK=block,
                                      **options)
    return dx
