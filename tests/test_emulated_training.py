"""CUDA training code on emulated cuda (and rocm's emulated 'cuda'), on the CPU wheel and on CUDA builds.

Each run is a real process with TORCHPLUG_EMULATE set (emulation is set up inside `import torch`),
and each trains examples/train.py, an ordinary CUDA script, to the same weights as the same steps on
the CPU, computed here with emulation off.
"""

import importlib.util
import sys

import pytest
import torch

from conftest import REPO, cli_json, run_process, clean_env
from emulation_helpers import CHECKS, run_json, value

pytestmark = pytest.mark.filterwarnings("ignore")

EXAMPLE = REPO / "examples" / "train.py"


def _example():
    spec = importlib.util.spec_from_file_location("torchplug_train_example", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _trained_on_emulated(tmp_path, emulate: str, *args: str) -> dict:
    saved = tmp_path / "weights.pt"
    run_process([sys.executable, EXAMPLE, *args, "--save", saved], env=clean_env(TORCHPLUG_EMULATE=emulate), cwd="/")
    return torch.load(saved)


@pytest.mark.parametrize("emulate, amp, compiled", [
    pytest.param("cuda", None, False, id="cuda-fp32-adamw-clipping"),
    pytest.param("cuda", "fp16", False, id="cuda-amp-fp16-gradscaler"),
    pytest.param("cuda", "bf16", False, id="cuda-autocast-bf16"),
    pytest.param("cuda", None, True, id="cuda-compiled"),
    pytest.param("rocm", "fp16", False, id="rocm-amp-fp16-gradscaler"),
    pytest.param("rocm", None, True, id="rocm-compiled"),
])
def test_cuda_training_script_matches_the_same_steps_on_the_cpu(tmp_path, emulate, amp, compiled):
    args = [*(["--amp", amp] if amp else []), *(["--compile"] if compiled else [])]
    device = _trained_on_emulated(tmp_path, emulate, *args)
    cpu = _example().train("cpu", amp=amp, compile=compiled)
    assert device.keys() == cpu.keys()
    for name in cpu:
        # The emulated device runs the CPU's kernels: only compiled graphs may round differently.
        torch.testing.assert_close(device[name], cpu[name], rtol=1e-5, atol=1e-6, msg=name)


CUDA_RUNTIME = CHECKS + """
import torch
import torch.nn.functional as F
from torchplug.emulation import runtime

def answers():
    return {"available": torch.cuda.is_available(), "count": torch.cuda.device_count(),
            "name": torch.cuda.get_device_name(1), "accelerator": str(torch.accelerator.current_accelerator()),
            "cudnn": torch.backends.cudnn.is_available(), "hooks": runtime.cuda_hooks_state()}
torch.ones(1, device="cuda")
check("answers", answers)

# What autocast("cuda") casts: CUDA's op lists, not the CPU's (which keeps softmax and layer_norm
# in float16 and has no float32 rule for exp).
def autocast_dtypes():
    x, w = torch.randn(4, 8, device="cuda"), torch.randn(8, 8, device="cuda")
    with torch.autocast("cuda", dtype=torch.float16):
        h = x @ w
        out = {"matmul": h, "linear": F.linear(x, w), "softmax": torch.softmax(h, -1),
               "layer_norm": F.layer_norm(h, (8,)), "exp": torch.exp(h), "mse_loss": F.mse_loss(h, h),
               "relu": torch.relu(h), "softmax_to_float": torch.softmax(h, -1, dtype=torch.float32)}
    return {name: str(t.dtype).removeprefix("torch.") for name, t in out.items()}
check("autocast_dtypes", autocast_dtypes)

# A step whose gradients are inf is skipped, and the scale halves; the next step applies.
def grad_scaler_skips_inf():
    model = torch.nn.Linear(4, 1).to("cuda")
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    scaler = torch.amp.GradScaler("cuda", init_scale=1024.0)
    before = model.weight.detach().clone()
    steps = []
    for poison in (True, False):
        with torch.autocast("cuda", dtype=torch.float16):
            loss = model(torch.ones(2, 4, device="cuda")).float().sum()
        optimizer.zero_grad()
        scaler.scale(loss).backward()
        if poison:
            model.weight.grad[0, 0] = float("inf")
        scaler.step(optimizer)
        scaler.update()
        steps.append([torch.equal(model.weight.detach(), before), scaler.get_scale()])
    return steps
check("grad_scaler", grad_scaler_skips_inf)

def pinned():
    host = torch.arange(6.0).pin_memory()
    on_device = host.to("cuda", non_blocking=True)
    back = (on_device * 2).to("cpu", non_blocking=True)
    torch.cuda.synchronize()
    return [host.is_pinned(), back.tolist()]
check("pinned", pinned)

def storages():
    s = torch.UntypedStorage(8, device="cuda:1")
    torch.empty(0, dtype=torch.uint8, device="cuda:1").set_(s).copy_(torch.arange(8, dtype=torch.uint8))
    s.resize_(4)
    kept = s.tolist()
    s.resize_(0)
    s.resize_(16)
    return [str(s.device), kept, s.nbytes()]
check("storages", storages)

def generator():
    g = torch.Generator(device="cuda").manual_seed(3)
    return torch.equal(torch.randn(5, device="cuda", generator=g).cpu(), torch.randn(5, generator=torch.Generator().manual_seed(3)))
check("generator", generator)
print(json.dumps(RESULTS))
"""


@pytest.fixture(scope="module")
def cuda_runtime():
    return run_json(CUDA_RUNTIME, TORCHPLUG_EMULATE="cuda", TORCHPLUG_EMULATE_DEVICES="2")


def test_torch_cuda_answers_as_a_cuda_build_with_two_gpus(cuda_runtime):
    answers = value(cuda_runtime, "answers")
    assert answers["available"] and answers["count"] == 2 and answers["accelerator"] == "cuda"
    assert "emulated" in answers["name"]
    assert answers["cudnn"] is False  # nothing routes CPU kernels to a cuDNN the CPU wheel lacks
    assert answers["hooks"] == "emulated"


def test_autocast_on_emulated_cuda_casts_what_cuda_casts(cuda_runtime):
    assert value(cuda_runtime, "autocast_dtypes") == {
        "matmul": "float16", "linear": "float16", "softmax": "float32", "layer_norm": "float32",
        "exp": "float32", "mse_loss": "float32", "relu": "float16", "softmax_to_float": "float32",
    }


def test_grad_scaler_skips_the_step_with_inf_gradients_and_halves_the_scale(cuda_runtime):
    assert value(cuda_runtime, "grad_scaler") == [[True, 512.0], [False, 512.0]]


def test_pinned_memory_and_non_blocking_copies_with_only_cuda_emulated(cuda_runtime):
    assert value(cuda_runtime, "pinned") == [True, [0.0, 2.0, 4.0, 6.0, 8.0, 10.0]]


def test_untyped_storages_are_created_and_resized_on_emulated_cuda(cuda_runtime):
    assert value(cuda_runtime, "storages") == ["cuda:1", [0, 1, 2, 3], 16]


def test_cuda_generators_sample_like_a_cpu_generator_with_the_same_seed(cuda_runtime):
    assert value(cuda_runtime, "generator") is True


NOT_EMULATED = """
import json, torch
from torchplug.emulation import runtime
x = torch.ones(2, device="xpu", requires_grad=True) if torch.xpu.is_available() else torch.ones(2, requires_grad=True)
x.sum().backward()
print(json.dumps([torch.cuda.is_available(), torch.cuda.device_count(), str(torch.accelerator.current_accelerator()),
                  runtime.cuda_hooks_state(), str(x.grad.device)]))
"""


@pytest.mark.parametrize("emulate, accelerator, grad_device", [
    pytest.param("", "None", "cpu", id="nothing-emulated"),
    pytest.param("xpu", "xpu", "xpu:0", id="xpu-emulated"),
])
def test_without_emulated_cuda_torch_keeps_its_own_cuda_hooks(emulate, accelerator, grad_device):
    # Stock torch: a CUDA build reports cuda as its accelerator even without a GPU. It mutes its hooks
    # only once another emulated type needs the accelerator slot.
    cuda_build = bool(torch.version.cuda or torch.version.hip)
    hooks = "muted" if emulate and cuda_build else "torch"
    accelerator = "cuda" if cuda_build and not emulate else accelerator
    assert run_json(NOT_EMULATED, TORCHPLUG_EMULATE=emulate) == [False, 0, accelerator, hooks, grad_device]


def test_torchplug_list_says_that_emulated_cuda_takes_torchs_cuda_hooks():
    rows = {row["name"]: row for row in cli_json("list", TORCHPLUG_EMULATE="cuda")["plugins"]}
    assert "CUDA hooks" in rows["cuda"]["reason"] or "CUDA kernels, hooks" in rows["cuda"]["reason"]


def test_generators_can_be_made_before_the_first_device_tensor():
    code = """
import json, torch
generators = {d: torch.Generator(device=d).manual_seed(1) for d in ("cuda", "xpu", "mps")}
expected = torch.randn(2, generator=torch.Generator().manual_seed(1))
print(json.dumps({d: torch.equal(torch.randn(2, device=d, generator=g).cpu(), expected) for d, g in generators.items()}))
"""
    assert run_json(code, TORCHPLUG_EMULATE="cuda,xpu,mps") == {"cuda": True, "xpu": True, "mps": True}
