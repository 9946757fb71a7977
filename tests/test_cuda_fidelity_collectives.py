"""Emulated cuda's collectives follow NCCL's rules (emulated xpu's XCCL's), and torch reports the
library as a GPU machine does: what DDP hooks, FSDP2 and HF accelerate ask of it (issue #29, item 2).

Real processes on 127.0.0.1, as in test_distributed.py; each job under a hard limit.
"""

import json
import shutil
import sys
from pathlib import Path

import pytest
import torch

from distributed_helpers import WORKERS, free_port, ok, run_launcher, run_ranks
from emulation_helpers import run_json

pytestmark = pytest.mark.filterwarnings("ignore")


@pytest.fixture(scope="module", autouse=True)
def built_extensions():
    """Compile the emulated runtime and torchplug.distributed's C++ part here, once, not inside each job's limit."""
    from torchplug.distributed import build
    from torchplug.emulation import build as emulation_build

    emulation_build.load()
    build.load()


# What each case of dist_workers/library_rules.py gives under the library's rules: the values
# (one entry, or one per rank), or the start of the error (with {lib}: NCCL, XCCL).
FLAT = [0.0, 1.0, 2.0, 3.0, 4.0, 5.0, 10.0, 11.0, 12.0, 13.0, 14.0, 15.0]
SCATTERED = ([[10.0, 12.0, 14.0], [16.0, 18.0, 20.0]], [[20.0, 24.0, 28.0], [32.0, 36.0, 40.0]])
LIBRARY_RULES = {
    # judged by element count: flat and stacked outputs (and inputs) work for a 2-D tensor
    "all_gather_into_tensor/flat": FLAT,
    "all_gather_into_tensor/stacked": [[[0.0, 1.0, 2.0], [3.0, 4.0, 5.0]], [[10.0, 11.0, 12.0], [13.0, 14.0, 15.0]]],
    "all_gather_into_tensor/concatenated": [[0.0, 1.0, 2.0], [3.0, 4.0, 5.0], [10.0, 11.0, 12.0], [13.0, 14.0, 15.0]],
    "all_gather_into_tensor/coalesced_flat": FLAT + [0.0, 0.0, 1.0, 1.0],
    "all_gather_into_tensor/wrong_numel": "ValueError: output tensor size must be equal to world_size times input "
                                          "tensor size (emulated {lib}: output of 13 elements, input of 6",
    "all_gather_into_tensor/wrong_dtype": "TypeError: output tensor must have the same type as input tensor",
    "reduce_scatter_tensor/flat_input": SCATTERED,
    "reduce_scatter_tensor/coalesced_flat": SCATTERED,
    "reduce_scatter_tensor/stacked_input": ([10.0, 12.0, 14.0], [16.0, 18.0, 20.0]),
    "reduce_scatter_tensor/wrong_numel": "ValueError: input tensor must be the same size as output size times world size",
    # reduce ops gloo lacks, as the library computes them
    "all_reduce/avg_float32": [1.5, 2.5],
    "all_reduce/avg_int64": [5, -5],  # the sum divided, toward zero
    "all_reduce/avg_bool": "TypeError: Cannot use ReduceOp.AVG with boolean inputs",
    "all_reduce/premul_sum_float32": [1.5, 4.0],
    "all_reduce/premul_sum_tensor_factor": [1.25, 4.0],
    "all_reduce/premul_sum_int64": "TypeError: PreMulSum Data type must be half, float, bfloat16 or double",
    "reduce_scatter_tensor/avg_bfloat16": ([1.5, 3.0], [4.5, 6.0]),
    "reduce_scatter_tensor/premul_sum": ([[1.5, 3.0], [1.0, 2.0, 3.0, 4.0]], [[4.5, 6.0], [2.0, 4.0, 6.0, 8.0]]),
    "reduce/avg": ([3.0], [0.0]),
    "all_reduce/sum_bool": [1, 1, 0],  # a logical or: bytes of 1, never 2
    "all_reduce/sum_bfloat16": [4.0],
    # what the library refuses and gloo would take, with the library's error
    "all_reduce/band": "ValueError: Cannot use ReduceOp.BAND with {lib}",
    "all_reduce/int16": "TypeError: Input tensor data type is not supported for {lib} process group: Short",
    "all_reduce/uint32": "TypeError: Input tensor data type is not supported for {lib} process group: UInt32",
    "all_reduce/noncontiguous": "ValueError: Tensors must be contiguous",
    "all_reduce/channels_last": [3.0] * 8,  # dense in its own memory format: the library takes it
    # fp8: moved as bytes everywhere; reduced by NCCL 2.24+ (e4m3fn, e5m2), never by XCCL
    "all_gather_into_tensor/float8_e4m3fn": [1.0, -0.5, 2.0, -0.5],
    "broadcast/float8_e5m2": [6.0],
    "all_reduce/float8_e4m3fn": [4.0, -4.0],
    "all_reduce/float8_e5m2fnuz": "RuntimeError: Unsupported Float8 type for NCCL reduction",
    # a group made with "gloo" keeps gloo's rules on the emulated device, as on a GPU
    "gloo_group/all_gather_into_tensor_flat": "RuntimeError: ProcessGroupGloo::allgather: invalid tensor size",
}
XCCL_DIFFERS = {
    "all_reduce/float8_e4m3fn": "RuntimeError: Float8 dtypes are not currently supported for XCCL reductions",
    "all_reduce/float8_e5m2fnuz": "RuntimeError: Float8 dtypes are not currently supported for XCCL reductions",
    "gloo_group/all_gather_into_tensor_flat": "ValueError: c10d::_allgather_base_ got xpu tensors, but process group",
}


