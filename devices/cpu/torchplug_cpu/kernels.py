"""torchplug-cpu's C++ kernels: build, load, choose the ISA path, register with the dispatcher.

The extension (csrc/) defines torchplug_cpu:: ops. `load()` registers them through torchplug's
dispatcher on the CPU key: as the float16 kernels of aten mm / addmm / bmm / baddbmm (functional,
out= and in-place forms, so linear and matmul too) and of the flash attention F.sdpa runs; as the
fp32 / bf16 / fp16 kernels of aten argmax (greedy decoding) and _fused_rms_norm (F.rms_norm), which
run SIMD row kernels on the common layouts and torch's kernel on the rest; as the fp32 / bf16 / fp16
kernels of aten's weight-only int8 / int4 products (_weight_int8pack_mm, _weight_int4pack_mm_for_cpu);
and as the fp32 / bf16 /
fp16 kernels of the four torchplug:: LLM ops (when torchplug.ops is first imported, as defining
those ops is not free). Every other dtype keeps torch's kernel. `unload()` gives them back. For
torch.compile, an Inductor pass (inductor.py) points compiled fp16 GEMMs at the same ops.

At autoload the backend calls `load(build=False)`: compiling takes minutes and must never happen
inside ``import torch``, so only a cached build is used there; `torchplug build cpu` (or `torchplug
doctor`, or `load()`) builds it once per torch version.

TORCHPLUG_CPU_ISA=avx512|avx2|scalar forces a path; unset, the best the CPU supports runs. An
unknown value, or a path the CPU lacks, raises ValueError saying what this CPU supports.

Where torch's oneDNN has its own fp16 matmul (AVX512-FP16 / AMX-FP16 CPUs), fp16 products with more
than 8 rows and 8 columns go to it (faster there); torchplug's GEMM keeps the skinny ones.

TORCHPLUG_CPU_INT4_ACTIVATIONS=int8|float: int4 weight-only products of a few rows (decode) with
fp16 or bf16 activations round them to int8 per block of 32 (llama.cpp's Q8_0) and run integer dot
products on the avx512 path where the CPU has AVX512-VNNI and VBMI, and on the avx2 path (`int8`,
the default; csrc/quant_int8_activations.h); `float` keeps them in fp32 (slower there, without the
activations' rounding error). fp32 activations always keep fp32.

TORCHPLUG_CPU_INT8_ACTIVATIONS=int16|float: the same for int8 weight-only products of a few rows:
`int16` (the default) rounds fp16 / bf16 activations to int16 per block of 256 along k (to within
max|x| / 65534 of the block, 254 times finer than the weights' own step) and runs integer dot
products, on the same paths (csrc/quant_int16_activations.h); `float` keeps them in fp32.

TORCHPLUG_CPU_PREFETCH_KB=N and TORCHPLUG_CPU_PREFETCH_LEVEL=l1|l2: how far ahead (KB) the skinny
products (decode's F.linear and the int8 / int4 weight-only products) prefetch their weight stream,
and into which cache (l1: prefetcht0, l2: prefetcht1). Unset: what `torchplug tune cpu` measured on
this CPU model and path (tuning.py), else prefetch.py's PREFETCH_BY_CPU entry for the CPU kind and path, else
the ISA path's own distance (gemv_kernel.h: 6 KB on avx512, 1 KB on avx2) into L1.

TORCHPLUG_CPU_STREAMS=1|2|4: how many weight streams each thread of those products reads at once
(columns, or int4 blocks of columns, half as many, from as many equal parts of its share). Unset: as the prefetch,
what `torchplug tune cpu` measured, else PREFETCH_BY_CPU's entry, else 1.

TORCHPLUG_CPU_FP32=auto|onednn|stock routes float32 mm/addmm/bmm/baddbmm (so linear and matmul):
`onednn` registers the same ops as their float32 kernels, which call oneDNN's matmul (inside torch);
`stock` keeps torch's (MKL). `auto` (the default) is a CPU-vendor rule: oneDNN on AMD CPUs whose
oneDNN has its AVX-512 path, where MKL takes its AVX2 path and runs at about half the speed; on AMD
CPUs without it, oneDNN's linear for skinny F.linear products only (m x k by a weight, m <= 256,
n >= 16m), which it runs faster than MKL, and MKL for everything else ("onednn-skinny").
"""

