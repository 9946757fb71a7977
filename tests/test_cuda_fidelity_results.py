"""Emulated cuda answers as CUDA does where CUDA's kernels differ from the CPU's (issue #29, findings 6 and 7).

Emulated devices run every op through its CPU kernel. Where torch's meta function says a GPU's kernel
lays its result out otherwise, where CUDA computes what the CPU refuses (LU without pivoting, complex32
sums, complex nansum, the fused attention kernels, float16 normalization with float32 statistics), or
where CUDA's kernel gives another edge value (logit's backward at -0.0), emulated cuda now gives
CUDA's answer. Each check runs in a fresh interpreter with TORCHPLUG_EMULATE set; the conformance
suite's `meta` mode, which finds the layout differences, is tested on a planted defect.
"""

import pytest
import torch

from emulation_helpers import CHECKS, run_json

pytest.importorskip("expecttest", reason="torch's OpInfo database needs expecttest (pip install expecttest)")

PRELUDE = CHECKS + '''
import math, warnings
import torch
import torch.nn.functional as F
warnings.simplefilter("ignore")
torch.manual_seed(0)
from torch._subclasses.fake_tensor import FakeTensorMode

def fake_strides(fn, *tensors):
    """The strides torch's meta functions give fn's tensor results on the device (what FakeTensor says)."""
    mode = FakeTensorMode()
    fakes = [mode.from_tensor(t) for t in tensors]
    with mode:
        out = fn(*fakes)
    return [list(t.stride()) for t in (out if isinstance(out, (tuple, list)) else [out])]

def strides(out):
    return [list(t.stride()) for t in (out if isinstance(out, (tuple, list)) else [out])]
'''

