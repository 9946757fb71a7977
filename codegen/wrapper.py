"""Inductor's Python wrapper for a host-memory device: buffers on the device, kernels without streams.

The kernels are Inductor's C++ kernels, called with host pointers: an emulated device's memory is
host memory. Only allocation (torch's fast paths would allocate real cuda/xpu memory) and the
kernel call (torch passes a stream to kernels on cuda/xpu) differ from the CPU's wrapper.
"""

from typing import Any

from torch._inductor.codegen.wrapper import PythonWrapperCodegen, SubgraphPythonWrapperCodegen
from torch._inductor.virtualized import V


class _HostDevice:
    def make_allocation(self, name: str, device: Any, dtype: Any, shape: Any, stride: Any,
                        allocation_shape: Any = None, is_pinned: bool = False) -> str:
        if device.type == "cpu":
            return super().make_allocation(name, device, dtype, shape, stride, allocation_shape, is_pinned)
        size = self.codegen_python_shape_tuple(shape)
        allocation = self.codegen_python_shape_tuple(shape if allocation_shape is None else allocation_shape)
        strides = self.codegen_python_shape_tuple(stride)
        line = f"{name} = empty_strided({allocation}, {strides}, device='{device}', dtype={dtype})"
        return line if size == allocation else f"{line}.as_strided({size}, {strides})"

    def _generate_kernel_call_helper(self, kernel_name: str, call_args: Any, *, device: Any = None,
                                     triton: bool = True, **kwargs: Any) -> None:
        device = device or V.graph.get_current_device_or_throw()
        if triton or device.type == "cpu":
            return super()._generate_kernel_call_helper(kernel_name, call_args, device=device, triton=triton, **kwargs)
        self.writeline(self.wrap_kernel_call(kernel_name, call_args))  # host code: no stream to pass


class HostSubgraphWrapperCodegen(_HostDevice, SubgraphPythonWrapperCodegen):
    pass


class HostWrapperCodegen(_HostDevice, PythonWrapperCodegen):
    @staticmethod
    def create(is_subgraph: bool, subgraph_name: str | None, parent_wrapper: PythonWrapperCodegen | None,
               partition_signatures: Any = None) -> PythonWrapperCodegen:
        if is_subgraph:
            return HostSubgraphWrapperCodegen(subgraph_name, parent_wrapper, partition_signatures)
        return HostWrapperCodegen()
