"""torch.cuda.jiterator on emulated cuda: the kernel's C++ compiled for the host.

torch.cuda.jiterator._create_jit_fn(code) takes the C++ of one elementwise function template. On a
GPU, torch compiles it with NVRTC the first time it runs and launches it over the inputs
(torch._C._cuda_jiterator_compile_and_launch_kernel): inputs promoted to their common dtype and
broadcast, the function instantiated for that dtype's math type (float for half and bfloat16),
extra arguments typed as torch holds Python scalars (double, int64_t, bool, complex<double>),
outputs in the common dtype. The emulated binding keeps those rules and compiles the same function
with the host's C++ compiler into a small library, cached by its source in torchplug's build cache.
CUDA's device math (::sin, ::min, ...) is the C++ standard library's here.
"""

import ctypes
import hashlib
import os
import subprocess
import tempfile
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from ..entrypoints.torch_devices import CUDA
from ..extension import cache_dir

_PRELUDE = """\
#include <algorithm>
#include <cmath>
#include <complex>
#include <cstdint>
#include <math.h>
using std::max;
using std::min;
"""
_CTYPES = {
    torch.float32: "float", torch.float64: "double", torch.int64: "int64_t", torch.int32: "int32_t",
    torch.int16: "int16_t", torch.int8: "int8_t", torch.uint8: "uint8_t", torch.bool: "bool",
    torch.complex64: "std::complex<float>", torch.complex128: "std::complex<double>",
}
_ENTRY = "torchplug_jiterator_launch"
_loaded: dict[str, Any] = {}
_lock = threading.Lock()


def _extra_argument(value: Any) -> torch.Tensor:
    """A scalar extra argument as torch's jiterator passes it: its at::Scalar type (a CPU tensor holds it)."""
    if isinstance(value, torch.Tensor):
        value = value.item()
    dtype = (torch.bool if isinstance(value, bool) else torch.int64 if isinstance(value, int)
             else torch.complex128 if isinstance(value, complex) else torch.float64)
    return torch.tensor([value], dtype=dtype)


def _source(code: str, name: str, compute: torch.dtype, inputs: int, outputs: int,
            extras: Sequence[torch.dtype], return_by_ref: bool) -> str:
    ctype = _CTYPES[compute]
    lines = [f"const T* in{i} = static_cast<const T*>(in[{i}]);" for i in range(inputs)]
    lines += [f"T* out{i} = static_cast<T*>(out[{i}]);" for i in range(outputs)]
    lines += [f"const {_CTYPES[dtype]} extra{i} = *static_cast<const {_CTYPES[dtype]}*>(extra[{i}]);"
              for i, dtype in enumerate(extras)]
    args = [f"in{i}[k]" for i in range(inputs)] + [f"extra{i}" for i in range(len(extras))]
    if return_by_ref:
        call = f"{name}<T>({', '.join(args + [f'out{i}[k]' for i in range(outputs)])});"
    else:
        call = f"out0[k] = {name}<T>({', '.join(args)});"
    body = "\n  ".join(lines)
    return (f"{_PRELUDE}\n{code}\n\nextern \"C\" void {_ENTRY}(int64_t n, void* const* in, void* const* out, "
            f"void* const* extra) {{\n  using T = {ctype};\n  {body}\n  for (int64_t k = 0; k < n; ++k) {{\n"
            f"    {call}\n  }}\n}}\n")


def _library(source: str, name: str) -> Any:
    """The compiled kernel: loaded before in this process, found in the cache, or compiled now."""
    key = hashlib.sha256(source.encode()).hexdigest()[:24]
    with _lock:
        if key in _loaded:
            return _loaded[key]
        folder = cache_dir() / "jiterator"
        library = folder / f"{key}.so"
        if not library.exists():
            folder.mkdir(parents=True, exist_ok=True)
            _compile(source, library, name)
        kernel = getattr(ctypes.CDLL(str(library)), _ENTRY)
        kernel.restype = None
        kernel.argtypes = [ctypes.c_int64, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p]
        _loaded[key] = kernel
        return kernel


def _compile(source: str, library: Path, name: str) -> None:
    compiler = os.environ.get("CXX", "c++")
    with tempfile.TemporaryDirectory(dir=library.parent) as scratch:
        cpp, built = Path(scratch) / "kernel.cpp", Path(scratch) / "kernel.so"
        cpp.write_text(source)
        try:
            result = subprocess.run([compiler, "-O2", "-std=c++17", "-shared", "-fPIC", str(cpp), "-o", str(built)],
                                    capture_output=True, text=True)
        except OSError as err:
            raise RuntimeError(f"torchplug's emulated cuda compiles jiterator kernels with the host's C++ compiler, "
                               f"and {compiler!r} could not be run ({err}). Install one or name it in CXX.") from err
        if result.returncode != 0:
            raise RuntimeError(f"jiterator kernel {name!r} did not compile for emulated cuda's host "
                               f"({compiler}):\n{result.stderr}")
        os.replace(built, library)  # atomic: a process loading it meanwhile sees all of it or nothing


def compile_and_launch(code: str, name: str, return_by_ref: bool, num_outputs: int,
                       tensors: Sequence[torch.Tensor], kwargs: dict[str, Any] | None) -> Any:
    """torch._C._cuda_jiterator_compile_and_launch_kernel's result: one tensor, or a tuple for several outputs."""
    from torch._prims_common import ELEMENTWISE_TYPE_PROMOTION_KIND, elementwise_dtypes

    devices = {t.device for t in tensors}
    if len(devices) != 1 or next(iter(devices)).type != CUDA.name:
        raise RuntimeError(f"Expected all tensors to be on the same device, but the jiterator kernel {name!r} got "
                           f"tensors on {sorted(map(str, devices))}")
    device = devices.pop()
    compute, common = elementwise_dtypes(*tensors, type_promotion_kind=ELEMENTWISE_TYPE_PROMOTION_KIND.DEFAULT)
    if compute not in _CTYPES:
        raise TypeError(f"the jiterator kernel {name!r} on emulated cuda does not support {common}")
    shape = torch.broadcast_shapes(*(t.shape for t in tensors))
    outputs = [torch.empty(shape, dtype=common, device=device) for _ in range(num_outputs)]
    if outputs[0].numel() > 0:
        extras = [_extra_argument(value) for value in (kwargs or {}).values()]
        source = _source(code, name, compute, len(tensors), num_outputs, [e.dtype for e in extras], return_by_ref)
        kernel = _library(source, name)
        inputs = [t.to(compute).expand(shape).contiguous() for t in tensors]  # device memory is host memory
        results = outputs if compute == common else [torch.empty(shape, dtype=compute, device=device) for _ in outputs]

        def pointers(held: Sequence[torch.Tensor]) -> Any:
            return (ctypes.c_void_p * max(len(held), 1))(*(t.data_ptr() for t in held))

        kernel(outputs[0].numel(), pointers(inputs), pointers(results), pointers(extras))
        for output, result in zip(outputs, results):
            if result is not output:
                output.copy_(result)
    return outputs[0] if num_outputs == 1 else tuple(outputs)
