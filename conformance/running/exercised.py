"""Which ATen overloads the cases exercise on the device, against the overloads relevant to the backend.

Relevant: every overload with a kernel for the backend's dispatch key and, on an emulated device, every
overload with a CPU kernel (the emulated runtime runs those on device memory). Exercised: the overloads
that reached the device's dispatch key during a case (composite ops arrive decomposed), as the emulated
runtime notes them in C++ (emulation/csrc/dispatched.cpp). A TorchDispatchMode would see the same
calls, but it changes what it watches: under one, torch's own linalg.matrix_rank(out=) returns
garbage and sgn's backward crashed a worker. So coverage is measured on emulated devices; on a native
device the report has none.
"""

import re
from collections import Counter
from typing import Any

import torch

# Overloads no conformance case can reach on a device that holds strided tensors: they take or make
# sparse, quantized, MKL-DNN or nested tensors, or exist for one vendor library. (Quantization and
# packing helpers that take and give strided tensors, _fake_quantize_*, _weight_int8pack_mm,
# _dyn_quant_*, mkldnn_rnn_layer, ..., are in reach: aten_db.py calls them.)
_OUT_OF_REACH = re.compile(
    r"^aten::(_?sparse|.*_sparse|.*sparse_|_to_sparse|to_sparse|_coalesce|coalesce|_nnz|_values|_indices|"
    r"indices|values|crow_indices|col_indices|ccol_indices|row_indices|_spdiags|"
    r"_?quantize_per|quantized_|.*_quantized|q_|_make_per|int_repr|dequantize|_empty_affine|"
    r"_empty_per_channel|to_mkldnn|_mkldnn|mkldnn_(?!rnn_layer)|_nnpack|_nested_(?!compute_contiguous)|nested_|"
    r"_fbgemm|fbgemm|_cslt|_autocast|_cudnn|cudnn|miopen|_use_cudnn|_mps|_has_compatible)"
)
# Overloads that reach a device only under other names: an implicit composite kernel (mish_backward,
# native_channel_shuffle) serves every device without a kernel of its own, so only the CPU sees them by
# name. (The emulated runtime routes ops with a CPU and an explicit composite kernel to the CPU kernel,
# except those it keeps on the composite as GPUs run them: emulation/csrc/composites.cpp.)
_KEPT_COMPOSITE = frozenset({"aten::narrow_copy"})


class Recorder:
    """The overloads the emulated runtime saw on the device's key, handed out as they come."""

    def __init__(self) -> None:
        from ...emulation.runtime import ensure

        self._ext = ensure()
        self._ext.record_dispatches(True)

    def fresh(self) -> list[str]:
        """The overloads first dispatched to the device since the last call."""
        return list(self._ext.take_dispatched())


def relevant_overloads(dispatch_key: str) -> list[str]:
    """The ATen overloads an emulated backend serves: a kernel for its dispatch key, or a CPU kernel."""
    names = set(torch._C._dispatch_get_registrations_for_dispatch_key(dispatch_key))
    names |= set(torch._C._dispatch_get_registrations_for_dispatch_key("CPU"))
    return sorted(n for n in names if n.startswith("aten::"))


# torch's own test fixtures (_foobar, _test_optional_intlist, ...): no program calls them, aten_db.py does.
_TEST_ONLY = re.compile(r"^aten::(_foobar|_test_)")


def _composite(overload: str) -> bool:
    return overload in _KEPT_COMPOSITE or torch._C._dispatch_has_kernel_for_dispatch_key(
        overload, "CompositeImplicitAutograd")


def why_unexercised(overload: str) -> str:
    if _OUT_OF_REACH.match(overload):
        return "out of reach: sparse, quantized, MKL-DNN, nested or vendor-library overloads"
    if _composite(overload):
        return "out of reach: a composite kernel serves every device but the CPU (which has its own)"
    if _TEST_ONLY.match(overload):
        return "a torch test-only op no case calls"
    if "_backward" in overload and overload.endswith(".grad_input"):
        return "the out= form of a backward kernel no case calls"
    if re.search(r"_backward|_backward_", overload):
        return "a backward kernel no case reached"
    if overload.endswith((".out", "_out")) or ".out" in overload or "_out" in overload.split(".")[-1]:
        return "an out= overload no out case reached"
    return "no case dispatches to it"


def audit(relevant: list[str], exercised: set[str]) -> dict[str, Any]:
    """The coverage section of report.json: the percentage, and every unexercised overload with why."""
    missing = {name: why_unexercised(name) for name in relevant if name not in exercised}
    in_reach = [name for name in relevant if not missing.get(name, "").startswith("out of reach")]
    hit = len(relevant) - len(missing)
    return {
        "relevant": len(relevant), "exercised": hit,
        "percent": round(100.0 * hit / len(relevant), 1) if relevant else 0.0,
        "in_reach": len(in_reach),
        "percent_in_reach": round(100.0 * hit / len(in_reach), 1) if in_reach else 0.0,
        "reasons": dict(Counter(missing.values()).most_common()),
        "unexercised": missing,
        "exercised_overloads": sorted(exercised),
    }
