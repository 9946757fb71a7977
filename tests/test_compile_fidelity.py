"""Fidelity mode (TORCHPLUG_EMULATE_INDUCTOR=triton): Inductor's GPU codegen on emulated devices.

Inductor generates the Triton kernels it would generate for the real GPU, and Triton's
interpreter runs them on the host. The tests check the generated code is Triton and the results
match eager; they skip with the reason when the triton package is absent.
"""

import pytest

from emulation_helpers import CHECKS, run_json


def _interpreter_reason():
    from torchplug.emulation import triton_interpreter

    return triton_interpreter.unavailable_reason()


needs_triton = pytest.mark.skipif(_interpreter_reason() is not None, reason=str(_interpreter_reason()))

CASES = CHECKS + """
import torch
from torch._inductor.utils import run_and_get_code
torch.manual_seed(0)
x = torch.randn(8, 33, device=DEVICE); w = torch.randn(33, device=DEVICE); b = torch.randn(33, device=DEVICE)

def compiled(fn, *args):
    got, code = run_and_get_code(torch.compile(fn), *args)
    torch.testing.assert_close(got.cpu(), fn(*args).cpu(), rtol=1e-4, atol=1e-5)
    return ["@triton.jit" in "".join(code), "cpp_fused" in "".join(code)]

check("pointwise", lambda: compiled(lambda a: torch.tanh(a) * torch.sigmoid(a) + a.exp() / 3, x))
check("softmax", lambda: compiled(lambda a: torch.softmax(a, -1), x))
check("layer_norm", lambda: compiled(lambda a, w, b: torch.nn.functional.layer_norm(a, (33,), w, b), x, w, b))
check("cpu", lambda: compiled(lambda a: torch.softmax(a, -1) * 2, x.cpu()))  # the CPU keeps C++ codegen
print(json.dumps(RESULTS))
"""


@needs_triton
@pytest.mark.parametrize("device", ["cuda", "xpu"])
def test_triton_codegen_runs_interpreted(device):
    results = run_json(f"DEVICE = {device!r}\n" + CASES, TORCHPLUG_EMULATE=device, TORCHPLUG_EMULATE_INDUCTOR="triton")
    failed = {name: r for name, r in results.items() if not r["ok"]}
    assert not failed, failed
    for name in ("pointwise", "softmax", "layer_norm"):
        assert results[name]["value"] == [True, False], name  # Triton kernels, not the host target's C++
    assert results["cpu"]["value"] == [False, True]


def test_metal_codegen_for_emulated_mps_keeps_the_source():
    code = CHECKS + """
import torch
from torchplug.codegen import metal
x = torch.randn(8, 33, device="mps")
check("call", lambda: torch.compile(lambda a: torch.softmax(a, -1) * 2)(x))
check("sources", lambda: [path.read_text() for path in metal.captured])
print(json.dumps(RESULTS))
"""
    results = run_json(code, TORCHPLUG_EMULATE="mps", TORCHPLUG_EMULATE_INDUCTOR="triton")
    call, sources = results["call"], results["sources"]
    assert not call["ok"] and "cannot run here" in call["message"] and ".metal" in call["message"]
    assert sources["ok"] and any("kernel void" in source for source in sources["value"])