def _expected(outcome, rank: int, library: str) -> str:
    if isinstance(outcome, str):
        return outcome.format(lib=library)
    return "ok " + repr(outcome[rank] if isinstance(outcome, tuple) else outcome)


@pytest.mark.parametrize("device_type, backend, library", [
    pytest.param("cuda", "nccl", "NCCL", id="cuda-nccl"),
    pytest.param("xpu", "xccl", "XCCL", id="xpu-xccl"),
])
def test_collectives_follow_the_native_librarys_rules(device_type, backend, library):
    expected = {**LIBRARY_RULES, **(XCCL_DIFFERS if library == "XCCL" else {})}
    for result in ok(run_ranks("library_rules", device_type, backend, TORCHPLUG_EMULATE=device_type, limit=180)):
        got = result["results"]
        assert got.keys() == expected.keys()
        wrong = {name: got[name] for name, outcome in expected.items()
                 if not got[name].startswith(_expected(outcome, result["rank"], library))}
        assert not wrong, f"rank {result['rank']}: {wrong}"


_IDENTITY = """
    import json, torch, torch.distributed as dist
    def attempt(fn):
        try:
            return fn()
        except Exception as err:
            return type(err).__name__
    print(json.dumps({
        "nccl": dist.is_nccl_available(), "xccl": dist.is_xccl_available(),
        "backend_nccl": dist.is_backend_available("nccl"),
        "nccl_version": attempt(lambda: list(torch.cuda.nccl.version())),
        "options": attempt(lambda: type(dist.ProcessGroupNCCL.Options(is_high_priority_stream=True)).__name__),
        "xccl_options": attempt(lambda: type(dist.ProcessGroupXCCL.Options()).__name__),
        "c10d_names": attempt(lambda: dist.distributed_c10d.ProcessGroupNCCL is dist.ProcessGroupNCCL),
        "single_process_nccl": torch.cuda.nccl.is_available([]),
        "timeout_s": attempt(lambda: dist.distributed_c10d._get_default_timeout("nccl").total_seconds()),
    }))
"""


@pytest.mark.parametrize("emulate, expected", [
    pytest.param("cuda", {"nccl": True, "xccl": False, "backend_nccl": True, "nccl_version": [2, 30, 7],
                          "options": "_Options", "xccl_options": "AttributeError", "c10d_names": True,
                          "single_process_nccl": False, "timeout_s": 600.0}, id="cuda"),
    pytest.param("rocm", {"nccl": True, "xccl": False, "backend_nccl": True, "nccl_version": [2, 27, 7],
                          "options": "_Options", "xccl_options": "AttributeError", "c10d_names": True,
                          "single_process_nccl": False, "timeout_s": 600.0}, id="rocm-rccl"),
    pytest.param("xpu", {"nccl": False, "xccl": True, "backend_nccl": False, "nccl_version": "AttributeError",
                         "options": "AttributeError", "xccl_options": "_Options", "c10d_names": "AttributeError",
                         "single_process_nccl": False, "timeout_s": 1800.0}, id="xpu-xccl"),
    # not emulated: torch.distributed answers as torch made it (a CPU build has neither library)
    pytest.param(None, {"nccl": False, "xccl": False, "backend_nccl": False, "nccl_version": "AttributeError",
                        "options": "AttributeError", "xccl_options": "AttributeError", "c10d_names": "AttributeError",
                        "single_process_nccl": False, "timeout_s": 1800.0}, id="not-emulated"),
])
def test_torch_reports_the_emulated_library_and_its_version(emulate, expected):
    if torch.version.cuda or torch.version.hip:
        pytest.skip("a CUDA/ROCm build has the real NCCL: torch's own answers stand (docs/distributed.md)")
    assert run_json(_IDENTITY, **({"TORCHPLUG_EMULATE": emulate} if emulate else {})) == expected


