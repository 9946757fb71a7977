"""torchplug-cpu's float16 attention (csrc/attention_ops.cpp: decode steps of
F.scaled_dot_product_attention over a KV cache, a few query rows at a time; and prefill, many rows
or is_causal, through attend_rows) on every ISA path this CPU can run.

The reference is float64 softmax(q k^T * scale + mask) v; the kernel computes in fp32 and rounds
once, so its error must be no worse than torch's own flash kernel on the same inputs (measured in
the same test with the kernels unregistered). No timing is asserted.
"""

import pytest
import torch
import torch.nn.functional as F

kernels = pytest.importorskip("torchplug_cpu.kernels")
kernels.extension()  # defines torch.ops.torchplug_cpu

OP = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu.default


@pytest.fixture(scope="module")
def ext():
    return kernels.load()


def rand(*shape, seed):
    return torch.randn(shape, generator=torch.Generator().manual_seed(seed)).half()


def exact(q, k, v, mask, scale=None):
    q, k, v = q.double(), k.double(), v.double()
    group = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(group, 1), v.repeat_interleave(group, 1)
    s = q @ k.transpose(-1, -2) * (scale if scale is not None else q.shape[-1] ** -0.5)
    if mask is not None:
        s = s.masked_fill(~mask, float("-inf")) if mask.dtype == torch.bool else s + mask.double()
    return torch.softmax(s, -1) @ v


def stock(fn):
    kernels.unload()
    try:
        return fn()
    finally:
        kernels.load()


# (batch, heads, kv heads, query rows, keys, head_dim): decode with GQA, several rows, tails of the
# vector width in head_dim and keys, the largest row count of the per-row loop, one head per kv
# head; then prefill (attend_rows): GQA, tails of its row and key blocks, fewer keys than a block.
SHAPES = [(1, 16, 4, 1, 128, 64), (2, 8, 8, 3, 37, 40), (1, 4, 2, 16, 200, 128), (3, 6, 3, 2, 9, 7),
          (1, 2, 1, 5, 300, 72), (1, 16, 4, 128, 128, 64), (2, 4, 4, 33, 70, 40), (1, 2, 1, 20, 9, 7)]


def masks(batch, rows, keys, seed):
    filled = torch.randint(0, keys, (rows,), generator=torch.Generator().manual_seed(seed))
    prefix = torch.arange(keys) <= filled[:, None]  # a static cache's padding mask
    return {"none": None, "bool": prefix, "float16 -inf": torch.where(prefix, 0.0, float("-inf")).half(),
            "float32 additive": torch.randn(batch, 1, rows, keys, generator=torch.Generator().manual_seed(seed))}


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("mask_kind", ["none", "bool", "float16 -inf", "float32 additive"])
def test_few_query_rows_match_float64_as_well_as_torch(isa, ext, shape, mask_kind):
    b, h, hk, rows, keys, d = shape
    q, k, v = rand(b, h, rows, d, seed=1), rand(b, hk, keys, d, seed=2), rand(b, hk, keys, d, seed=3)
    mask = masks(b, rows, keys, seed=4)[mask_kind]
    calls = lambda: F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=True)  # noqa: E731
    ours, theirs, ref = calls(), stock(calls), exact(q, k, v, mask)
    assert ours.dtype == torch.float16 and ours.shape == ref.shape
    err, err_stock = (ours.double() - ref).abs().max().item(), (theirs.double() - ref).abs().max().item()
    assert err <= max(2 * err_stock, 2e-3), (err, err_stock)


@pytest.mark.parametrize("rows", [2, 20], ids=["per-row loop", "attend_rows"])
def test_layouts_logsumexp_scale_and_fully_masked_rows_as_torch(isa, ext, rows):
    q, k, v = rand(1, 4, rows, 16, seed=1), rand(1, 2, 24, 16, seed=2), rand(1, 2, 24, 16, seed=3)
    mask = torch.zeros(1, 4, rows, 24, dtype=torch.half)
    mask[..., 10:] = float("-inf")
    mask[0, 1, 1] = float("-inf")  # one row sees no key
    out, lse = OP(q, k, v, attn_mask=mask, scale=0.3)
    ref_out, ref_lse = stock(lambda: OP(q, k, v, attn_mask=mask, scale=0.3))
    assert out.shape == ref_out.shape and out.stride() == ref_out.stride()
    assert lse.shape == ref_lse.shape and lse.stride() == ref_lse.stride() and lse.dtype == ref_lse.dtype
    torch.testing.assert_close(out, ref_out, atol=2e-3, rtol=2e-3)
    torch.testing.assert_close(lse, ref_lse, atol=1e-4, rtol=1e-4)
    assert (out[0, 1, 1] == 0).all()


@pytest.mark.parametrize("rows, keys", [(128, 128), (40, 16), (7, 30), (1, 5)])
def test_causal_matches_float64_as_well_as_torch(isa, ext, rows, keys):
    """is_causal: query i sees keys 0..i (torch aligns the triangle top-left, also when rows != keys)."""
    q, k, v = rand(1, 8, rows, 64, seed=1), rand(1, 2, keys, 64, seed=2), rand(1, 2, keys, 64, seed=3)
    calls = lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)  # noqa: E731
    ours, theirs = calls(), stock(calls)
    ref = exact(q, k, v, torch.ones(rows, keys, dtype=torch.bool).tril())
    err, err_stock = (ours.double() - ref).abs().max().item(), (theirs.double() - ref).abs().max().item()
    assert err <= max(2 * err_stock, 2e-3), (err, err_stock)


@pytest.mark.parametrize("kwargs", [{"rows": 17, "keys": 8193}, {"dtype": torch.float32}],
                         ids=["keys past attend_rows' limit", "float32"])
def test_other_calls_run_torchs_kernel_unchanged(ext, kwargs):
    rows, keys, dtype = kwargs.pop("rows", 2), kwargs.pop("keys", 20), kwargs.pop("dtype", torch.float16)
    q, k, v = (rand(1, 2, n, 8, seed=s).to(dtype) for s, n in ((1, rows), (2, keys), (3, keys)))
    ours = OP(q, k, v, **kwargs)
    theirs = stock(lambda: OP(q, k, v, **kwargs))
    for a, b in zip(ours, theirs):
        assert torch.equal(a, b)


def test_strided_cache_views(ext):
    """q, k, v as views (a cache sliced to its filled part, heads transposed out of [B, L, H, D])."""
    cache = rand(2, 3, 50, 32, seed=2)
    q = rand(2, 1, 6, 32, seed=1).transpose(1, 2)
    k, v = cache[:, :, :33], cache.flip(2)[:, :, :33]
    out = F.scaled_dot_product_attention(q, k, v, enable_gqa=True)
    ref = exact(q, k, v, None)
    theirs = stock(lambda: F.scaled_dot_product_attention(q, k, v, enable_gqa=True))
    assert (out.double() - ref).abs().max() <= max(2 * (theirs.double() - ref).abs().max(), 2e-3)
