"""torchplug-cpu's float16 GEMM family: mm / addmm / bmm / baddbmm (functional, out=, in-place),
reached directly and through linear / matmul, on every ISA path this CPU can run.

Results are checked against a float64 reference with an error bound that fp32 accumulation meets
and fp16 accumulation does not; accuracy is compared with stock torch's fp16 result computed in a
fresh process that never loads torchplug's kernels. No timing is asserted anywhere.
"""

import json
import math
import textwrap
import threading

import pytest
import torch
import torch.nn.functional as F
from torch._inductor.utils import run_and_get_code

from conftest import CPU_ISAS as ISAS
from conftest import run_python

kernels = pytest.importorskip("torchplug_cpu.kernels")


@pytest.fixture(scope="module")
def ext():
    """The extension with the kernels registered, every fp16 product on torchplug's GEMM (also
    where oneDNN would take the larger ones); the previous state is restored afterwards."""
    was_loaded = kernels.loaded()
    module = kernels.load()
    module.set_fp16_route_onednn(False)
    yield module
    module.set_fp16_route_onednn(kernels.onednn_fp16())
    if not was_loaded:
        kernels.unload()


def rand(*shape, gen=None, dtype=torch.float16):
    return torch.randn(shape, generator=gen, dtype=torch.float32).to(dtype)


def reference(a, b, bias=None, alpha=1.0, beta=0.0):
    """float64 alpha * a @ b + beta * bias (bias ignored when beta == 0, as torch does)."""
    out = alpha * torch.matmul(a.double(), b.double())
    if bias is not None and beta != 0:
        out = out + beta * bias.double()
    return out


def assert_gemm_close(out, a, b, bias=None, alpha=1.0, beta=0.0):
    """|out - ref| within fp16 rounding of the result plus worst-case fp32 accumulation error."""
    ref = reference(a, b, bias, alpha, beta)
    assert out.dtype == torch.float16 and out.shape == ref.shape
    magnitude = abs(alpha) * torch.matmul(a.double().abs(), b.double().abs())
    if bias is not None and beta != 0:
        magnitude = magnitude + abs(beta) * bias.double().abs()
    accumulation = (a.shape[-1] + 4) * 2.0**-24 * magnitude
    bound = 2.0**-11 * (ref.abs() + accumulation) + accumulation + 2.0**-25
    err = (out.double() - ref).abs()
    bad = err > bound
    assert not bad.any(), f"{int(bad.sum())} of {out.numel()} elements off; worst {float((err - bound).max())}"
    if out.numel() >= 1024:  # fp32 accumulation rounds almost every element like the exact result
        same = (out == ref.half()).double().mean().item()
        assert same > 0.97, f"only {same:.3f} of the elements equal the correctly rounded result"


def calls(ext):
    return ext.fp16_gemm_calls()


# ---- shapes --------------------------------------------------------------------------------------

SHAPES = [  # (m, k, n)
    (0, 5, 7), (5, 0, 7), (5, 7, 0), (0, 0, 0),  # empty
    (1, 1, 1), (1, 9, 1), (7, 1, 5), (1, 300, 200), (200, 300, 1),  # 1-sized
    (37, 53, 29), (13, 17, 19),  # odd
    (150, 300, 1100),  # several m-blocks, n-blocks and k-slices
    (20, 16384, 24),  # long K
]


@pytest.mark.parametrize("m,k,n", SHAPES, ids=[f"{m}x{k}x{n}" for m, k, n in SHAPES])
def test_mm_shapes(isa, ext, m, k, n):
    gen = torch.Generator().manual_seed(m * 1000 + k + n)
    a, b = rand(m, k, gen=gen), rand(k, n, gen=gen)
    before = calls(ext)
    out = torch.mm(a, b)
    assert calls(ext) > before
    if k == 0:
        assert torch.equal(out, torch.zeros(m, n, dtype=torch.float16))
    assert_gemm_close(out, a, b)


def layouts(rows, cols, gen):
    """The same logical matrix in every stride pattern the GEMM must handle."""
    base = rand(rows, cols, gen=gen)
    big = rand(2 * rows + 1, 3 * cols + 2, gen=gen)
    big[1::2, 2::3] = base
    row, col = rand(cols, gen=gen), rand(rows, 1, gen=gen)
    return {
        "contiguous": base,
        "transposed": base.t().contiguous().t(),
        "sliced": big[1::2, 2::3],
        "broadcast-rows": row.expand(rows, cols),
        "broadcast-cols": col.expand(rows, cols),
    }


