"""torchplug.ops: portable LLM building blocks as torch custom ops (``torchplug::<name>``).

Each op has a schema (torch.library.custom_op), a fake implementation so torch.compile can trace
it, autograd, and a reference implementation in plain torch. The reference is registered under
CompositeExplicitAutograd, so it serves every device. A backend that registers its own kernel
under its dispatch key (CPU, XPU, ...) takes precedence for that device.

float16 and bfloat16 inputs are computed in float32 and the result is rounded back to the input
dtype; float32 and float64 are computed in their own precision.
"""

import torch
import torch.nn.functional as F
from torch import Tensor

_LIB = "torchplug"


def _check(op: str, condition: bool, message: str) -> None:
    if not condition:
        raise ValueError(f"torchplug::{op}: {message}")


def _check_norm_args(op: str, x: Tensor, weight: Tensor) -> None:
    _check(op, x.dim() >= 1 and tuple(weight.shape) == (x.shape[-1],),
           f"weight must have shape ({x.shape[-1] if x.dim() else '?'},) to match x {list(x.shape)}, "
           f"got {list(weight.shape)}")


def _wide(t: Tensor) -> Tensor:
    """The tensor in the precision its op computes in: at least float32."""
    return t.float() if t.dtype in (torch.float16, torch.bfloat16) else t


def _inv_rms(x: Tensor, eps: float) -> Tensor:
    return torch.rsqrt(_wide(x).pow(2).mean(-1, keepdim=True) + eps)


def _rms_norm_ref(x: Tensor, weight: Tensor, eps: float) -> Tensor:
    return (_wide(x) * _inv_rms(x, eps) * _wide(weight)).to(x.dtype)


def _rms_norm_grads(x: Tensor, weight: Tensor, eps: float, grad: Tensor) -> tuple[Tensor, Tensor]:
    """d(loss)/dx and d(loss)/dweight of y = x * inv_rms(x) * weight, in at least float32."""
    inv_rms = _inv_rms(x, eps)
    x_hat = _wide(x) * inv_rms
    grad_w_scaled = _wide(grad) * _wide(weight)
    dx = inv_rms * (grad_w_scaled - x_hat * (grad_w_scaled * x_hat).mean(-1, keepdim=True))
    dweight = (_wide(grad) * x_hat).reshape(-1, x.shape[-1]).sum(0)
    return dx, dweight


def _save_inputs(ctx, inputs, output) -> None:
    *tensors, ctx.eps = inputs
    ctx.save_for_backward(*tensors)


# --- rms_norm -------------------------------------------------------------------------------


@torch.library.custom_op(f"{_LIB}::rms_norm", mutates_args=())
def rms_norm(x: Tensor, weight: Tensor, eps: float) -> Tensor:
    """x / sqrt(mean(x**2, -1) + eps) * weight."""
    _check_norm_args("rms_norm", x, weight)
    return _rms_norm_ref(x, weight, eps)


@rms_norm.register_fake
def _(x: Tensor, weight: Tensor, eps: float) -> Tensor:
    _check_norm_args("rms_norm", x, weight)
    return torch.empty_like(x)


def _rms_norm_backward_ref(grad: Tensor, x: Tensor, weight: Tensor, eps: float,
                           grad_residual: Tensor | None) -> tuple[Tensor, Tensor]:
    dx, dweight = _rms_norm_grads(x, weight, eps, grad)
    if grad_residual is not None:
        dx = dx + _wide(grad_residual)
    return dx.to(x.dtype), dweight.to(weight.dtype)


@torch.library.custom_op(f"{_LIB}::rms_norm_backward", mutates_args=())
def rms_norm_backward(grad: Tensor, x: Tensor, weight: Tensor, eps: float,
                      grad_residual: Tensor | None = None) -> tuple[Tensor, Tensor]:
    """rms_norm's (dx, dweight) in x's and weight's dtypes, an op of its own so backends can give it
    a kernel. `grad_residual` is added to dx before rounding (fused_add_rms_norm's second output)."""
    return _rms_norm_backward_ref(grad, x, weight, eps, grad_residual)


