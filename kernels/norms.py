"""RMS normalisation in Triton: `rms_norm` and `fused_add_rms_norm_`, one program per row.

A row that fits in `LaunchConfig.max_row_block` is read once and kept in registers; a longer row
is read twice (sum of squares, then normalise). Rows may have any strides: a view that can be
flattened to [rows, hidden] is used in place, anything else is copied (and written back for the
in-place op). Outputs take the input's layout, as torch.empty_like does (and the fake kernels say). Arguments are checked with the same messages as the reference in torchplug.ops;
calls the kernel does not cover (mixed dtypes or devices) run the reference itself, so they give
its results and its errors.
"""

import torch
import triton
import triton.language as tl
from torch import Tensor

from ..dispatcher.portable import check_norm_args, check_residual_args, fused_add_rms_norm_ref_, rms_norm_ref
from .launch import LaunchConfig, launch_options
from .layout import one_device, read_rows, written_rows
from .rounding import to_dtype


@triton.jit
def _row_chunk(x_row, res_row, cols, mask, x_col_stride, res_col_stride, FUSED_ADD: tl.constexpr):
    """Columns `cols` of the row in float32; with FUSED_ADD, residual += x is stored first."""
    value = tl.load(x_row + cols * x_col_stride, mask=mask, other=0.0).to(tl.float32)
    if FUSED_ADD:
        residual = tl.load(res_row + cols * res_col_stride, mask=mask, other=0.0).to(tl.float32)
        summed = to_dtype(value + residual, res_row.dtype.element_ty)
        tl.store(res_row + cols * res_col_stride, summed, mask=mask)
        value = summed.to(tl.float32)  # normalise the sum as stored, like residual.add_ then rms_norm
    return value


@triton.jit
def _rms_norm_rows(x_ptr, res_ptr, w_ptr, out_ptr, x_row_stride, x_col_stride, res_row_stride, res_col_stride,
                   w_stride, out_row_stride, out_col_stride, n_cols, eps,
                   BLOCK: tl.constexpr, ONE_PASS: tl.constexpr, FUSED_ADD: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    x_row = x_ptr + row * x_row_stride
    res_row = res_ptr + row * res_row_stride
    out_row = out_ptr + row * out_row_stride
    out_ty = out_ptr.dtype.element_ty
    if ONE_PASS:
        cols = tl.arange(0, BLOCK)
        mask = cols < n_cols
        value = _row_chunk(x_row, res_row, cols, mask, x_col_stride, res_col_stride, FUSED_ADD)
        inv_rms = tl.math.rsqrt(tl.sum(value * value, axis=0) / n_cols + eps)
        weight = tl.load(w_ptr + cols * w_stride, mask=mask, other=0.0).to(tl.float32)
        tl.store(out_row + cols * out_col_stride, to_dtype(value * inv_rms * weight, out_ty), mask=mask)
    else:
        squares = tl.zeros([BLOCK], dtype=tl.float32)
        for start in range(0, n_cols, BLOCK):
            cols = start + tl.arange(0, BLOCK)
            value = _row_chunk(x_row, res_row, cols, cols < n_cols, x_col_stride, res_col_stride, FUSED_ADD)
            squares += value * value
        inv_rms = tl.math.rsqrt(tl.sum(squares, axis=0) / n_cols + eps)
        tl.debug_barrier()  # the second pass reads what the first stored (FUSED_ADD)
        if FUSED_ADD:  # read the stored sum back
            src_row, src_col_stride = res_row, res_col_stride
        else:
            src_row, src_col_stride = x_row, x_col_stride
        for start in range(0, n_cols, BLOCK):
            cols = start + tl.arange(0, BLOCK)
            mask = cols < n_cols
            value = tl.load(src_row + cols * src_col_stride, mask=mask, other=0.0).to(tl.float32)
            weight = tl.load(w_ptr + cols * w_stride, mask=mask, other=0.0).to(tl.float32)
            tl.store(out_row + cols * out_col_stride, to_dtype(value * inv_rms * weight, out_ty), mask=mask)


def _launch(x: Tensor, residual: Tensor, weight: Tensor, out: Tensor, eps: float, fused_add: bool,
            config: LaunchConfig) -> None:
    """Run the kernel on [rows, hidden] tensors (x and residual may be the same when not fused)."""
    hidden = x.shape[-1]
    block = config.row_block(hidden)
    _rms_norm_rows[(x.shape[0],)](
        x, residual, weight, out, x.stride(0), x.stride(1), residual.stride(0), residual.stride(1),
        weight.stride(0), out.stride(0), out.stride(1), hidden, eps,
        BLOCK=block, ONE_PASS=hidden <= block, FUSED_ADD=fused_add,
        **launch_options(config, block, x.element_size()))


def rms_norm(x: Tensor, weight: Tensor, eps: float, config: LaunchConfig) -> Tensor:
    check_norm_args("rms_norm", x, weight)
    if not one_device(x, weight):
        return rms_norm_ref(x, weight, eps)
    out = torch.empty_like(x)  # x's layout where it is dense, as the reference and the fake kernel give
    if out.numel():
        rows = read_rows(x)
        with written_rows(out) as out_rows:
            _launch(rows, rows, weight, out_rows, eps, False, config)
    return out


def fused_add_rms_norm_(x: Tensor, residual: Tensor, weight: Tensor, eps: float, config: LaunchConfig) -> None:
    check_residual_args(x, residual, weight)
    if x.dtype != residual.dtype or not one_device(x, residual, weight):
        fused_add_rms_norm_ref_(x, residual, weight, eps)
        return
    if x.numel():
        with written_rows(x) as x_rows, written_rows(residual) as res_rows:
            _launch(x_rows, res_rows, weight, x_rows, eps, True, config)


def fused_add_rms_norm(x: Tensor, residual: Tensor, weight: Tensor, eps: float,
                       config: LaunchConfig) -> tuple[Tensor, Tensor]:
    """The functional form: x is only read, the sum goes to a copy of residual, the result to a new tensor."""
    check_residual_args(x, residual, weight)
    summed = residual.clone()
    if x.dtype != residual.dtype or not one_device(x, residual, weight):
        out = x.clone()
        fused_add_rms_norm_ref_(out, summed, weight, eps)
        return out, summed
    out = torch.empty_like(x)
    if x.numel():
        with written_rows(summed) as res_rows, written_rows(out) as out_rows:
            _launch(read_rows(x), res_rows, weight, out_rows, eps, True, config)
    return out, summed
