"""torch.compile: fp16 CPU GEMMs in Inductor graphs call torchplug's kernels in every wrapper mode.

Inductor's default Python wrapper calls `extern_kernels.mm(..., out=buf)`, which goes through the
dispatcher and so reaches torchplug's kernels anyway. Its C++ wrapper (`cpp_wrapper=True`) calls
torch's kernels through C shims (`at::cpu::mm_out`) that bypass the dispatcher. A post-grad pass
therefore rewrites float16 CPU mm / addmm / bmm / baddbmm nodes, and fp32 / bf16 / fp16 CPU
weight-only int8 / int4 products (_weight_int8pack_mm, _weight_int4pack_mm_for_cpu), to the
`torchplug_cpu::` ops (same schemas), which both wrappers call through the dispatcher. AOTInductor packages are not rewritten,
so they stay portable to machines without torchplug (and run torch's fp16 GEMM).

The same pass groups skinny fp16 products that share their input (a decode step's q / k / v
projections, its gate / up projections: a few rows against weights) into one
`torchplug_cpu::mm_group` call, which streams all their weights in one parallel region: the thread
pool wakes once, the threads split the group's bytes evenly, and the Python wrapper makes one call
instead of three. Eager mode cannot do this, as each F.linear is its own call.

Importing Inductor costs over a second, so the pass is installed when Inductor's config module is
first imported, not inside ``import torch``. Passes the user set before are kept and run first.
"""

import hashlib
import operator
import threading
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import torch

from torchplug.codegen.imports import after_import

_CONFIG = "torch._inductor.config"
# In the pass's cache key: a graph cached by an older version of this file is never reused.
_SOURCE_HASH = hashlib.sha256(Path(__file__).read_bytes()).hexdigest()[:16]
_GEMMS = ("mm", "addmm", "bmm", "baddbmm")
_QUANT_MMS = ("_weight_int8pack_mm", "_weight_int4pack_mm_for_cpu")
_QUANT_DTYPES = (torch.float32, torch.bfloat16, torch.float16)  # the activations kernels.py registers them for
_lock = threading.Lock()
_kernels_loaded: Callable[[], bool] | None = None  # kernels.loaded: whether the GEMM ops are registered now


def install_when_inductor_loads(kernels_loaded: Callable[[], bool]) -> None:
    """Install the pass into Inductor's config now if it is imported, else right after it is.
    `kernels_loaded` tells the pass whether torchplug-cpu's GEMM ops are registered when it runs."""
    global _kernels_loaded
    with _lock:
        if _kernels_loaded is not None:
            return
        _kernels_loaded = kernels_loaded
    after_import(_CONFIG, _install, "torchplug-cpu's Inductor pass (compiled fp16 GEMMs under cpp_wrapper run torch's kernels)")


def _install(config: ModuleType) -> None:
    from torch._inductor.custom_graph_pass import CustomGraphPass, get_custom_graph_passes

    class Fp16GemmPass(CustomGraphPass):
        def __call__(self, graph: torch.fx.Graph) -> None:
            if rewrite_products(graph):
                group_skinny_gemms(graph)

        def uuid(self) -> Any:  # part of Inductor's FX-graph cache key
            from torch._inductor.cpu_vec_isa import pick_vec_isa
            from torch._inductor.virtualized import V

            # The vector ISA Inductor writes its C++ kernels for, which its own key leaves out (torch
            # 2.13-2.15): a graph cached under AVX-512 was served under ATEN_CPU_CAPABILITY=avx2, its
            # 32-lane fp16 loops then built with AVX2's 16-lane vectors, and it computed NaNs.
            return ("torchplug-cpu-fp16-gemm", _SOURCE_HASH, _kernels_loaded(), V.aot_compilation, str(pick_vec_isa()))

    _register_fake_kernels()
    # Inductor runs a list of post-grad passes in order: any the user set stay, unchanged, first.
    config.post_grad_custom_post_pass = [*get_custom_graph_passes(config.post_grad_custom_post_pass), Fp16GemmPass()]


