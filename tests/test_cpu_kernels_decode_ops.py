"""torchplug-cpu's kernels for the aten ops of a decode step outside the GEMMs: argmax (greedy
sampling, csrc/argmax_ops.cpp) and _fused_rms_norm (F.rms_norm, csrc/llm_ops.cpp), on every ISA
path this CPU can run, in fp32, bf16 and fp16.

argmax must be torch's exactly: float64 calls are not routed, so torch's own argmax of the input
widened to float64 (an exact, order-keeping conversion) is the reference. rms_norm is checked
against float64 to within one unit in the last place, and its shapes and dtypes against torch's
own result. The extension's call counters show which calls the kernels took; the rest must be
torch's results, bit for bit. No timing is asserted.
"""

import pytest
import torch
import torch.autograd.forward_ad as fwAD
import torch.nn.functional as F

kernels = pytest.importorskip("torchplug_cpu.kernels")
kernels.extension()  # defines torch.ops.torchplug_cpu

DTYPES = [torch.float32, torch.bfloat16, torch.float16]
RTOL = {torch.float32: 2e-6, torch.bfloat16: 2.0**-7, torch.float16: 2.0**-10}  # one ulp, as test_cpu_kernels_llm
NAN, INF = float("nan"), float("inf")


@pytest.fixture(scope="module")
def ext():
    return kernels.load()


def stock(fn):
    isa = kernels.current_isa()
    kernels.unload()
    try:
        return fn()
    finally:
        kernels.load()
        kernels.select_isa(isa)  # load() selects the default path again


def counted(counter, fn):
    """(how many calls reached the kernel, fn's result)."""
    before = counter()
    result = fn()
    return counter() - before, result


def ties(*shape, dtype, seed=0):
    """Small integers: every row has ties, also at its maximum."""
    return torch.randint(-4, 5, shape, generator=torch.Generator().manual_seed(seed)).to(dtype)


# ---- argmax -----------------------------------------------------------------------------------------

# (shape, dim): the decode case, rows below, at and around the vector widths (8, 16, 32 per pass),
# a single element, and dim=None over the whole tensor.
FAST = [((1, 32000), -1), ((5, 7), -1), ((3, 16), 1), ((4, 33), -1), ((2, 3, 17), 2), ((6, 1), -1), ((64, 1000), -1),
        ((2, 3, 17), None), ((40,), None), ((), None), ((1,), 0)]


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("shape,dim", FAST, ids=str)
@pytest.mark.parametrize("keepdim", [False, True])
def test_argmax_takes_the_first_maximum(isa, ext, dtype, shape, dim, keepdim):
    for x in (ties(*shape, dtype=dtype), torch.randn(shape).to(dtype), -torch.rand(shape).to(dtype) - 1):
        calls, out = counted(ext.argmax_calls, lambda: x.argmax(dim, keepdim))
        assert calls == 1
        expected = x.double().argmax(dim, keepdim)
        assert out.dtype == torch.int64 and out.shape == expected.shape and torch.equal(out, expected)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("n", [1, 7, 8, 15, 16, 17, 31, 33, 100])
