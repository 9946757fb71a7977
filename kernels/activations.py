"""SwiGLU in Triton: `silu_and_mul`, x = [a, b] on the last dim -> silu(a) * b.

Programs tile [rows, blocks of the half width]; any row and column strides are read in place.
The output is a new contiguous tensor, as the reference returns.
"""

import torch
import triton
import triton.language as tl
from torch import Tensor

from ..dispatcher.ops import _check_gated
from .launch import LaunchConfig, next_power_of_2
from .rounding import to_dtype


@triton.jit
def _silu_and_mul_rows(x_ptr, out_ptr, x_row_stride, x_col_stride, out_row_stride, half, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    mask = cols < half
    x_row = x_ptr + row * x_row_stride
    a = tl.load(x_row + cols * x_col_stride, mask=mask, other=0.0).to(tl.float32)
    b = tl.load(x_row + (cols + half) * x_col_stride, mask=mask, other=0.0).to(tl.float32)
    silu = a / (1.0 + tl.exp(-a))  # as torch computes silu: exp overflows to inf for a << 0, giving -0
    tl.store(out_ptr + row * out_row_stride + cols, to_dtype(silu * b, out_ptr.dtype.element_ty), mask=mask)


def silu_and_mul(x: Tensor, config: LaunchConfig) -> Tensor:
    _check_gated(x)
    half = x.shape[-1] // 2
    out = torch.empty((*x.shape[:-1], half), dtype=x.dtype, device=x.device)
    if not out.numel():
        return out
    rows = x.reshape(-1, x.shape[-1])
    block = min(next_power_of_2(half), config.elementwise_block)
    grid = (rows.shape[0], triton.cdiv(half, block))
    _silu_and_mul_rows[grid](rows, out, rows.stride(0), rows.stride(1), half, half, BLOCK=block,
                             **config.launch_options(block, x.element_size()))
    return out