def rewrite_products(graph: torch.fx.Graph) -> int:
    """Point float16 CPU mm/addmm/bmm/baddbmm nodes, and fp32 / bf16 / fp16 CPU weight-only int8 /
    int4 products, at torchplug_cpu's ops; returns how many GEMMs it rewrote.

    AOTInductor packages are left alone: rewritten, they would only run where torchplug-cpu is
    loaded (and torch 2.13's AOTInductor proxy executor rejects these ops' Scalar arguments).
    """
    from torch._inductor.virtualized import V

    if _kernels_loaded is None or not _kernels_loaded() or V.aot_compilation:
        return 0
    ours = {getattr(torch.ops.aten, name).default: (getattr(torch.ops.torchplug_cpu, name).default, dtypes)
            for names, dtypes in ((_GEMMS, (torch.float16,)), (_QUANT_MMS, _QUANT_DTYPES)) for name in names}
    rewritten = 0
    for node in graph.nodes:
        value = node.meta.get("val")
        if (node.op == "call_function" and node.target in ours and isinstance(value, torch.Tensor)
                and value.dtype in ours[node.target][1] and value.device.type == "cpu"):
            rewritten += node.target.__name__.split(".")[0] in _GEMMS
            node.target = ours[node.target][0]
    return rewritten


# Rows up to which a product is skinny (gemm.cpp's kSkinnyDotRows): its weight streams from memory.
SKINNY_ROWS = 16
_WEIGHT_VIEWS = ("permute", "t", "transpose")
_INPUT_VIEWS = ("view", "reshape", "_unsafe_view")


def group_skinny_gemms(graph: torch.fx.Graph) -> int:
    """Replace torchplug_cpu.mm nodes of a few fp16 rows that share their input, with weights that
    are graph inputs (or their transposes), by one torchplug_cpu.mm_group each; returns how many
    groups were made."""
    mm = torch.ops.torchplug_cpu.mm.default
    by_input: dict[Any, list[torch.fx.Node]] = {}
    for node in graph.nodes:
        if node.target is mm and _skinny_by_weight(node):
            by_input.setdefault(_input_key(node.args[0]), []).append(node)
    groups = [nodes for nodes in by_input.values() if len(nodes) > 1]
    for nodes in groups:
        first = nodes[0]
        for node in nodes[1:]:  # a weight's transpose may be taken just before its own product
            weight = node.args[1]
            if weight.op == "call_function":
                first.prepend(weight)
        with graph.inserting_before(first):
            group = graph.call_function(torch.ops.torchplug_cpu.mm_group.default, (first.args[0], [n.args[1] for n in nodes]))
            group.meta["val"] = [n.meta["val"] for n in nodes]
            for i, node in enumerate(nodes):
                item = graph.call_function(operator.getitem, (group, i))
                item.meta["val"] = node.meta["val"]
                node.replace_all_uses_with(item)
        for node in nodes:
            graph.erase_node(node)
        for node in nodes[1:]:  # each F.linear flattened the shared input in a view of its own
            if node.args[0] is not first.args[0] and not node.args[0].users:
                graph.erase_node(node.args[0])
    return len(groups)


def _input_key(a: torch.fx.Node) -> Any:
    """The same input for every view of one tensor to one shape (each F.linear takes its own)."""
    if a.op == "call_function" and getattr(a.target, "__name__", "").split(".")[0] in _INPUT_VIEWS:
        return a.target, a.args[0], tuple(a.args[1])
    return a


def _skinny_by_weight(node: torch.fx.Node) -> bool:
    """A product of a few rows whose second operand is a graph input, or a transpose of one,
    contiguous along k (F.linear's weight): the operands exist before any product runs."""
    a, weight = node.args
    out, value = node.meta.get("val"), weight.meta.get("val") if isinstance(weight, torch.fx.Node) else None
    if not isinstance(a, torch.fx.Node) or value is None or out.shape[0] > SKINNY_ROWS or value.stride(0) != 1:
        return False
    source = weight
    if weight.op == "call_function":
        if getattr(weight.target, "__name__", "").split(".")[0] not in _WEIGHT_VIEWS or len(weight.users) != 1:
            return False
        source = weight.args[0]
    return isinstance(source, torch.fx.Node) and source.op in ("placeholder", "get_attr")


def _register_fake_kernels() -> None:
    # Shapes and dtypes are aten's: the fake kernel of torchplug_cpu::<op> is aten::<op> on fake tensors.
    for name in _GEMMS + _QUANT_MMS:
        aten_op = getattr(torch.ops.aten, name).default
        torch.library.register_fake(f"torchplug_cpu::{name}", lambda *args, _op=aten_op, **kwargs: _op(*args, **kwargs))
    torch.library.register_fake("torchplug_cpu::mm_group", lambda a, mats: [a @ mat for mat in mats])
