"""torchplug-cpu's C++ kernels for the portable LLM ops (rms_norm, fused_add_rms_norm_,
silu_and_mul, rotary_embedding) on every ISA path this CPU can run, in fp32, bf16 and fp16.

The reference is computed here in float64 (independently of torchplug.ops, which may itself be
served by these kernels): the kernels compute in fp32 and round once, so they must match the exact
result to within one unit in the last place of the dtype. No timing is asserted.
"""

import json

import pytest
import torch
import torch.nn.functional as F

from conftest import run_python

kernels = pytest.importorskip("torchplug_cpu.kernels")
kernels.extension()  # defines torch.ops.torchplug_cpu

DTYPES = [torch.float32, torch.bfloat16, torch.float16]
EPS = 1e-6
# One unit in the last place, relative: fp32 also carries its accumulation error (hidden <= 4101).
RTOL = {torch.float32: 2e-6, torch.bfloat16: 2.0**-7, torch.float16: 2.0**-10}


OPS = torch.ops.torchplug_cpu  # the kernels themselves, whatever torchplug.ops routes to


@pytest.fixture(scope="module")
def ext():
    return kernels.load()


def rand(*shape, dtype, seed=0, scale=1.0):
    gen = torch.Generator().manual_seed(seed)
    return (torch.randn(shape, generator=gen) * scale).to(dtype)


def assert_ulp_close(out, exact, dtype):
    """out (dtype) within 1 ulp of the float64 result (plus a tiny absolute floor near zero)."""
    assert out.dtype == dtype and out.shape == exact.shape
    err = (out.double() - exact).abs()
    bound = RTOL[dtype] * exact.abs() + 1e-6
    assert (err <= bound).all(), f"worst excess {float((err - bound).max())} at {int((err - bound).argmax())}"


def rms_norm_exact(x, w):
    x, w = x.double(), w.double()
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + EPS) * w


HIDDEN = [1, 7, 64, 4101]  # below, at and around the vector widths; 4101 has a tail


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("hidden", HIDDEN)
@pytest.mark.parametrize("fp32_weight", [False, True])
def test_rms_norm(isa, ext, dtype, hidden, fp32_weight):
    x = rand(5, 3, hidden, dtype=dtype, seed=hidden)
    w = rand(hidden, dtype=torch.float32 if fp32_weight else dtype, seed=1)
    out = OPS.rms_norm(x, w, EPS)
    assert_ulp_close(out, rms_norm_exact(x, w), dtype)


def test_rms_norm_non_contiguous_and_empty(isa, ext):
    base = rand(6, 80, dtype=torch.bfloat16)
    x = base[::2, 3:67]  # row stride 160, sliced columns
    w = rand(64, dtype=torch.bfloat16, seed=2)
    assert_ulp_close(OPS.rms_norm(x, w, EPS), rms_norm_exact(x, w), torch.bfloat16)
    assert OPS.rms_norm(torch.empty(0, 64), torch.ones(64), EPS).shape == (0, 64)


def test_rms_norm_threads_split_rows_without_changing_results(isa, ext):
    x, w = rand(300, 1000, dtype=torch.float16), rand(1000, dtype=torch.float16, seed=3)
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        one = OPS.rms_norm(x, w, EPS)
    finally:
        torch.set_num_threads(threads)
    assert torch.equal(one, OPS.rms_norm(x, w, EPS))


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("hidden", HIDDEN)
def test_fused_add_rms_norm_in_place(isa, ext, dtype, hidden):
    x, residual = rand(4, hidden, dtype=dtype, seed=hidden), rand(4, hidden, dtype=dtype, seed=hidden + 1)
    w = rand(hidden, dtype=dtype, seed=2)
    x0, r0 = x.clone(), residual.clone()
    pointers = x.data_ptr(), residual.data_ptr()
    OPS.fused_add_rms_norm_(x, residual, w, EPS)
    assert (x.data_ptr(), residual.data_ptr()) == pointers
    assert torch.equal(residual, x0 + r0)  # torch adds 16-bit floats in fp32 and rounds once, as we do
    assert_ulp_close(x, rms_norm_exact(residual, w), dtype)