# Emulated cuda: layouts from the meta functions, the CUDA-only kernels, logit's edge value.
CUDA = PRELUDE + '''
dev = "cuda"
def layouts():
    cases = {
        "rfftn": (lambda x: torch.fft.rfftn(x, dim=(-3, -2, -1)), [torch.randn(5, 6, 6)]),
        "irfftn": (lambda x: torch.fft.irfftn(x, dim=(-3, -2, -1)), [torch.randn(5, 6, 4, dtype=torch.cfloat)]),
        "svd": (lambda a: torch.linalg.svd(a, full_matrices=False), [torch.randn(3, 5, 4)]),
        "eig": (lambda a: torch.linalg.eig(a), [torch.randn(5, 5)]),
        "nonzero_static": (lambda x: torch.nonzero_static(x, size=8), [torch.ones(2, 3)]),
    }
    found = {}
    for name, (fn, inputs) in cases.items():
        moved = [t.to(dev) for t in inputs]
        found[name] = [strides(fn(*moved)), fake_strides(fn, *moved)]
    values = torch.fft.rfftn(torch.arange(180.).reshape(5, 6, 6).to(dev), dim=(-3, -2, -1)).cpu()
    found["rfftn_values"] = torch.allclose(values, torch.fft.rfftn(torch.arange(180.).reshape(5, 6, 6), dim=(-3, -2, -1)))
    return found
check("layouts", layouts)

def lu_without_pivoting():
    a = torch.randn(2, 4, 4, dtype=torch.float64) + 4 * torch.eye(4, dtype=torch.float64)
    lu, pivots = torch.linalg.lu_factor(a.to(dev), pivot=False)
    l = lu.cpu().tril(-1) + torch.eye(4, dtype=torch.float64)
    p, l2, u = torch.linalg.lu(a.to(dev), pivot=False)
    _, _, info = torch.linalg.lu_factor_ex(torch.zeros(3, 3, device=dev), pivot=False)
    return {"reconstructs": torch.allclose(l @ lu.cpu().triu(), a),
            "pivots": pivots.cpu().tolist(), "column_major": lu.stride(),
            "P": list(p.shape), "LU": torch.allclose(l2.cpu() @ u.cpu(), a), "singular_info": info.item()}
check("lu_without_pivoting", lu_without_pivoting)

def out_dtypes():
    """out= tensors of another dtype, as CUDA's kernels take them: structured ones refuse, TensorIterator
    ones cast where safe, a reduction with no dtype computes in its out='s (PyTorch's test_out)."""
    a, found = torch.randn(3, 3, device=dev), {}
    def refused(call):
        try:
            call()
        except RuntimeError as e:
            return str(e)
        return None
    ints = [torch.empty(0, dtype=torch.int64, device=dev)] + [torch.empty(0, dtype=torch.int32, device=dev)] * 2
    found["lu_factor_ex"] = refused(lambda: torch.linalg.lu_factor_ex(a, pivot=False, out=ints))
    found["lu"] = refused(lambda: torch.linalg.lu(a, pivot=False, out=[torch.empty(0, dtype=torch.int64, device=dev)] * 3))
    x = torch.tensor([1 + 1j, float("nan"), 2j], dtype=torch.complex64, device=dev)
    wide = torch.empty((), dtype=torch.complex128, device=dev)
    torch.nansum(x, 0, out=wide)
    found["nansum_into_complex128"] = [str(wide.dtype), wide.item() == 1 + 3j]
    grad, half = torch.ones(4, device=dev), torch.full((4,), 0.5, device=dev)
    doubles = torch.empty(4, dtype=torch.float64, device=dev)
    torch.ops.aten.logit_backward.grad_input(grad, half, None, grad_input=doubles)
    found["logit_backward_into_float64"] = doubles.tolist()
    found["logit_backward_into_int64"] = refused(lambda: torch.ops.aten.logit_backward.grad_input(
        grad, half, None, grad_input=torch.empty(4, dtype=torch.int64, device=dev)))
    return found
check("out_dtypes", out_dtypes)

def complex_reductions():
    x = torch.randn(3, 4, dtype=torch.cfloat)
    half = x.to(torch.complex32)
    y = x.clone()
    y[0, 1] = complex(math.nan, 1.0)
    y[2, 2] = complex(1.0, math.nan)
    kept = torch.where(torch.isnan(y), torch.zeros((), dtype=y.dtype), y)
    return {"sum_complex32": [str(half.to(dev).sum().dtype),
                              torch.allclose(half.to(dev).sum(1).cpu().to(torch.cfloat), half.to(torch.cfloat).sum(1), atol=1e-2)],
            "nansum": torch.allclose(y.to(dev).nansum(1).cpu(), kept.sum(1)),
            "nansum_all": torch.allclose(y.to(dev).nansum().cpu(), kept.sum())}
check("complex_reductions", complex_reductions)

def attention(backend, dtype, **kw):
    from torch.nn.attention import sdpa_kernel, SDPBackend
    q, k, v = (torch.randn(2, 4, 6, 16, dtype=dtype) for _ in range(3))
    mask = kw.pop("mask", None)
    inputs = [t.to(dev).requires_grad_() for t in (q, k, v)]
    with sdpa_kernel(getattr(SDPBackend, backend)):
        out = F.scaled_dot_product_attention(*inputs, attn_mask=None if mask is None else mask.to(dev), **kw)
    out.float().sum().backward()
    ref = [t.double().requires_grad_() for t in (q, k, v)]
    expected = F.scaled_dot_product_attention(*ref, attn_mask=mask, **kw)
    expected.sum().backward()
    tol = 1e-5 if dtype == torch.float32 else 2e-2
    return [out.dtype == dtype and torch.allclose(out.double().cpu(), expected, atol=tol)] + \\
           [torch.allclose(a.grad.double().cpu(), b.grad, atol=tol) for a, b in zip(inputs, ref)]
for backend, dtype, kw in (("FLASH_ATTENTION", torch.float16, {}), ("FLASH_ATTENTION", torch.bfloat16, {"is_causal": True}),
                           ("EFFICIENT_ATTENTION", torch.float32, {}), ("EFFICIENT_ATTENTION", torch.float16,
                                                                       {"mask": torch.rand(6, 6) > 0.3}),
                           ("EFFICIENT_ATTENTION", torch.float32, {"is_causal": True})):
    check(f"sdpa_{backend}_{dtype}_{sorted(kw)}", lambda b=backend, d=dtype, k=kw: attention(b, d, **dict(k)))
check("sdpa_flash_refuses_float32", lambda: attention("FLASH_ATTENTION", torch.float32))
check("sdpa_flash_refuses_a_mask", lambda: attention("FLASH_ATTENTION", torch.float16, mask=torch.ones(6, 6, dtype=torch.bool)))

def fused_kernels():
    q = torch.randn(2, 5, 3, 8, dtype=torch.float16, device=dev)  # [batch, seqlen, heads, head_dim]
    out, lse, seed, offset, max_q, max_k = torch.ops.aten._efficient_attention_forward(
        q, q, q, None, None, None, None, None, 0.0, 1, True)
    flash = torch.ops.aten._flash_attention_forward(q, q, q, None, None, 5, 5, 0.0, False, False)
    expected = F.scaled_dot_product_attention(*(q.cpu().transpose(1, 2).float() for _ in range(3)), is_causal=True)
    choice = torch.ops.aten._fused_sdp_choice
    return {"efficient": [list(out.shape), list(lse.shape), seed.device.type, max_q, max_k,
                          torch.allclose(out.cpu().float().transpose(1, 2), expected, atol=2e-3)],
            "flash": [list(flash[0].shape), list(flash[1].shape), str(flash[2].dtype)],
            "choice": [choice(q.transpose(1, 2), q.transpose(1, 2), q.transpose(1, 2)),
                       choice(*(t.float().transpose(1, 2) for t in (q, q, q)))]}
check("fused_kernels", fused_kernels)
check("flash_refuses_float32_itself", lambda: torch.ops.aten._flash_attention_forward(
    *(torch.randn(1, 4, 2, 8, device=dev) for _ in range(3)), None, None, 4, 4, 0.0, False, False))

def logit_backward():
    found = {}
    for eps in (None, 0.0, 0.1):
        for n in (1, 7, 8, 9, 17):
            grad = torch.ops.aten.logit_backward(torch.ones(n, device=dev), torch.full((n,), -0.0, device=dev), eps).cpu()
            found[f"{eps}_{n}"] = [grad[0].item(), bool(torch.signbit(grad).all())]
    x = torch.tensor([-0.5, 0.0, 0.25, 0.5, 1.0, 1.5])
    found["values"] = torch.allclose(torch.ops.aten.logit_backward(torch.ones(6, device=dev), x.to(dev), None).cpu(),
                                     torch.ops.aten.logit_backward(torch.ones(6), x, None), equal_nan=True)
    return found
check("logit_backward", logit_backward)
print(json.dumps(RESULTS, default=str))
'''

