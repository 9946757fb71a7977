"""Rotary position embedding in Triton (neox layout): one program per token and block of heads.

Each pair (x[i], x[i + d/2]) turns by the token's angle: cos and sin ([tokens, head_dim // 2], any
strides and dtype) are read once per program and broadcast over its heads. q and k ([tokens,
heads, head_dim], any strides, e.g. views of a fused qkv projection) are rotated by two launches
of the same kernel into new tensors laid out as torch.empty_like gives (as the fake kernel says).
"""

import torch
import triton
import triton.language as tl
from torch import Tensor

from ..dispatcher.portable import check_rotary, rotate
from .launch import LaunchConfig, launch_options, next_power_of_2
from .layout import one_device
from .rounding import to_dtype

_MAX_TILE = 4096  # elements of one program's [heads, head_dim // 2] tile


@triton.jit
def _rotate_heads(x_ptr, cos_ptr, sin_ptr, out_ptr, x_t_stride, x_h_stride, x_d_stride, cos_t_stride, cos_d_stride,
                  sin_t_stride, sin_d_stride, out_t_stride, out_h_stride, out_d_stride, heads, half,
                  BLOCK_H: tl.constexpr, BLOCK_D: tl.constexpr):
    token = tl.program_id(0).to(tl.int64)
    h = (tl.program_id(1) * BLOCK_H + tl.arange(0, BLOCK_H))[:, None]
    d = tl.arange(0, BLOCK_D)[None, :]
    d_mask = d < half
    mask = (h < heads) & d_mask
    c = tl.load(cos_ptr + token * cos_t_stride + d * cos_d_stride, mask=d_mask, other=0.0).to(tl.float32)
    s = tl.load(sin_ptr + token * sin_t_stride + d * sin_d_stride, mask=d_mask, other=0.0).to(tl.float32)
    x_row = x_ptr + token * x_t_stride + h * x_h_stride
    x1 = tl.load(x_row + d * x_d_stride, mask=mask, other=0.0).to(tl.float32)
    x2 = tl.load(x_row + (d + half) * x_d_stride, mask=mask, other=0.0).to(tl.float32)
    out_row = out_ptr + token * out_t_stride + h * out_h_stride
    out_ty = out_ptr.dtype.element_ty
    tl.store(out_row + d * out_d_stride, to_dtype(x1 * c - x2 * s, out_ty), mask=mask)
    tl.store(out_row + (d + half) * out_d_stride, to_dtype(x2 * c + x1 * s, out_ty), mask=mask)


def _rotate_with_kernel(x: Tensor, cos: Tensor, sin: Tensor, config: LaunchConfig) -> Tensor:
    out = torch.empty_like(x)
    tokens, heads, head_dim = x.shape
    if not out.numel():
        return out
    half = head_dim // 2
    block_d = next_power_of_2(half)
    block_h = min(next_power_of_2(heads), max(1, _MAX_TILE // block_d))
    _rotate_heads[(tokens, triton.cdiv(heads, block_h))](
        x, cos, sin, out, *x.stride(), *cos.stride(), *sin.stride(), *out.stride(), heads, half,
        BLOCK_H=block_h, BLOCK_D=block_d, **launch_options(config, block_h * block_d, x.element_size()))
    return out


def rotary_embedding(q: Tensor, k: Tensor, cos: Tensor, sin: Tensor, config: LaunchConfig) -> tuple[Tensor, Tensor]:
    check_rotary(q, k, cos, sin)
    if not one_device(q, k, cos, sin):
        return rotate(q, cos, sin), rotate(k, cos, sin)  # the reference, which raises torch's error
    return _rotate_with_kernel(q, cos, sin, config), _rotate_with_kernel(k, cos, sin, config)