@pytest.mark.parametrize("a_layout", ["contiguous", "transposed", "sliced", "broadcast-rows", "broadcast-cols"])
@pytest.mark.parametrize("b_layout", ["contiguous", "transposed", "sliced", "broadcast-rows", "broadcast-cols"])
def test_mm_stride_patterns(isa, ext, a_layout, b_layout):
    gen = torch.Generator().manual_seed(7)
    a = layouts(45, 70, gen)[a_layout]
    b = layouts(70, 33, gen)[b_layout]
    assert_gemm_close(torch.mm(a, b), a, b)


SKINNY = [(1, 1), (1, 70), (2, 33), (3, 5), (4, 1030), (5, 40), (70, 1), (33, 3), (1030, 4),  # (m, n)
          (6, 71), (8, 33), (11, 1030), (16, 7), (17, 20)]  # 5..16 rows: skinny when B lies along k, as F.linear's


@pytest.mark.parametrize("m,n", SKINNY, ids=[f"{m}x{n}" for m, n in SKINNY])
@pytest.mark.parametrize("layout", ["contiguous", "transposed", "sliced"])
def test_skinny_products(isa, ext, m, n, layout):
    """At most 4 rows or columns (16 rows with B contiguous along k): the unpacked path, K with slices and a tail."""
    gen = torch.Generator().manual_seed(m * 7 + n)
    k = 603
    a, b = layouts(m, k, gen)[layout], layouts(k, n, gen)[layout]
    bias = rand(n, gen=gen)
    assert_gemm_close(torch.mm(a, b), a, b)
    assert_gemm_close(torch.addmm(bias, a, b, beta=0.5, alpha=1.5), a, b, bias, 1.5, 0.5)
    assert_gemm_close(torch.mm(a, b.t().contiguous().t()), a, b)  # the F.linear layout of B


@pytest.mark.parametrize("m", [5, 8, 12, 16])
def test_linear_of_a_few_tokens_streams_the_weight_once_per_thread_count(isa, ext, m):
    """5..16 rows of F.linear (small batches, speculative decoding): the skinny path's row groups,
    long K, n split across threads without changing a single element."""
    gen = torch.Generator().manual_seed(m)
    x, w, bias = rand(m, 5000, gen=gen), rand(515, 5000, gen=gen), rand(515, gen=gen)
    before = calls(ext)
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        one = F.linear(x, w, bias)
        torch.set_num_threads(2)
        two = F.linear(x, w, bias)
    finally:
        torch.set_num_threads(threads)
    assert calls(ext) == before + 2
    assert torch.equal(one, two)
    assert_gemm_close(one, x, w.t(), bias, 1.0, 1.0)


def test_skinny_batched_and_long_k(isa, ext):
    gen = torch.Generator().manual_seed(12)
    q, keys = rand(6, 1, 64, gen=gen), rand(6, 300, 64, gen=gen)  # decode attention scores
    assert_gemm_close(torch.bmm(q, keys.transpose(1, 2)), q, keys.transpose(1, 2))
    x, w = rand(2, 16384, gen=gen), rand(40, 16384, gen=gen)
    assert_gemm_close(F.linear(x, w), x, w.t())


def test_many_blocks_with_transposed_operands(isa, ext):
    gen = torch.Generator().manual_seed(3)
    a, b = rand(600, 300, gen=gen).t(), rand(1100, 600, gen=gen).t()  # both column-major
    assert_gemm_close(a @ b, a, b)


# ---- addmm: bias, alpha, beta, out=, in place -------------------------------------------------------

BIAS_SHAPES = [(33,), (1, 33), (45, 1), (45, 33), ()]
SCALARS = [(1.0, 1.0), (0.5, -2.0), (-1.5, 0.25)]


@pytest.mark.parametrize("bias_shape", BIAS_SHAPES, ids=str)
@pytest.mark.parametrize("alpha,beta", SCALARS)
def test_addmm_bias_alpha_beta(isa, ext, bias_shape, alpha, beta):
    gen = torch.Generator().manual_seed(11)
    a, b, bias = rand(45, 300, gen=gen), rand(300, 33, gen=gen), rand(*bias_shape, gen=gen)
    out = torch.addmm(bias, a, b, alpha=alpha, beta=beta)
    assert_gemm_close(out, a, b, bias, alpha, beta)


def test_addmm_beta_zero_ignores_nan_bias(isa, ext):
    a, b = rand(9, 12), rand(12, 10)
    bias = torch.full((9, 10), float("nan"), dtype=torch.float16)
    out = torch.addmm(bias, a, b, beta=0, alpha=2.0)
    assert not out.isnan().any()
    assert_gemm_close(out, a, b, alpha=2.0)


