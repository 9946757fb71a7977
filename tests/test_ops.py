"""torchplug.ops: schemas, fake kernels, autograd and results of the portable ops, on the CPU
both through the kernels the CPU plugin registers and through the plain-torch reference."""

import pytest
import torch
import torch.nn.functional as F

from torchplug import ops

EPS = 1e-6
DTYPES = [torch.float32, torch.float16, torch.bfloat16]


@pytest.fixture(autouse=True, params=["backend kernels", "reference"])
def implementation(request):
    """Runs each test twice: with torchplug-cpu's kernels registered (when it is installed), and
    with them unregistered, so that the plain-torch reference serves the CPU."""
    try:
        from torchplug_cpu import kernels
    except ImportError:
        kernels = None
    if request.param == "reference" and kernels is not None and kernels.loaded():
        kernels.unload()
        yield request.param
        kernels.load()
    else:
        yield request.param


def rotary_inputs(dtype=torch.float32, tokens=5, requires_grad=False):
    gen = torch.Generator().manual_seed(0)
    q = torch.randn(tokens, 4, 16, generator=gen, dtype=dtype)
    k = torch.randn(tokens, 2, 16, generator=gen, dtype=dtype)
    angle = torch.randn(tokens, 8, generator=gen, dtype=dtype)
    return [t.requires_grad_(requires_grad) for t in (q, k, angle.cos(), angle.sin())]


def samples(dtype, requires_grad=False):
    """(op, args) for every custom op, the in-place one included."""
    gen = torch.Generator().manual_seed(1)

    def rand(*shape):
        return torch.randn(*shape, generator=gen, dtype=dtype).requires_grad_(requires_grad)

    yield ops.rms_norm, (rand(3, 7, 32), rand(32), EPS)
    yield ops.silu_and_mul, (rand(6, 2 * 24),)
    yield ops.rotary_embedding, tuple(rotary_inputs(dtype, requires_grad=requires_grad))
    yield torch.ops.torchplug.fused_add_rms_norm.default, (rand(4, 32), rand(4, 32), rand(32), EPS)
    if not requires_grad:
        yield torch.ops.torchplug.fused_add_rms_norm_.default, (rand(4, 32), rand(4, 32), rand(32), EPS)


@pytest.mark.parametrize("dtype", DTYPES)
def test_opcheck_schema_fake_and_autograd_registration(dtype):
    for op, args in samples(dtype, requires_grad=dtype == torch.float32):
        torch.library.opcheck(op, args)


def test_gradients_match_finite_differences():
    for op, args in samples(torch.float64, requires_grad=True):
        assert torch.autograd.gradcheck(op, args), op


def test_rms_norm_matches_torch():
    x, w = torch.randn(4, 64), torch.randn(64)
    torch.testing.assert_close(ops.rms_norm(x, w, EPS), F.rms_norm(x, (64,), w, EPS))


def test_silu_and_mul_matches_definition():
    x = torch.randn(3, 10)
    torch.testing.assert_close(ops.silu_and_mul(x), F.silu(x[:, :5]) * x[:, 5:])


def test_rotary_embedding_is_a_complex_rotation_of_half_pairs():
    q, k, cos, sin = rotary_inputs()
    angle = torch.atan2(sin, cos).unsqueeze(1)
    for x, out in zip((q, k), ops.rotary_embedding(q, k, cos, sin)):
        pairs = torch.complex(x[..., :8], x[..., 8:]) * torch.polar(torch.ones_like(angle), angle)
        torch.testing.assert_close(out, torch.cat([pairs.real, pairs.imag], -1))


@pytest.mark.parametrize("dtype", DTYPES)
def test_low_precision_results_are_the_float32_result_rounded(dtype):
    x, w = torch.randn(8, 128), torch.randn(128)
    expected = ops.rms_norm(x.to(dtype).float(), w.to(dtype).float(), EPS).to(dtype)
    assert torch.equal(ops.rms_norm(x.to(dtype), w.to(dtype), EPS), expected)


@pytest.mark.parametrize("grad", [False, True])
def test_fused_add_rms_norm_updates_both_tensors_in_place(grad):
    x, residual, w = torch.randn(4, 32), torch.randn(4, 32), torch.randn(32, requires_grad=grad)
    hidden = (x * 1.0).requires_grad_(False)
    if grad:  # non-leaf tensors, as inside a model
        hidden, residual = x.clone().requires_grad_() * 1.0, residual.clone().requires_grad_() * 1.0
    summed = hidden.detach() + residual.detach()
    out_x, out_residual = ops.fused_add_rms_norm(hidden, residual, w, EPS)
    assert out_x is hidden and out_residual is residual
    torch.testing.assert_close(residual.detach(), summed)
    torch.testing.assert_close(hidden.detach(), F.rms_norm(summed, (32,), w.detach(), EPS))
    if grad:
        hidden.sum().backward()
        assert w.grad is not None and w.grad.abs().sum() > 0


@pytest.mark.parametrize("call, message", [
    (lambda: ops.rms_norm(torch.randn(4, 8), torch.randn(7), EPS),
     r"torchplug::rms_norm: weight must have shape \(8,\) to match x \[4, 8\], got \[7\]"),
    (lambda: ops.silu_and_mul(torch.randn(4, 7)), r"torchplug::silu_and_mul: the last dimension of x \[4, 7\] must be even"),
    (lambda: ops.rotary_embedding(torch.randn(5, 4, 16), torch.randn(5, 2, 16), torch.randn(5, 16), torch.randn(5, 16)),
     r"cos \[5, 16\] and sin \[5, 16\] must be \[tokens, head_dim // 2\] = \(5, 8\)"),
    (lambda: ops.fused_add_rms_norm(torch.randn(4, 8), torch.randn(3, 8), torch.randn(8), EPS),
     r"x \[4, 8\] and residual \[3, 8\] must have the same shape"),
    # Mixed dtypes: torchplug-cpu's kernels refuse them (naming dtypes as C++ does), so the reference does too.
    (lambda: ops.rotary_embedding(torch.randn(5, 4, 16), torch.randn(5, 2, 16).double(), torch.randn(5, 8),
                                  torch.randn(5, 8)),
     r"torchplug::rotary_embedding: q \((torch.float32|Float)\) and k \((torch.float64|Double)\) must have the same dtype"),
    (lambda: ops.fused_add_rms_norm(torch.randn(4, 8), torch.randn(4, 8).double(), torch.randn(8), EPS),
     r"x \((torch.float32|Float)\) and residual \((torch.float64|Double)\) must have the same dtype"),
])
def test_bad_input_names_the_op_and_shapes(call, message):
    with pytest.raises(ValueError, match=message):
        call()


def test_ops_trace_under_torch_compile_without_graph_breaks():
    def block(x, residual, w, q, k, cos, sin):
        x, residual = ops.fused_add_rms_norm(x, residual, w, EPS)
        h = ops.silu_and_mul(torch.cat([x, x], -1))
        return ops.rms_norm(h, w, EPS), *ops.rotary_embedding(q, k, cos, sin)

    args = (torch.randn(4, 32), torch.randn(4, 32), torch.randn(32), *rotary_inputs())
    eager = block(*(a.clone() for a in args))
    compiled = torch.compile(block, fullgraph=True, backend="aot_eager")(*(a.clone() for a in args))
    for e, c in zip(eager, compiled):
        torch.testing.assert_close(e, c)
