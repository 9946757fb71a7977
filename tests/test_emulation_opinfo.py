"""Slow tier: PyTorch's OpInfo samples (float32, two per op) on emulated xpu and mps, forward and
backward, against the CPU. The conformance suite is the full version; this guards the runtime."""

import pytest

from emulation_helpers import run_json

pytest.importorskip("expecttest", reason="torch's OpInfo database needs expecttest (pip install expecttest)")

SWEEP = r'''
import json, sys
import torch
from torch.testing._internal.common_methods_invocations import op_db

DEVICE, GRAD = sys.argv[1] if len(sys.argv) > 1 else "{device}", {grad}
# Random, uninitialised and sparse ops cannot match the CPU's values; tensor_split wants its
# indices on the CPU (as on CUDA); float8 _scaled_mm results do not compare with assert_close.
SKIP = ("empty", "new_empty", "rand", "normal", "bernoulli", "multinomial", "uniform", "cauchy",
        "exponential", "geometric", "log_normal", "randint", "nn.functional.dropout", "nn.functional.rrelu",
        "nn.functional.feature_alpha", "nn.functional.alpha_dropout", "as_strided", "tensor_split",
        "torch._scaled_mm")

def move(x):
    if isinstance(x, torch.Tensor):
        return x.detach().to(DEVICE).requires_grad_(x.requires_grad)
    if isinstance(x, (list, tuple)):
        return type(x)(move(i) for i in x)
    if isinstance(x, dict):
        return {{k: move(v) for k, v in x.items()}}
    return x

def tensors(x):
    if isinstance(x, torch.Tensor):
        return [x]
    if isinstance(x, (list, tuple)):
        return [t for i in x for t in tensors(i)]
    if isinstance(x, dict):
        return tensors(list(x.values()))
    return []

def run(op, args, kwargs):
    out = op(*args, **kwargs)
    if not GRAD:
        return tensors(out)
    outs = [o for o in tensors(out) if o.requires_grad]
    ins = [i for i in tensors([args, kwargs]) if i.requires_grad]
    if not outs or not ins:
        return None
    return list(torch.autograd.grad(sum(o.sum() for o in outs), ins, allow_unused=True))

failures, compared = {{}}, 0
for op in op_db:
    if op.name.startswith(SKIP) or "sparse" in op.name or (GRAD and not op.supports_autograd):
        continue
    if DEVICE == "mps" and not op.supports_dtype(torch.float32, "cpu"):
        continue
    try:
        samples = list(op.sample_inputs("cpu", torch.float32, requires_grad=GRAD))[:2]
    except Exception:
        continue
    for s in samples:
        try:
            expected = run(op, [s.input, *s.args], s.kwargs)
        except Exception:
            continue  # the CPU itself rejects this sample
        if expected is None or not tensors([s.input, s.args]):
            continue  # nothing to compare, or a factory op: it makes CPU tensors unless told otherwise
        if "device" in s.kwargs or op.name in ("to", "item"):
            continue  # the result's device is the sample's choice
        try:
            got = run(op, [move(s.input), *move(list(s.args))], move(s.kwargs))
            for e, g in zip(expected, got):
                if e is None and g is None:
                    continue
                assert g.device.type == DEVICE, f"result on {{g.device}}"
                torch.testing.assert_close(g.detach().cpu(), e.detach(), equal_nan=True, rtol=1e-4, atol=1e-4)
            compared += 1
        except Exception as err:
            message = str(err).splitlines()[0][:200]
            if DEVICE == "mps" and ("does not support torch.float64" in message
                                    or "does not support torch.complex128" in message):
                continue  # the sample asks for a 64-bit float, which emulated MPS refuses, as MPS does
            failures.setdefault(op.name, message)
print(json.dumps({{"compared": compared, "failures": failures}}))
'''


@pytest.mark.slow
@pytest.mark.parametrize("device", ["xpu", "mps"])
@pytest.mark.parametrize("grad", [False, True], ids=["forward", "backward"])
def test_opinfo_samples_match_the_cpu(device, grad):
    result = run_json(SWEEP.format(device=device, grad=grad), TORCHPLUG_EMULATE=device)
    assert result["failures"] == {}, result["failures"]
    assert result["compared"] > 800, result["compared"]