def test_addmm_in_place_and_out_forms(isa, ext):
    gen = torch.Generator().manual_seed(5)
    a, b, c0 = rand(40, 270, gen=gen), rand(270, 50, gen=gen), rand(40, 50, gen=gen)
    c = c0.clone()
    ptr = c.data_ptr()
    assert c.addmm_(a, b, beta=0.5, alpha=2.0) is c and c.data_ptr() == ptr
    assert_gemm_close(c, a, b, c0, 2.0, 0.5)
    c = c0.clone()  # out= the bias itself
    torch.addmm(c, a, b, beta=-1.0, out=c)
    assert_gemm_close(c, a, b, c0, 1.0, -1.0)
    out = torch.empty(0, dtype=torch.float16)  # resized by the op
    torch.addmm(c0[0], a, b, out=out)
    assert_gemm_close(out, a, b, c0[0], 1.0, 1.0)


@pytest.mark.parametrize("out_layout", ["contiguous", "transposed", "sliced", "resized"])
def test_mm_out_layouts(isa, ext, out_layout):
    gen = torch.Generator().manual_seed(9)
    a, b = rand(37, 66, gen=gen), rand(66, 29, gen=gen)
    out = {
        "contiguous": torch.empty(37, 29, dtype=torch.float16),
        "transposed": torch.empty(29, 37, dtype=torch.float16).t(),
        "sliced": torch.empty(37, 58, dtype=torch.float16)[:, ::2],
        "resized": torch.empty(0, dtype=torch.float16),
    }[out_layout]
    keep = out.stride()
    assert torch.mm(a, b, out=out) is out
    if out_layout != "resized":
        assert out.stride() == keep  # written in place, not reallocated
    assert_gemm_close(out, a, b)


def test_out_aliasing_an_input_reads_the_inputs_first(isa, ext):
    gen = torch.Generator().manual_seed(2)
    a, b = rand(48, 48, gen=gen), rand(48, 48, gen=gen)
    a0 = a.clone()
    torch.mm(a, b, out=a)
    assert_gemm_close(a, a0, b)
    x, y = rand(3, 20, 20, gen=gen), rand(3, 20, 20, gen=gen)
    x0 = x.clone()
    torch.baddbmm(x, y, x, out=x)  # bias, mat2 and out are one tensor
    assert_gemm_close(x, y, x0, x0, 1.0, 1.0)


# ---- bmm / baddbmm ---------------------------------------------------------------------------------


def batched_layouts(batch, rows, cols, gen):
    base = rand(batch, rows, cols, gen=gen)
    return {
        "contiguous": base,
        "transposed": base.transpose(1, 2).contiguous().transpose(1, 2),
        "batch-inner": base.transpose(0, 1).contiguous().transpose(0, 1),  # batch stride < row stride
        "batch-sliced": torch.zeros(2 * batch, rows, cols, dtype=base.dtype).index_copy_(0, torch.arange(0, 2 * batch, 2), base)[::2],
        "batch-broadcast": base[:1].expand(batch, rows, cols),
    }


@pytest.mark.parametrize("layout", ["contiguous", "transposed", "batch-inner", "batch-sliced", "batch-broadcast"])
def test_bmm_and_baddbmm_stride_patterns(isa, ext, layout):
    gen = torch.Generator().manual_seed(4)
    a = batched_layouts(5, 23, 300, gen)[layout]
    b = batched_layouts(5, 300, 19, gen)["transposed" if layout == "contiguous" else layout]
    before = calls(ext)
    assert_gemm_close(torch.bmm(a, b), a, b)
    bias = rand(5, 1, 19, gen=gen)
    assert_gemm_close(torch.baddbmm(bias, a, b, beta=0.5, alpha=-2.0), a, b, bias, -2.0, 0.5)
    assert calls(ext) >= before + 2


def test_bmm_out_and_baddbmm_in_place(isa, ext):
    gen = torch.Generator().manual_seed(6)
    a, b, c0 = rand(4, 17, 40, gen=gen), rand(4, 40, 21, gen=gen), rand(4, 17, 21, gen=gen)
    out = torch.empty(4, 21, 17, dtype=torch.float16).transpose(1, 2)
    torch.bmm(a, b, out=out)
    assert_gemm_close(out, a, b)
    c = c0.clone()
    c.baddbmm_(a, b, beta=2.0, alpha=0.5)
    assert_gemm_close(c, a, b, c0, 0.5, 2.0)
    out = torch.empty(0, dtype=torch.float16)
    torch.baddbmm(c0, a, b, out=out)
    assert_gemm_close(out, a, b, c0, 1.0, 1.0)
    empty = torch.bmm(rand(0, 3, 4), rand(0, 4, 5))
    assert empty.shape == (0, 3, 5)


# ---- linear, matmul, autograd: they reach the same kernels ---------------------------------------