import os
import threading
from pathlib import Path
from types import ModuleType
from typing import NamedTuple

import torch

from torchplug.dispatcher.portable import KERNEL_OPS

from .prefetch import (PREFETCH_ENV, PREFETCH_LEVEL_ENV, PREFETCH_LEVELS, STREAMS, STREAMS_ENV, cpu_family_model,
                       prefetch_by_cpu)

ISA_ENV = "TORCHPLUG_CPU_ISA"
FP32_ENV = "TORCHPLUG_CPU_FP32"
FP32_ROUTES = ("auto", "onednn", "stock")
INT4_ACTIVATIONS_ENV = "TORCHPLUG_CPU_INT4_ACTIVATIONS"
INT8_ACTIVATIONS_ENV = "TORCHPLUG_CPU_INT8_ACTIVATIONS"
INT4_ACTIVATIONS = ("int8", "float")
INT8_ACTIVATIONS = ("int16", "float")
EXTENSION_NAME = "torchplug_cpu_ext"
CSRC = Path(__file__).resolve().parent / "csrc"
# at::parallel_for is inline OpenMP code: without -fopenmp it silently runs on one thread. The
# extension then binds to the libgomp.so.1 torch already loaded, so there is one thread pool.
# No -march flag: the ISA-specific files set their own targets (csrc/isa_*.cpp), with a pragma that
# would leak into the files after them. They hold the kernels' loops, so they are compiled apart, at
# -O3, and the rest, the glue around them, as one unity unit at -O1 (torchplug.extension).
CFLAGS = ["-fopenmp"]
KERNEL_SOURCES = ("isa_avx2.cpp", "isa_avx512.cpp", "isa_avx512emu.cpp", "isa_avx512vnni.cpp", "isa_scalar.cpp")
# The avx512emu path (the AVX-512 path's code on AVX2, which tests it on any CPU; never the default)
# is an extension of its own, compiled the first time that path is selected: ~6 s of CPU time that
# no cold build of the kernels users run pays.
TEST_PATH, TEST_PATH_EXTENSION = "avx512emu", "torchplug_cpu_avx512emu"
TEST_PATH_SOURCES = ("avx512emu_module.cpp", "isa_avx512emu.cpp")
# aten's CPU attention (F.scaled_dot_product_attention): float16 calls with a few query rows run
# torchplug's loop (csrc/attention_ops.cpp), the rest torch's flash kernel.
ATTENTION_OPS = ("_scaled_dot_product_flash_attention_for_cpu",)
GEMM_OPS = ("mm", "mm.out", "bmm", "bmm.out", "addmm", "addmm.out", "addmm_", "baddbmm", "baddbmm.out", "baddbmm_")
# Its C++ has a kernel for each portable op but the backward ones, which keep torchplug's reference.
LLM_OPS = tuple(op for op in KERNEL_OPS if not op.endswith("_backward"))
LLM_DTYPES = (torch.float32, torch.bfloat16, torch.float16)  # float64 keeps the plain-torch reference
# Ops of a decode step outside the GEMMs (csrc/argmax_ops.cpp, llm_ops.cpp), for LLM_DTYPES.
DECODE_OPS = ("argmax", "argmax.out", "_fused_rms_norm")
# Of those, the ops torch's CPU runs as a composite that autograd differentiates through its parts.
# A CPU kernel would switch AutogradCPU to the op's own derivative, which has no CPU kernel, so
# AutogradCPU is routed too, to a kernel that runs the composite where autograd has work. It is
# routed first, while the composite is still the kernel the dtype split keeps for other dtypes.
COMPOSITE_OPS = ("_fused_rms_norm",)
# Weight-only quantized products (csrc/quant_ops.cpp: what torchao's CPU int8 / int4 layouts call),
# for LLM_DTYPES activations.
QUANT_OPS = ("_weight_int8pack_mm", "_weight_int4pack_mm_for_cpu")

_lock = threading.RLock()
_extension: ModuleType | None = None
_registrations: list = []  # torchplug.dispatcher Registrations, while loaded
_fp32: tuple[str, str] = ("stock", "kernels not loaded")  # the float32 route while loaded, and why
_prefetch: "Prefetch | None" = None  # the skinny products' prefetch while loaded (gemv_prefetch)