def test_fused_add_rms_norm_writes_back_into_strided_tensors(isa, ext):
    xb, rb = rand(4, 96, dtype=torch.float16), rand(4, 96, dtype=torch.float16, seed=1)
    x, residual = xb[:, ::2], rb[:, 1::2]
    w = rand(48, dtype=torch.float32, seed=2)
    x0, r0 = x.clone(), residual.clone()
    OPS.fused_add_rms_norm_(x, residual, w, EPS)
    assert torch.equal(rb[:, 1::2], x0 + r0)
    assert_ulp_close(xb[:, ::2], rms_norm_exact(x0 + r0, w), torch.float16)
    assert torch.equal(xb[:, 1::2], rand(4, 96, dtype=torch.float16)[:, 1::2])  # the rest untouched


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("d", [1, 5, 64, 1003])
def test_silu_and_mul(isa, ext, dtype, d):
    x = rand(3, 2, 2 * d, dtype=dtype, seed=d, scale=4.0)  # |x| up to ~16: both tails of silu
    a, b = x.double().chunk(2, dim=-1)
    out = OPS.silu_and_mul(x)
    assert out.shape == (3, 2, d)
    # fp32 exp and divide add a few ulp of fp32 on top of the final rounding
    err = (out.double() - F.silu(a) * b).abs()
    bound = max(RTOL[dtype], 1e-6) * (F.silu(a) * b).abs() + 1e-6
    assert (err <= bound).all(), float((err - bound).max())


def test_silu_and_mul_extremes(isa, ext):
    x = torch.tensor([[-200.0, -88.0, -1.0, 0.0, 1.0, 88.0, 200.0, float("nan"), 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0]])
    out = OPS.silu_and_mul(x)
    expected = F.silu(x[:, :8].double()) * x[:, 8:].double()
    assert out[0, 7].isnan()
    torch.testing.assert_close(out[:, :7].double(), expected[:, :7], rtol=1e-6, atol=1e-30)


def test_silu_and_mul_saturates_as_torch_does(isa, ext):
    """Far past exp's range silu is -0 (a very negative gate) or NaN (-inf, as torch's -inf * 0),
    also when the other half is huge: an exp clamped to the normal floats gave silu(-100) * 3e38 =
    -181 and silu(-3e38) * 2 = -3.6."""
    gate = torch.tensor([-float("inf"), -3e38, -200.0, -100.0, -88.8, -88.0, -1.0, 0.0, 88.8, 3e38, float("inf")])
    for up in (2.0, 3e38, -3e38):
        x = torch.cat([gate, torch.full_like(gate, up)]).unsqueeze(0)
        want = F.silu(gate) * up  # torch in float32
        torch.testing.assert_close(OPS.silu_and_mul(x)[0], want, rtol=1e-5, atol=0.0, equal_nan=True)


def rope_exact(x, cos, sin):
    x1, x2 = x.double().chunk(2, dim=-1)
    c, s = cos.double().unsqueeze(1), sin.double().unsqueeze(1)
    return torch.cat([x1 * c - x2 * s, x2 * c + x1 * s], dim=-1)