def test_linear_and_matmul_reach_the_fp16_gemm(isa, ext):
    gen = torch.Generator().manual_seed(8)
    x, w, bias = rand(2, 9, 64, gen=gen), rand(48, 64, gen=gen), rand(48, gen=gen)
    cases = [
        (lambda: F.linear(x[0], w, bias), x[0], w.t(), bias),
        (lambda: F.linear(x[0], w), x[0], w.t(), None),
        (lambda: F.linear(x, w, bias), x, w.t(), bias),
        (lambda: x @ w.t(), x, w.t(), None),
        (lambda: x[0] @ x.transpose(1, 2), x[0], x.transpose(1, 2), None),
        (lambda: x.unsqueeze(1) @ x.transpose(1, 2).unsqueeze(0), x.unsqueeze(1), x.transpose(1, 2).unsqueeze(0), None),
    ]
    for fn, a, b, bias_ in cases:
        before = calls(ext)
        out = fn()
        assert calls(ext) > before
        assert_gemm_close(out, a, b, bias_, 1.0, 1.0 if bias_ is not None else 0.0)


def test_autograd_through_linear(isa, ext):
    x = rand(8, 32).requires_grad_()
    w = rand(16, 32).requires_grad_()
    F.linear(x, w).sum().backward()
    ones = torch.ones(8, 16, dtype=torch.float16)
    assert_gemm_close(x.grad, ones, w.detach())
    assert_gemm_close(w.grad, ones.t(), x.detach())


def test_result_does_not_depend_on_thread_count(isa, ext):
    a, b = rand(300, 700), rand(700, 500)
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        one = a @ b
    finally:
        torch.set_num_threads(threads)
    assert torch.equal(one, a @ b)  # blocks change, each element's summation order does not


# ---- what is not ours goes to torch, unchanged ----------------------------------------------------


def test_other_dtypes_and_invalid_calls_do_not_reach_the_fp16_gemm(ext):
    before = calls(ext)
    for dtype in (torch.float32, torch.bfloat16, torch.float64):
        a, b = rand(5, 6, dtype=dtype), rand(6, 7, dtype=dtype)
        torch.mm(a, b), torch.addmm(rand(7, dtype=dtype), a, b), torch.bmm(a[None], b[None])
    with pytest.raises(RuntimeError, match="cannot be multiplied"):
        torch.mm(rand(3, 4), rand(5, 6))
    with pytest.raises(RuntimeError, match="dtype"):
        torch.mm(rand(3, 4), rand(4, 6, dtype=torch.float32))
    with pytest.raises(RuntimeError):
        torch.bmm(rand(2, 3, 4), rand(3, 4, 5))
    with pytest.raises(RuntimeError):
        torch.addmm(rand(3, 5), rand(4, 6), rand(6, 7))  # bias does not broadcast
    assert calls(ext) == before


def stock_process_results(tmp_path, cases: str) -> dict:
    """Run `cases` (defining RESULTS: name -> tensor) in a fresh process without torchplug's kernels."""
    out = tmp_path / "stock.pt"
    run_python(f"import torch\n{cases}\ntorch.save(RESULTS, {str(out)!r})", TORCHPLUG_DISABLE="cpu")
    return torch.load(out)


OTHER_DTYPE_CASES = """
gen = torch.Generator().manual_seed(0)
RESULTS = {}
for dtype in (torch.float32, torch.bfloat16):
    big = 300 if dtype == torch.float32 else 40  # stock bf16 GEMM is slow on CPUs without AVX512-BF16
    a = torch.randn(big, big + 3, generator=gen).to(dtype)
    b = torch.randn(big + 3, big - 5, generator=gen).to(dtype)
    bias = torch.randn(big - 5, generator=gen).to(dtype)
    x = torch.randn(3, big, big + 3, generator=gen).to(dtype)
    RESULTS[f"mm {dtype}"] = torch.mm(a, b)
    RESULTS[f"mm_t {dtype}"] = torch.mm(b.t(), a.t())
    RESULTS[f"addmm {dtype}"] = torch.addmm(bias, a, b, beta=0.5, alpha=2.0)
    RESULTS[f"bmm {dtype}"] = torch.bmm(x, b.expand(3, -1, -1))
    RESULTS[f"baddbmm {dtype}"] = torch.baddbmm(bias, x, b.expand(3, -1, -1), alpha=-1.0)
    RESULTS[f"linear {dtype}"] = torch.nn.functional.linear(x, b.t(), bias)
"""


def test_float32_and_bfloat16_are_bit_identical_to_stock_unless_float32_is_routed(ext, tmp_path):
    stock = stock_process_results(tmp_path, OTHER_DTYPE_CASES)
    namespace = {"torch": torch}
    exec(OTHER_DTYPE_CASES, namespace)
    assert kernels.loaded()
    routed = kernels.fp32_status().startswith("fp32 GEMM: onednn")  # test_cpu_kernels_fp32.py checks it closely
    for name, expected in stock.items():
        if routed and "float32" in name:
            torch.testing.assert_close(namespace["RESULTS"][name], expected, rtol=1e-5, atol=1e-4, msg=name)
        else:
            assert torch.equal(namespace["RESULTS"][name], expected), name


