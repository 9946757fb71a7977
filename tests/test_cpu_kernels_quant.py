"""torchplug-cpu's weight-only int8 and int4 products (csrc/quant_ops.cpp, quant_kernel.h): aten's
_weight_int8pack_mm and _weight_int4pack_mm_for_cpu, which torchao's CPU layouts call, on every ISA
path this CPU can run, with fp32, bf16 and fp16 activations, against the float64 product of the
dequantized weights.

The bound is the activation dtype's rounding of the result plus the fp32 accumulation error of
either summation order (torch's: dequantize, then multiply; ours: sum x * q, then scale), and one
test checks it is tight enough to catch a single wrong scale. int4 weights are packed by torch's
own _convert_weight_to_int4pack_for_cpu, whose layout depends on torch's CPU capability: each
capability's layout runs in a subprocess. No timing is asserted.

int4 decode rows with fp16 / bf16 activations round x to int8 per block of 32 (llama.cpp's Q8_0;
csrc/quant_int8_activations.h) on the avx512 path of AVX512-VNNI CPUs (quant_vnni.h, torch's
AVX-512 layout) and on the avx2 path (quant_avx2_dots.h, torch's AVX2 and AVX-512 layouts): there
the result is held to the same bound around the float64 product of the rounded x (recomputed here
exactly as the kernel rounds it), and to the activations' rounding bound around the product of x
itself. Each path and packed layout runs (ATEN_CPU_CAPABILITY=avx2 in a subprocess for torch's AVX2
layout).

int8 decode rows with fp16 / bf16 activations round x to int16 per block of 256 (csrc/
quant_int16_activations.h) on the same paths: the result is held to the bound around the product of
the rounded x, and around x's own product with the rounding's bound added.
"""

import re
import sys
from pathlib import Path

import pytest
import torch

from conftest import clean_env, run_process, run_python

kernels = pytest.importorskip("torchplug_cpu.kernels")
kernels.extension()  # defines torch.ops.torchplug_cpu

DTYPES = [torch.float32, torch.bfloat16, torch.float16]
UNIT = {torch.float32: 2.0**-24, torch.bfloat16: 2.0**-8, torch.float16: 2.0**-11}  # half an ulp, relative


@pytest.fixture(scope="module")
def ext():
    return kernels.load()


def int8_case(m, k, n, dtype, seed=0, row_stride=None):
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(m, row_stride or k, generator=gen)[:, :k].to(dtype)
    w = torch.randint(-128, 128, (n, k), dtype=torch.int8, generator=gen)
    scales = (torch.rand(n, generator=gen) * 0.02 + 0.001).to(dtype)
    return x, w, scales


def int8_dequantized(w, scales):
    return w.double() * scales.double()[:, None]