def assert_rope_close(out, x, cos, sin):
    exact = rope_exact(x, cos, sin)
    x1, x2 = x.double().abs().chunk(2, dim=-1)
    terms = torch.cat([x1 + x2, x1 + x2], dim=-1)  # x1 c - x2 s can cancel: fp32 error scales with the terms
    err = (out.double() - exact).abs()
    bound = RTOL[x.dtype] * exact.abs() + 2e-7 * terms + 1e-6
    assert (err <= bound).all(), float((err - bound).max())


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("head_dim", [2, 18, 64, 128])
@pytest.mark.parametrize("fp32_angles", [False, True])
def test_rotary_embedding(isa, ext, dtype, head_dim, fp32_angles):
    q, k = rand(7, 4, head_dim, dtype=dtype, seed=1), rand(7, 2, head_dim, dtype=dtype, seed=2)
    angle = rand(7, head_dim // 2, dtype=torch.float32, seed=3)
    cos, sin = (angle.cos(), angle.sin()) if fp32_angles else (angle.cos().to(dtype), angle.sin().to(dtype))
    q0, k0 = q.clone(), k.clone()
    q_out, k_out = OPS.rotary_embedding(q, k, cos, sin)
    assert torch.equal(q, q0) and torch.equal(k, k0)  # functional: inputs untouched
    assert q_out.shape == q.shape and k_out.shape == k.shape
    assert_rope_close(q_out, q, cos, sin)
    assert_rope_close(k_out, k, cos, sin)


def test_rotary_embedding_on_views_of_a_fused_qkv(isa, ext):
    tokens, heads, kv_heads, head_dim = 5, 4, 2, 32
    qkv = rand(tokens, (heads + 2 * kv_heads) * head_dim, dtype=torch.bfloat16)
    q = qkv[:, : heads * head_dim].view(tokens, heads, head_dim)
    k = qkv[:, heads * head_dim : (heads + kv_heads) * head_dim].view(tokens, kv_heads, head_dim)
    angle = rand(tokens, head_dim // 2, dtype=torch.float32, seed=4)
    cos_sin = torch.cat([angle.cos(), angle.sin()], dim=-1)  # one cache, as vLLM keeps it
    cos, sin = cos_sin[:, : head_dim // 2], cos_sin[:, head_dim // 2 :]  # strided views
    q_out, k_out = OPS.rotary_embedding(q, k, cos, sin)
    assert_rope_close(q_out, q, cos, sin)
    assert_rope_close(k_out, k, cos, sin)


@pytest.mark.parametrize("call, message", [
    (lambda ops: ops.rms_norm(torch.randn(4, 8), torch.randn(7), EPS),
     r"torchplug::rms_norm: weight must have shape \(8,\) to match x \[4, 8\], got \[7\]"),
    (lambda ops: ops.rms_norm(torch.randn(4, 8, dtype=torch.float64), torch.randn(8, dtype=torch.float64), EPS),
     r"x must be float32, bfloat16 or float16, got Double"),
    (lambda ops: ops.silu_and_mul(torch.randn(4, 7)), r"the last dimension of x \[4, 7\] must be even"),
    (lambda ops: ops.rotary_embedding(torch.randn(5, 4, 16), torch.randn(5, 2, 16), torch.randn(5, 16), torch.randn(5, 16)),
     r"cos \[5, 16\] and sin \[5, 16\] must be \[tokens, head_dim // 2\] = \(5, 8\)"),
    (lambda ops: ops.fused_add_rms_norm_(torch.randn(4, 8), torch.randn(3, 8), torch.randn(8), EPS),
     r"x \[4, 8\] and residual \[3, 8\] must have the same shape"),
])
def test_bad_input_raises_value_error_naming_the_op(ext, call, message):
    with pytest.raises(ValueError, match=message):
        call(OPS)


def test_torchplug_ops_on_cpu_run_these_kernels_except_float64(ext):
    from torchplug import ops
    from torchplug.dispatcher import route

    for op in kernels.LLM_OPS:
        for dtype in DTYPES:
            assert route(f"torchplug::{op}", "cpu", "CPU", dtype) == "kernel", (op, dtype)
        assert route(f"torchplug::{op}", "cpu", "CPU", torch.float64) == "native", op
    for dtype in DTYPES:
        x, w = rand(3, 5, 96, dtype=dtype, seed=7), rand(96, dtype=dtype, seed=8)
        assert torch.equal(ops.rms_norm(x, w, EPS), OPS.rms_norm(x, w, EPS))
        assert torch.equal(ops.silu_and_mul(x), OPS.silu_and_mul(x))
    x, w = rand(3, 96, dtype=torch.float64), rand(96, dtype=torch.float64)  # the kernels reject float64
    assert_ulp_close(ops.rms_norm(x, w, EPS).float(), rms_norm_exact(x, w).float(), torch.float32)


def test_op_kernels_register_once_when_torchplug_ops_is_first_imported():
    code = """
        import json, sys, torch
        from torchplug_cpu import kernels
        before = "torchplug.dispatcher.ops" in sys.modules, len(kernels._registrations)
        kernels.unload()
        kernels.load()  # a second registration waits for the ops, like the one made at autoload
        from torchplug import ops
        from torchplug.dispatcher import route
        print(json.dumps({"before": before, "after": len(kernels._registrations),
                          "route": route("torchplug::silu_and_mul", "cpu", "CPU", torch.bfloat16)}))
    """
    report = json.loads(run_python(code).stdout)
    aten = len(kernels.GEMM_OPS) + len(kernels.ATTENTION_OPS) + len(kernels.DECODE_OPS) + len(kernels.QUANT_OPS)
    assert report == {"before": [False, aten], "after": aten + len(kernels.LLM_OPS), "route": "kernel"}