# ---- accuracy against stock torch -------------------------------------------------------------------

ACCURACY_CASES = """
RESULTS = {}
for m, k, n in [(48, 4096, 40), (16, 16384, 16), (8, 32768, 12), (64, 1024, 64), (1, 16384, 64), (3, 16384, 50)]:
    gen = torch.Generator().manual_seed(k)
    a = torch.randn(m, k, generator=gen).half()
    b = (torch.rand(k, n, generator=gen) * 2 - 1).half()
    RESULTS[(m, k, n)] = (a, b, a @ b)
"""


def test_accuracy_is_no_worse_than_stock_fp16_including_long_k(isa, ext, tmp_path):
    for (m, k, n), (a, b, stock) in stock_process_results(tmp_path, ACCURACY_CASES).items():
        exact = a.double() @ b.double()
        ours = a @ b

        def rms(x):
            return (x.double() - exact).pow(2).mean().sqrt().item()

        assert rms(ours) <= rms(stock) * (1 + 1e-3), (m, k, n, rms(ours), rms(stock))
        assert (ours.double() - exact).abs().max() <= (stock.double() - exact).abs().max() * (1 + 2.0**-10)
        assert_gemm_close(ours, a, b)


# ---- ISA selection and installation -----------------------------------------------------------------


def test_isa_lists_and_default(ext):
    assert list(ext.known_isas()) == ISAS
    supported = list(ext.supported_isas())
    assert supported and "scalar" in supported and set(supported) <= set(ISAS)
    assert supported[0] != "avx512emu" and kernels.select_isa("") == supported[0]  # the default
    assert kernels.supported_isas() == supported


def test_isa_environment_variable(ext):
    code = """
        import json, torch
        from torchplug_cpu import kernels
        try:
            kernels.load()
            print(json.dumps({"isa": kernels.current_isa()}))
        except ValueError as err:
            print(json.dumps({"error": str(err)}))
    """

    def isa_for(value):
        return json.loads(run_python(code, TORCHPLUG_CPU_ISA=value).stdout)

    assert isa_for("scalar") == {"isa": "scalar"}
    assert isa_for("") == {"isa": ext.supported_isas()[0]}
    bogus = isa_for("sse9")["error"]
    assert "unknown TORCHPLUG_CPU_ISA=sse9" in bogus and "avx512, avx2, scalar, avx512emu" in bogus
    for name in ISAS:
        if name in ext.supported_isas():
            assert isa_for(name.upper()) == {"isa": name}
        else:
            message = isa_for(name)["error"]
            assert f"TORCHPLUG_CPU_ISA={name} needs" in message and "It supports: " in message


def test_set_isa_rejects_unknown_names(ext):
    with pytest.raises(ValueError, match="unknown TORCHPLUG_CPU_ISA=neon"):
        ext.set_isa("neon")


def test_autoload_registers_the_kernels_and_unload_restores_stock():
    code = """
        import json, threading, warnings
        warnings.simplefilter("error")
        import torch
        from torchplug_cpu import kernels
        ext = kernels.extension()
        a, b = torch.randn(8, 8).half(), torch.randn(8, 8).half()

        def routed():
            before = ext.fp16_gemm_calls()
            result = a @ b
            return ext.fp16_gemm_calls() - before, result

        at_import, ours = kernels.loaded(), routed()[0]
        kernels.unload()
        after_unload = routed()[0]
        threads = [threading.Thread(target=kernels.load) for _ in range(4)]
        [t.start() for t in threads]
        [t.join() for t in threads]
        print(json.dumps({"at_import": at_import, "ours": ours, "after_unload": after_unload,
                          "reloaded": routed()[0], "registrations": len(kernels._registrations)}))
    """
    result = run_python(code)
    aten = len(kernels.GEMM_OPS) + len(kernels.ATTENTION_OPS) + len(kernels.DECODE_OPS) + len(kernels.QUANT_OPS)
    assert json.loads(result.stdout) == {"at_import": True, "ours": 1, "after_unload": 0, "reloaded": 1,
                                         "registrations": aten}
    assert "Warning" not in result.stderr, result.stderr


