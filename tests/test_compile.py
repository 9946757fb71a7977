"""torch.compile on emulated devices (the host target) and beside them (CPU compiles keep working).

Each test runs in a fresh interpreter: emulation is set up inside ``import torch``. Compiles are
slow on small machines, so each process compiles a handful of graphs at most.
"""

import json
import os

from conftest import REPO, cli_json, make_plugin, run_cli
from emulation_helpers import CHECKS, run_json

# The snippet: a compiled MLP matches eager on each device named in DEVICES.
SNIPPET = CHECKS + """
import warnings
import torch
from torchplug import TorchplugWarning
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.GELU(), torch.nn.Linear(256, 10))

def compiled_matches_eager(dev):
    m = model.to(dev); x = torch.randn(32, 64, device=dev)
    y = torch.compile(m)(x)
    torch.testing.assert_close(y.cpu(), m(x).cpu(), rtol=1e-4, atol=1e-4)
    compiled_grads = torch.autograd.grad(y.square().sum(), list(m.parameters()))
    eager_grads = torch.autograd.grad(m(x).square().sum(), list(m.parameters()))
    grads_match = all(torch.allclose(a.cpu(), b.cpu(), rtol=1e-4, atol=1e-4) for a, b in zip(compiled_grads, eager_grads))
    return [str(y.device), y.requires_grad, grads_match]

for dev in DEVICES:
    check(dev, lambda: compiled_matches_eager(dev))
print(json.dumps(RESULTS))
"""


def snippet(*devices: str) -> str:
    return f"DEVICES = {list(devices)!r}\n" + SNIPPET


def assert_all_ok(results: dict) -> None:
    failed = {name: r for name, r in results.items() if not r["ok"]}
    assert not failed, json.dumps(failed)[:6000]


def test_snippet_on_emulated_xpu_mps_cuda_and_cpu():
    results = run_json(snippet("xpu", "mps", "cuda", "cpu"), TORCHPLUG_EMULATE="xpu,mps,cuda")
    assert_all_ok(results)
    for dev in ("xpu:0", "mps:0", "cuda:0", "cpu"):  # training graphs: the compiled backward matches eager
        assert results[dev.split(":")[0]]["value"] == [dev, True, True]


def test_inductors_compile_workers_can_ask_every_emulated_device():
    # Each compile worker first reads the properties of every available device (pre_fork_setup); one
    # that raised killed the worker pool ("Attempting to use a closed pool" on a cold cache).
    code = """
import json, torch
from torch._inductor.async_compile import caching_device_properties
caching_device_properties()
print(json.dumps([torch.backends.mps.get_core_count(), torch.backends.mps.get_name()]))
"""
    cores, name = run_json(code, TORCHPLUG_EMULATE="xpu,mps,cuda")
    assert cores == 16 and "Apple M1 Pro" in name  # the default emulated mps model


def test_cpu_compiles_beside_emulated_cuda():
    code = snippet("cpu") + """
eager_backend = torch.compile(torch.softmax, backend="eager")(torch.randn(4, 8), -1)
print(json.dumps(RESULTS | {"eager": {"ok": True, "value": eager_backend.shape[-1]}}))
"""
    results = run_json(code, TORCHPLUG_EMULATE="cuda")
    assert_all_ok(results)
    assert results["eager"]["value"] == 8


def test_cpu_compiles_beside_two_emulated_gpu_types():
    # The CPU keeps Inductor's C++ codegen (cpp_fused kernels), not a GPU target, beside emulated GPUs.
    code = snippet("cpu") + """
from torch._inductor.utils import run_and_get_code
_, sources = run_and_get_code(torch.compile(lambda t: (t.sin() + 1).relu()), torch.randn(8))
print(json.dumps(RESULTS | {"kernels": {"ok": True, "value": [("cpp_fused" in s, "triton" in s) for s in sources]}}))
"""
    results = run_json(code, TORCHPLUG_EMULATE="xpu,mps")
    assert_all_ok(results)
    assert results["cpu"]["value"] == ["cpu", True, True] and results["kernels"]["value"] == [[True, False]]


