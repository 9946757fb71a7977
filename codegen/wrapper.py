"""Inductor's Python wrappers for host-memory devices: buffers on the device, kernels without streams.

The host target calls Inductor's C++ kernels with the device's pointers (`host_wrapper`); the
fidelity mode calls Inductor's Triton kernels, which run under Triton's interpreter
(`interpreted_wrapper`). Both launch each kernel through the device's launcher (a HostLauncher,
from the extension points): an emulated device's records it while a CUDA graph captures, a runtime's
runs it inside the runtime's launch_host window. Both allocate through torch's dispatcher: torch's
fast paths (`empty_strided_cuda`, ...) would ask a CPU-only torch for real GPU memory.
"""

import functools
import hashlib
from pathlib import Path
from typing import Any

from torch._inductor.codegen.wrapper import PythonWrapperCodegen, SubgraphPythonWrapperCodegen
from torch._inductor.virtualized import V

from ..entrypoints.compile_target import HostLauncher


class _DeviceAllocation:
    def make_allocation(self, name: str, device: Any, dtype: Any, shape: Any, stride: Any,
                        allocation_shape: Any = None, is_pinned: bool = False) -> str:
        if device.type == "cpu":
            return super().make_allocation(name, device, dtype, shape, stride, allocation_shape, is_pinned)
        size = self.codegen_python_shape_tuple(shape)
        allocation = self.codegen_python_shape_tuple(shape if allocation_shape is None else allocation_shape)
        strides = self.codegen_python_shape_tuple(stride)
        line = f"{name} = empty_strided({allocation}, {strides}, device='{device}', dtype={dtype})"
        return line if size == allocation else f"{line}.as_strided({size}, {strides})"


class _RuntimeLaunches(_DeviceAllocation):
    """Kernels are launched through the device's launcher, imported as `launch_host_kernel`."""

    launcher: HostLauncher  # set on the classes `_wrapper_classes` makes

    def write_header(self) -> None:
        super().write_header()
        self.imports.splice(f"from {self.launcher.module} import {self.launcher.name} as launch_host_kernel")


class _HostKernelCalls(_RuntimeLaunches):
    def _generate_kernel_call_helper(self, kernel_name: str, call_args: Any, *, device: Any = None,
                                     triton: bool = True, **kwargs: Any) -> None:
        device = device or V.graph.get_current_device_or_throw()
        if triton or device.type == "cpu":
            return super()._generate_kernel_call_helper(kernel_name, call_args, device=device, triton=triton, **kwargs)
        # Host code: no stream to pass. The arguments the kernel writes are its non-const pointers.
        types = kwargs.get("arg_types")
        writes = None if types is None else tuple(i for i, t in enumerate(types) if _writes(t))
        launch = [kernel_name, repr(kernel_name), repr(writes), *call_args]
        self.writeline(self.wrap_kernel_call("launch_host_kernel", launch))


class _InterpretedKernelCalls(_RuntimeLaunches):
    def _generate_kernel_call_helper(self, kernel_name: str, call_args: Any, **kwargs: Any) -> None:
        # torch writes `<kernel>.run(<args>, stream=...)`, through whatever `writeline` is current (the
        # final pass points it at the wrapper's body); which arguments the kernel writes is unknown.
        run = f"{kernel_name}.run("
        own = self.__dict__.get("writeline")
        write = self.writeline

        def writeline(line: Any) -> None:
            if isinstance(line, str) and line.startswith(run):
                line = f"launch_host_kernel({kernel_name}.run, {kernel_name!r}, None, {line[len(run):]}"
            write(line)

        self.writeline = writeline
        try:
            super()._generate_kernel_call_helper(kernel_name, call_args, **kwargs)
        finally:
            if own is None:
                del self.writeline
            else:
                self.writeline = own


def _writes(arg_type: Any) -> bool:
    """Whether a C++ kernel argument of this type is written: a pointer that is not const."""
    text = str(arg_type).strip()
    return text.endswith("*") and not text.startswith("const ")


def _wrapper_classes(mixin: type, name: str, launcher: HostLauncher) -> type:
    """A top-level wrapper class with `mixin` and `launcher`, whose subgraphs (control flow) get them too."""
    subgraph = type(f"{name}Subgraph", (mixin, SubgraphPythonWrapperCodegen), {"launcher": launcher})

    def create(is_subgraph: bool, subgraph_name: str | None, parent_wrapper: PythonWrapperCodegen | None,
               partition_signatures: Any = None) -> PythonWrapperCodegen:
        if is_subgraph:
            return subgraph(subgraph_name, parent_wrapper, partition_signatures)
        return top()

    top = type(name, (mixin, PythonWrapperCodegen), {"create": staticmethod(create), "launcher": launcher})
    return top


@functools.cache
def host_wrapper(launcher: HostLauncher) -> type:
    """The host target's wrapper codegen: C++ kernels, each launched through `launcher`."""
    return _wrapper_classes(_HostKernelCalls, "HostWrapperCodegen", launcher)


@functools.cache
def interpreted_wrapper(launcher: HostLauncher) -> type:
    """The fidelity mode's wrapper codegen: interpreted Triton kernels, each launched through `launcher`."""
    return _wrapper_classes(_InterpretedKernelCalls, "InterpretedWrapperCodegen", launcher)


@functools.cache
def source_digest() -> str:
    """This module's source, for the targets' cache keys: a graph cached by another torchplug (an older
    one, or another checkout on the machine) may call the runtime differently."""
    return hashlib.sha256(Path(__file__).read_bytes()).hexdigest()[:16]