def test_argmax_nan_is_the_maximum_and_the_first_nan_wins(isa, ext, dtype, n):
    rows = []
    for first in sorted({0, n // 3, n - 1}):  # one or two NaNs anywhere, among ties and infinities
        row = ties(n, dtype=torch.float32, seed=first)
        row[first] = NAN
        row[(first + n // 2) % n] = NAN if first % 2 else INF
        rows.append(row)
    rows += [torch.full((n,), NAN), torch.full((n,), -INF), torch.full((n,), INF), torch.zeros(n),
             torch.arange(n, dtype=torch.float32).neg()]  # the maximum at index 0 only
    signed_zero = torch.zeros(n)
    signed_zero[::2] = -0.0  # -0 == +0: the first wins
    x = torch.stack([*rows, signed_zero, torch.arange(n, dtype=torch.float32)]).to(dtype)
    calls, out = counted(ext.argmax_calls, lambda: x.argmax(-1))
    assert calls == 1 and torch.equal(out, x.double().argmax(-1))


def test_argmax_out(isa, ext):
    x = ties(3, 40, dtype=torch.float16)
    out = torch.empty(0, dtype=torch.int64)
    calls, result = counted(ext.argmax_calls, lambda: torch.argmax(x, -1, keepdim=True, out=out))
    assert calls == 1 and result is out and torch.equal(out, x.double().argmax(-1, keepdim=True))
    wide = torch.zeros(3, 2, dtype=torch.int64)
    calls, _ = counted(ext.argmax_calls, lambda: torch.argmax(x, -1, out=wide[:, 0]))  # strided out: torch's
    assert calls == 0 and torch.equal(wide[:, 0], x.double().argmax(-1)) and not wide[:, 1].any()


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_argmax_other_layouts_are_torchs(isa, ext, dtype):
    x = torch.randn(6, 20, 5).to(dtype)
    cases = [(x, 0, False), (x, 1, True), (x, -2, False), (x.transpose(1, 2), -1, False), (x[:, :, ::2], None, True),
             (torch.tensor(3.0, dtype=dtype), 0, False), (torch.tensor(3.0, dtype=dtype), -1, True),
             (torch.empty(0, 5, dtype=dtype), -1, False)]
    for t, dim, keepdim in cases:
        calls, out = counted(ext.argmax_calls, lambda: t.argmax(dim, keepdim))
        assert calls == 0 and torch.equal(out, stock(lambda: t.argmax(dim, keepdim)))


@pytest.mark.parametrize("shape,dim", [((0, 5), None), ((), 1), ((3, 0), -1), ((0,), 0), ((2, 3), 2)], ids=str)
def test_argmax_errors_are_torchs(isa, ext, shape, dim):
    x = torch.empty(shape, dtype=torch.float16)

    def error(fn):
        with pytest.raises(Exception) as info:
            fn()
        return type(info.value), str(info.value)

    assert error(lambda: x.argmax(dim)) == stock(lambda: error(lambda: x.argmax(dim)))
    wrong_out = torch.empty(0, dtype=torch.int32)
    y = torch.randn(2, 3).half()
    assert error(lambda: torch.argmax(y, -1, out=wrong_out)) == stock(lambda: error(
        lambda: torch.argmax(y, -1, out=wrong_out)))


# ---- _fused_rms_norm (F.rms_norm) --------------------------------------------------------------------

def rms_exact(x, normalized, w, eps):
    dims = tuple(range(-len(normalized), 0))
    x = x.double()
    rstd = torch.rsqrt(x.pow(2).mean(dims, keepdim=True) + eps)
    return x * rstd * (w.double() if w is not None else 1), rstd


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("shape,normalized", [((1, 128, 1024), (1024,)), ((1, 1, 1024), (1024,)), ((3, 7), (7,)),
                                              ((2, 3, 37), (3, 37)), ((4, 1), (1,))], ids=str)
@pytest.mark.parametrize("weight", ["none", "same", "float32"])
@pytest.mark.parametrize("eps", [1e-6, None])
def test_rms_norm_matches_float64_with_torchs_outputs(isa, ext, dtype, shape, normalized, weight, eps):
    gen = torch.Generator().manual_seed(len(shape))
    x = torch.randn(shape, generator=gen).to(dtype)
    w = None if weight == "none" else torch.randn(normalized, generator=gen).to(
        dtype if weight == "same" else torch.float32)
    calls, (out, rstd) = counted(ext.fused_rms_norm_calls,
                                 lambda: torch.ops.aten._fused_rms_norm(x, list(normalized), w, eps))
    assert calls == 1
    theirs = stock(lambda: torch.ops.aten._fused_rms_norm(x, list(normalized), w, eps))
    for ours, torchs in zip((out, rstd), theirs):
        assert (ours.dtype, ours.shape, ours.stride()) == (torchs.dtype, torchs.shape, torchs.stride())
    exact, rstd_exact = rms_exact(x, normalized, w, torch.finfo(torch.float32).eps if eps is None else eps)
    err, bound = (out.double() - exact).abs(), RTOL[dtype] * exact.abs() + 1e-6
    assert (err <= bound).all(), float((err - bound).max())
    torch.testing.assert_close(rstd.double(), rstd_exact, rtol=1e-5, atol=0)
    if w is None or w.dtype == dtype:  # F.rms_norm takes the composite with a weight of another dtype
        calls, functional = counted(ext.fused_rms_norm_calls, lambda: F.rms_norm(x, normalized, w, eps))
        assert calls == 1 and torch.equal(functional, out)


def test_rms_norm_other_calls_are_torchs(isa, ext):
    x = torch.randn(4, 6, 32).half()
    cases = [(x.transpose(0, 1), [32], None), (x, [32], torch.randn(32, dtype=torch.float64)),
             (x, [], None), (torch.empty(0, 32).half(), [32], None), (x, [6, 16], None),
             (x.double(), [32], torch.randn(32, dtype=torch.float64))]
    for t, normalized, w in cases:
        calls, out = counted(ext.fused_rms_norm_calls, lambda: torch.ops.aten._fused_rms_norm(t, normalized, w, 1e-5))
        theirs = stock(lambda: torch.ops.aten._fused_rms_norm(t, normalized, w, 1e-5))
        assert calls == 0 and all(torch.equal(a, b) for a, b in zip(out, theirs))


@pytest.mark.parametrize("dtype", [torch.float16, torch.float64], ids=str)
def test_rms_norm_autograd_is_torchs_and_inference_is_ours(isa, ext, dtype):
    gen = torch.Generator().manual_seed(0)
    x0, w0, grad = (torch.randn(shape, generator=gen).to(dtype) for shape in ((3, 64), (64,), (3, 64)))

    def backward():
        x, w = x0.clone().requires_grad_(), w0.clone().requires_grad_()
        F.rms_norm(x, (64,), w, 1e-6).backward(grad)
        return x.grad, w.grad

    calls, grads = counted(ext.fused_rms_norm_calls, backward)
    assert calls == 0 and all(torch.equal(a, b) for a, b in zip(grads, stock(backward)))
    x = x0.clone().requires_grad_()
    with torch.no_grad():
        calls, _ = counted(ext.fused_rms_norm_calls, lambda: F.rms_norm(x, (64,), w0, 1e-6))
    with torch.inference_mode():
        calls += counted(ext.fused_rms_norm_calls, lambda: F.rms_norm(x0, (64,), w0, 1e-6))[0]
    assert calls == (2 if dtype == torch.float16 else 0)


def test_rms_norm_forward_ad_is_torchs(isa, ext):
    gen = torch.Generator().manual_seed(1)
    x, tangent, w = (torch.randn(shape, generator=gen).half() for shape in ((3, 64), (3, 64), (64,)))

    def tangents():
        jvp = torch.func.jvp(lambda x: F.rms_norm(x, (64,), w, 1e-6), (x,), (tangent,))[1]
        with fwAD.dual_level():
            dual = fwAD.unpack_dual(F.rms_norm(fwAD.make_dual(x, tangent), (64,), w, 1e-6)).tangent
        return jvp, dual

    calls, ours = counted(ext.fused_rms_norm_calls, tangents)
    assert calls == 0 and all(torch.equal(a, b) for a, b in zip(ours, stock(tangents)))
