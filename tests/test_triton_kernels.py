"""torchplug.kernels' Triton kernels on emulated cuda, rocm and xpu, run by Triton's interpreter.

One child process per backend runs the whole matrix in triton_kernel_cases.py (every op, dtype,
shape class and stride pattern, errors, trace routes); each case is one test here. rocm emulates
torch's cuda device with its own launch config. Without triton installed they skip with the reason.
"""

import json
from pathlib import Path

import pytest

from conftest import run_python
from triton_kernel_cases import CASES, OPS

TESTS = Path(__file__).resolve().parent
# backend -> the torch device type it emulates: rocm runs the same kernels with its own launch config
BACKENDS = {"cuda": "cuda", "xpu": "xpu", "rocm": "cuda"}


def _interpreter_reason() -> str | None:
    from torchplug.emulation import triton_interpreter

    return triton_interpreter.unavailable_reason()


needs_triton = pytest.mark.skipif(_interpreter_reason() is not None, reason=str(_interpreter_reason()))


def run_cases(backend: str) -> dict:
    code = f"import triton_kernel_cases as cases; cases.main({BACKENDS[backend]!r})"
    result = run_python(code, path=TESTS, TORCHPLUG_EMULATE=backend, TRITON_INTERPRET="1")
    return json.loads(result.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module", params=list(BACKENDS))
def backend_results(request):
    return request.param, run_cases(request.param)


@needs_triton
@pytest.mark.parametrize("name", [n for n in CASES if n != "trace-route"])
def test_case(backend_results, name):
    backend, results = backend_results
    record = results[name]
    assert record["ok"], f"{name} on emulated {backend}: {record['error']}: {record['message']}\n{record['trace']}"
    if str(record["value"]).startswith("SKIP: "):
        pytest.skip(record["value"].removeprefix("SKIP: "))


@needs_triton
def test_trace_shows_the_backends_triton_kernel(backend_results):
    backend, results = backend_results
    routes = results["trace-route"]["value"]
    label = f"torchplug_{backend} triton kernel"
    for dtype in ("float32", "bfloat16", "float16"):
        assert routes[dtype] == sorted([f"torchplug::{op}", "kernel", label] for op in OPS), dtype
    assert all(route == "native" for _, route, _ in routes["float64"])  # the plain-torch reference


def test_without_the_interpreter_emulation_keeps_the_cpu_kernels():
    code = """
        import json, torch
        from torchplug.entrypoints import backend
        before = backend("xpu").status().reason  # what `torchplug list` says before any op ran
        from torchplug import ops, dispatcher
        x = torch.ones(2, 8, device="xpu")
        with dispatcher.trace() as t:
            ops.rms_norm(x, torch.ones(8, device="xpu"), 1e-6)
        print(json.dumps([t.events[0].route, before, backend("xpu").status().reason]))
    """
    route, before, reason = json.loads(run_python(code, TORCHPLUG_EMULATE="xpu").stdout.strip().splitlines()[-1])
    assert route == "native"
    assert before == reason
    assert "Triton kernels not active: the emulated device keeps the CPU kernels" in reason
    assert "TRITON_INTERPRET=1" in reason or "triton package is not installed" in reason


def test_launch_configs_fit_each_backends_hardware():
    from torchplug_cuda import PROFILE as cuda
    from torchplug_rocm import PROFILE as rocm
    from torchplug_xpu import PROFILE as xpu

    CUDA, ROCM, XPU = cuda.launch, rocm.launch, xpu.launch

    assert CUDA.row_block(100) == 128 and CUDA.row_block(1 << 20) == CUDA.max_row_block
    assert ROCM.row_block(8) == 64  # never narrower than a wavefront
    assert CUDA.num_warps(8192, 2) == 16 and ROCM.num_warps(8192, 2) == 16  # 1024 threads, 8 halves each
    assert CUDA.num_warps(128, 4) == 1 and ROCM.num_warps(64, 2) == 1
    assert XPU.max_warps * XPU.warp_size == 1024