# Every emulated type: normalization as GPUs compute it (the meta functions say so for any device but the CPU).
NORMALIZATION = PRELUDE + '''
import sys
dev = sys.argv[1] if len(sys.argv) > 1 else "cuda"
def batch_norm_eval():
    x, mean, var = torch.randn(2, 3, 4), torch.randn(3), torch.rand(3) + 0.5
    out = torch.ops.aten._native_batch_norm_legit(x.to(dev), None, None, mean.to(dev), var.to(dev), False, 0.1, 1e-5)
    legacy = torch.ops.aten.native_batch_norm(x.to(dev), None, None, mean.to(dev), var.to(dev), False, 0.1, 1e-5)
    return {"shapes": [list(t.shape) for t in out], "legacy_shapes": [list(t.shape) for t in legacy],
            "saved": torch.allclose(out[1].cpu(), mean) and torch.allclose(out[2].cpu(), (var + 1e-5).rsqrt())}
check("batch_norm_eval", batch_norm_eval)

def mixed_batch_norm(dtype, weight_dtype):
    x = torch.randn(4, 3, 5)
    w, b = torch.rand(3) + 0.5, torch.randn(3)
    xi = x.to(dtype).to(dev).requires_grad_()
    wi, bi = (t.to(weight_dtype).to(dev).requires_grad_() for t in (w, b))
    running_mean, running_var = torch.zeros(3, device=dev), torch.ones(3, device=dev)
    out = F.batch_norm(xi, running_mean, running_var, wi, bi, training=True)
    out.float().sum().backward()
    saved = torch.ops.aten.native_batch_norm(xi.detach(), wi.detach(), bi.detach(), None, None, True, 0.1, 1e-5)
    ref = F.batch_norm(x.double(), None, None, w.double(), b.double(), training=True)
    return {"dtypes": [str(out.dtype), str(xi.grad.dtype), str(wi.grad.dtype), str(saved[1].dtype)],
            "close": torch.allclose(out.double().cpu(), ref, atol=2e-2),
            "running_mean": torch.allclose(running_mean.cpu(), 0.1 * x.to(dtype).float().mean((0, 2)), atol=1e-3)}
for dtype in ("float16", "bfloat16"):
    for weight in (dtype, "float32"):
        check(f"batch_norm_{dtype}_{weight}", lambda d=dtype, w=weight: mixed_batch_norm(getattr(torch, d), getattr(torch, w)))

def backward_with_float32_statistics():
    """What CUDA's forward saves (float32 statistics beside float16 input and weight), given to the backward."""
    x = torch.randn(4, 3, 5, dtype=torch.float16, device=dev)
    w = torch.ones(3, dtype=torch.float16, device=dev)
    mean, invstd = x.float().mean((0, 2)), x.float().var((0, 2), unbiased=False).add(1e-5).rsqrt()
    grads = torch.ops.aten.native_batch_norm_backward(torch.ones_like(x), x, w, None, None, mean, invstd, True, 1e-5,
                                                      [True, True, True])
    return [str(g.dtype) for g in grads]
check("batch_norm_backward_float32_statistics", backward_with_float32_statistics)

def layer_norm(dtype):
    x = torch.randn(2, 3, 8)
    xi = x.to(dtype).to(dev).requires_grad_()
    out, mean, rstd = torch.ops.aten.native_layer_norm(xi, [8], None, None, 1e-5)
    F.layer_norm(xi, [8]).float().sum().backward()
    return {"dtypes": [str(out.dtype), str(mean.dtype), str(rstd.dtype), str(xi.grad.dtype)],
            "mean": torch.allclose(mean.cpu(), x.to(dtype).float().mean(-1, keepdim=True), atol=1e-6)}
check("layer_norm_float16", lambda: layer_norm(torch.float16))

def log_sigmoid():
    x = torch.randn(3, 4)
    xi = x.to(dev).requires_grad_()
    output, buffer = torch.ops.aten.log_sigmoid_forward(xi)
    F.logsigmoid(xi).sum().backward()
    return {"buffer": list(buffer.shape), "grad": torch.allclose(xi.grad.cpu(), torch.sigmoid(-x))}
check("log_sigmoid", log_sigmoid)
check("lu_without_pivoting", lambda: torch.linalg.lu_factor(torch.eye(3, device=dev), pivot=False)[1].tolist())

def group_norm_bias_only():
    """Without a weight, the CPU kernel raised 'tensor does not have a device' for the bias gradient (TorchCTS)."""
    x, b = torch.linspace(-2, 2, 24).reshape(2, 4, 3), torch.tensor([-0.5, -0.25, 0.25, 0.5])
    grad = torch.linspace(0.25, 2.5, 24).reshape(2, 4, 3)
    xi, bi = x.to(dev).requires_grad_(), b.to(dev).requires_grad_()
    F.group_norm(xi, 2, weight=None, bias=bi, eps=1e-5).backward(grad.to(dev))
    xr = x.clone().requires_grad_()
    F.group_norm(xr, 2, weight=torch.ones(4), bias=b, eps=1e-5).backward(grad)
    return [torch.allclose(bi.grad.cpu(), grad.sum(dim=(0, 2))), torch.allclose(xi.grad.cpu(), xr.grad, atol=1e-6)]
check("group_norm_bias_only", group_norm_bias_only)

def grid_sample_nonfinite():
    """CUDA's and XPU's kernels send a non-finite coordinate to pixel -100 (zero padding): zero, no gradient."""
    inp = torch.linspace(-1, 1, 12).reshape(1, 1, 3, 4)
    grid = torch.rand(1, 3, 2, 2) * 2 - 1
    grid.view(-1, 2)[0, 0] = math.nan
    grid.view(-1, 2)[3, 1] = math.inf
    far = grid.clone()
    far.view(-1, 2)[0, 0] = -1e3
    far.view(-1, 2)[3, 1] = -1e3
    found = {}
    for name, mode in (("2d", None), ("3d", None)):
        i, g, f = (inp, grid, far) if name == "2d" else (inp.unsqueeze(2), grid.unsqueeze(1).expand(1, 1, 3, 2, 2).clone(),
                                                        far.unsqueeze(1).expand(1, 1, 3, 2, 2).clone())
        if name == "3d":
            g, f = torch.cat([g, torch.zeros(*g.shape[:-1], 1)], -1), torch.cat([f, torch.zeros(*f.shape[:-1], 1)], -1)
        xi, gi = i.to(dev).requires_grad_(), g.to(dev).requires_grad_()
        out = F.grid_sample(xi, gi, padding_mode="zeros", align_corners=False)
        out.sum().backward()
        xr, fr = i.clone().requires_grad_(), f.clone().requires_grad_()
        ref = F.grid_sample(xr, fr, padding_mode="zeros", align_corners=False)
        ref.sum().backward()
        found[name] = [torch.allclose(out.cpu(), ref), torch.allclose(xi.grad.cpu(), xr.grad),
                       bool(torch.isfinite(gi.grad).all())]
    return found
check("grid_sample_nonfinite", grid_sample_nonfinite)
print(json.dumps(RESULTS, default=str))
'''