def int4_case(m, k, n, group, dtype, seed=0):
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(m, k, generator=gen).to(dtype)
    q = torch.randint(0, 16, (n, k), dtype=torch.int32, generator=gen)
    groups = -(-k // group)
    scales_zeros = torch.stack([torch.rand(groups, n, generator=gen) * 0.02 + 0.001,
                                torch.randn(groups, n, generator=gen) * 0.02], -1).to(dtype)
    return x, q, scales_zeros


def int4_dequantized(q, group, scales_zeros):
    """w[n, k] = (q - 8) * scale + zero, the scale and zero of k's group."""
    k = q.shape[1]
    scale = scales_zeros[..., 0].double().repeat_interleave(group, 0)[:k].t()
    zero = scales_zeros[..., 1].double().repeat_interleave(group, 0)[:k].t()
    return (q.double() - 8) * scale + zero


def assert_quant_close(out, x, w, terms, x_used=None, extra=0.0):
    """out (x's dtype) against x_used @ w^T in float64 (x_used: the float64 x the kernel multiplies, by
    default x); `terms` [n, k]: the largest magnitude any form of the dequantization sums (|w|, or
    |q * scale| + |zero - 8 scale|), for the fp32 accumulation bound; `extra`: a further bound."""
    x_used = x.double() if x_used is None else x_used
    ref = x_used @ w.t()
    assert out.dtype == x.dtype and out.shape == ref.shape
    accumulation = (x.shape[1] + 8) * 2.0**-23 * (x_used.abs() @ terms.t())
    bound = UNIT[x.dtype] * (ref.abs() + accumulation) + accumulation + extra + 1e-30
    err = (out.double() - ref).abs()
    bad = err > bound
    assert not bad.any(), f"{int(bad.sum())} of {out.numel()} elements off; worst by {float((err / bound).max()):.3g}x the bound"


def int8_terms(w, scales):
    return int8_dequantized(w, scales).abs()


def runs_int16_activations(ext, x):
    """Whether an int8 call on x rounds it to int16 (quant_ops.cpp): fp16 / bf16 with k a multiple of
    32, with the setting on, on a path that has the kernels."""
    return ext.int8_int16_dots() and x.dtype != torch.float32 and x.shape[1] % 32 == 0


def int16_rounded(x):
    """(x_hat, d) in float64: x rounded to int16 per block of 256 along k (the last one shorter) as
    quant_int16_activations.h rounds it (in fp32: d = max|x| / 32767, q = round-half-even(x * (1 / d))),
    and d per element's block."""
    x_hat, d = torch.empty(x.shape, dtype=torch.float64), torch.empty(x.shape, dtype=torch.float64)
    for k0 in range(0, x.shape[1], 256):
        block = x[:, k0:k0 + 256].float()
        scale = block.abs().amax(1, keepdim=True) / 32767
        inv = torch.where(scale != 0, 1 / scale, torch.zeros_like(scale))
        q = torch.round(block * inv)
        assert q.abs().max() <= 32767
        x_hat[:, k0:k0 + 256] = q.double() * scale.double()
        d[:, k0:k0 + 256] = scale.double()
    return x_hat, d


def assert_int8_close(ext, out, x, w, scales):
    """out against the float64 product of the x the kernel multiplies (int16-rounded where it rounds it)."""
    x_used = int16_rounded(x)[0] if runs_int16_activations(ext, x) else None
    assert_quant_close(out, x, int8_dequantized(w, scales), int8_terms(w, scales), x_used)


# The packed layouts (torch's CPU capability) each path's int8-activation kernels read.
INT8_LAYOUTS = {"avx512": ("AVX512",), "avx2": ("AVX512", "AVX2")}


def reads_layout_with_int8(ext):
    """Whether the active path's int8-activation kernels read the layout torch packs in this process."""
    return torch.backends.cpu.get_cpu_capability() in INT8_LAYOUTS.get(ext.current_isa(), ())


def runs_int8_activations(ext, x):
    """Whether an int4 call on x rounds it to int8 (quant_ops.cpp): a few rows of fp16 / bf16 with k a
    multiple of 32, with the setting on, on a path that has the kernels (the avx512 path of an
    AVX512-VNNI CPU, or the avx2 path) and reads torch's layout."""
    return (ext.int4_int8_dots() and x.dtype != torch.float32 and x.shape[0] <= 16 and x.shape[1] % 32 == 0
            and reads_layout_with_int8(ext))


def int8_rounded(x):
    """(x_hat, d) in float64: x rounded to int8 per block of 32 along k as quant_vnni.h rounds it (in
    fp32: d = max|x| / 127, q = round-half-even(x * (1 / d))), and d per element's block."""
    blocks = x.float().reshape(x.shape[0], -1, 32)
    d = blocks.abs().amax(-1, keepdim=True) / 127
    inv = torch.where(d != 0, 1 / d, torch.zeros_like(d))
    q = torch.round(blocks * inv)
    assert q.abs().max() <= 127
    return (q.double() * d.double()).reshape(x.shape), d.double().expand_as(blocks).reshape(x.shape)


def runs_int16_prefill(ext, x):
    """Whether an int4 call on x rounds it to int16 (quant_ops.cpp): over 16 rows of fp16 / bf16 with k
    a multiple of 32, with the setting on, on the avx512 path of an AVX512-VNNI CPU, in torch's AVX-512
    layout."""
    return (ext.int4_int16_prefill() and x.dtype != torch.float32 and x.shape[0] > 16 and x.shape[1] % 32 == 0
            and torch.backends.cpu.get_cpu_capability() == "AVX512")


def assert_int4_close(ext, out, x, q, group, sz):
    """out against the float64 product of the x the kernel multiplies (int8- or int16-rounded where it
    rounds it)."""
    w, terms = int4_dequantized(q, group, sz), int4_terms(q, group, sz)
    x_used = (int8_rounded(x)[0] if runs_int8_activations(ext, x)
              else int16_rounded(x)[0] if runs_int16_prefill(ext, x) else None)
    assert_quant_close(out, x, w, terms, x_used)


def int4_terms(q, group, scales_zeros):
    k = q.shape[1]
    scale = scales_zeros[..., 0].double().abs().repeat_interleave(group, 0)[:k].t()
    zero = scales_zeros[..., 1].double().abs().repeat_interleave(group, 0)[:k].t()
    return (q.double() + 8) * scale + zero


def counted(ext, fn):
    before = ext.quant_mm_calls()
    out = fn()
    assert ext.quant_mm_calls() == before + 1, "the call did not reach torchplug's kernel"
    return out


# (m, k, n): decode rows (1-4), the skinny path's 5-16 rows, the GEMM (17 and more, several kc
# slices and row blocks), odd k and k below a vector, n not a multiple of 16 or of the GEMM tile.
INT8_SHAPES = [(1, 2048, 256), (1, 7, 3), (2, 33, 17), (3, 130, 48), (4, 1000, 100), (5, 96, 80), (16, 515, 33),
               (17, 200, 64), (40, 1001, 300), (130, 512, 250)]


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("m,k,n", INT8_SHAPES, ids=[f"{m}x{k}x{n}" for m, k, n in INT8_SHAPES])
def test_int8_matches_float64(isa, ext, dtype, m, k, n):
    x, w, scales = int8_case(m, k, n, dtype, seed=m + k + n)
    out = counted(ext, lambda: torch.ops.aten._weight_int8pack_mm(x, w, scales))
    assert_int8_close(ext, out, x, w, scales)


@pytest.mark.parametrize("m", [1, 5, 40])
def test_int8_takes_rows_with_a_stride(isa, ext, m):
    """x need only be contiguous along k (torch's rule): rows of a wider buffer."""
    x, w, scales = int8_case(m, 320, 70, torch.float16, row_stride=333)
    out = counted(ext, lambda: torch.ops.aten._weight_int8pack_mm(x, w, scales))
    assert_int8_close(ext, out, x, w, scales)


# (m, k, n, group): every group size, k not a multiple of the group (a shorter last group), n with a
# narrower last block (16, 32, 48 columns past a multiple of 64), decode rows, the skinny path and the GEMM;
# prefill with k a multiple of 32 (int16 activations where they run: 4 rows at a time, 64 rounded at a
# time, a shorter last block of 256 and group).
INT4_SHAPES = [(1, 2048, 256, 128), (1, 64, 16, 32), (2, 96, 80, 64), (3, 200, 112, 32), (4, 512, 64, 256),
               (5, 130, 48, 128), (16, 256, 96, 64), (17, 256, 64, 32), (40, 1000, 208, 256), (130, 520, 272, 128),
               (19, 288, 208, 32), (33, 512, 64, 256), (70, 800, 128, 128), (18, 2048, 320, 64)]


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("m,k,n,group", INT4_SHAPES, ids=[f"{m}x{k}x{n}-g{g}" for m, k, n, g in INT4_SHAPES])
def test_int4_matches_float64(isa, ext, dtype, m, k, n, group):
    x, q, sz = int4_case(m, k, n, group, dtype, seed=m + k + n + group)
    packed = torch.ops.aten._convert_weight_to_int4pack_for_cpu(q, 1)
    out = counted(ext, lambda: torch.ops.aten._weight_int4pack_mm_for_cpu(x, packed, group, sz))
    assert_int4_close(ext, out, x, q, group, sz)


# The paths with int8-activation kernels (the `isa` fixture, conftest.py, selects each).
INT8_PATHS = pytest.mark.parametrize("isa", list(INT8_LAYOUTS), indirect=True)


@pytest.fixture(params=["int8", "float"])
def int4_activations(request, ext, isa):
    """Both settings of the int4 activations (TORCHPLUG_CPU_INT4_ACTIVATIONS): int8 where the path can."""
    if request.param == "int8" and not ext.int4_int8_dots_supported():
        pytest.skip(f"the {isa} path has no int8 activations on this CPU (avx512 needs AVX512-VNNI and VBMI)")
    if request.param == "int8" and not reads_layout_with_int8(ext):
        pytest.skip(f"the {isa} path's int8 activations do not read torch's "
                    f"{torch.backends.cpu.get_cpu_capability()} layout")
    ext.set_int4_int8_dots(request.param == "int8")
    yield request.param
    ext.set_int4_int8_dots(kernels.int4_activations() == "int8")


# (m, k, n, group): decode rows on the int8 activations' path (k a multiple of 32), with every group
# size, a group longer than k, a narrower last block (16 or 48 columns past a multiple of 32 / 64),
# a block narrower than the first, 1 to 16 rows (4 or 2 per pass, and the rest).
INT8_ACTIVATION_SHAPES = [(1, 2048, 256, 128), (1, 64, 16, 32), (2, 96, 80, 64), (3, 224, 112, 32),
                          (4, 512, 64, 256), (5, 160, 48, 128), (6, 128, 176, 32), (7, 320, 208, 64),
                          (9, 96, 144, 256), (16, 256, 96, 64)]


@INT8_PATHS
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=str)
@pytest.mark.parametrize("m,k,n,group", INT8_ACTIVATION_SHAPES,
                         ids=[f"{m}x{k}x{n}-g{g}" for m, k, n, g in INT8_ACTIVATION_SHAPES])