def test_ddp_comm_hooks_and_fsdp2_mixed_precision_train_as_on_the_cpu(tmp_path):
    """fp16 and bf16 compression, PowerSGD and FSDP2 with bf16 parameters (fp32 and bf16 reduction)
    on emulated cuda, in a group made with "nccl" and NCCL options, give the CPU's weights."""
    saved = {}
    for device, env in (("cuda", {"TORCHPLUG_EMULATE": "cuda"}), ("cpu", {})):
        saved[device] = tmp_path / f"{device}.pt"
        results = ok(run_ranks("comm_hooks", device, str(saved[device]), limit=240, **env))
        assert results[0]["cases"] == ["bf16_compress", "fp16_compress", "fsdp2_bf16_params_bf16_reduce",
                                       "fsdp2_bf16_params_fp32_reduce", "powerSGD"]
    cuda, cpu = torch.load(saved["cuda"]), torch.load(saved["cpu"])
    for case, weights in cpu.items():
        for name, value in weights.items():
            torch.testing.assert_close(cuda[case][name], value, rtol=1e-5, atol=1e-6, msg=f"{case}: {name}")


@pytest.mark.parametrize("emulate, backend, distributed_type", [
    pytest.param("cuda", "nccl", "MULTI_GPU", id="cuda"),
    pytest.param("xpu", "xccl", "MULTI_XPU", id="xpu"),  # accelerate picks xccl only where it is available
])
def test_accelerate_launch_multi_gpu_gathers_pads_and_compresses_gradients_in_bf16(tmp_path, emulate, backend,
                                                                                   distributed_type):
    """`accelerate launch --multi_gpu --num_processes 2` on emulated cuda: accelerate picks nccl and
    MULTI_GPU, registers DDP's bf16 compression hook, and gather / pad_across_processes (flat
    all_gather_into_tensor outputs) give what they give on GPUs. Emulated xpu likewise, with xccl."""
    pytest.importorskip("accelerate", reason="HF accelerate is not installed (pip install './[test]' installs it)")
    launcher = shutil.which("accelerate", path=str(Path(sys.executable).parent))
    assert launcher, "accelerate's launcher is not beside this interpreter"
    output = run_launcher(
        [launcher, "launch", "--multi_gpu", "--num_processes", "2", "--num_machines", "1", "--mixed_precision", "no",
         "--dynamo_backend", "no", "--main_process_ip", "127.0.0.1", "--main_process_port", str(free_port()),
         str(WORKERS / "accelerate_train.py"), str(tmp_path)],
        "accelerate launch", limit=240, TORCHPLUG_EMULATE=emulate, HF_HOME=str(tmp_path), OMP_NUM_THREADS="1")
    written = sorted(tmp_path.glob("rank*.json"))
    assert [p.name for p in written] == ["rank0.json", "rank1.json"], output[-4000:]
    ranks = [json.loads(p.read_text()) for p in written]
    for r in ranks:
        assert (r["device"], r["backend"], r["distributed_type"]) == (f"{emulate}:{r['rank']}", backend,
                                                                       f"DistributedType.{distributed_type}")
        assert r["comm_hook"] == "bf16_compress_hook"
        assert r["gathered"] == [[0.0] * 3, [0.0] * 3, [1.0] * 3, [1.0] * 3]
        assert r["padded_gathered"] == [[1.0, 1.0], [-1.0, -1.0], [2.0, 2.0], [2.0, 2.0]]
        assert r["weights_everywhere_equal"] and r["loss"] == r["loss"]  # in step, and not NaN