def test_fp16_products_go_to_onednn_where_it_has_an_fp16_path(ext):
    """On CPUs where torch's oneDNN has its own fp16 matmul (AVX512-FP16), products with more than 8
    rows and 8 columns run torch's kernel (faster there), bit for bit; the skinny ones stay ours."""
    if not kernels.onednn_fp16():
        pytest.skip("torch's oneDNN has no fp16 matmul on this CPU (it needs AVX512-FP16 or AMX-FP16)")
    gen = torch.Generator().manual_seed(3)
    a, b, w = rand(64, 96, gen=gen), rand(96, 72, gen=gen), rand(72, 96, gen=gen)

    def products():
        return [torch.mm(a, b), F.linear(a, w), torch.bmm(a[None], b[None]), torch.mm(a[:8], b), torch.mm(a, b[:, :8])]
    ext.set_fp16_route_onednn(True)
    try:
        before = calls(ext)
        routed = products()
        assert calls(ext) == before + 2  # the 8-row and 8-column products
        kernels.unload()
        stock = products()
    finally:
        kernels.load()
        ext.set_fp16_route_onednn(False)
    for got, want in zip(routed[:3], stock[:3]):
        assert torch.equal(got, want)
    for got, (x, y) in zip(routed[3:], ((a[:8], b), (a, b[:, :8]))):
        assert_gemm_close(got, x, y)


def test_disabled_plugin_leaves_torch_stock():
    code = """
        import json, sys, torch
        print(json.dumps({"loaded": sorted(m for m in ("torchplug_cpu_ext", "torchplug_dispatch") if m in sys.modules),
                          "mm": "dtype_split.cpp" in torch._C._dispatch_dump("aten::mm")}))
    """
    assert json.loads(run_python(code, TORCHPLUG_DISABLE="cpu").stdout) == {"loaded": [], "mm": False}
    assert json.loads(run_python(code).stdout) == {"loaded": ["torchplug_cpu_ext", "torchplug_dispatch"],
                                                   "mm": True}


def test_cold_cache_warns_once_with_the_fix_and_never_compiles_in_import_torch(tmp_path):
    code = """
        import json, time, warnings
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            import torch
        import torchplug_cpu
        from torchplug_cpu import kernels
        a = torch.ones(4, 4).half()
        print(json.dumps({"warnings": [str(w.message) for w in caught], "loaded": kernels.loaded(),
                          "status": torchplug_cpu.backend.status().reason, "works": (a @ a)[0, 0].item()}))
    """
    first, again = (run_python(code, TORCHPLUG_CACHE=str(tmp_path)) for _ in range(2))
    for result in (first, again):
        report = json.loads(result.stdout)
        assert not report["loaded"] and report["works"] == 4.0
        assert "torchplug build cpu" in report["status"]  # `torchplug list` keeps saying it
        assert "compiling" not in result.stderr
    said = [w for w in json.loads(first.stdout)["warnings"] if "not built yet" in w and "torchplug build cpu" in w]
    assert len(said) == 1 and said[0].endswith("(said once per cache)"), first.stdout
    assert not [w for w in json.loads(again.stdout)["warnings"] if "not built yet" in w], again.stdout
    assert [p.name for p in tmp_path.rglob("*") if p.is_file()] == ["notices.json"]  # nothing built
    other = run_python(code, TORCHPLUG_CACHE=str(tmp_path / "other"))  # another cache is told again
    assert [w for w in json.loads(other.stdout)["warnings"] if "not built yet" in w], other.stdout


def test_an_impossible_isa_keeps_the_device_and_says_why():
    code = """
        import json, warnings
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            import torch
        import torchplug_cpu
        from torchplug.entrypoints import loader
        print(json.dumps({"status": loader.loaded_backend("cpu").status().reason,
                          "warned": any("TORCHPLUG_CPU_ISA=sse9" in str(w.message) for w in caught)}))
    """
    # No FX-graph cache: a hit from an earlier run would skip the post-grad passes altogether.
    report = json.loads(run_python(code, TORCHPLUG_CPU_ISA="sse9", TORCHINDUCTOR_FORCE_DISABLE_CACHES="1").stdout)
    assert report["warned"] and report["status"].startswith("kernels not registered: unknown TORCHPLUG_CPU_ISA=sse9")


def test_loading_is_thread_safe_while_computing(ext):
    errors = []

    def work():
        try:
            for _ in range(20):
                kernels.load()
                a, b = rand(30, 40), rand(40, 20)
                assert_gemm_close(a @ b, a, b)
        except Exception as err:  # surfaced below
            errors.append(err)

    threads = [threading.Thread(target=work) for _ in range(3)]
    [t.start() for t in threads]
    [t.join() for t in threads]
    assert not errors, errors


def test_bound_is_tight_enough_to_catch_fp16_accumulation():
    """The checker itself: summing in fp16 (what the kernel must not do) fails it."""
    gen = torch.Generator().manual_seed(1)
    a, b = rand(32, 2048, gen=gen), rand(2048, 32, gen=gen)
    fp16_sum = torch.zeros(32, 32, dtype=torch.float16)
    for k0 in range(0, 2048, 256):  # fp32 within slices, rounded to fp16 between them
        fp16_sum = (fp16_sum.float() + a[:, k0:k0 + 256].float() @ b[k0:k0 + 256].float()).half()
    with pytest.raises(AssertionError):
        assert_gemm_close(fp16_sum, a, b)
    assert math.isfinite(float(fp16_sum.float().abs().max()))