def test_int4_activations_rounded_to_int8_stay_within_their_bound(ext, int4_activations, dtype, m, k, n, group):
    """With int8 activations the result is the float64 product of the rounded x (within fp32's
    accumulation bound), and so within sum over k of |x - x_hat| |w| <= d / 2 * |w| of the product
    of x itself: the bound docs/cpu-fp16.md states. With float activations, x's product."""
    x, q, sz = int4_case(m, k, n, group, dtype, seed=m + k + n + group)
    packed = torch.ops.aten._convert_weight_to_int4pack_for_cpu(q, 1)
    out = counted(ext, lambda: torch.ops.aten._weight_int4pack_mm_for_cpu(x, packed, group, sz))
    assert runs_int8_activations(ext, x) == (int4_activations == "int8")
    w, terms = int4_dequantized(q, group, sz), int4_terms(q, group, sz)
    if int4_activations == "float":
        assert_quant_close(out, x, w, terms)
        return
    x_hat, d = int8_rounded(x)
    assert_quant_close(out, x, w, terms, x_hat)
    assert_quant_close(out, x, w, terms, extra=(d / 2) @ w.abs().t())
    # the rounding shows against fp16's bound (bf16's own rounding is as coarse, and at larger k the
    # fp32 accumulation bound, linear in k, covers it)
    if dtype == torch.float16 and k <= 512:
        with pytest.raises(AssertionError, match="elements off"):
            assert_quant_close(out, x, w, terms)