def extension(build: bool = True) -> ModuleType | None:
    """The compiled module, built first if needed; with build=False, None unless a build is cached."""
    global _extension
    with _lock:
        if _extension is None:
            from torchplug import extension as builder

            sources = [s for s in sorted(CSRC.glob("*.cpp")) if s.name not in TEST_PATH_SOURCES]
            _extension = (builder.load_extension(EXTENSION_NAME, sources, CFLAGS, KERNEL_SOURCES) if build
                          else builder.load_cached(EXTENSION_NAME, sources, CFLAGS, KERNEL_SOURCES))
        return _extension


def test_path(build: bool = True) -> ModuleType | None:
    """The avx512emu path's extension, built first if needed (None with build=False when it is not
    cached); its kernel table is handed to the kernels' extension, which can then select it."""
    from torchplug import extension as builder

    found = (builder.load_extension if build else builder.load_cached)(
        TEST_PATH_EXTENSION, [CSRC / name for name in TEST_PATH_SOURCES], CFLAGS, KERNEL_SOURCES)
    if found is not None:
        extension().register_test_path(found.table())
    return found


def test_path_selected() -> bool:
    """Whether $TORCHPLUG_CPU_ISA asks for the avx512emu test path (so `torchplug build cpu` builds it too)."""
    return os.environ.get(ISA_ENV, "").strip().lower() == TEST_PATH


def select_isa(name: str | None = None, build: bool = True) -> str:
    """Use ISA path `name`, else $TORCHPLUG_CPU_ISA, else the best this CPU supports; returns it.

    The avx512emu test path is built the first time it is selected (with build=False, ValueError if
    it is not built yet)."""
    ext = extension()
    with _lock:
        choice = (name if name is not None else os.environ.get(ISA_ENV, "")).strip().lower()
        if choice == TEST_PATH and test_path(build) is None:
            raise ValueError(f"torchplug-cpu: {ISA_ENV}={TEST_PATH}: that test path is not built yet; build it "
                             f"once with: {ISA_ENV}={TEST_PATH} torchplug build cpu")
        ext.set_isa(choice or ext.supported_isas()[0])
        global _prefetch
        _prefetch = gemv_prefetch()
        apply_prefetch(_prefetch.kb, _prefetch.level, _prefetch.streams)
        return ext.current_isa()


class Prefetch(NamedTuple):
    """How the skinny products prefetch their weight stream: KB ahead, into which cache, and why."""

    kb: int
    level: str  # a PREFETCH_LEVELS name
    streams: int  # one of STREAMS
    source: str


def apply_prefetch(kb: int, level: str, streams: int) -> None:
    """Make the kernels prefetch `kb` KB ahead into cache `level` ("l1" or "l2"), reading `streams`
    weight streams per thread, from now on."""
    extension().set_gemv_prefetch_bytes(kb << 10)
    extension().set_gemv_prefetch_level(PREFETCH_LEVELS[level])
    extension().set_gemv_streams(streams)


