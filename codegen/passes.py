"""The post-grad pass a torchplug target registers for its device type.

It carries the target's `uuid()` into Inductor's FX-graph cache key, so a graph compiled for one
target (or an older version of it) is never reused for another.
"""

from collections.abc import Hashable

import torch
from torch._inductor.custom_graph_pass import CustomGraphModulePass

from ..entrypoints.compile_target import CodegenTarget


class TargetPass(CustomGraphModulePass):
    def __init__(self, target: CodegenTarget) -> None:
        self.target = target

    def __call__(self, gm: torch.fx.GraphModule) -> None:
        return None  # the graph is Inductor's to lower as it is; only the cache key changes

    def uuid(self) -> Hashable:
        return self.target.uuid()
