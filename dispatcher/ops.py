"""torchplug.ops: portable LLM building blocks as torch custom ops (``torchplug::<name>``).

Each op has a schema (torch.library.custom_op), a fake implementation so torch.compile can trace
it, autograd, and a reference implementation in plain torch. The reference is registered under
CompositeExplicitAutograd, so it serves every device. A backend that registers its own kernel
under its dispatch key (CPU, XPU, ...) takes precedence for that device.

float16 and bfloat16 inputs are computed in float32 and the result is rounded back to the input
dtype; float32 and float64 are computed in their own precision.
"""

import torch
from torch import Tensor

from .portable import (PUBLIC_OPS, check_gated, check_norm_args, check_residual_args, check_rotary,
                       fused_add_rms_norm_ref_, rms_norm_backward_ref, rms_norm_ref, rotate, silu_and_mul_backward_ref,
                       silu_and_mul_ref, wide)

_LIB = "torchplug"


def _save_inputs(ctx, inputs, output) -> None:
    *tensors, ctx.eps = inputs
    ctx.save_for_backward(*tensors)


# --- rms_norm -------------------------------------------------------------------------------


@torch.library.custom_op(f"{_LIB}::rms_norm", mutates_args=())
def rms_norm(x: Tensor, weight: Tensor, eps: float) -> Tensor:
    """x / sqrt(mean(x**2, -1) + eps) * weight."""
    check_norm_args("rms_norm", x, weight)
    return rms_norm_ref(x, weight, eps)


@rms_norm.register_fake
def _(x: Tensor, weight: Tensor, eps: float) -> Tensor:
    check_norm_args("rms_norm", x, weight)
    return torch.empty_like(x)


@torch.library.custom_op(f"{_LIB}::rms_norm_backward", mutates_args=())
def rms_norm_backward(grad: Tensor, x: Tensor, weight: Tensor, eps: float,
                      grad_residual: Tensor | None = None) -> tuple[Tensor, Tensor]:
    """rms_norm's (dx, dweight) in x's and weight's dtypes, an op of its own so backends can give it
    a kernel. `grad_residual` is added to dx before rounding (fused_add_rms_norm's second output)."""
    return rms_norm_backward_ref(grad, x, weight, eps, grad_residual)


@rms_norm_backward.register_fake
def _(grad: Tensor, x: Tensor, weight: Tensor, eps: float,
      grad_residual: Tensor | None = None) -> tuple[Tensor, Tensor]:
    return torch.empty_like(x), torch.empty_like(weight)


def _rms_norm_backward(ctx, grad: Tensor):
    x, weight = ctx.saved_tensors
    return *torch.ops.torchplug.rms_norm_backward(grad, x, weight, ctx.eps), None


rms_norm.register_autograd(_rms_norm_backward, setup_context=_save_inputs)


# --- fused_add_rms_norm ---------------------------------------------------------------------


@torch.library.custom_op(f"{_LIB}::fused_add_rms_norm_", mutates_args=("x", "residual"))
def _fused_add_rms_norm_inplace(x: Tensor, residual: Tensor, weight: Tensor, eps: float) -> None:
    """residual += x; x = rms_norm(residual) * weight. The kernel backends replace."""
    check_residual_args(x, residual, weight)
    fused_add_rms_norm_ref_(x, residual, weight, eps)


@_fused_add_rms_norm_inplace.register_fake
def _(x: Tensor, residual: Tensor, weight: Tensor, eps: float) -> None:
    check_norm_args("fused_add_rms_norm_", x, weight)


@torch.library.custom_op(f"{_LIB}::fused_add_rms_norm", mutates_args=())
def _fused_add_rms_norm_functional(x: Tensor, residual: Tensor, weight: Tensor, eps: float) -> tuple[Tensor, Tensor]:
    """The out-of-place form autograd needs: returns (rms_norm(x + residual) * weight, x + residual)."""
    out, summed = x.clone(), residual.clone()
    torch.ops.torchplug.fused_add_rms_norm_(out, summed, weight, eps)  # the backend's kernel, if any
    return out, summed


@_fused_add_rms_norm_functional.register_fake
def _(x: Tensor, residual: Tensor, weight: Tensor, eps: float) -> tuple[Tensor, Tensor]:
    check_norm_args("fused_add_rms_norm", x, weight)
    return torch.empty_like(x), torch.empty_like(residual)


def _fused_setup(ctx, inputs, output) -> None:
    _, _, weight, ctx.eps = inputs
    ctx.x_dtype, ctx.residual_dtype = inputs[0].dtype, inputs[1].dtype
    ctx.save_for_backward(output[1], weight)