def gemv_prefetch(measured: bool = True) -> Prefetch:
    """The skinny products' prefetch on the active ISA path: `torchplug tune cpu`'s measurement for this
    CPU model and path (with `measured`), else PREFETCH_BY_CPU's entry, else the path's own distance
    into L1 on one stream; $TORCHPLUG_CPU_PREFETCH_KB, $TORCHPLUG_CPU_PREFETCH_LEVEL and
    $TORCHPLUG_CPU_STREAMS override each part.
    ValueError on a bad value."""
    from . import tuning

    ext = extension()
    isa = ext.current_isa()
    if measured and (found := tuning.recorded(ext, isa)) is not None:
        base = Prefetch(found.prefetch_kb, found.prefetch_level, found.streams,
                        f"measured by `torchplug tune cpu` at {found.measured}")
    elif (entry := prefetch_by_cpu(ext.cpu_vendor(), *cpu_family_model(ext), isa)) is not None:
        base = Prefetch(*entry[1], f"PREFETCH_BY_CPU's {entry[0].name} entry")
    else:
        base = Prefetch(ext.own_prefetch_bytes() >> 10, "l1", 1, f"the {isa} path's own")
    kb = os.environ.get(PREFETCH_ENV, "").strip()
    if kb and not kb.isdigit():
        raise ValueError(f"torchplug-cpu: {PREFETCH_ENV}={kb!r} is not a whole number of KB (0 or more); "
                         f"unset it for this CPU's distance")
    level = os.environ.get(PREFETCH_LEVEL_ENV, "").strip().lower()
    if level and level not in PREFETCH_LEVELS:
        raise ValueError(f"torchplug-cpu: {PREFETCH_LEVEL_ENV}={level!r} is not one of {', '.join(PREFETCH_LEVELS)}; "
                         f"unset it for this CPU's level")
    streams = os.environ.get(STREAMS_ENV, "").strip()
    if streams and streams not in map(str, STREAMS):
        raise ValueError(f"torchplug-cpu: {STREAMS_ENV}={streams!r} is not one of {', '.join(map(str, STREAMS))}; "
                         f"unset it for this CPU's count")
    settings = ((PREFETCH_ENV, kb), (PREFETCH_LEVEL_ENV, level), (STREAMS_ENV, streams))
    overridden = [name for name, value in settings if value]
    source = "; ".join(overridden + ([] if all(value for _, value in settings) else [base.source]))
    return Prefetch(int(kb) if kb else base.kb, level or base.level, int(streams) if streams else base.streams, source)


def load(build: bool = True) -> ModuleType | None:
    """Select the ISA path and register the kernels with torchplug's dispatcher. Idempotent.

    Returns the extension; with build=False, None when nothing is cached yet (nothing changes).
    """
    from torchplug.dispatcher import cpp, when_torchplug_ops_defined

    with _lock:
        if _registrations:
            return _extension
        if extension(build) is None or cpp.extension(build) is None:
            return None
        select_isa(build=build)
        _extension.set_int4_int8_dots(int4_activations() == "int8")
        _extension.set_int8_int16_dots(int8_activations() == "int16")
        global _fp32
        _fp32 = fp32_route()
        _extension.set_fp32_route_skinny(_fp32[0] == "onednn-skinny")
        _extension.set_fp16_route_onednn(onednn_fp16())
        dtypes = (torch.float16,) if _fp32[0] == "stock" else (torch.float16, torch.float32)
        _registrations.extend(_register("aten", op, dtypes) for op in GEMM_OPS)
        _registrations.extend(_register("aten", op, (torch.float16,)) for op in ATTENTION_OPS)
        for op in COMPOSITE_OPS:
            _route_autograd(op, f"torchplug_cpu::{op}")
        _registrations.extend(_register("aten", op, LLM_DTYPES) for op in DECODE_OPS + QUANT_OPS)
        when_torchplug_ops_defined(_register_llm_ops)
        from .inductor import install_when_inductor_loads

        install_when_inductor_loads(loaded)
        return _extension


def int4_activations() -> str:
    """$TORCHPLUG_CPU_INT4_ACTIVATIONS (int8, the default, or float); ValueError naming the choices otherwise."""
    return _activations(INT4_ACTIVATIONS_ENV, INT4_ACTIVATIONS)


def int8_activations() -> str:
    """$TORCHPLUG_CPU_INT8_ACTIVATIONS (int16, the default, or float); ValueError naming the choices otherwise."""
    return _activations(INT8_ACTIVATIONS_ENV, INT8_ACTIVATIONS)


def _activations(env: str, choices: tuple[str, str]) -> str:
    """$env, one of `choices` (the first, rounded activations, is the default)."""
    choice = os.environ.get(env, "").strip().lower() or choices[0]
    if choice not in choices:
        raise ValueError(f"torchplug-cpu: unknown {env}={choice}; expected one of {', '.join(choices)} (or unset it "
                         f"for {choices[0]} on the avx2 path, and on the avx512 one with AVX512-VNNI)")
    return choice


