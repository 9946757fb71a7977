"""rms_norm's backward in Triton: dx row by row, dweight as per-program partial sums.

With x_hat = x * inv_rms and gw = grad * weight:
    dx      = inv_rms * (gw - x_hat * mean(gw * x_hat))      (+ grad_residual, for fused_add_rms_norm)
    dweight = sum over rows of grad * x_hat
Each program walks a strided share of the rows and accumulates its dweight partial in float32;
the host sums the partials (one small reduction), so no atomics and a deterministic result.
"""

import torch
import triton
import triton.language as tl
from torch import Tensor

from ..dispatcher.portable import rms_norm_backward_ref
from .launch import LaunchConfig, launch_options, reduction_programs
from .layout import one_device, read_rows, written_rows
from .rounding import to_dtype


@triton.jit
def _rms_norm_grad_rows(grad_ptr, x_ptr, w_ptr, res_grad_ptr, dx_ptr, partial_ptr,
                        g_row_stride, g_col_stride, x_row_stride, x_col_stride, w_stride,
                        rg_row_stride, rg_col_stride, dx_row_stride, dx_col_stride, n_rows, n_cols, eps,
                        BLOCK: tl.constexpr, ONE_PASS: tl.constexpr, HAS_RES_GRAD: tl.constexpr):
    pid = tl.program_id(0)
    programs = tl.num_programs(0)
    partial_row = partial_ptr + pid.to(tl.int64) * n_cols
    dx_ty = dx_ptr.dtype.element_ty
    if ONE_PASS:
        cols = tl.arange(0, BLOCK)
        mask = cols < n_cols
        weight = tl.load(w_ptr + cols * w_stride, mask=mask, other=0.0).to(tl.float32)
        dweight = tl.zeros([BLOCK], dtype=tl.float32)
        for row in range(pid, n_rows, programs):
            r = tl.cast(row, tl.int64)  # the loop index is a plain int under the interpreter
            x = tl.load(x_ptr + r * x_row_stride + cols * x_col_stride, mask=mask, other=0.0).to(tl.float32)
            g = tl.load(grad_ptr + r * g_row_stride + cols * g_col_stride, mask=mask, other=0.0).to(tl.float32)
            inv_rms = tl.math.rsqrt(tl.sum(x * x, axis=0) / n_cols + eps)
            x_hat = x * inv_rms
            gw = g * weight
            dx = inv_rms * (gw - x_hat * (tl.sum(gw * x_hat, axis=0) / n_cols))
            if HAS_RES_GRAD:
                dx += tl.load(res_grad_ptr + r * rg_row_stride + cols * rg_col_stride, mask=mask,
                              other=0.0).to(tl.float32)
            tl.store(dx_ptr + r * dx_row_stride + cols * dx_col_stride, to_dtype(dx, dx_ty), mask=mask)
            dweight += g * x_hat
        tl.store(partial_row + cols, dweight, mask=mask)
    else:  # the row does not fit: one pass for the two sums, one for the outputs (partials start at 0)
        for row in range(pid, n_rows, programs):
            r = tl.cast(row, tl.int64)  # the loop index is a plain int under the interpreter
            squares = tl.zeros([BLOCK], dtype=tl.float32)
            gw_x = tl.zeros([BLOCK], dtype=tl.float32)
            for start in range(0, n_cols, BLOCK):
                cols = start + tl.arange(0, BLOCK)
                mask = cols < n_cols
                x = tl.load(x_ptr + r * x_row_stride + cols * x_col_stride, mask=mask, other=0.0).to(tl.float32)
                g = tl.load(grad_ptr + r * g_row_stride + cols * g_col_stride, mask=mask, other=0.0).to(tl.float32)
                weight = tl.load(w_ptr + cols * w_stride, mask=mask, other=0.0).to(tl.float32)
                squares += x * x
                gw_x += g * weight * x
            inv_rms = tl.math.rsqrt(tl.sum(squares, axis=0) / n_cols + eps)
            mean_gw_xhat = tl.sum(gw_x, axis=0) * inv_rms / n_cols
            for start in range(0, n_cols, BLOCK):
                cols = start + tl.arange(0, BLOCK)
                mask = cols < n_cols
                x = tl.load(x_ptr + r * x_row_stride + cols * x_col_stride, mask=mask, other=0.0).to(tl.float32)
                g = tl.load(grad_ptr + r * g_row_stride + cols * g_col_stride, mask=mask, other=0.0).to(tl.float32)
                weight = tl.load(w_ptr + cols * w_stride, mask=mask, other=0.0).to(tl.float32)
                x_hat = x * inv_rms
                dx = inv_rms * (g * weight - x_hat * mean_gw_xhat)
                if HAS_RES_GRAD:
                    dx += tl.load(res_grad_ptr + r * rg_row_stride + cols * rg_col_stride, mask=mask,
                                  other=0.0).to(tl.float32)
                tl.store(dx_ptr + r * dx_row_stride + cols * dx_col_stride, to_dtype(dx, dx_ty), mask=mask)
                partial = tl.load(partial_row + cols, mask=mask, other=0.0)  # this program's own row
                tl.store(partial_row + cols, partial + g * x_hat, mask=mask)


def rms_norm_backward(grad: Tensor, x: Tensor, weight: Tensor, eps: float, grad_residual: Tensor | None,
                      config: LaunchConfig) -> tuple[Tensor, Tensor]:
    extra = () if grad_residual is None else (grad_residual,)
    if (not x.numel() or not one_device(grad, x, weight, *extra)
            or any(t.shape != x.shape for t in (grad, *extra))):
        return rms_norm_backward_ref(grad, x, weight, eps, grad_residual)
    hidden = x.shape[-1]
    x_rows, g_rows = read_rows(x), read_rows(grad)
    rg_rows = read_rows(grad_residual) if grad_residual is not None else g_rows  # unread without HAS_RES_GRAD
    block = config.row_block(hidden)
    one_pass = hidden <= block
    programs = reduction_programs(x.device, x_rows.shape[0])
    partials = (torch.empty if one_pass else torch.zeros)((programs, hidden), dtype=torch.float32, device=x.device)
    dx = torch.empty_like(x)
    with written_rows(dx) as dx_rows:
        _rms_norm_grad_rows[(programs,)](
            g_rows, x_rows, weight, rg_rows, dx_rows, partials, g_rows.stride(0), g_rows.stride(1),
            x_rows.stride(0), x_rows.stride(1), weight.stride(0), rg_rows.stride(0), rg_rows.stride(1),
            dx_rows.stride(0), dx_rows.stride(1), x_rows.shape[0], hidden, eps,
            BLOCK=block, ONE_PASS=one_pass, HAS_RES_GRAD=grad_residual is not None,
            **launch_options(config, block, 4))  # float32 arithmetic on whole rows: size warps for it
    return dx, partials.sum(0).to(weight.dtype)
