"""The portable ops' shared meaning: which ops there are, their argument checks and their references.

One source for every reader: the custom ops (ops.py) validate with these checks and compute with
these references, backend kernels (torchplug.kernels, torchplug-mps, torchplug-cpu) raise the same
errors and fall back to the same references, and the conformance suite and its tiers read the
tables below.
"""

import torch
import torch.nn.functional as F
from torch import Tensor

# The public ops (torchplug.ops): what users call and the conformance suite checks.
PUBLIC_OPS = ("rms_norm", "fused_add_rms_norm", "silu_and_mul", "rotary_embedding")
# Every torchplug:: op a backend may give a kernel for: the public ones, the in-place form of
# fused_add_rms_norm, and the backward ops autograd calls.
KERNEL_OPS = ("rms_norm", "fused_add_rms_norm_", "fused_add_rms_norm", "rms_norm_backward", "silu_and_mul",
              "silu_and_mul_backward", "rotary_embedding")


def _check(op: str, condition: bool, message: str) -> None:
    if not condition:
        raise ValueError(f"torchplug::{op}: {message}")


def check_norm_args(op: str, x: Tensor, weight: Tensor) -> None:
    _check(op, x.dim() >= 1 and tuple(weight.shape) == (x.shape[-1],),
           f"weight must have shape ({x.shape[-1] if x.dim() else '?'},) to match x {list(x.shape)}, "
           f"got {list(weight.shape)}")


def wide(t: Tensor) -> Tensor:
    """The tensor in the precision its op computes in: at least float32."""
    return t.float() if t.dtype in (torch.float16, torch.bfloat16) else t


def _inv_rms(x: Tensor, eps: float) -> Tensor:
    return torch.rsqrt(wide(x).pow(2).mean(-1, keepdim=True) + eps)


def rms_norm_ref(x: Tensor, weight: Tensor, eps: float) -> Tensor:
    return (wide(x) * _inv_rms(x, eps) * wide(weight)).to(x.dtype)


def _rms_norm_grads(x: Tensor, weight: Tensor, eps: float, grad: Tensor) -> tuple[Tensor, Tensor]:
    """d(loss)/dx and d(loss)/dweight of y = x * inv_rms(x) * weight, in at least float32."""
    inv_rms = _inv_rms(x, eps)
    x_hat = wide(x) * inv_rms
    grad_w_scaled = wide(grad) * wide(weight)
    dx = inv_rms * (grad_w_scaled - x_hat * (grad_w_scaled * x_hat).mean(-1, keepdim=True))
    dweight = (wide(grad) * x_hat).reshape(-1, x.shape[-1]).sum(0)
    return dx, dweight


def rms_norm_backward_ref(grad: Tensor, x: Tensor, weight: Tensor, eps: float,
                           grad_residual: Tensor | None) -> tuple[Tensor, Tensor]:
    dx, dweight = _rms_norm_grads(x, weight, eps, grad)
    if grad_residual is not None:
        dx = dx + wide(grad_residual)
    return dx.to(x.dtype), dweight.to(weight.dtype)


def check_residual_args(x: Tensor, residual: Tensor, weight: Tensor) -> None:
    check_norm_args("fused_add_rms_norm_", x, weight)
    _check("fused_add_rms_norm_", x.shape == residual.shape,
           f"x {list(x.shape)} and residual {list(residual.shape)} must have the same shape")
    _check("fused_add_rms_norm_", x.dtype == residual.dtype,
           f"x ({x.dtype}) and residual ({residual.dtype}) must have the same dtype")


def fused_add_rms_norm_ref_(x: Tensor, residual: Tensor, weight: Tensor, eps: float) -> None:
    residual.add_(x)
    x.copy_(rms_norm_ref(residual, weight, eps))


def check_gated(x: Tensor) -> None:
    _check("silu_and_mul", x.dim() >= 1 and x.shape[-1] % 2 == 0,
           f"the last dimension of x {list(x.shape)} must be even: it holds [gate, up] halves")


def silu_and_mul_ref(x: Tensor) -> Tensor:
    a, b = wide(x).chunk(2, dim=-1)
    return (F.silu(a) * b).to(x.dtype)


def silu_and_mul_backward_ref(grad: Tensor, x: Tensor) -> Tensor:
    a, b = wide(x).chunk(2, dim=-1)
    sigmoid = torch.sigmoid(a)
    silu = a * sigmoid
    da = wide(grad) * b * sigmoid * (1 + a * (1 - sigmoid))
    return torch.cat([da, wide(grad) * silu], dim=-1).to(x.dtype)


def check_rotary(q: Tensor, k: Tensor, cos: Tensor, sin: Tensor) -> None:
    _check("rotary_embedding", q.dim() == 3 and k.dim() == 3 and q.shape[-1] % 2 == 0,
           f"q {list(q.shape)} and k {list(k.shape)} must be [tokens, heads, head_dim] with an even head_dim")
    tokens, head_dim = q.shape[0], q.shape[-1]
    _check("rotary_embedding", k.shape[0] == tokens and k.shape[-1] == head_dim,
           f"k {list(k.shape)} must match q {list(q.shape)} in tokens and head_dim")
    want = (tokens, head_dim // 2)
    _check("rotary_embedding", tuple(cos.shape) == want and tuple(sin.shape) == want,
           f"cos {list(cos.shape)} and sin {list(sin.shape)} must be [tokens, head_dim // 2] = {want}")
    # torchplug-cpu rotates q and k in one dtype: the reference asks the same, so every device refuses alike.
    _check("rotary_embedding", q.dtype == k.dtype, f"q ({q.dtype}) and k ({k.dtype}) must have the same dtype")


def rotate(x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
    """Neox-style rotate-half: pairs (x[i], x[i + d/2]) turn by the angle whose cos/sin are given."""
    x1, x2 = wide(x).chunk(2, dim=-1)
    c, s = wide(cos).unsqueeze(-2), wide(sin).unsqueeze(-2)  # broadcast over heads
    return torch.cat([x1 * c - x2 * s, x2 * c + x1 * s], dim=-1).to(x.dtype)