def fp32_route() -> tuple[str, str]:
    """("onednn", "onednn-skinny" or "stock", why) for float32 GEMMs, from $TORCHPLUG_CPU_FP32 and this CPU.

    Raises ValueError on an unknown value, or on `onednn` where torch's oneDNN cannot run it.
    """
    choice = os.environ.get(FP32_ENV, "").strip().lower() or "auto"
    if choice not in FP32_ROUTES:
        raise ValueError(f"torchplug-cpu: {FP32_ENV}={choice!r} is not one of {', '.join(FP32_ROUTES)}")
    if choice == "stock":
        return "stock", f"{FP32_ENV}=stock"
    # torch's oneDNN matmul takes float32 only where its bf16 path runs (AVX-512 BW/VL/DQ or AVX-NE-CONVERT).
    usable = torch.backends.mkldnn.is_available() and torch.ops.mkldnn._is_mkldnn_bf16_supported()
    if choice == "onednn":
        if not usable:
            raise ValueError(f"torchplug-cpu: {FP32_ENV}=onednn, but torch's oneDNN has no fast float32 matmul on "
                             f"this CPU (it needs AVX-512 BW/VL/DQ); unset it or use {FP32_ENV}=stock")
        return "onednn", f"{FP32_ENV}=onednn"
    vendor = extension().cpu_vendor()
    if vendor == "AuthenticAMD" and usable:
        return "onednn", "AMD CPU with AVX-512: MKL would take its AVX2 path"
    if vendor == "AuthenticAMD" and torch.backends.mkldnn.is_available():
        return "onednn-skinny", ("AMD CPU without AVX-512: oneDNN's linear for F.linear products of 2 to 256 rows "
                                 "and at least 16 output columns per row, where it beats MKL; MKL for the rest")
    return "stock", f"{vendor or 'unknown'} CPU: torch's MKL is as fast" if usable else "no AVX-512 oneDNN path"


def onednn_fp16() -> bool:
    """Whether torch's oneDNN has its own fp16 matmul on this CPU (AVX512-FP16 or AMX-FP16): it then
    runs fp16 products of more than a few rows faster than torchplug's GEMM, which keeps the rest."""
    return torch.backends.mkldnn.is_available() and torch.ops.mkldnn._is_mkldnn_fp16_supported()


def fp32_status() -> str:
    """How float32 GEMMs run while loaded, for `torchplug list`."""
    route, why = _fp32 if loaded() else ("stock", "kernels not loaded")
    return f"fp32 GEMM: {route} ({why})"


def fp16_status() -> str:
    """How float16 GEMMs run while loaded, for `torchplug list`."""
    gemm = ("fp16 GEMM: torchplug's up to 8 rows or columns, torch's oneDNN (AVX512-FP16) beyond"
            if loaded() and onednn_fp16() else "fp16 GEMM: torchplug's")
    if not loaded() or _prefetch is None:
        return gemm
    return (f"{gemm}, prefetching {_prefetch.kb} KB ahead into {_prefetch.level.upper()} on {_prefetch.streams} "
            f"weight stream{'s' if _prefetch.streams > 1 else ''} per thread in decode ({_prefetch.source})")


def _register_llm_ops() -> None:
    with _lock:  # only while loaded, and once (an unload and a load may both have queued this)
        if _registrations and not any(r.op.startswith("torchplug::") for r in _registrations):
            _registrations.extend(_register("torchplug", op, LLM_DTYPES) for op in LLM_OPS)


def unload() -> None:
    """Give the ops back to the kernels they had before `load()` (the extension stays loaded)."""
    from torchplug.dispatcher import unregister

    with _lock:
        if _registrations:
            for op in COMPOSITE_OPS:
                _route_autograd(op, "")  # "": torch's composite again
        while _registrations:
            unregister(_registrations.pop())


def loaded() -> bool:
    """True while the kernels are registered."""
    return bool(_registrations)


def _register(namespace: str, op: str, dtypes: tuple[torch.dtype, ...]):
    from torchplug.dispatcher import register

    name, _, overload = op.partition(".")
    ours = getattr(getattr(torch.ops.torchplug_cpu, name), overload or "default")
    return register(f"{namespace}::{op}", "cpu", ours, dtypes=dtypes)


def _route_autograd(op: str, kernel_op: str) -> None:
    from torchplug.dispatcher import cpp

    cpp.extension().route(f"aten::{op}", "AutogradCPU", list(LLM_DTYPES), kernel_op)


def current_isa() -> str:
    return extension().current_isa()


def supported_isas() -> list[str]:
    """ISA paths this CPU can run, best first (a subset of avx512, avx2, scalar)."""
    return list(extension().supported_isas())