def test_example_npu_plugin_compiles_forward_and_backward(tmp_path):
    # The example vendor plugin (docs/example-plugin) on torch's PrivateUse1 key, second device.
    make_plugin(tmp_path, "npu", "", target="torchplug_example:backend")
    # the example's spec reads its torch range from its own metadata, as an installed plugin would
    (tmp_path / "torchplug_example-0.1.0.dist-info").mkdir()
    (tmp_path / "torchplug_example-0.1.0.dist-info" / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: torchplug-example\nVersion: 0.1.0\nRequires-Dist: torch>=2.13,<2.16\n")
    code = CHECKS + """
import torch
def train_step():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.Tanh(), torch.nn.Linear(32, 1))
    reference = [p.detach().clone() for p in model.parameters()]
    x = torch.randn(8, 16)
    model.to("npu:1")
    torch.compile(model)(x.to("npu:1")).sum().backward()
    cpu_model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.Tanh(), torch.nn.Linear(32, 1))
    for p, r in zip(cpu_model.parameters(), reference):
        p.data.copy_(r)
    cpu_model(x).sum().backward()
    for p, q in zip(model.parameters(), cpu_model.parameters()):
        torch.testing.assert_close(p.grad.cpu(), q.grad, rtol=1e-4, atol=1e-5)
    return str(model[0].weight.grad.device)
check("train", train_step)
print(json.dumps(RESULTS))
"""
    path = os.pathsep.join([str(tmp_path), str(REPO / "docs" / "example-plugin")])
    results = run_json(code, path=path, TORCHPLUG_EMULATE="npu", TORCHPLUG_EMULATE_DEVICES="2")
    assert_all_ok(results)
    assert results["train"]["value"] == "npu:1"


def test_modes_on_emulated_xpu():
    code = CHECKS + """
import warnings
import torch
from torchplug import TorchplugWarning
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.GELU(), torch.nn.Linear(128, 10)).to("xpu:1")
x = torch.randn(32, 64, device="xpu:1")

def matches(compiled, *shapes):
    for n in shapes:
        xx = torch.randn(n, 64, device="xpu:1")
        torch.testing.assert_close(compiled(xx).cpu(), model(xx).cpu(), rtol=1e-4, atol=1e-4)
    return True

def backward():
    torch.compile(model)(x).pow(2).sum().backward()
    got = [p.grad.clone() for p in model.parameters()]
    model.zero_grad()
    model(x).pow(2).sum().backward()
    for g, p in zip(got, model.parameters()):
        torch.testing.assert_close(g.cpu(), p.grad.cpu(), rtol=1e-4, atol=1e-5)
    return str(got[0].device)

def warned(mode):
    torch._dynamo.reset()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", TorchplugWarning)
        matches(torch.compile(model, mode=mode), 32)
    return [str(w.message) for w in caught if issubclass(w.category, TorchplugWarning)]

check("dynamic", lambda: matches(torch.compile(model, dynamic=True), 5, 7, 33))
check("backward", backward)
check("max-autotune", lambda: warned("max-autotune"))
check("reduce-overhead", lambda: warned("reduce-overhead"))
torch._dynamo.reset()
check("cpp_wrapper", lambda: torch.compile(model, options={"cpp_wrapper": True})(x))
print(json.dumps(RESULTS))
"""
    results = run_json(code, TORCHPLUG_EMULATE="xpu", TORCHPLUG_EMULATE_DEVICES="2")
    assert_all_ok({k: v for k, v in results.items() if k != "cpp_wrapper"})
    assert results["backward"]["value"] == "xpu:1"
    for mode in ("max-autotune", "reduce-overhead"):
        assert any("without CUDA graphs" in m for m in results[mode]["value"]), results[mode]
    refused = results["cpp_wrapper"]
    assert not refused["ok"] and "cpp_wrapper" in refused["message"] and "aoti_torch_xpu_" in refused["message"]


def test_doctor_runs_the_compile_canary_on_emulated_devices():
    result = run_cli("doctor", "mps", TORCHPLUG_EMULATE="mps")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "compiled softmax+matmul+layer_norm matches eager on mps" in result.stdout


def test_list_shows_each_backends_codegen_target():
    def targets(**env: str) -> dict[str, str]:
        return {p["name"]: p["codegen"] for p in cli_json("list", **env)["plugins"]}

    plain = targets(TORCHPLUG_EMULATE="xpu,mps")
    assert plain["xpu"] == plain["mps"] == "inductor: host-cpp (emulated)"
    assert plain["cpu"] == "inductor: torch cpp (native)"
    assert plain["rocm"] == "inductor: none — the device is unavailable"
    fidelity = targets(TORCHPLUG_EMULATE="xpu,mps", TORCHPLUG_EMULATE_INDUCTOR="triton")
    assert fidelity["xpu"].startswith("inductor: triton-interpreter") and "slow" in fidelity["xpu"]
    assert fidelity["mps"].startswith("inductor: metal-capture")


def test_targets_refuse_a_torch_outside_the_verified_range(monkeypatch):
    from torchplug.codegen import patches
    from torchplug.codegen.host import HostCppTarget

    monkeypatch.setattr(patches.torch, "__version__", "2.16.0")
    status = HostCppTarget("xpu").status()
    assert status.startswith("inductor: none — torch 2.16.0 is outside the range") and patches.TORCH_RANGE in status