@INT8_PATHS
@pytest.mark.parametrize("bad", [float("inf"), float("nan")])
def test_int4_rows_with_infinities_keep_float_activations(ext, int4_activations, bad):
    """A row holding an infinity or NaN cannot be rounded to int8: that call runs the float path, so
    the results are the float path's, infinities and NaNs where torch puts them."""
    x, q, sz = int4_case(2, 256, 64, 64, torch.float16)
    x[1, 100] = bad
    packed = torch.ops.aten._convert_weight_to_int4pack_for_cpu(q, 1)
    assert_the_float_path_ran(ext, lambda: torch.ops.aten._weight_int4pack_mm_for_cpu(x, packed, 64, sz),
                              ext.set_int4_int8_dots)


def assert_the_float_path_ran(ext, call, allow_rounding):
    """call()'s result (x's row 1 holds an infinity or NaN) equals, bit for bit and NaN for NaN, the
    float path's (rounded activations forbidden by allow_rounding(False)), with row 1 all non-finite."""
    out = counted(ext, call)
    allow_rounding(False)
    expected = call()
    assert torch.equal(out.isnan(), expected.isnan()) and out[1].isinf().sum() + out[1].isnan().sum() == out.shape[1]
    torch.testing.assert_close(out, expected, equal_nan=True, rtol=0, atol=0)


@pytest.fixture(params=["int16", "float"])
def int8_activations(request, ext, isa):
    """Both settings of the int8 weights' activations (TORCHPLUG_CPU_INT8_ACTIVATIONS)."""
    if request.param == "int16" and not ext.int8_int16_dots_supported():
        pytest.skip(f"the {isa} path has no int16 activations on this CPU (avx512 needs AVX512-VNNI and VBMI)")
    ext.set_int8_int16_dots(request.param == "int16")
    yield request.param
    ext.set_int8_int16_dots(kernels.int8_activations() == "int16")