@pytest.fixture(scope="module")
def cuda():
    return run_json(CUDA, TORCHPLUG_EMULATE="cuda")


@pytest.fixture(scope="module", params=["cuda", "xpu"])
def normalization(request):
    code = NORMALIZATION.replace('sys.argv[1] if len(sys.argv) > 1 else "cuda"', repr(request.param))
    return request.param, run_json(code, TORCHPLUG_EMULATE=request.param)


def value(record):
    assert record["ok"], record
    return record["value"]


@pytest.mark.parametrize("op", ["rfftn", "irfftn", "svd", "eig", "nonzero_static"])
def test_results_are_laid_out_as_the_meta_function_says_for_cuda(cuda, op):
    """rfftn(dim=(-3,-2,-1)) on (5, 6, 6) gave the CPU's (24, 4, 1) where CUDA gives (6, 1, 30)."""
    actual, fake = value(cuda["layouts"])[op]
    assert actual == fake, (op, actual, fake)


def test_restrided_results_keep_their_values(cuda):
    assert value(cuda["layouts"])["rfftn_values"] is True


def test_lu_without_pivoting_runs_as_on_cuda(cuda):
    """The CPU refuses: 'linalg.lu_factor: LU without pivoting is not implemented on the CPU'."""
    found = value(cuda["lu_without_pivoting"])
    assert found["reconstructs"] and found["LU"], found
    assert found["pivots"] == [[1, 2, 3, 4]] * 2 and found["P"] == [0] and found["singular_info"] == 1
    assert found["column_major"] == [16, 1, 4]


