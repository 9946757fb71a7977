"""What a CUDA machine answers, recorded on a real GPU, and compared with what emulated cuda answers.

Each probe asks one question CUDA code asks of its device (identity, memory statistics, the
shapes and edge values of results, what capture and collectives accept) and returns a JSON
value. `.ci/gpu` records the answers of a real GPU into fidelity_records/<model>-torch<version>.json
beside this file; tests/test_cuda_fidelity_records.py runs the same probes on emulated cuda as that
model and compares. A record is the judge: the emulation is changed to match it, or the
difference is listed in the record's "known" section with the reason.

    python -m torchplug_cuda.fidelity record OUT.json   # on a GPU: write the record
    python -m torchplug_cuda.fidelity compare RECORD.json  # on emulated cuda: print the differences
"""

import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

RECORDS = Path(__file__).resolve().parent / "fidelity_records"
PROBES: dict[str, Callable[[], Any]] = {}


def probe(function: Callable[[], Any]) -> Callable[[], Any]:
    PROBES[function.__name__] = function
    return function


def _layout(t: torch.Tensor) -> dict[str, Any]:
    return {"shape": list(t.shape), "stride": list(t.stride()), "dtype": str(t.dtype).removeprefix("torch.")}


@probe
def identity() -> dict[str, Any]:
    props = torch.cuda.get_device_properties()
    return {
        "capability": list(torch.cuda.get_device_capability()), "sms": props.multi_processor_count,
        "warp_size": props.warp_size, "threads_per_sm": props.max_threads_per_multi_processor,
        "registers_per_sm": props.regs_per_multiprocessor, "l2": props.L2_cache_size,
        "memory_gib": round(props.total_memory / (1 << 30)), "bf16": torch.cuda.is_bf16_supported(),
        "bf16_without_emulation": torch.cuda.is_bf16_supported(including_emulation=False),
    }


@probe
def test_helpers() -> dict[str, bool]:
    from torch.testing._internal import common_cuda

    names = ("SM80OrLater", "SM89OrLater", "SM90OrLater", "PLATFORM_SUPPORTS_FLASH_ATTENTION",
             "PLATFORM_SUPPORTS_MEM_EFF_ATTENTION", "PLATFORM_SUPPORTS_FP8", "PLATFORM_SUPPORTS_BF16")
    return {name: bool(getattr(common_cuda, name)) for name in names if hasattr(common_cuda, name)}


@probe
def memory_stat_keys() -> list[str]:
    x = torch.ones(1000, device="cuda")
    keys = sorted(torch.cuda.memory_stats())
    del x
    return keys


@probe
def memory_of_a_small_tensor() -> dict[str, int]:
    before = torch.cuda.memory_allocated()
    x = torch.ones(1000, device="cuda")
    return {"allocated": torch.cuda.memory_allocated() - before, "reserved_at_least": int(torch.cuda.memory_reserved() >= 4000)}


@probe
def result_layouts() -> dict[str, Any]:
    x = torch.randn(2, 3, 4, 5, device="cuda")
    a = torch.randn(4, 3, device="cuda")
    u, s, vh = torch.linalg.svd(a, full_matrices=False)
    bn = torch.ops.aten._native_batch_norm_legit_no_training(
        x, torch.ones(3, device="cuda"), torch.zeros(3, device="cuda"), torch.zeros(3, device="cuda"),
        torch.ones(3, device="cuda"), 0.1, 1e-5)
    training = torch.ops.aten.native_batch_norm(x, None, None, None, None, True, 0.1, 1e-5)
    return {
        "rfftn": _layout(torch.fft.rfftn(x, dim=(-3, -2, -1))),
        "irfftn": _layout(torch.fft.irfftn(torch.fft.rfftn(x, dim=(-3, -2, -1)), dim=(-3, -2, -1))),
        "svd_u": _layout(u), "svd_vh": _layout(vh),
        "batch_norm_eval_save_mean": _layout(bn[1]), "batch_norm_training_save_mean": _layout(training[1]),
    }


@probe
def edge_values() -> dict[str, Any]:
    device = "cuda"
    return {
        "kaiser_window_inf_beta": torch.kaiser_window(5, True, float("inf"), device=device).cpu().tolist(),
        "ldexp_int64_exponent": torch.ldexp(torch.tensor([1.0], device=device),
                                            torch.tensor([1 << 33], device=device)).cpu().tolist(),
        "histc_dtype": str(torch.histc(torch.tensor([1, 2, 1], dtype=torch.float32, device=device), bins=3).dtype),
    }


@probe
def private_bindings() -> list[str]:
    names = ("_cuda_getDevice", "_cuda_setDevice", "_cuda_setStream", "_cuda_getCurrentStream", "_cuda_ipc_collect",
             "_cuda_sleep", "_cuda_getAllocatorBackend", "_cuda_getCurrentBlasHandle", "_cuda_memoryStats",
             "_cuda_isCurrentStreamCapturing", "_cuda_getArchFlags")
    return [name for name in names if hasattr(torch._C, name)]


@probe
def capture_rejects_synchronize() -> str:
    graph, x = torch.cuda.CUDAGraph(), torch.ones(4, device="cuda")
    stream = torch.cuda.Stream()
    with torch.cuda.stream(stream):
        try:
            graph.capture_begin()
            (x * 2).sum().item()  # a device-to-host sync inside capture
        except Exception as err:
            return type(err).__name__
        finally:
            try:
                graph.capture_end()
            except Exception:
                pass
    return "accepted"


def record() -> dict[str, Any]:
    """Every probe's answer on this process's cuda device, or the type and message of what it raised."""
    answers = {}
    for name, function in PROBES.items():
        try:
            answers[name] = {"ok": True, "value": function()}
        except Exception as err:
            answers[name] = {"ok": False, "error": type(err).__name__, "message": str(err)[:300]}
    return {"torch": torch.__version__, "device": torch.cuda.get_device_name(), "answers": answers, "known": {}}


def differences(recorded: dict[str, Any], emulated: dict[str, Any]) -> dict[str, str]:
    """Probe name -> how emulated cuda's answer differs from the record's, for probes the record does not
    list as known differences. A known entry names a probe, or one key of a probe's answer ("probe.key")."""
    found, known = {}, recorded.get("known", {})
    for name, answer in recorded["answers"].items():
        if name in known:
            continue
        mine = emulated["answers"].get(name)
        ignored = {k.split(".", 1)[1] for k in known if k.startswith(f"{name}.")}
        if ignored and isinstance(answer, dict) and isinstance(mine, dict):
            answer, mine = ({**a, "value": {k: v for k, v in a.get("value", {}).items() if k not in ignored}}
                            for a in (answer, mine))
        if json.dumps(mine, sort_keys=True) != json.dumps(answer, sort_keys=True):  # NaN equals NaN here
            found[name] = f"GPU: {json.dumps(answer)[:400]} | emulated: {json.dumps(mine)[:400]}"
    return found


def main(argv: list[str]) -> int:
    if len(argv) != 2 or argv[0] not in ("record", "compare"):
        print(__doc__, file=sys.stderr)
        return 2
    # Run as `python -m torchplug_cuda.fidelity`, this plugin was still being imported when torch
    # autoloaded it: the next torchplug call finishes loading it (and sets up its emulation).
    from torchplug.entrypoints import discover

    discover()
    if argv[0] == "record":
        Path(argv[1]).write_text(json.dumps(record(), indent=1, sort_keys=True) + "\n")
        return 0
    found = differences(json.loads(Path(argv[1]).read_text()), record())
    for name, difference in found.items():
        print(f"{name}: {difference}")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