# (m, k, n): rows on the int16 activations' path (k a multiple of 32): one block and a part, several
# blocks with a shorter last one (k 800: 256 * 3 + 32), 1 to 16 rows (decode: 4 per pass, and the
# rest), n not a multiple of 16; prefill (over 16 rows: 4 at a time, 64 rounded at a time) in one
# chunk of columns and in several (k 2048: 128 columns a chunk), n not a multiple of 3.
INT16_ACTIVATION_SHAPES = [(1, 2048, 256), (1, 32, 17), (2, 96, 80), (3, 800, 48), (4, 512, 64), (5, 288, 33),
                           (7, 4096, 40), (9, 256, 100), (16, 160, 96), (17, 288, 50), (23, 2048, 300),
                           (70, 800, 97)]


@INT8_PATHS
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=str)
@pytest.mark.parametrize("m,k,n", INT16_ACTIVATION_SHAPES, ids=[f"{m}x{k}x{n}" for m, k, n in INT16_ACTIVATION_SHAPES])
def test_int8_activations_rounded_to_int16_stay_within_their_bound(ext, int8_activations, dtype, m, k, n):
    """With int16 activations the result is the float64 product of the rounded x (within fp32's
    accumulation bound), and so within sum over k of |x - x_hat| |w| <= d / 2 * |w| of the product
    of x itself. With float activations, x's product."""
    x, w, scales = int8_case(m, k, n, dtype, seed=m + k + n)
    out = counted(ext, lambda: torch.ops.aten._weight_int8pack_mm(x, w, scales))
    assert runs_int16_activations(ext, x) == (int8_activations == "int16")
    w64, terms = int8_dequantized(w, scales), int8_terms(w, scales)
    if int8_activations == "float":
        assert_quant_close(out, x, w64, terms)
        return
    x_hat, d = int16_rounded(x)
    assert_quant_close(out, x, w64, terms, x_hat)
    assert_quant_close(out, x, w64, terms, extra=(d / 2) @ w64.abs().t())


@INT8_PATHS
@pytest.mark.parametrize("bad", [float("inf"), float("nan")])
def test_int8_rows_with_infinities_keep_float_activations(ext, int8_activations, bad):
    """A row holding an infinity or NaN cannot be rounded to int16: that call runs the float path,
    infinities and NaNs where torch puts them."""
    x, w, scales = int8_case(2, 256, 64, torch.float16)
    x[1, 100] = bad
    assert_the_float_path_ran(ext, lambda: torch.ops.aten._weight_int8pack_mm(x, w, scales), ext.set_int8_int16_dots)


def assert_rows_8_to_11_alone_run_the_float_path(call, x, allow_rounding, setting, rounds):
    """Prefill of x (24 rows, row 9 holding an infinity or NaN) rounds 4 rows at a time. With `rounds`
    (the rounded prefill runs), rows 8 to 11 come out bit for bit (NaN for NaN) as the float path's
    decode rows give them (rounding forbidden by allow_rounding(False), then set back to `setting`),
    and the others as the same call without rows 8 to 11. Returns call(x) and those other rows of x."""
    out = call(x)
    allow_rounding(False)
    try:
        expected = call(x[8:12])  # the float path's decode rows, which that group runs
    finally:
        allow_rounding(setting)
    rest = torch.cat([x[:8], x[12:]])
    if rounds:
        torch.testing.assert_close(out[8:12], expected, equal_nan=True, rtol=0, atol=0)
        assert torch.equal(torch.cat([out[:8], out[12:]]), call(rest))
    return out, rest


@INT8_PATHS
def test_int8_prefill_rows_are_decode_rows_bit_for_bit(ext, int8_activations):
    """Prefill (over 16 rows) takes rows 4 at a time and columns a few at a time; each column's sums
    run in decode's order, so every row comes out as a call on that row alone would give it."""
    if int8_activations == "float":
        pytest.skip("the float path's prefill is the fp32 GEMM, which sums in another order than its decode")
    x, w, scales = int8_case(37, 800, 70, torch.float16, seed=5)
    out = torch.ops.aten._weight_int8pack_mm(x, w, scales)
    for r in range(x.shape[0]):
        assert torch.equal(out[r], torch.ops.aten._weight_int8pack_mm(x[r:r + 1], w, scales)[0]), f"row {r}"


