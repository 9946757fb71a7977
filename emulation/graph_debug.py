"""What an emulated graph's debug helpers show: its recorded nodes and the dependencies between them.

A node depends on the last earlier node that wrote memory it reads or writes (the same storage), as
the edges of a CUDA graph captured from one stream order its kernels.
"""

from typing import Any

from .graph_capture import KernelNode, OpNode, Program

_COPIES = {"aten::copy_", "aten::_to_copy", "aten::_copy_from", "aten::_copy_from_and_resize"}
_FILLS = {"aten::fill_", "aten::zero_", "aten::fill"}


def node_type(node: Any) -> str:
    """CUDA's node kind: memcpy and memset for copies and fills, kernel for the rest, child_graph for replays."""
    if isinstance(node, OpNode):
        name = node.func._schema.name
        return "memcpy" if name in _COPIES else "memset" if name in _FILLS else "kernel"
    return "kernel" if isinstance(node, KernelNode) else "child_graph"


def dependencies(program: Program) -> list[list[int]]:
    last_writer: dict[int, int] = {}
    edges = []
    for index, node in enumerate(program.nodes):
        before = {last_writer[r.ptr] for r in (*node.reads, *node.writes) if r.ptr in last_writer}
        edges.append(sorted(before))
        for ref in node.writes:
            last_writer[ref.ptr] = index
    return edges


def _label(node: Any) -> str:
    shapes = ", ".join(str(list(r.size)) for r in node.reads[:4])
    return f"{node.name}({shapes}{', ...' if len(node.reads) > 4 else ''})"


def dot(program: Program, graph_name: str) -> str:
    lines = [f'digraph "{graph_name}" {{', '  label="recorded by torchplug\'s emulated device";']
    for index, node in enumerate(program.nodes):
        label = _label(node).replace('"', "'")
        lines.append(f'  n{index} [shape=box, label="{index}: {node_type(node)}\\n{label}"];')
    for index, before in enumerate(dependencies(program)):
        lines.extend(f"  n{b} -> n{index};" for b in before)
    lines.append("}")
    return "\n".join(lines) + "\n"


def graph_data(program: Program, graph_id: int) -> dict:
    """The structure torch.cuda.CUDAGraph.get_graph_data() returns; ids number the recorded nodes."""
    edges = dependencies(program)
    nodes = [{"index": i, "node_type": node_type(node), "tools_id": (graph_id << 32) | i, "graph_id": graph_id,
              "node_id": i, "kernel_name": node.name if node_type(node) == "kernel" else None,
              "dependencies": edges[i], "dependents": []} for i, node in enumerate(program.nodes)]
    for i, before in enumerate(edges):
        for b in before:
            nodes[b]["dependents"].append(i)
    return {"exec_graph_id": graph_id, "nodes": nodes}
