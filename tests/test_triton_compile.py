"""The Triton kernels compile for real GPUs: NVIDIA sm_90 (cubin) and AMD gfx942 (hsaco), no GPU needed.

tests/triton_aot.py records the launches the host code makes (for the benchmark's shapes, each
kernel variant, with each backend's LaunchConfig), specialises them as Triton's JIT would, and
compiles them with Triton's own compiler. This checks what the interpreter cannot: that the
kernels lower for the hardware, and that their global memory accesses are 16 bytes wide (what
bandwidth-bound kernels need). Running them on the hardware stays unverified without a GPU.
"""

import json
from pathlib import Path

import pytest

from conftest import run_python

pytest.importorskip("triton", reason="the triton package is not installed (pip install triton, or the 'test' extra)")

TESTS = Path(__file__).resolve().parent


def compile_all(full: bool) -> dict:
    code = f"import triton_aot; triton_aot.main({full})"
    return json.loads(run_python(code, path=TESTS).stdout.strip().splitlines()[-1])


def check(results: dict) -> None:
    failed = {k: v["error"] for k, v in results.items() if not v["ok"]}
    assert not failed, "\n\n".join(f"{k}:\n{e}" for k, e in failed.items())
    narrow = [k for k, v in results.items() if not v["vector_io"]]
    assert not narrow, f"not 16-byte global loads and stores: {narrow}"
    kernels = {k.split()[1] for k in results}
    assert kernels == {"_rms_norm_rows", "_rms_norm_grad_rows", "_silu_and_mul_rows", "_silu_and_mul_grad_rows",
                       "_rotate_heads"}
    assert {k.split()[0] for k in results} == {"sm_90", "gfx942"}


def test_float16_kernels_compile_for_nvidia_and_amd_with_16_byte_accesses():
    check(compile_all(full=False))


@pytest.mark.slow
def test_every_dtype_compiles_for_nvidia_and_amd():
    check(compile_all(full=True))