# ---- torch.compile: Inductor graphs call the torchplug_cpu:: GEMM ops (torchplug_cpu/inductor.py) ----


# The compiled-model tests' model and input, run in this process or at the top of a fresh one.
FP16_MLP = """import json, sys, torch
torch.manual_seed(0)
mlp = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.GELU(), torch.nn.Linear(256, 64)).half().eval()
x = torch.randn(8, 64).half()
"""


def with_fp16_mlp(code: str) -> str:
    """`code` (indented as written in this file) run after FP16_MLP has defined `mlp` and `x`."""
    return FP16_MLP + textwrap.dedent(code)


def test_compiled_fp16_mlp_uses_the_fp16_gemm(ext):
    namespace = {}
    exec(FP16_MLP, namespace)
    mlp, x = namespace["mlp"], namespace["x"]
    with torch.no_grad():
        compiled = torch.compile(mlp)  # default mode: Inductor's C++ codegen, GEMMs as extern kernels
        _, (code, *_) = run_and_get_code(compiled, x)
        before = calls(ext)
        out = compiled(x)
        assert calls(ext) - before == 2  # both Linear layers
        torch.testing.assert_close(out, mlp(x), rtol=2e-3, atol=2e-3)
    assert code.count("torch.ops.torchplug_cpu.addmm.default(") == 2  # the post-grad pass (inductor.py)
    assert "at::vec::Vectorized<at::Half>" in code  # the GELU: Inductor's C++ codegen, fp16 vectorised


CPP_WRAPPER_MLP = with_fp16_mlp("""
    inductor_at_import = "torch._inductor.config" in sys.modules
    import torch._inductor.config as config
    config.cpp_wrapper = True  # C++ wrapper: torch's kernels are called through C shims
    from torchplug_cpu import kernels
    ext = kernels.extension()
    with torch.no_grad():
        compiled = torch.compile(mlp)
        compiled(x)
        before = ext.fp16_gemm_calls()
        out = compiled(x)
        print(json.dumps({"inductor_at_import": inductor_at_import, "calls": ext.fp16_gemm_calls() - before,
                          "close": torch.allclose(out, mlp(x), rtol=2e-3, atol=2e-3)}))
""")


def test_compiled_fp16_mlp_with_the_cpp_wrapper_uses_the_fp16_gemm(ext):
    report = json.loads(run_python(CPP_WRAPPER_MLP).stdout)
    assert report == {"inductor_at_import": False, "calls": 2, "close": True}


def projections(x, wq, wk, wv):
    """A decode step's q / k / v: three F.linear of one input, each used on its own."""
    return F.linear(x, wq).relu(), F.linear(x, wk) * 2, F.linear(x, wv)


@pytest.mark.parametrize("rows, grouped", [(1, True), (16, True), (17, False)])
def test_compiled_projections_of_a_few_rows_run_as_one_group(ext, rows, grouped):
    gen = torch.Generator().manual_seed(rows)
    weights = rand(64, 48, gen=gen), rand(16, 48, gen=gen), rand(16, 48, gen=gen)
    x = rand(rows, 48, gen=gen)
    torch._dynamo.reset()
    with torch.no_grad():
        compiled = torch.compile(projections)
        _, (code, *_) = run_and_get_code(compiled, x, *weights)
        before = calls(ext)
        out = compiled(x, *weights)
        assert calls(ext) - before == 3
        eager = projections(x, *weights)
    assert code.count("torch.ops.torchplug_cpu.mm_group.default(") == int(grouped)
    for ours, theirs in zip(out, eager):
        assert torch.equal(ours, theirs)  # each column summed as in F.linear's own kernel


def test_mm_group_runs_mm_for_what_is_not_a_group(ext):
    group = torch.ops.torchplug_cpu.mm_group
    gen = torch.Generator().manual_seed(0)
    a, w = rand(3, 40, gen=gen), rand(24, 40, gen=gen)
    cases = {"float32": (a.float(), [w.t().float()]), "weight not contiguous along k": (a, [w.t().contiguous()]),
             "too many rows": (rand(17, 40, gen=gen), [w.t()]), "group": (a, [w.t(), w[:5].t()])}
    for name, (x, mats) in cases.items():
        for ours, mat in zip(group(x, mats), mats):
            assert torch.equal(ours, x @ mat), name
    with pytest.raises(RuntimeError, match="cannot be multiplied"):
        group(a, [w.t(), rand(24, 39, gen=gen).t()])