def test_out_tensors_of_another_dtype_are_taken_as_cudas_kernels_take_them(cuda):
    found = value(cuda["out_dtypes"])
    assert "linalg_lu_factor_ex.out: Expected out tensor to have dtype Float, but got Long" in found["lu_factor_ex"]
    assert "linalg_lu.out: Expected out tensor to have dtype Float, but got Long" in found["lu"]
    assert found["nansum_into_complex128"] == ["torch.complex128", True]
    assert found["logit_backward_into_float64"] == [4.0] * 4
    assert "result type Float can't be cast to the desired output type Long" in found["logit_backward_into_int64"]


def test_complex32_sum_and_complex_nansum_compute_as_on_cuda(cuda):
    """The CPU refuses both: '"sum_cpu" not implemented for ComplexHalf', 'nansum on CPU does not support complex'."""
    assert value(cuda["complex_reductions"]) == {"sum_complex32": ["torch.complex32", True], "nansum": True,
                                                 "nansum_all": True}


@pytest.mark.parametrize("name", ["sdpa_FLASH_ATTENTION_torch.float16_[]", "sdpa_FLASH_ATTENTION_torch.bfloat16_['is_causal']",
                                  "sdpa_EFFICIENT_ATTENTION_torch.float32_[]", "sdpa_EFFICIENT_ATTENTION_torch.float16_['mask']",
                                  "sdpa_EFFICIENT_ATTENTION_torch.float32_['is_causal']"])