@rms_norm_backward.register_fake
def _(grad: Tensor, x: Tensor, weight: Tensor, eps: float,
      grad_residual: Tensor | None = None) -> tuple[Tensor, Tensor]:
    return torch.empty_like(x), torch.empty_like(weight)


def _rms_norm_backward(ctx, grad: Tensor):
    x, weight = ctx.saved_tensors
    return *torch.ops.torchplug.rms_norm_backward(grad, x, weight, ctx.eps), None


rms_norm.register_autograd(_rms_norm_backward, setup_context=_save_inputs)


# --- fused_add_rms_norm ---------------------------------------------------------------------


def _check_residual_args(x: Tensor, residual: Tensor, weight: Tensor) -> None:
    _check_norm_args("fused_add_rms_norm_", x, weight)
    _check("fused_add_rms_norm_", x.shape == residual.shape,
           f"x {list(x.shape)} and residual {list(residual.shape)} must have the same shape")


def _fused_add_rms_norm_ref_(x: Tensor, residual: Tensor, weight: Tensor, eps: float) -> None:
    residual.add_(x)
    x.copy_(_rms_norm_ref(residual, weight, eps))


@torch.library.custom_op(f"{_LIB}::fused_add_rms_norm_", mutates_args=("x", "residual"))
def _fused_add_rms_norm_inplace(x: Tensor, residual: Tensor, weight: Tensor, eps: float) -> None:
    """residual += x; x = rms_norm(residual) * weight. The kernel backends replace."""
    _check_residual_args(x, residual, weight)
    _fused_add_rms_norm_ref_(x, residual, weight, eps)


@_fused_add_rms_norm_inplace.register_fake
def _(x: Tensor, residual: Tensor, weight: Tensor, eps: float) -> None:
    _check_norm_args("fused_add_rms_norm_", x, weight)


@torch.library.custom_op(f"{_LIB}::fused_add_rms_norm", mutates_args=())
def _fused_add_rms_norm_functional(x: Tensor, residual: Tensor, weight: Tensor, eps: float) -> tuple[Tensor, Tensor]:
    """The out-of-place form autograd needs: returns (rms_norm(x + residual) * weight, x + residual)."""
    out, summed = x.clone(), residual.clone()
    torch.ops.torchplug.fused_add_rms_norm_(out, summed, weight, eps)  # the backend's kernel, if any
    return out, summed


@_fused_add_rms_norm_functional.register_fake
def _(x: Tensor, residual: Tensor, weight: Tensor, eps: float) -> tuple[Tensor, Tensor]:
    _check_norm_args("fused_add_rms_norm", x, weight)
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


def _check_gated(x: Tensor) -> None:
    _check("silu_and_mul", x.dim() >= 1 and x.shape[-1] % 2 == 0,
           f"the last dimension of x {list(x.shape)} must be even: it holds [gate, up] halves")


def _silu_and_mul_ref(x: Tensor) -> Tensor:
    a, b = _wide(x).chunk(2, dim=-1)
    return (F.silu(a) * b).to(x.dtype)


@torch.library.custom_op(f"{_LIB}::silu_and_mul", mutates_args=())
def silu_and_mul(x: Tensor) -> Tensor:
    """SwiGLU: with x = [a, b] split in halves on the last dim, silu(a) * b."""
    _check_gated(x)
    return _silu_and_mul_ref(x).contiguous()  # a new contiguous tensor, as the fake kernel and the kernels give


