"""The correctness matrix for the Triton kernels, run inside one child process per device.

test_triton_kernels.py starts `python -c "import triton_kernel_cases as c; c.main('cuda')"` with
TORCHPLUG_EMULATE and TRITON_INTERPRET set, and asserts on the JSON record of each named case.
Every case builds its inputs on the CPU, runs torchplug.ops on the device and checks the result
against float64 arithmetic done here (independent of torchplug.ops), within one unit in the last
place of the dtype, as tests/test_cpu_kernels_llm.py checks the CPU kernels.
"""

import json
import sys
import traceback
from collections.abc import Callable

import torch
import torch.nn.functional as F

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
EPS = 1e-6
RTOL = {torch.float32: 2e-6, torch.bfloat16: 2.0**-7, torch.float16: 2.0**-10}
LONG = 16384 + 37  # longer than every backend's max_row_block: the two-pass path
OPS = ("rms_norm", "fused_add_rms_norm_", "fused_add_rms_norm", "rms_norm_backward", "silu_and_mul",
       "silu_and_mul_backward", "rotary_embedding")
CASES: dict[str, Callable[[str], object]] = {}


def case(name: str):
    def add(fn):
        CASES[name] = fn
        return fn
    return add


def rand(*shape, dtype, seed=0, scale=1.0):
    gen = torch.Generator().manual_seed(seed)
    return (torch.randn(shape, generator=gen) * scale).to(dtype)


def assert_ulp_close(out, exact, dtype, floor=1e-6):
    assert out.dtype == dtype and tuple(out.shape) == tuple(exact.shape), (out.dtype, out.shape, exact.shape)
    err = (out.cpu().double() - exact).abs()
    bound = RTOL[dtype] * exact.abs() + floor
    assert (err <= bound).all(), f"worst excess {float((err - bound).max())} at {int((err - bound).argmax())}"


def rms_norm_exact(x, w):
    x, w = x.double(), w.double()
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + EPS) * w


def silu_and_mul_exact(x):
    a, b = x.double().chunk(2, dim=-1)
    return F.silu(a) * b


# --- inputs: shape classes x stride patterns (built on the CPU, then moved) -----------------------

def layouts(shape, dtype, seed):
    """name -> a CPU tensor of `shape` with that memory layout (same values for every layout)."""
    values = rand(*shape, dtype=dtype, seed=seed)
    wide = torch.zeros(*shape[:-1], shape[-1] * 2 + 3, dtype=dtype)
    wide[..., 3:3 + 2 * shape[-1]:2] = values  # row stride and column stride 2, at an offset
    found = {"contiguous": values, "strided": wide[..., 3:3 + 2 * shape[-1]:2]}
    if len(shape) >= 2:
        found["transposed"] = values.transpose(-1, -2).contiguous().transpose(-1, -2)  # column stride = rows
    if len(shape) == 3:  # dense, but its rows do not flatten into one [rows, hidden] view
        found["permuted"] = values.transpose(0, 1).contiguous().transpose(0, 1)
    return found


SHAPES = {"row": (1, 1), "batch": (2, 3, 100), "long": (2, LONG)}