@INT8_PATHS
def test_int8_prefill_sends_only_the_four_rows_with_a_nan_to_the_float_path(ext, int8_activations):
    """Prefill rounds x 4 rows at a time: the 4 rows holding a NaN run the float path (NaNs where torch
    puts them), the others keep their rounded activations."""
    x, w, scales = int8_case(24, 256, 64, torch.float16)
    x[9, 100] = float("nan")
    out, _ = assert_rows_8_to_11_alone_run_the_float_path(
        lambda rows: torch.ops.aten._weight_int8pack_mm(rows, w, scales), x, ext.set_int8_int16_dots,
        int8_activations == "int16", runs_int16_activations(ext, x))
    assert out[9].isnan().all() and not out[8].isnan().any()


@INT8_PATHS
@pytest.mark.parametrize("bad", [float("inf"), float("nan")])
def test_int4_prefill_sends_only_the_four_rows_with_a_bad_value_to_the_float_path(ext, int4_activations, bad):
    """int4 prefill rounds x 4 rows at a time: the 4 rows holding an infinity or NaN run the float path
    (infinities and NaNs where torch puts them), the others keep their rounded activations."""
    x, q, sz = int4_case(24, 256, 128, 64, torch.float16)
    packed = torch.ops.aten._convert_weight_to_int4pack_for_cpu(q, 1)
    x[9, 100] = bad
    call = lambda rows: torch.ops.aten._weight_int4pack_mm_for_cpu(rows, packed, 64, sz)  # noqa: E731
    out, rest = assert_rows_8_to_11_alone_run_the_float_path(call, x, ext.set_int4_int8_dots,
                                                             int4_activations == "int8", runs_int16_prefill(ext, x))
    assert out[9].isinf().sum() + out[9].isnan().sum() == out.shape[1] and out[8].isfinite().all()
    assert_int4_close(ext, call(rest), rest, q, 64, sz)


@pytest.mark.parametrize("env, choices, active, supported, unknown", [
    ("TORCHPLUG_CPU_INT4_ACTIVATIONS", "int8, float", "int4_int8_dots", "int4_int8_dots_supported", "int4"),
    ("TORCHPLUG_CPU_INT8_ACTIVATIONS", "int16, float", "int8_int16_dots", "int8_int16_dots_supported", "int8"),
], ids=["int4", "int8"])
def test_activations_setting_is_read_from_the_environment(env, choices, active, supported, unknown):
    """`float` turns the rounded activations off; an unknown value is refused naming the choices; the
    avx2 path has them on every CPU that runs it."""
    code = f"from torchplug_cpu import kernels; ext = kernels.load(); print('dots:', ext.{active}(), ext.{supported}())"
    assert "dots: False" in run_python(code, **{env: "float"}).stdout
    result = run_python(code)
    assert "dots: True True" in result.stdout or "dots: False False" in result.stdout
    bad = run_python(code, check=False, **{env: unknown})
    assert bad.returncode != 0 and f"{env}={unknown}; expected one of {choices}" in bad.stderr
    if "avx2" in kernels.load().supported_isas():
        assert "dots: True True" in run_python(code, TORCHPLUG_CPU_ISA="avx2").stdout
        assert "dots: False True" in run_python(code, TORCHPLUG_CPU_ISA="avx2", **{env: "float"}).stdout


@INT8_PATHS
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_the_check_catches_one_wrong_scale(ext, isa, dtype):
    """The bound is tight enough that a kernel reading one wrong scale fails it: the kernel's result,
    checked against weights where one column (int8) or one group of one column (int4) has its
    neighbour's scale, as an off-by-one in the kernel would read it."""
    x, w, scales = int8_case(3, 512, 64, dtype)
    out = counted(ext, lambda: torch.ops.aten._weight_int8pack_mm(x, w, scales))
    assert_int8_close(ext, out, x, w, scales)
    planted = scales.clone()
    planted[37] = scales[38]
    assert abs(float(scales[38] / scales[37]) - 1) > 0.1
    with pytest.raises(AssertionError, match="elements off"):
        assert_int8_close(ext, out, x, w, planted)

    x, q, sz = int4_case(3, 512, 64, 128, dtype)
    packed = torch.ops.aten._convert_weight_to_int4pack_for_cpu(q, 1)
    out = counted(ext, lambda: torch.ops.aten._weight_int4pack_mm_for_cpu(x, packed, 128, sz))
    assert_int4_close(ext, out, x, q, 128, sz)
    planted = sz.clone()
    planted[2, 11, 0] = sz[2, 12, 0]  # group 2's scale of column 11
    assert abs(float(sz[2, 12, 0] / sz[2, 11, 0]) - 1) > 0.1
    with pytest.raises(AssertionError, match="elements off"):
        assert_int4_close(ext, out, x, q, 128, planted)