def test_sdpa_with_the_fused_backends_matches_the_math_path_forward_and_backward(cuda, name):
    assert value(cuda[name]) == [True, True, True, True], name


@pytest.mark.parametrize("name", ["sdpa_flash_refuses_float32", "sdpa_flash_refuses_a_mask"])
def test_sdpa_refuses_what_cuda_refuses(cuda, name):
    """Before, sdpa_kernel(FLASH_ATTENTION) ran the math path whatever the inputs."""
    record = cuda[name]
    assert not record["ok"] and record["message"] == "No available kernel. Aborting execution.", record


def test_the_fused_attention_kernels_exist_with_cudas_shapes(cuda):
    """aten::_efficient_attention_forward had no kernel ('has no CPU kernel')."""
    found = value(cuda["fused_kernels"])
    # output [B, M, H, Kv]; log-sum-exp [B, H, M rounded up to 32]; seed and offset on the CPU (as CUDA's)
    assert found["efficient"] == [[2, 5, 3, 8], [2, 3, 32], "cpu", 5, 5, True]
    assert found["flash"] == [[2, 5, 3, 8], [2, 3, 5], "torch.uint64"]
    assert found["choice"] == [1, 2]  # flash for float16, memory-efficient for float32 (SDPBackend values)
    record = cuda["flash_refuses_float32_itself"]
    assert not record["ok"] and "FlashAttention only support fp16 and bf16" in record["message"], record


def test_logit_backward_keeps_the_sign_of_zero_as_cudas_kernel_does(cuda):
    """CUDA: dy / (x * (1 - x)), so -0.0 gives -inf at every length; the CPU's vector loop gave +inf."""
    found = value(cuda["logit_backward"])
    for n in (1, 7, 8, 9, 17):
        assert found[f"None_{n}"] == [float("-inf"), True] and found[f"0.0_{n}"] == [float("-inf"), True]
        assert found[f"0.1_{n}"] == [0.0, False]
    assert found["values"] is True