def on(device, t):
    """`t` on `device` with the same strides and storage offset."""
    storage = t.untyped_storage()
    whole = torch.empty(0, dtype=t.dtype).set_(storage, 0, (storage.nbytes() // t.element_size(),))
    return whole.to(device).as_strided(t.shape, t.stride(), t.storage_offset())


for dtype_name, dtype in DTYPES.items():
    for shape_name, shape in SHAPES.items():
        for layout in ("contiguous", "strided", "transposed", "permuted"):
            if (shape_name == "long" and layout != "contiguous") or (layout == "permuted" and len(shape) != 3):
                continue

            @case(f"rms_norm-{dtype_name}-{shape_name}-{layout}")
            def _(device, dtype=dtype, shape=shape, layout=layout):
                x = layouts(shape, dtype, seed=1)[layout]
                w = rand(shape[-1], dtype=dtype, seed=2)
                import torchplug.ops as ops
                out = ops.rms_norm(on(device, x), on(device, w), EPS)
                assert out.device.type == device and out.stride() == torch.empty_like(x).stride()
                assert_ulp_close(out, rms_norm_exact(x, w), dtype)

            @case(f"fused_add_rms_norm_-{dtype_name}-{shape_name}-{layout}")
            def _(device, dtype=dtype, shape=shape, layout=layout):
                x_cpu = layouts(shape, dtype, seed=3)[layout]
                r_cpu = layouts(shape, dtype, seed=4)["contiguous" if layout == "transposed" else layout]
                w = rand(shape[-1], dtype=dtype, seed=5)
                x, residual = on(device, x_cpu), on(device, r_cpu)
                pointers = x.data_ptr(), residual.data_ptr()
                import torchplug.ops as ops
                ops.fused_add_rms_norm(x, residual, on(device, w), EPS)
                assert (x.data_ptr(), residual.data_ptr()) == pointers
                summed = x_cpu + r_cpu  # torch adds 16-bit floats in float32 and rounds once, as the kernel does
                assert torch.equal(residual.cpu(), summed)
                assert_ulp_close(x, rms_norm_exact(summed, w), dtype)

    @case(f"rms_norm-{dtype_name}-float32_weight")
    def _(device, dtype=dtype):
        x, w = rand(4, 96, dtype=dtype, seed=6), rand(96, dtype=torch.float32, seed=7)
        import torchplug.ops as ops
        assert_ulp_close(ops.rms_norm(on(device, x), on(device, w), EPS), rms_norm_exact(x, w), dtype)

    @case(f"rms_norm-{dtype_name}-empty")
    def _(device, dtype=dtype):
        import torchplug.ops as ops
        out = ops.rms_norm(torch.empty(0, 64, dtype=dtype, device=device), torch.ones(64, dtype=dtype, device=device), EPS)
        assert out.shape == (0, 64) and out.device.type == device

    @case(f"fused_add_rms_norm_-{dtype_name}-neighbours_untouched")
    def _(device, dtype=dtype):
        xb, rb = rand(4, 96, dtype=dtype, seed=8), rand(4, 96, dtype=dtype, seed=9)
        xd, rd = on(device, xb), on(device, rb)
        x, residual = xd[:, ::2], rd[:, 1::2]
        w = rand(48, dtype=torch.float32, seed=10)
        import torchplug.ops as ops
        ops.fused_add_rms_norm(x, residual, on(device, w), EPS)
        summed = xb[:, ::2] + rb[:, 1::2]
        assert torch.equal(rd.cpu()[:, 1::2], summed) and torch.equal(rd.cpu()[:, ::2], rb[:, ::2])
        assert torch.equal(xd.cpu()[:, 1::2], xb[:, 1::2])
        assert_ulp_close(xd[:, ::2], rms_norm_exact(summed, w), dtype)

    @case(f"fused_add_rms_norm-{dtype_name}-functional")
    def _(device, dtype=dtype):
        x, residual, w = rand(3, 40, dtype=dtype, seed=11), rand(3, 40, dtype=dtype, seed=12), rand(40, dtype=dtype)
        xd, rd = on(device, x), on(device, residual)
        out, summed = torch.ops.torchplug.fused_add_rms_norm(xd, rd, on(device, w), EPS)
        assert torch.equal(xd.cpu(), x) and torch.equal(rd.cpu(), residual)  # inputs untouched
        assert torch.equal(summed.cpu(), x + residual)
        assert_ulp_close(out, rms_norm_exact(x + residual, w), dtype)

    for shape_name, shape in {"row": (1, 2), "batch": (2, 3, 202), "long": (2, 2 * 3000 + 2)}.items():
        for layout in ("contiguous", "strided", "transposed"):
            if shape_name == "long" and layout != "contiguous":
                continue

            @case(f"silu_and_mul-{dtype_name}-{shape_name}-{layout}")
            def _(device, dtype=dtype, shape=shape, layout=layout):
                x = layouts(shape, dtype, seed=13)[layout] * 4  # |x| up to ~16: both tails of silu
                import torchplug.ops as ops
                out = ops.silu_and_mul(on(device, x))
                assert out.is_contiguous() and out.device.type == device
                assert_ulp_close(out, silu_and_mul_exact(x), dtype)

    @case(f"silu_and_mul-{dtype_name}-extremes")
    def _(device, dtype=dtype):
        row = [-200.0, -88.0, -1.0, 0.0, 1.0, 88.0, 200.0, float("nan")] + [1.0] * 8
        x = torch.tensor([row]).to(dtype)
        import torchplug.ops as ops
        out = ops.silu_and_mul(on(device, x)).cpu()
        assert out[0, 7].isnan()
        exact = silu_and_mul_exact(x)[:, :7]
        finite = exact.abs() < torch.finfo(dtype).max
        assert torch.equal(out[:, :7][~finite].double(), exact[~finite].to(dtype).double())  # overflow to inf
        assert_ulp_close(out[:, :7].where(finite, 0), exact.where(finite, 0), dtype)


def rms_norm_grads_exact(x, w, g):
    x, w, g = x.double(), w.double(), g.double()
    inv_rms = torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + EPS)
    x_hat, gw = x * inv_rms, g * w
    dx = inv_rms * (gw - x_hat * (gw * x_hat).mean(-1, keepdim=True))
    return dx, (g * x_hat).reshape(-1, x.shape[-1]).sum(0)


def assert_grad_close(got, exact, dtype):
    """Within one unit in the last place, plus fp32 rounding of the sums each element depends on."""
    assert_ulp_close(got, exact, dtype, floor=1e-5 * float(exact.abs().max()) + 1e-6)


def leaf(device, t):
    return on(device, t).detach().requires_grad_()


def needs_autograd(device):
    """None, or why backward through autograd cannot run on this device here (then the case skips):
    asked of autograd itself, since it depends on torch's build and on whether the device is emulated."""
    try:
        x = torch.ones(2, device=device, requires_grad=True)
        (x * 2).sum().backward()
    except RuntimeError as err:
        return f"SKIP: autograd cannot run backward on {device} with torch {torch.__version__}: {err}"
    return None


BACKWARD = torch.ops.torchplug


for dtype_name, dtype in DTYPES.items():
    for shape_name, shape in {"row": (1, 1), "batch": (2, 3, 100), "long": (2, LONG)}.items():
        @case(f"rms_norm_backward-{dtype_name}-{shape_name}")
        def _(device, dtype=dtype, shape=shape):
            x, w, g = rand(*shape, dtype=dtype, seed=20), rand(shape[-1], dtype=dtype, seed=21), rand(
                *shape, dtype=dtype, seed=22)
            dx, dw = BACKWARD.rms_norm_backward(on(device, g), on(device, x), on(device, w), EPS)
            exact_dx, exact_dw = rms_norm_grads_exact(x, w, g)
            assert_grad_close(dx, exact_dx, dtype)
            assert_grad_close(dw, exact_dw, dtype)

    @case(f"rms_norm_backward-{dtype_name}-strided_and_broadcast_grad")
    def _(device, dtype=dtype):
        x = layouts((4, 96), dtype, seed=23)["transposed"]
        w = rand(96, dtype=torch.float32, seed=24)
        g = torch.ones((), dtype=dtype, device=device).expand(4, 96)  # as out.sum().backward() passes it
        dx, dw = BACKWARD.rms_norm_backward(g, on(device, x), on(device, w), EPS)
        exact_dx, exact_dw = rms_norm_grads_exact(x, w, torch.ones(4, 96, dtype=torch.float64))
        assert dx.stride() == torch.empty_like(x).stride()
        assert_grad_close(dx, exact_dx, dtype)
        assert_grad_close(dw, exact_dw, torch.float32)

    @case(f"rms_norm_backward-{dtype_name}-with_residual_grad")
    def _(device, dtype=dtype):
        summed, w, g_out, g_sum = (rand(3, 5, 64, dtype=dtype, seed=s) for s in (25, 26, 27, 28))
        w = w[0, 0]
        d_summed, dw = BACKWARD.rms_norm_backward(on(device, g_out), on(device, summed), on(device, w), EPS,
                                                  on(device, g_sum))
        exact_dx, exact_dw = rms_norm_grads_exact(summed, w, g_out)
        assert_grad_close(d_summed, exact_dx + g_sum.double(), dtype)
        assert_grad_close(dw, exact_dw, dtype)

    for shape_name, shape in {"row": (1, 2), "batch": (2, 3, 202), "long": (2, 2 * 3000 + 2)}.items():
        @case(f"silu_and_mul_backward-{dtype_name}-{shape_name}")
        def _(device, dtype=dtype, shape=shape):
            x = layouts(shape, dtype, seed=30)["strided"] * 4
            g = rand(*shape[:-1], shape[-1] // 2, dtype=dtype, seed=31)
            dx = BACKWARD.silu_and_mul_backward(on(device, g), on(device, x))
            a, b = x.double().chunk(2, dim=-1)
            sigmoid = torch.sigmoid(a)
            exact = torch.cat([g.double() * b * sigmoid * (1 + a * (1 - sigmoid)), g.double() * a * sigmoid], -1)
            assert dx.stride() == torch.empty_like(x).stride()
            assert_grad_close(dx, exact, dtype)

    @case(f"autograd-{dtype_name}")
    def _(device, dtype=dtype):
        """loss.backward() reaches the backward kernels through each op's autograd formula."""
        if reason := needs_autograd(device):
            return reason
        import torchplug.ops as ops
        x, residual, w = (rand(3, 64, dtype=dtype, seed=s) for s in (32, 33, 34))
        w = w[0]
        xd, rd, wd = leaf(device, x), leaf(device, residual), leaf(device, w)
        cos, sin = angles(3, 8, torch.float32, seed=35)

        def loss(x, residual, w, cos, sin):
            hidden, summed = torch.ops.torchplug.fused_add_rms_norm(x, residual, w, EPS)
            q, k = ops.rotary_embedding(summed.view(3, 4, 16), hidden.view(3, 4, 16), cos, sin)
            return ops.silu_and_mul(ops.rms_norm(q.reshape(3, 64), w, EPS)).sum() + k.sum()

        loss(xd, rd, wd, on(device, cos), on(device, sin)).backward()
        for t in (xd, rd, wd):
            assert t.grad is not None and t.grad.isfinite().all() and t.grad.abs().sum() > 0
        cpu = [t.detach().requires_grad_() for t in (x.float(), residual.float(), w.float())]
        loss(*cpu, cos, sin).backward()
        for got, want in zip((xd, rd, wd), cpu):
            torch.testing.assert_close(got.grad.cpu().float(), want.grad, rtol=4 * RTOL[dtype], atol=4 * RTOL[dtype])


def rope_exact(x, cos, sin):
    x1, x2 = x.double().chunk(2, dim=-1)
    c, s = cos.double().unsqueeze(1), sin.double().unsqueeze(1)
    return torch.cat([x1 * c - x2 * s, x2 * c + x1 * s], dim=-1)


def assert_rope_close(out, x, cos, sin):
    x1, x2 = x.double().abs().chunk(2, dim=-1)
    terms = torch.cat([x1 + x2, x1 + x2], dim=-1)  # x1 c - x2 s can cancel: fp32 error scales with the terms
    exact = rope_exact(x, cos, sin)
    assert out.dtype == x.dtype and out.shape == x.shape
    err = (out.cpu().double() - exact).abs()
    bound = RTOL[x.dtype] * exact.abs() + 2e-7 * terms + 1e-6
    assert (err <= bound).all(), float((err - bound).max())


def angles(tokens, half, dtype, seed):
    angle = rand(tokens, half, dtype=torch.float32, seed=seed)
    return angle.cos().to(dtype), angle.sin().to(dtype)


for dtype_name, dtype in DTYPES.items():
    for head_dim in (2, 18, 128):
        for layout in ("contiguous", "permuted"):
            @case(f"rotary_embedding-{dtype_name}-head_dim{head_dim}-{layout}")
            def _(device, dtype=dtype, head_dim=head_dim, layout=layout):
                q, k = layouts((7, 4, head_dim), dtype, seed=40)[layout], layouts((7, 2, head_dim), dtype, seed=41)[layout]
                cos, sin = angles(7, head_dim // 2, torch.float32 if layout == "permuted" else dtype, seed=42)
                qd, kd = on(device, q), on(device, k)
                import torchplug.ops as ops
                q_out, k_out = ops.rotary_embedding(qd, kd, on(device, cos), on(device, sin))
                assert torch.equal(qd.cpu(), q) and torch.equal(kd.cpu(), k)  # functional: inputs untouched
                assert q_out.stride() == torch.empty_like(q).stride()
                assert_rope_close(q_out, q, cos, sin)
                assert_rope_close(k_out, k, cos, sin)

    @case(f"rotary_embedding-{dtype_name}-fused_qkv_views")
    def _(device, dtype=dtype):
        tokens, heads, kv_heads, head_dim = 5, 4, 2, 32
        qkv = rand(tokens, (heads + 2 * kv_heads) * head_dim, dtype=dtype, seed=43)
        angle = rand(tokens, head_dim // 2, dtype=torch.float32, seed=44)
        cos_sin = torch.cat([angle.cos(), angle.sin()], dim=-1)  # one cache, as vLLM keeps it
        qkv_d, cos_sin_d = on(device, qkv), on(device, cos_sin)
        q = qkv_d[:, : heads * head_dim].view(tokens, heads, head_dim)
        k = qkv_d[:, heads * head_dim: (heads + kv_heads) * head_dim].view(tokens, kv_heads, head_dim)
        cos, sin = cos_sin_d[:, : head_dim // 2], cos_sin_d[:, head_dim // 2:]  # strided views
        import torchplug.ops as ops
        q_out, k_out = ops.rotary_embedding(q, k, cos, sin)
        assert_rope_close(q_out, q.cpu(), cos.cpu(), sin.cpu())
        assert_rope_close(k_out, k.cpu(), cos.cpu(), sin.cpu())

    @case(f"rotary_embedding-{dtype_name}-backward_rotates_back")
    def _(device, dtype=dtype):
        """The backward formula's dq, dk: the op itself with -sin (a rotation's transpose)."""
        g_q, g_k = rand(6, 3, 64, dtype=dtype, seed=45), rand(6, 1, 64, dtype=dtype, seed=46)
        cos, sin = angles(6, 32, torch.float32, seed=47)
        dq, dk = torch.ops.torchplug.rotary_embedding(on(device, g_q), on(device, g_k), on(device, cos),
                                                      on(device, -sin))
        assert_rope_close(dq, g_q, cos, -sin)
        assert_rope_close(dk, g_k, cos, -sin)


BAD_INPUTS = {
    "rotary_embedding-angles_shape": lambda ops, d: ops.rotary_embedding(
        torch.randn(5, 4, 16, device=d), torch.randn(5, 2, 16, device=d), torch.randn(5, 16, device=d),
        torch.randn(5, 16, device=d)),
    "rotary_embedding-k_shape": lambda ops, d: ops.rotary_embedding(
        torch.randn(5, 4, 16, device=d), torch.randn(4, 2, 16, device=d), torch.randn(5, 8, device=d),
        torch.randn(5, 8, device=d)),
    "rms_norm-weight_shape": lambda ops, d: ops.rms_norm(torch.randn(4, 8, device=d), torch.randn(7, device=d), EPS),
    "silu_and_mul-odd": lambda ops, d: ops.silu_and_mul(torch.randn(4, 7, device=d)),
    "fused_add_rms_norm_-shapes": lambda ops, d: ops.fused_add_rms_norm(
        torch.randn(4, 8, device=d), torch.randn(3, 8, device=d), torch.randn(8, device=d), EPS),
    "fused_add_rms_norm_-weight_shape": lambda ops, d: ops.fused_add_rms_norm(
        torch.randn(4, 8, device=d), torch.randn(4, 8, device=d), torch.randn(9, device=d), EPS),
}
for name, call in BAD_INPUTS.items():
    @case(f"error-{name}")
    def _(device, call=call):
        """The same exception and message on the device as on the CPU."""
        import torchplug.ops as ops
        raised = []
        for where in (device, "cpu"):
            try:
                call(ops, where)
            except Exception as err:
                raised.append(f"{type(err).__name__}: {err}")
            else:
                raised.append("nothing raised")
        assert raised[0] == raised[1] and raised[0].startswith("ValueError: torchplug::"), raised
        return raised[0]


@case("trace-route")
def _(device):
    """Every op in every kernel dtype is served by the backend's Triton kernel; float64 by the reference."""
    import torchplug.ops as ops
    from torchplug import dispatcher
    routes = {}
    for dtype_name, dtype in {**DTYPES, "float64": torch.float64}.items():
        x, w = torch.ones(2, 8, dtype=dtype, device=device), torch.ones(8, dtype=dtype, device=device)
        with dispatcher.trace() as t:
            ops.rms_norm(x, w, EPS)
            ops.fused_add_rms_norm(x, x.clone(), w, EPS)
            torch.ops.torchplug.fused_add_rms_norm(x, x, w, EPS)
            torch.ops.torchplug.rms_norm_backward(x, x, w, EPS)
            ops.silu_and_mul(x)
            torch.ops.torchplug.silu_and_mul_backward(x[:, :4], x)
            ops.rotary_embedding(x.view(2, 1, 8), x.view(2, 1, 8), x[:, :4], x[:, 4:])
        routes[dtype_name] = sorted({(e.op, e.route, e.served_by) for e in t.events if e.op.startswith("torchplug::")})
    return routes


def main(device: str) -> None:
    results = {}
    for name, fn in CASES.items():
        try:
            results[name] = {"ok": True, "value": fn(device)}
        except BaseException as err:
            results[name] = {"ok": False, "error": type(err).__name__, "message": str(err),
                             "trace": traceback.format_exc(limit=-3)}
    print(json.dumps(results, default=str))


if __name__ == "__main__":
    main(sys.argv[1])