@pytest.mark.parametrize("threads", [1, 3])
def test_results_do_not_depend_on_the_thread_count(ext, threads):
    x, w, scales = int8_case(40, 700, 500, torch.bfloat16)
    x4, q, sz = int4_case(2, 512, 576, 64, torch.bfloat16)
    packed = torch.ops.aten._convert_weight_to_int4pack_for_cpu(q, 1)
    calls = lambda: (torch.ops.aten._weight_int8pack_mm(x, w, scales),  # noqa: E731
                     torch.ops.aten._weight_int8pack_mm(x[:3], w, scales),
                     torch.ops.aten._weight_int4pack_mm_for_cpu(x4, packed, 64, sz))
    before = torch.get_num_threads()
    expected = calls()
    torch.set_num_threads(threads)
    try:
        for got, want in zip(calls(), expected):
            assert torch.equal(got, want)
    finally:
        torch.set_num_threads(before)


def torch_error(fn):
    """The message of torch's own kernel's error for this call (torchplug's kernels withdrawn)."""
    isa = kernels.current_isa()
    kernels.unload()
    try:
        with pytest.raises(RuntimeError) as err:
            fn()
        return str(err.value)
    finally:
        kernels.load()
        kernels.select_isa(isa)


INT8_REFUSED = {
    "3-D x": lambda: (torch.randn(2, 3, 64), torch.zeros(16, 64, dtype=torch.int8), torch.rand(16)),
    "x not contiguous along k": lambda: (torch.randn(64, 2).t(), torch.zeros(16, 64, dtype=torch.int8), torch.rand(16)),
    "scales of another dtype": lambda: (torch.randn(2, 64).half(), torch.zeros(16, 64, dtype=torch.int8), torch.rand(16)),
    "int32 weights": lambda: (torch.randn(2, 64), torch.zeros(16, 64, dtype=torch.int32), torch.rand(16)),
    "k mismatch": lambda: (torch.randn(2, 63), torch.zeros(16, 64, dtype=torch.int8), torch.rand(16)),
    "float64": lambda: (torch.randn(2, 64).double(), torch.zeros(16, 64, dtype=torch.int8), torch.rand(16).double()),
}


@pytest.mark.parametrize("case", INT8_REFUSED)
def test_int8_calls_torch_refuses_get_torchs_error(ext, case):
    args = INT8_REFUSED[case]()
    expected = torch_error(lambda: torch.ops.aten._weight_int8pack_mm(*args))
    with pytest.raises(RuntimeError) as err:
        torch.ops.aten._weight_int8pack_mm(*args)
    assert str(err.value) == expected


def test_int4_calls_outside_its_layouts_run_torchs_kernel(ext):
    """Group sizes torch refuses, a non-contiguous x: torch's error; an empty x: torch's result."""
    packed = torch.ops.aten._convert_weight_to_int4pack_for_cpu(torch.randint(0, 16, (32, 64), dtype=torch.int32), 1)
    for args in ((torch.randn(2, 64), packed, 16, torch.rand(4, 32, 2)),
                 (torch.randn(64, 2).t(), packed, 32, torch.rand(2, 32, 2)),
                 (torch.randn(2, 64).half(), packed, 32, torch.rand(2, 32, 2))):
        expected = torch_error(lambda: torch.ops.aten._weight_int4pack_mm_for_cpu(*args))
        with pytest.raises(RuntimeError) as err:
            torch.ops.aten._weight_int4pack_mm_for_cpu(*args)
        assert str(err.value) == expected
    before = ext.quant_mm_calls()
    out = torch.ops.aten._weight_int4pack_mm_for_cpu(torch.randn(0, 64), packed, 32, torch.rand(2, 32, 2))
    assert out.shape == (0, 32) and ext.quant_mm_calls() == before