@silu_and_mul.register_fake
def _(x: Tensor) -> Tensor:
    _check_gated(x)
    return x.new_empty((*x.shape[:-1], x.shape[-1] // 2))


def _silu_and_mul_backward_ref(grad: Tensor, x: Tensor) -> Tensor:
    a, b = _wide(x).chunk(2, dim=-1)
    sigmoid = torch.sigmoid(a)
    silu = a * sigmoid
    da = _wide(grad) * b * sigmoid * (1 + a * (1 - sigmoid))
    return torch.cat([da, _wide(grad) * silu], dim=-1).to(x.dtype)


@torch.library.custom_op(f"{_LIB}::silu_and_mul_backward", mutates_args=())
def silu_and_mul_backward(grad: Tensor, x: Tensor) -> Tensor:
    """silu_and_mul's dx, an op of its own so backends can give it a kernel."""
    return _silu_and_mul_backward_ref(grad, x)


@silu_and_mul_backward.register_fake
def _(grad: Tensor, x: Tensor) -> Tensor:
    return torch.empty_like(x)


def _silu_and_mul_backward(ctx, grad: Tensor):
    (x,) = ctx.saved_tensors
    return torch.ops.torchplug.silu_and_mul_backward(grad, x)


silu_and_mul.register_autograd(_silu_and_mul_backward,
                               setup_context=lambda ctx, inputs, output: ctx.save_for_backward(inputs[0]))


# --- rotary_embedding -----------------------------------------------------------------------


def _check_rotary(q: Tensor, k: Tensor, cos: Tensor, sin: Tensor) -> None:
    _check("rotary_embedding", q.dim() == 3 and k.dim() == 3 and q.shape[-1] % 2 == 0,
           f"q {list(q.shape)} and k {list(k.shape)} must be [tokens, heads, head_dim] with an even head_dim")
    tokens, head_dim = q.shape[0], q.shape[-1]
    _check("rotary_embedding", k.shape[0] == tokens and k.shape[-1] == head_dim,
           f"k {list(k.shape)} must match q {list(q.shape)} in tokens and head_dim")
    want = (tokens, head_dim // 2)
    _check("rotary_embedding", tuple(cos.shape) == want and tuple(sin.shape) == want,
           f"cos {list(cos.shape)} and sin {list(sin.shape)} must be [tokens, head_dim // 2] = {want}")


def _rotate(x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
    """Neox-style rotate-half: pairs (x[i], x[i + d/2]) turn by the angle whose cos/sin are given."""
    x1, x2 = _wide(x).chunk(2, dim=-1)
    c, s = _wide(cos).unsqueeze(-2), _wide(sin).unsqueeze(-2)  # broadcast over heads
    return torch.cat([x1 * c - x2 * s, x2 * c + x1 * s], dim=-1).to(x.dtype)


@torch.library.custom_op(f"{_LIB}::rotary_embedding", mutates_args=())
def rotary_embedding(q: Tensor, k: Tensor, cos: Tensor, sin: Tensor) -> tuple[Tensor, Tensor]:
    """Apply rotary position embedding (neox layout) to q [T, Hq, D] and k [T, Hk, D].

    cos and sin are [T, D // 2]: the per-token angles already gathered by position.
    """
    _check_rotary(q, k, cos, sin)
    return _rotate(q, cos, sin), _rotate(k, cos, sin)


@rotary_embedding.register_fake
def _(q: Tensor, k: Tensor, cos: Tensor, sin: Tensor) -> tuple[Tensor, Tensor]:
    _check_rotary(q, k, cos, sin)
    return torch.empty_like(q), torch.empty_like(k)


def _angle_grads(x: Tensor, grad: Tensor) -> tuple[Tensor, Tensor]:
    """Contributions of one rotated tensor to d(loss)/dcos and d(loss)/dsin, summed over heads."""
    x1, x2 = _wide(x).chunk(2, dim=-1)
    g1, g2 = _wide(grad).chunk(2, dim=-1)
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

__all__ = ["fused_add_rms_norm", "rms_norm", "rotary_embedding", "silu_and_mul"]

# Backends that loaded before these ops existed register their kernels for them now.
from .registry import _torchplug_ops_defined  # noqa: E402  -- the ops above must exist first

_torchplug_ops_defined()
