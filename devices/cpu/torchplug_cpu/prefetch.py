"""The skinny products' prefetch and weight-stream settings, and the CPU kinds they were measured on.

Decode's products (F.linear of a few rows, int8 and int4 weight-only) read their weights as a few
streams per thread, prefetched some KB ahead into L1 or L2. What is fastest depends on the CPU
model: kernels.gemv_prefetch() takes `torchplug tune cpu`'s measurement (tuning.py), else the entry
below for this CPU kind and ISA path, else the path's own; the environment overrides each part.
"""

import re
from types import ModuleType
from typing import NamedTuple

PREFETCH_ENV = "TORCHPLUG_CPU_PREFETCH_KB"
PREFETCH_LEVEL_ENV = "TORCHPLUG_CPU_PREFETCH_LEVEL"
PREFETCH_LEVELS = {"l1": 1, "l2": 2}  # the name -> the cache level the C++ takes
STREAMS_ENV = "TORCHPLUG_CPU_STREAMS"
STREAMS = (1, 2, 4)


class CpuKind(NamedTuple):
    """CPUs that hold one PREFETCH_BY_CPU setting: a CPUID vendor, and a display family and models (None: all)."""

    name: str
    vendor: str
    family: int | None = None
    models: frozenset[int] | None = None

    def holds(self, vendor: str, family: int, model: int) -> bool:
        return (vendor == self.vendor and self.family in (None, family)
                and (self.models is None or model in self.models))


INTEL = CpuKind("Intel", "GenuineIntel")
# AMD family 25 (19h) is Zen 3 and Zen 4; Zen 4 is models 10h-1Fh (Genoa), 60h-7Fh (Raphael, Phoenix)
# and A0h-AFh (Bergamo, Siena).
ZEN4 = CpuKind("Zen 4", "AuthenticAMD", 25, frozenset((*range(0x10, 0x20), *range(0x60, 0x80), *range(0xA0, 0xB0))))
# The skinny products' prefetch (KB, level) and weight streams where a CPU kind was measured to want
# other than the ISA path's own (one stream into L1), by `torchplug tune cpu` on 2 threads from memory
# (docs/cpu-fp16.md, "Prefetching into L2", "Weight streams"); the first entry that holds the CPU and
# path wins.
PREFETCH_BY_CPU: tuple[tuple[CpuKind, str, tuple[int, str, int]], ...] = (
    # EPYC (family 25 model 17) VM: into L1 on one stream (the path's own) 22-23 GB/s, into L2 on 4
    # streams 28-31 (1 KB best in 3 of 4 runs); the 499M decoder's fp16 and int8 decode 1.2-1.5x faster.
    (ZEN4, "avx512", (1, "l2", 4)),
    (ZEN4, "avx2", (12, "l2", 4)),  # the path's own 21-24 GB/s, into L2 on 2-4 streams 26-36
    # Xeon (family 6 model 167) VM: one stream, 12 KB into L2 20.4 GB/s (into L1 9-12% slower in the
    # 499M decoder); 4 streams, 2 KB into L1 23.9 (avx2 path: 24.4, its own distance on one stream 18.4)
    (INTEL, "avx512", (2, "l1", 4)),
    (INTEL, "avx2", (2, "l1", 4)),
)


def prefetch_by_cpu(vendor: str, family: int, model: int, isa: str) -> tuple[CpuKind, tuple[int, str, int]] | None:
    """PREFETCH_BY_CPU's entry for this CPU (CPUID vendor, display family and model) on path `isa`, if any."""
    return next(((kind, setting) for kind, path, setting in PREFETCH_BY_CPU
                 if path == isa and kind.holds(vendor, family, model)), None)


def cpu_family_model(ext: ModuleType) -> tuple[int, int]:
    """The CPUID display family and model, from the extension's `cpu_model()` ("family F model M: brand")."""
    family, model = re.match(r"family (\d+) model (\d+)", ext.cpu_model()).groups()
    return int(family), int(model)
