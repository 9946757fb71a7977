"""torchplug-cpu's float32 GEMM route (TORCHPLUG_CPU_FP32): mm / addmm / bmm / baddbmm, and so
linear and matmul, on oneDNN where it is routed (all of them, or on AMD CPUs without AVX-512 the
skinny F.linear products), on oneDNN's AVX2 and AVX-512 paths.

Each case runs in a fresh process, as the route is chosen when the kernels load. Results are
checked against float64 with the worst-case fp32 accumulation bound that stock fp32 meets too.
"""

import json

import pytest
import torch

from conftest import run_python

kernels = pytest.importorskip("torchplug_cpu.kernels")

# Read before any test process caps oneDNN's ISA (ONEDNN_MAX_CPU_ISA applies per process).
ONEDNN_USABLE = torch.backends.mkldnn.is_available() and torch.ops.mkldnn._is_mkldnn_bf16_supported()

# Every routed form, each checked against float64; prints {"errors": [...], "routed": {op: calls}} last.
CASES = """
    import json
    import torch
    import torch.nn.functional as F
    from torchplug_cpu import kernels

    ext = kernels.load()
    gen = torch.Generator().manual_seed(0)
    r = lambda *shape: torch.randn(shape, generator=gen)
    errors, routed = [], {}

    def check(name, fn, ref):
        before = ext.fp32_gemm_calls()
        got, (want, magnitude, k) = fn(), ref()
        routed[name] = ext.fp32_gemm_calls() - before
        bound = (k + 4) * 2.0**-24 * magnitude + 2.0**-24 * want.abs() + 1e-30
        if got.dtype != torch.float32 or got.shape != want.shape or ((got.double() - want).abs() > bound).any():
            errors.append(f"{name}: {got.dtype} {tuple(got.shape)}, worst {float(((got.double() - want).abs() - bound).max())}")

    def ref(a, b, bias=None, alpha=1.0, beta=0.0):
        want = alpha * (a.double() @ b.double())
        magnitude = abs(alpha) * (a.double().abs() @ b.double().abs())
        if beta:
            want, magnitude = want + beta * bias.double(), magnitude + abs(beta) * bias.double().abs()
        return lambda: (want, magnitude, a.shape[-1])

    a, b, bias, row = r(37, 300), r(300, 45), r(37, 45), r(45)
    w, x3 = r(45, 300), r(2, 37, 300)
    check("mm", lambda: torch.mm(a, b), ref(a, b))
    check("mm transposed", lambda: torch.mm(b.t(), a.t()), ref(b.t(), a.t()))
    check("addmm", lambda: torch.addmm(row, a, b, beta=0.5, alpha=2.0), ref(a, b, row, 2.0, 0.5))
    out = torch.empty(0)
    check("addmm out=", lambda: torch.addmm(bias, a, b, out=out), ref(a, b, bias, 1.0, 1.0))
    inplace = bias.clone()
    check("addmm_", lambda: inplace.addmm_(a, b, beta=-1.0), ref(a, b, bias, 1.0, -1.0))
    # mat2 as a weight's transpose takes oneDNN's linear; other layouts its matmul.
    check("linear", lambda: F.linear(a, w, row), ref(a, w.t(), row, 1.0, 1.0))
    check("addmm by a weight", lambda: torch.addmm(row, a, w.t(), beta=0.5, alpha=2.0), ref(a, w.t(), row, 2.0, 0.5))
    inplace_w = bias.clone()
    check("addmm_ by a weight", lambda: inplace_w.addmm_(a, w.t(), beta=-1.0), ref(a, w.t(), bias, 1.0, -1.0))
    check("linear 3-D", lambda: F.linear(x3, w), ref(x3, w.t()))
    # Skinny products (a few rows, >= 16 output columns per row): the only ones on the skinny route.
    x, wide, wide_bias = r(4, 300), r(70, 300), r(70)
    check("skinny linear", lambda: F.linear(x, wide, wide_bias), ref(x, wide.t(), wide_bias, 1.0, 1.0))
    skinny_out = torch.empty(4, 70)
    check("skinny mm out= by a weight", lambda: torch.mm(x, wide.t(), out=skinny_out), ref(x, wide.t()))
    p, q, c = r(3, 17, 64), r(3, 64, 9), r(3, 17, 9)
    check("bmm", lambda: torch.bmm(p, q), ref(p, q))
    check("bmm strided", lambda: torch.bmm(p.transpose(1, 2).contiguous().transpose(1, 2), q[:, :, ::1]), ref(p, q))
    check("baddbmm", lambda: torch.baddbmm(c, p, q, beta=2.0, alpha=0.5), ref(p, q, c, 0.5, 2.0))
    check("matmul", lambda: torch.matmul(p, q), ref(p, q))
    # Not ours: torch's kernel, torch's result.
    strided_out = torch.empty(45, 37).t()
    check("mm non-contiguous out=", lambda: torch.mm(a, b, out=strided_out), ref(a, b))
    check("mm empty k", lambda: torch.mm(r(3, 0), r(0, 4)), ref(r(3, 0), r(0, 4)))
    check("mm one row", lambda: torch.mm(a[:1], b), ref(a[:1], b))
    # One row by a weight's transpose (decode's GEMV): oneDNN's linear on the full route only.
    check("linear one row", lambda: F.linear(a[:1], w), ref(a[:1], w.t()))
    print(json.dumps({"errors": errors, "routed": routed, "status": kernels.fp32_status()}))
"""

