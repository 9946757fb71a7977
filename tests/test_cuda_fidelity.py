"""Emulated cuda answers what a real CUDA machine of one model answers (issue #29's findings 1, 4 and 5).

CUDA code picks bf16, TF32, flash attention or a kernel by the GPU's identity, reads memory
statistics, and torch's own test harness calls private torch._C._cuda_* bindings. Each test runs a
fresh interpreter with TORCHPLUG_EMULATE=cuda (emulation is set up inside `import torch`), on the
CPU wheel and on CUDA builds alike. The collectives (finding 2), CUDA graphs (3) and CUDA's results
(6, 7) have files of their own.
"""

import pytest

from conftest import cli_json
from emulation_helpers import CHECKS, run_json

pytestmark = pytest.mark.filterwarnings("ignore")

# Asked before any tensor exists: torch caches some answers (is_bf16_supported's probe) on first ask.
IDENTITY = CHECKS + """
import torch
from torch.testing._internal import common_cuda

def first_answers():
    props = torch.cuda.get_device_properties()
    return {"bf16": torch.cuda.is_bf16_supported(), "capability": list(torch.cuda.get_device_capability()),
            "arch_list": torch.cuda.get_arch_list(), "name": torch.cuda.get_device_name(),
            "sms": props.multi_processor_count, "memory": props.total_memory, "mem_get_info_total": torch.cuda.mem_get_info()[1],
            "l2": props.L2_cache_size, "tf32": torch.cuda.is_tf32_supported() if hasattr(torch.cuda, "is_tf32_supported") else None,
            "SM80OrLater": bool(common_cuda.SM80OrLater), "SM90OrLater": bool(common_cuda.SM90OrLater),
            "flash": bool(common_cuda.PLATFORM_SUPPORTS_FLASH_ATTENTION),
            "mem_efficient": bool(common_cuda.PLATFORM_SUPPORTS_MEM_EFF_ATTENTION)}
check("first_answers", first_answers)

def bf16_autocast_after_asking_first():
    with torch.autocast("cuda", dtype=torch.bfloat16):
        y = torch.randn(4, 8, device="cuda") @ torch.randn(8, 8, device="cuda")
    return str(y.dtype)
check("bf16_autocast", bf16_autocast_after_asking_first)
print(json.dumps(RESULTS))
"""


def value(results, name):
    record = results[name]
    assert record["ok"], f"{name} raised {record['error']}: {record['message']}\n{record['trace']}"
    return record["value"]


def test_emulated_cuda_is_an_a100_from_the_first_question():
    results = run_json(IDENTITY, TORCHPLUG_EMULATE="cuda")
    answers = value(results, "first_answers")
    assert answers["bf16"] is True and answers["capability"] == [8, 0] and "sm_80" in answers["arch_list"]
    assert "A100" in answers["name"] and "emulated" in answers["name"]
    assert answers["sms"] == 108 and answers["memory"] == answers["mem_get_info_total"] == 80 << 30
    assert answers["l2"] == 40 << 20 and answers["tf32"] in (True, None)
    assert answers["SM80OrLater"] and not answers["SM90OrLater"] and answers["flash"] and answers["mem_efficient"]
    assert value(results, "bf16_autocast") == "torch.bfloat16"


def test_torchplug_emulate_gpu_chooses_the_model():
    answers = value(run_json(IDENTITY, TORCHPLUG_EMULATE="cuda", TORCHPLUG_EMULATE_GPU="h100"), "first_answers")
    assert answers["capability"] == [9, 0] and answers["sms"] == 132 and answers["SM90OrLater"]
    assert "H100" in answers["name"] and "emulated" in answers["name"]
    older = value(run_json(IDENTITY, TORCHPLUG_EMULATE="cuda", TORCHPLUG_EMULATE_GPU="cuda=t4"), "first_answers")
    assert older["capability"] == [7, 5] and older["bf16"] is False and not older["SM80OrLater"] and not older["flash"]


def test_the_memory_capacity_wins_over_the_models_memory():
    answers = value(run_json(IDENTITY, TORCHPLUG_EMULATE="cuda", TORCHPLUG_EMULATE_MEMORY="2GiB"), "first_answers")
    assert answers["memory"] == answers["mem_get_info_total"] == 2 << 30


