"""torchplug-mps's Metal kernels, as far as a machine without a Mac can check them.

Here: every op has a Metal kernel per dtype, the sources pass g++'s C++ syntax check against a
stand-in <metal_stdlib> (tests/metal_stub), the host code runs up to torch.mps.compile_shader (a
recorder takes the compiled library's place) and calls the kernels the sources define with the
arguments their signatures take, and an emulated mps device says it keeps the CPU kernels. On a
Mac the last test runs the kernels for real against the reference.
"""

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import torch

from conftest import run_python

metal_ops = pytest.importorskip("torchplug_mps.metal_ops")

STUB = Path(__file__).resolve().parent / "metal_stub"
SOURCES = sorted(metal_ops.METAL.glob("*.metal"))
DTYPES = [torch.float32, torch.float16, torch.bfloat16]


def defined_kernels(source: Path) -> dict[str, int]:
    """kernel name -> number of arguments the host passes (buffers and constants, not thread
    positions), for the kernels a .metal file's macros instantiate."""
    text = source.read_text().replace("\\\n", " ")
    signatures = re.findall(r"kernel void (\w+)_##NAME\((.*?)\)\s*\{", text)
    types = re.findall(r"^INSTANTIATE_\w+\(\w+, (\w+)\)", text, re.M)
    passed = {base: [a for a in args.split(",") if "[[" not in a and "ROW_THREAD_ARGS" not in a]
              for base, args in signatures}
    return {f"{base}_{type_name}": len(passed[base]) for base in passed for type_name in types}


class RecordingLibrary:
    """Takes the place of a compiled shader library: records each kernel call."""

    def __init__(self, source: str, calls: list) -> None:
        self.source, self.calls = source, calls

    def __getattr__(self, name: str):
        return lambda *args, **launch: self.calls.append((self.source, name, args, launch))


@pytest.fixture
def recorded(monkeypatch):
    calls: list = []
    sources = {path.read_text(): path for path in SOURCES}
    monkeypatch.setattr(torch.mps, "compile_shader", lambda source: RecordingLibrary(sources[source], calls))
    metal_ops.library.cache_clear()
    yield calls
    metal_ops.library.cache_clear()


def test_sources_pass_a_cpp_syntax_check_against_a_metal_stand_in():
    compiler = shutil.which("g++") or shutil.which("clang++")
    if compiler is None:
        pytest.skip("no C++ compiler (g++ or clang++) to check the Metal sources' syntax")
    for source in SOURCES:
        result = subprocess.run([compiler, "-fsyntax-only", "-x", "c++", "-std=c++17", "-Wno-attributes",
                                 "-I", str(STUB), str(source)], capture_output=True, text=True)
        assert result.returncode == 0, f"{source.name}:\n{result.stderr}"


def op_calls(dtype: torch.dtype) -> dict:
    """Each Metal op called on small CPU tensors of `dtype` (its kernels are recorded, not run)."""
    x, w = torch.randn(3, 2, 64).to(dtype), torch.randn(64).to(dtype)
    q, k, cos = torch.randn(3, 4, 16).to(dtype), torch.randn(3, 2, 16).to(dtype), torch.randn(3, 8)
    return {
        "rms_norm": lambda: metal_ops.rms_norm(x, w, 1e-6),
        "fused_add_rms_norm_": lambda: metal_ops.fused_add_rms_norm_(x.clone(), x.clone(), w, 1e-6),
        "fused_add_rms_norm": lambda: metal_ops.fused_add_rms_norm(x, x, w, 1e-6),
        "rms_norm_backward": lambda: metal_ops.rms_norm_backward(x, x, w, 1e-6, x),
        "silu_and_mul": lambda: metal_ops.silu_and_mul(x),
        "silu_and_mul_backward": lambda: metal_ops.silu_and_mul_backward(x[..., :32], x),
        "rotary_embedding": lambda: metal_ops.rotary_embedding(q, k, cos, cos.to(dtype)),
    }


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_every_op_calls_kernels_its_source_defines_with_their_arguments(recorded, dtype):
    assert set(op_calls(dtype)) == set(metal_ops.OPS)
    kernels = {path: defined_kernels(path) for path in SOURCES}
    for op, call in op_calls(dtype).items():
        recorded.clear()
        call()
        assert recorded, f"{op} launched no Metal kernel"
        for source, name, args, launch in recorded:
            assert name.endswith("_" + metal_ops.TYPE_NAMES[dtype]), (op, name)
            assert name in kernels[source], f"{op} calls {name}, which {source.name} does not define"
            assert len(args) == kernels[source][name], f"{name} takes {kernels[source][name]} arguments, got {len(args)}"
            tensors = [a for a in args if isinstance(a, torch.Tensor)]
            assert all(t.is_contiguous() for t in tensors), (op, name)
            assert launch["threads"][0] > 0 and launch.get("group_size", [1])[0] <= 1024