NOT_OURS = ("mm non-contiguous out=", "mm empty k", "mm one row")
SKINNY = ("skinny linear", "skinny mm out= by a weight")
AMD = kernels.extension().cpu_vendor() == "AuthenticAMD"


def run_cases(**env: str) -> tuple[dict, str]:
    result = run_python(CASES, **env)
    return json.loads(result.stdout.strip().splitlines()[-1]), result.stdout


def load_error(**env: str) -> str:
    """The ValueError loading the kernels raises under `env` (empty if none)."""
    code = """
        from torchplug_cpu import kernels
        try:
            kernels.load()
        except ValueError as err:
            print(err)
    """
    return run_python(code, **env).stdout


@pytest.mark.skipif(not ONEDNN_USABLE, reason="torch's oneDNN has no AVX-512 float32 matmul on this CPU")
@pytest.mark.parametrize("isa", ["avx2", "avx512"])
def test_routed_fp32_gemms_run_on_onednn_and_agree_with_float64(isa):
    if isa not in kernels.supported_isas():
        pytest.skip(f"this CPU cannot run the {isa} path")
    # TORCHPLUG_CPU_ISA picks torchplug's own kernels' path; the float32 route is the same on both.
    report, printed = run_cases(TORCHPLUG_CPU_FP32="onednn", TORCHPLUG_CPU_ISA=isa, ONEDNN_VERBOSE="1")
    assert report["errors"] == []
    assert report["status"] == "fp32 GEMM: onednn (TORCHPLUG_CPU_FP32=onednn)"
    assert all(report["routed"][name] == 0 for name in NOT_OURS)
    assert all(calls >= 1 for name, calls in report["routed"].items() if name not in NOT_OURS), report["routed"]
    # oneDNN's verbose log names the kernel it ran: an AVX-512 one, the reason for the route.
    matmuls = [line for line in printed.splitlines() if ",matmul," in line and "exec" in line]
    assert matmuls and all("avx512" in line for line in matmuls), matmuls[:3]


@pytest.mark.parametrize("isa", ["avx2", "avx512"])
def test_where_onednn_has_only_its_avx2_path_auto_routes_skinny_linears_on_amd_and_onednn_is_refused(isa):
    """ONEDNN_MAX_CPU_ISA=AVX2 makes oneDNN behave as on a CPU without AVX-512 (as this test's
    CPU may really be): on AMD, auto sends skinny F.linear products to oneDNN's AVX2 linear and
    everything else to MKL; elsewhere it keeps MKL."""
    if isa not in kernels.supported_isas():
        pytest.skip(f"this CPU cannot run the {isa} path")
    report, _ = run_cases(ONEDNN_MAX_CPU_ISA="AVX2", TORCHPLUG_CPU_ISA=isa)
    assert report["errors"] == []
    if AMD and torch.backends.mkldnn.is_available():
        assert report["status"].startswith("fp32 GEMM: onednn-skinny (AMD CPU without AVX-512")
        assert {name for name, calls in report["routed"].items() if calls} == set(SKINNY), report["routed"]
    else:
        assert report["status"].startswith("fp32 GEMM: stock (") and not any(report["routed"].values())
    printed = load_error(TORCHPLUG_CPU_FP32="onednn", ONEDNN_MAX_CPU_ISA="AVX2")
    assert "TORCHPLUG_CPU_FP32=onednn, but torch's oneDNN has no fast float32 matmul on this CPU" in printed


def test_stock_keeps_torchs_fp32_gemm():
    report, _ = run_cases(TORCHPLUG_CPU_FP32="stock")
    assert report["errors"] == [] and not any(report["routed"].values())
    assert report["status"] == "fp32 GEMM: stock (TORCHPLUG_CPU_FP32=stock)"


def test_auto_follows_the_vendor_rule_and_torchplug_list_reports_it():
    code = """
        import json
        from torchplug.entrypoints import loader
        print(json.dumps(loader.loaded_backend("cpu").status().reason))
    """
    reason = json.loads(run_python(code).stdout)
    expected = ("fp32 GEMM: stock (" if not AMD else "fp32 GEMM: onednn (AMD CPU with AVX-512: MKL would take its "
                "AVX2 path)" if ONEDNN_USABLE else "fp32 GEMM: onednn-skinny (AMD CPU without AVX-512")
    assert expected in reason


def test_an_unknown_route_is_refused_with_the_choices():
    printed = load_error(TORCHPLUG_CPU_FP32="mkl")
    assert "TORCHPLUG_CPU_FP32='mkl' is not one of auto, onednn, stock" in printed
