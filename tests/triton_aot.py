"""Compile the Triton kernels ahead of time for real GPUs, without one: what each launch would build.

Run as `python -c "import triton_aot; triton_aot.main(FULL)"` in a process where Triton's
interpreter is off. The host functions run on small CPU tensors with each @triton.jit kernel
replaced by a recorder; every recorded launch (its argument types, constexprs and num_warps from
the backend's LaunchConfig) is then compiled by Triton for NVIDIA sm_90 (to cubin, with the CUDA
config) and AMD gfx942 (to hsaco, with the ROCm config), specialised as Triton's JIT would
specialise it. Prints {launch: {"ok", "error" or "vector_io" (16-byte global loads and stores)}} as JSON.
"""

import json
import sys
import traceback

import torch

from torchplug.kernels import activations, launch, norms, norms_backward, rotary
from torchplug_cuda import PROFILE as CUDA_PROFILE
from torchplug_rocm import PROFILE as ROCM_PROFILE

TARGETS = {"sm_90": ("cuda", 90, 32, CUDA_PROFILE.launch), "gfx942": ("hip", "gfx942", 64, ROCM_PROFILE.launch)}
KERNELS = [(norms, "_rms_norm_rows"), (norms_backward, "_rms_norm_grad_rows"), (activations, "_silu_and_mul_rows"),
           (activations, "_silu_and_mul_grad_rows"), (rotary, "_rotate_heads")]
TYPES = {torch.float32: "*fp32", torch.float16: "*fp16", torch.bfloat16: "*bf16"}


class Recorder:
    """Stands in for a JITFunction: `kernel[grid](*args, **kwargs)` records the launch."""

    def __init__(self, fn, launches):
        self.fn, self.launches = fn, launches

    def __getitem__(self, grid):
        return lambda *args, **kwargs: self.launches.append((self.fn, args, kwargs))


def launches(config, dtypes) -> list:
    """The launches the host code makes for a small call of every op in each dtype."""
    recorded = []
    for module, name in KERNELS:
        setattr(module, name, Recorder(getattr(module, name), recorded))
    for dtype in dtypes:
        for hidden in (8192, 2 * config.max_row_block):  # one pass at the benchmark's width; two passes
            x, w = torch.randn(2, hidden).to(dtype), torch.randn(hidden).to(dtype)
            norms.rms_norm(x, w, 1e-6, config)
            norms.fused_add_rms_norm_(x.clone(), x.clone(), w, 1e-6, config)
            for residual_grad in (None, x):
                norms_backward.rms_norm_backward(x, x, w, 1e-6, residual_grad, config)
        x = torch.randn(2, 2 * 8192).to(dtype)
        activations.silu_and_mul(x, config)
        activations.silu_and_mul_backward(x[:, :8192], x, config)
        q = torch.randn(3, 32, 128).to(dtype)
        rotary.rotary_embedding(q, q, torch.randn(3, 64), torch.randn(3, 64), config)
    for module, name in KERNELS:
        setattr(module, name, getattr(module, name).fn)
    return recorded


def specialise(fn, args, kwargs) -> tuple[dict, dict, dict]:
    """(signature, constexprs, attributes) as Triton's JIT would build them for this launch:
    integers equal to 1 become constants, pointers and integers divisible by 16 are marked so."""
    names = fn.arg_names
    types, constants, attrs = {}, {}, {}
    for index, (name, value) in enumerate(zip(names, args)):
        if isinstance(value, torch.Tensor):
            types[name] = TYPES[value.dtype]
            aligned = value.data_ptr() % 16 == 0
        elif isinstance(value, float):
            types[name], aligned = "fp32", False
        elif value == 1:
            types[name], constants[name], aligned = "constexpr", 1, False
        else:
            types[name] = "i64" if abs(value) >= 2**31 else "i32"
            aligned = value % 16 == 0
        if aligned:
            attrs[(index,)] = [["tt.divisibility", 16]]
    for name in names[len(args):]:
        types[name], constants[name] = "constexpr", kwargs[name]
    return types, constants, attrs


def moves_16_bytes(asm: dict) -> bool:
    """The kernel loads and stores global memory 16 bytes at a time (NVIDIA PTX, AMD GCN)."""
    code = asm.get("ptx", "") + asm.get("amdgcn", "")
    loads = ("ld.global.v4", "global_load_dwordx4", "buffer_load_dwordx4")
    stores = ("st.global.v4", "global_store_dwordx4", "buffer_store_dwordx4")
    return any(op in code for op in loads) and any(op in code for op in stores)


def main(full: bool) -> None:
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    launch._compute_units = lambda device: 132  # SM count of an H100: only sizes the reduction grid
    dtypes = list(TYPES) if full else [torch.float16]
    results = {}
    for target_name, (backend, arch, warp_size, config) in TARGETS.items():
        for fn, args, kwargs in launches(config, dtypes):
            types, constants, attrs = specialise(fn, args, kwargs)
            blocks = " ".join(f"{k}={v}" for k, v in constants.items() if k.isupper())
            pointers = "/".join(sorted({t for t in types.values() if t.startswith("*")}))
            key = f"{target_name} {fn.__name__} {blocks} {pointers} num_warps={kwargs['num_warps']}"
            if key in results:
                continue
            try:
                compiled = triton.compile(ASTSource(fn, types, constants, attrs),
                                          target=GPUTarget(backend, arch, warp_size),
                                          options={"num_warps": kwargs["num_warps"]})
                results[key] = {"ok": True, "vector_io": moves_16_bytes(compiled.asm)}
            except Exception as err:
                results[key] = {"ok": False, "error": f"{type(err).__name__}: {err}\n{traceback.format_exc(limit=-2)}"}
    print(json.dumps(results))


if __name__ == "__main__":
    main(sys.argv[1:] == ["full"])