LAYOUT_CHECK = """
import sys, torch
sys.path.insert(0, {tests!r})
from test_cpu_kernels_quant import int4_case, assert_int4_close
from torchplug_cpu import kernels
ext = kernels.load()
assert torch.backends.cpu.get_cpu_capability() == {capability!r}
for isa in ext.supported_isas():
    kernels.select_isa(isa)
    for dtype in (torch.float32, torch.bfloat16, torch.float16):
        for m, k, n, group in ((1, 256, 112, 64), (3, 130, 80, 32), (30, 200, 96, 128)):
            x, q, sz = int4_case(m, k, n, group, dtype)
            packed = torch.ops.aten._convert_weight_to_int4pack_for_cpu(q, 1)
            before = ext.quant_mm_calls()
            out = torch.ops.aten._weight_int4pack_mm_for_cpu(x, packed, group, sz)
            assert ext.quant_mm_calls() == before + 1
            assert_int4_close(ext, out, x, q, group, sz)
print("checked", ext.supported_isas())
"""


@pytest.mark.parametrize("capability", ["AVX2", "DEFAULT"])
def test_int4_reads_the_layout_torch_packs_for_each_cpu_capability(ext, capability):
    """torch packs int4 weights in blocks of 64 columns with its AVX-512 kernels, 32 with its AVX2
    ones, and in pairs with its portable ones (ATEN_CPU_CAPABILITY picks them): each is read right."""
    from pathlib import Path

    code = LAYOUT_CHECK.format(tests=str(Path(__file__).parent), capability=capability)
    result = run_python(code, ATEN_CPU_CAPABILITY=capability.lower())
    assert "checked" in result.stdout


def test_int8_activations_read_torchs_avx2_layout(ext):
    """torch's AVX2 layout (blocks of 32 columns), which it packs only with its AVX2 kernels: the int8
    activations' tests, the planted wrong scale and the infinities in a process where torch runs them
    (ATEN_CPU_CAPABILITY=avx2), where the avx2 path's int8 activations must run, not be skipped."""
    if "avx2" not in ext.supported_isas():
        pytest.skip(f"this CPU cannot run the avx2 path (it supports {ext.supported_isas()})")
    tests = "int8_stay_within_their_bound or infinities_keep_float or one_wrong_scale"
    result = run_process([sys.executable, "-m", "pytest", __file__, "-q", "-rs", "-p", "no:cacheprovider", "-k", tests],
                         cwd=Path(__file__).parent, env=clean_env(ATEN_CPU_CAPABILITY="avx2"))
    skipped_avx2 = [line for line in result.stdout.splitlines() if line.startswith("SKIPPED") and "avx2 path" in line]
    assert not skipped_avx2, skipped_avx2
    assert int(re.search(r"(\d+) passed", result.stdout)[1]) >= 2 * 2 * len(INT8_ACTIVATION_SHAPES)


@pytest.mark.parametrize("cpp_wrapper", [False, True], ids=["python-wrapper", "cpp-wrapper"])
def test_compiled_quantized_linears_reach_the_kernels(ext, cpp_wrapper):
    """torch.compile of weight-only int8 and int4 linears, in both wrapper modes: Inductor's C++
    wrapper calls torch's kernels through C shims, so the post-grad pass points them at torchplug's."""
    import torch._inductor.config as inductor_config

    x8, w, scales = int8_case(1, 256, 64, torch.float16)
    x4, q, sz = int4_case(1, 256, 64, 64, torch.float16)
    packed = torch.ops.aten._convert_weight_to_int4pack_for_cpu(q, 1)

    def model(a, b):
        return (torch.ops.aten._weight_int8pack_mm(a, w, scales) +
                torch.ops.aten._weight_int4pack_mm_for_cpu(b, packed, 64, sz)).relu()

    torch._dynamo.reset()
    with inductor_config.patch(cpp_wrapper=cpp_wrapper):
        compiled = torch.compile(model)
        compiled(x8, x4)
        before = ext.quant_mm_calls()
        got = compiled(x8, x4)
    assert ext.quant_mm_calls() == before + 2
    assert torch.equal(got, model(x8, x4))