def test_an_unknown_model_fails_the_plugin_naming_the_models_it_has():
    rows = {row["name"]: row for row in cli_json("list", TORCHPLUG_EMULATE="cuda", TORCHPLUG_EMULATE_GPU="h200")["plugins"]}
    assert rows["cuda"]["status"] == "failed"
    assert "no model 'h200'" in rows["cuda"]["reason"] and "a100, h100" in rows["cuda"]["reason"]
    assert "TORCHPLUG_EMULATE_GPU=cuda=a100" in rows["cuda"]["fix"]


def test_a_bare_model_applies_to_the_backend_that_has_it():
    code = """
import json, torch
print(json.dumps([torch.cuda.get_device_name(), torch.xpu.get_device_name()]))
"""
    cuda_name, xpu_name = run_json(code, TORCHPLUG_EMULATE="cuda,xpu", TORCHPLUG_EMULATE_GPU="h100")
    assert "H100" in cuda_name and "Max 1550" in xpu_name  # xpu keeps its default
    rocm = run_json("import json, torch; print(json.dumps(torch.cuda.get_device_properties().gcnArchName))",
                    TORCHPLUG_EMULATE="rocm")
    assert rocm == "gfx942:sramecc+:xnack-"


TOOLING = CHECKS + """
import torch
x = torch.ones(1000, device="cuda")

def memory():
    summary = torch.cuda.memory_summary()
    return {"summary_has_usage": "Allocated memory" in summary,
            "submodule_agrees": torch.cuda.memory.memory_allocated() == torch.cuda.memory_allocated() == 4096,
            "small_pool": torch.cuda.memory_stats()["allocated_bytes.small_pool.current"],
            "reserved": torch.cuda.memory_reserved() >= torch.cuda.memory_allocated()}
check("memory", memory)

def rng():
    torch.cuda.manual_seed(7)
    state = torch.cuda.random.get_rng_state()
    first = torch.rand(3, device="cuda")
    torch.cuda.random.set_rng_state(state)
    return [torch.equal(first, torch.rand(3, device="cuda")), len(torch.cuda.default_generators)]
check("rng", rng)

def nvtx():
    depth = torch.cuda.nvtx.range_push("outer")
    with torch.cuda.nvtx.range("inner"):
        pass
    torch.cuda.nvtx.mark("here")
    return [depth, torch.cuda.nvtx.range_pop()]
check("nvtx", nvtx)

# What torch's own test harness (CudaNonDefaultStream) and torch.cuda's Python call.
def private_bindings():
    before = torch._C._cuda_getCurrentStream(0)
    side = torch.cuda.Stream()
    torch._C._cuda_setStream(stream_id=side.stream_id, device_index=side.device_index, device_type=side.device_type)
    switched = torch.cuda.current_stream().stream_id == side.stream_id
    torch._C._cuda_setStream(stream_id=before[0], device_index=before[1], device_type=before[2])
    torch._C._cuda_setDevice(0)
    torch.cuda.ipc_collect()
    torch.cuda._sleep(1000)
    return {"switched": switched, "device": torch._C._cuda_getDevice(), "backend": torch._C._cuda_getAllocatorBackend(),
            "blas_handle": torch.cuda.current_blas_handle()}
check("private_bindings", private_bindings)
print(json.dumps(RESULTS))
"""


@pytest.fixture(scope="module")
def tooling():
    return run_json(TOOLING, TORCHPLUG_EMULATE="cuda")


def test_memory_statistics_carry_torchs_keys_and_the_submodules_agree(tooling):
    # a GPU counts 512-byte blocks: a 4000-byte tensor is 4096 (recorded on the H100)
    assert value(tooling, "memory") == {"summary_has_usage": True, "submodule_agrees": True, "small_pool": 4096,
                                        "reserved": True}


def test_torch_cuda_random_reproduces_through_the_default_generators(tooling):
    assert value(tooling, "rng") == [True, 1]


def test_nvtx_answers_as_without_a_profiling_tool(tooling):
    assert value(tooling, "nvtx") == [-2, -2]  # NVTX_NO_PUSH_POP_TRACKING, as CUDA builds answer with no tool attached


def test_torchs_private_cuda_bindings_answer(tooling):
    assert value(tooling, "private_bindings") == {"switched": True, "device": 0, "backend": "native", "blas_handle": 0}