def _fused_backward(ctx, grad_out: Tensor, grad_summed: Tensor):
    summed, weight = ctx.saved_tensors
    d_summed, dweight = torch.ops.torchplug.rms_norm_backward(grad_out, summed, weight, ctx.eps, grad_summed)
    return d_summed.to(ctx.x_dtype), d_summed.to(ctx.residual_dtype), dweight, None


_fused_add_rms_norm_functional.register_autograd(_fused_backward, setup_context=_fused_setup)


def fused_add_rms_norm(x: Tensor, residual: Tensor, weight: Tensor, eps: float) -> tuple[Tensor, Tensor]:
    """residual += x, then x = rms_norm(residual) * weight, both in place; returns (x, residual).

    When autograd is recording, the functional op runs and its results are copied into x and
    residual, so the semantics are the same and gradients flow.
    """
    if torch.is_grad_enabled() and any(t.requires_grad for t in (x, residual, weight)):
        out, summed = torch.ops.torchplug.fused_add_rms_norm(x, residual, weight, eps)
        residual.copy_(summed)
        x.copy_(out)
    else:
        torch.ops.torchplug.fused_add_rms_norm_(x, residual, weight, eps)
    return x, residual


# --- silu_and_mul ---------------------------------------------------------------------------


@torch.library.custom_op(f"{_LIB}::silu_and_mul", mutates_args=())
def silu_and_mul(x: Tensor) -> Tensor:
    """SwiGLU: with x = [a, b] split in halves on the last dim, silu(a) * b."""
    check_gated(x)
    return silu_and_mul_ref(x).contiguous()  # a new contiguous tensor, as the fake kernel and the kernels give


@silu_and_mul.register_fake
def _(x: Tensor) -> Tensor:
    check_gated(x)
    return x.new_empty((*x.shape[:-1], x.shape[-1] // 2))


@torch.library.custom_op(f"{_LIB}::silu_and_mul_backward", mutates_args=())
def silu_and_mul_backward(grad: Tensor, x: Tensor) -> Tensor:
    """silu_and_mul's dx, an op of its own so backends can give it a kernel."""
    return silu_and_mul_backward_ref(grad, x)


@silu_and_mul_backward.register_fake
def _(grad: Tensor, x: Tensor) -> Tensor:
    return torch.empty_like(x)


def _silu_and_mul_backward(ctx, grad: Tensor):
    (x,) = ctx.saved_tensors
    return torch.ops.torchplug.silu_and_mul_backward(grad, x)


silu_and_mul.register_autograd(_silu_and_mul_backward,
                               setup_context=lambda ctx, inputs, output: ctx.save_for_backward(inputs[0]))


# --- rotary_embedding -----------------------------------------------------------------------


@torch.library.custom_op(f"{_LIB}::rotary_embedding", mutates_args=())
def rotary_embedding(q: Tensor, k: Tensor, cos: Tensor, sin: Tensor) -> tuple[Tensor, Tensor]:
    """Apply rotary position embedding (neox layout) to q [T, Hq, D] and k [T, Hk, D].

    cos and sin are [T, D // 2]: the per-token angles already gathered by position.
    """
    check_rotary(q, k, cos, sin)
    return rotate(q, cos, sin), rotate(k, cos, sin)


@rotary_embedding.register_fake
def _(q: Tensor, k: Tensor, cos: Tensor, sin: Tensor) -> tuple[Tensor, Tensor]:
    check_rotary(q, k, cos, sin)
    return torch.empty_like(q), torch.empty_like(k)


def _angle_grads(x: Tensor, grad: Tensor) -> tuple[Tensor, Tensor]:
    """Contributions of one rotated tensor to d(loss)/dcos and d(loss)/dsin, summed over heads."""
    x1, x2 = wide(x).chunk(2, dim=-1)
    g1, g2 = wide(grad).chunk(2, dim=-1)
    return (g1 * x1 + g2 * x2).sum(-2), (g2 * x1 - g1 * x2).sum(-2)


def _rotary_backward(ctx, grad_q: Tensor, grad_k: Tensor):
    q, k, cos, sin = ctx.saved_tensors
    # A rotation's transpose is the rotation by the opposite angle: the op itself (a backend's kernel) does it.
    dq, dk = torch.ops.torchplug.rotary_embedding(grad_q, grad_k, cos, -sin)
    dcos_q, dsin_q = _angle_grads(q, grad_q)
    dcos_k, dsin_k = _angle_grads(k, grad_k)
    return dq, dk, (dcos_q + dcos_k).to(cos.dtype), (dsin_q + dsin_k).to(sin.dtype)


rotary_embedding.register_autograd(
    _rotary_backward, setup_context=lambda ctx, inputs, output: ctx.save_for_backward(*inputs))

__all__ = list(PUBLIC_OPS)

# Backends that loaded before these ops existed register their kernels for them now.
from .ops_ready import announce_defined  # noqa: E402  -- the ops above must exist first

announce_defined()