def test_row_kernels_get_one_threadgroup_per_row(recorded):
    metal_ops.rms_norm(torch.randn(5, 7, 100), torch.randn(100), 1e-6)
    (_, name, args, launch), = recorded
    assert name == "rms_norm_float" and args[3] == 100
    assert launch == {"threads": [35 * metal_ops.THREADGROUP], "group_size": [metal_ops.THREADGROUP]}


def test_strided_inputs_reach_the_kernels_contiguous_and_outputs_keep_their_layout(recorded):
    x = torch.randn(64, 6).t()  # [6, 64] with column stride 6
    out = metal_ops.rms_norm(x, torch.randn(64), 1e-6)
    dx = metal_ops.silu_and_mul_backward(torch.randn(6, 32), x)
    assert out.stride() == dx.stride() == torch.empty_like(x).stride() == (1, 6)
    assert [name for _, name, _, _ in recorded] == ["rms_norm_float", "silu_and_mul_grad_float"]
    assert all(a.is_contiguous() for _, _, args, _ in recorded for a in args if isinstance(a, torch.Tensor))


def test_bad_arguments_raise_the_references_errors_before_any_kernel(recorded):
    with pytest.raises(ValueError, match=r"torchplug::rms_norm: weight must have shape \(8,\)"):
        metal_ops.rms_norm(torch.randn(4, 8), torch.randn(7), 1e-6)
    with pytest.raises(ValueError, match=r"torchplug::silu_and_mul: the last dimension of x \[4, 7\] must be even"):
        metal_ops.silu_and_mul(torch.randn(4, 7))
    assert not recorded


def test_emulated_mps_keeps_the_cpu_kernels_and_says_why():
    code = """
        import json, torch
        import torchplug.ops
        from torchplug.entrypoints import loaded, loaded_backend
        print(json.dumps(loaded_backend("mps").status().reason if "mps" in loaded() else None))
    """
    reason = json.loads(run_python(code, TORCHPLUG_EMULATE="mps").stdout.strip().splitlines()[-1])
    if reason is None:
        pytest.skip(f"torchplug-mps does not load with torch {torch.__version__} (its torch range)")
    assert "Metal kernels not active: Metal kernels need a real Apple GPU" in reason, reason


@pytest.mark.skipif(not torch.backends.mps.is_available(), reason="needs a Mac with MPS: the kernels run only there")
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_metal_kernels_match_the_reference_on_a_mac(dtype):
    from torchplug.dispatcher import portable as reference

    x, w = torch.randn(3, 2, 64).to(dtype), torch.randn(64).to(dtype)
    tolerance = {"rtol": 2e-2, "atol": 2e-2} if dtype != torch.float32 else {"rtol": 1e-5, "atol": 1e-5}
    got = metal_ops.rms_norm(x.to("mps"), w.to("mps"), 1e-6).cpu()
    torch.testing.assert_close(got, reference.rms_norm_ref(x, w, 1e-6), **tolerance)
    torch.testing.assert_close(metal_ops.silu_and_mul(x.to("mps")).cpu(), torchplug_silu(x), **tolerance)


def torchplug_silu(x):
    a, b = x.float().chunk(2, dim=-1)
    return (torch.nn.functional.silu(a) * b).to(x.dtype)