def test_eval_batch_norm_saves_the_running_statistics(normalization):
    """The CPU returns empty saved statistics in eval mode; a GPU the running mean and 1/sqrt(var + eps)."""
    _, found = normalization
    found = value(found["batch_norm_eval"])
    assert found["shapes"] == [[2, 3, 4], [3], [3]] and found["legacy_shapes"] == [[2, 3, 4], [3], [3]]
    assert found["saved"] is True


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("weight", ["same", "float32"])
def test_low_precision_batch_norm_computes_in_float32_with_any_parameter_dtype(normalization, dtype, weight):
    _, found = normalization
    found = value(found[f"batch_norm_{dtype}_{dtype if weight == 'same' else weight}"])
    weight_dtype = dtype if weight == "same" else "float32"
    assert found["dtypes"] == [f"torch.{dtype}", f"torch.{dtype}", f"torch.{weight_dtype}", "torch.float32"], found
    assert found["close"] and found["running_mean"], found


def test_batch_norm_backward_takes_float32_statistics_with_float16_input(normalization):
    """The CPU kernel raised 'expected scalar type Half but found Float' (TorchCTS)."""
    _, found = normalization
    assert value(found["batch_norm_backward_float32_statistics"]) == ["torch.float16"] * 3


def test_low_precision_layer_norm_saves_float32_statistics(normalization):
    _, found = normalization
    found = value(found["layer_norm_float16"])
    assert found["dtypes"] == ["torch.float16", "torch.float32", "torch.float32", "torch.float16"] and found["mean"]


def test_log_sigmoid_buffer_is_empty_and_the_backward_still_right(normalization):
    _, found = normalization
    assert value(found["log_sigmoid"]) == {"buffer": [0], "grad": True}


def test_lu_without_pivoting_stays_refused_off_cuda(normalization):
    device, found = normalization
    record = found["lu_without_pivoting"]
    if device == "cuda":
        assert value(record) == [1, 2, 3]
    else:
        assert not record["ok"] and "LU without pivoting is not implemented" in record["message"], record


def test_the_meta_mode_finds_a_result_laid_out_otherwise_than_the_meta_function_says():
    """A custom op whose kernel returns a column-major result while its fake kernel says row-major: the
    value modes pass it, the meta mode names the strides."""
    from torch.testing._internal.opinfo.core import SampleInput

    from torchplug.conformance.modes.meta import meta
    from torchplug.conformance.modes.eager import eager
    from torchplug.conformance.target import Target
    from torchplug.conformance.cases.opinfo import OpEntry

    lib = torch.library.Library("fid29_meta", "DEF")
    lib.define("column_major(Tensor x) -> Tensor")
    lib.impl("column_major", lambda x: x.t().contiguous().t().clone(memory_format=torch.preserve_format), "CPU")
    torch.library.register_fake("fid29_meta::column_major", lambda x: torch.empty_like(x, memory_format=torch.contiguous_format), lib=lib)
    entry = OpEntry("column_major", torch.ops.fid29_meta.column_major, frozenset({torch.float32}), frozenset(), False,
                    lambda dtype, grad: [SampleInput(torch.randn(3, 4))])
    sample, target = entry.samples(torch.float32)[0], Target("cpu", torch.device("cpu"))
    assert eager(entry, sample, target).ok
    verdict = meta(entry, sample, target)
    assert not verdict.ok and "Stride mismatch" in verdict.detail and "(1, 3)" in verdict.detail, verdict.detail
    assert meta(OpEntry("add", torch.add, frozenset({torch.float32}), frozenset(), True,
                        lambda dtype, grad: [SampleInput(torch.randn(3, 4), args=(torch.randn(3, 4),))]),
                SampleInput(torch.randn(3, 4), args=(torch.randn(3, 4),)), target).ok


def test_group_norm_without_a_weight_gives_the_bias_gradient(normalization):
    _, found = normalization
    assert value(found["group_norm_bias_only"]) == [True, True]


def test_grid_sample_sends_a_non_finite_coordinate_outside_the_input(normalization):
    """The CPU's vectorized kernel gave NaN for the point and its gradients."""
    _, found = normalization
    assert value(found["grid_sample_nonfinite"]) == {"2d": [True, True, True], "3d": [True, True, True]}