def test_a_users_inductor_pass_set_before_the_kernels_load_still_runs():
    code = """
        import json, os, warnings
        warnings.simplefilter("ignore")
        import torch
        import torch._inductor.config as config
        from torch._inductor.custom_graph_pass import CustomGraphPass
        from torchplug_cpu import kernels

        seen = []

        class Mine(CustomGraphPass):
            def __call__(self, graph):
                seen.append(len(graph.nodes))

            def uuid(self):
                return "mine"

        config.post_grad_custom_post_pass = Mine()
        loaded_at_import = kernels.loaded()  # no: the ISA asked for does not exist
        del os.environ["TORCHPLUG_CPU_ISA"]
        ext = kernels.load()
        a, b = torch.randn(16, 32).half(), torch.randn(32, 8).half()
        compiled = torch.compile(lambda a, b: torch.relu(a @ b))
        compiled(a, b)
        before = ext.fp16_gemm_calls()
        compiled(a, b)
        print(json.dumps({"loaded_at_import": loaded_at_import, "mine_ran": bool(seen),
                          "calls": ext.fp16_gemm_calls() - before}))
    """
    # No FX-graph cache: a hit from an earlier run would skip the post-grad passes altogether.
    report = json.loads(run_python(code, TORCHPLUG_CPU_ISA="sse9", TORCHINDUCTOR_FORCE_DISABLE_CACHES="1").stdout)
    assert report == {"loaded_at_import": False, "mine_ran": True, "calls": 1}


# torch's FX-graph cache key leaves out the vector ISA Inductor writes its C++ kernels for; the
# pass's key adds it (inductor.py).
ISA_PROBE = """
    import json, warnings
    warnings.simplefilter("ignore")
    import torch
    import torch._inductor.config as config
    from torchplug_cpu import kernels

    kernels.load()
    ours = config.post_grad_custom_post_pass[-1]

    def f(x, w):
        return torch.nn.functional.rms_norm(x, (x.shape[-1],), w) * 2 + 1

    x = torch.randn(16, 1024, generator=torch.Generator().manual_seed(0)).half()
    w = torch.rand(1024, generator=torch.Generator().manual_seed(1)).half()
    got = torch.compile(f)(x, w).float()
    print(json.dumps({"isa": torch.backends.cpu.get_cpu_capability(), "key": repr(ours.uuid()),
                      "nans": int(got.isnan().sum()), "close": torch.allclose(got, f(x.float(), w.float()), atol=2e-2)}))
"""


def test_the_inductor_pass_cache_key_names_the_vector_isa():
    scalar, avx2 = (json.loads(run_python(ISA_PROBE, ATEN_CPU_CAPABILITY=isa, TORCHINDUCTOR_FORCE_DISABLE_CACHES="1").stdout)
                    for isa in ("default", "avx2"))
    assert scalar["close"] and avx2["close"]
    assert scalar["key"] != avx2["key"] or avx2["isa"] != "AVX2"  # a CPU without AVX2 runs both as "default"


@pytest.mark.skipif(torch.backends.cpu.get_cpu_capability() != "AVX512", reason="needs a CPU that runs AVX-512")
def test_a_graph_cached_under_avx512_is_not_served_under_avx2(tmp_path):
    cache = str(tmp_path / "inductor")
    wide = json.loads(run_python(ISA_PROBE, TORCHINDUCTOR_CACHE_DIR=cache).stdout)
    narrow = json.loads(run_python(ISA_PROBE, TORCHINDUCTOR_CACHE_DIR=cache, ATEN_CPU_CAPABILITY="avx2").stdout)
    assert (wide["isa"], wide["nans"], wide["close"]) == ("AVX512", 0, True)
    # torch alone serves the AVX-512 graph here, and its 32-lane loops built for AVX2 give NaNs.
    assert (narrow["isa"], narrow["nans"], narrow["close"]) == ("AVX2", 0, True)


def test_aot_inductor_packages_are_not_rewritten_and_stay_portable():
    code = with_fp16_mlp("""
        import os, tempfile, warnings, zipfile
        warnings.simplefilter("ignore")
        with torch.no_grad():
            path = torch._inductor.aoti_compile_and_package(
                torch.export.export(mlp, (x,)), package_path=os.path.join(tempfile.mkdtemp(), "mlp.pt2"))
            out = torch._inductor.aoti_load_package(path)(x)
            with zipfile.ZipFile(path) as package:
                mentions = any(b"torchplug_cpu" in package.read(name) for name in package.namelist())
            print(json.dumps({"close": torch.allclose(out, mlp(x), rtol=2e-3, atol=2e-3), "mentions": mentions}))
    """)
    assert json.loads(run_python(code).stdout) == {"close": True, "mentions": False}

