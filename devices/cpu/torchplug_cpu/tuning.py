"""Settings torchplug-cpu measures on the machine instead of guessing per ISA path.

`torchplug tune cpu` times the skinny products' prefetch (how far ahead decode's F.linear and the
int8 / int4 weight-only products fetch their weight streams, and into L1 or L2) with each count of
weight streams a thread reads at once (1, 2, 4), and records the fastest combination, keyed by the
CPU model and ISA path, in the cache's tuning file. Every later load on a CPU of that model runs it
(kernels.py: under $TORCHPLUG_CPU_PREFETCH_KB / _LEVEL and $TORCHPLUG_CPU_STREAMS, over
PREFETCH_BY_CPU and the path's own). A pre-baked cache taken to another CPU model keeps that CPU's
defaults.

The measurement is the one decode is bound by: fp16 weights in 8192 x 2048 matrices, twice the L3
(at least 512 MB) so they come from memory, one activation row, on torch's threads. Each candidate
runs once per round in a rotating order, so a load change on a shared machine hits them
alike; medians over the rounds. A candidate replaces the prefetch in force only when its median is
at least MARGIN faster: on a noisy machine the default stands rather than a lucky draw.
"""

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple

import torch

from .prefetch import PREFETCH_LEVELS, STREAMS

CANDIDATES_KB = (0, 1, 2, 4, 6, 8, 12, 16, 24)
LEVELS = tuple(PREFETCH_LEVELS)  # at 0 KB the level makes no difference
ROUNDS = 7
MARGIN = 1.03
SHAPE = (8192, 2048)  # a decoder's MLP matrix: one weight row is 4 KB, about the distances tried
MIN_BYTES = 512 << 20
TUNING_FILE = "torchplug-cpu-tuning.json"


class PrefetchMeasurement(NamedTuple):
    """One `torchplug tune cpu` result for a CPU model and ISA path."""

    cpu: str
    isa: str
    prefetch_kb: int        # what runs from now on
    prefetch_level: str
    streams: int
    in_force_kb: int        # what ran before the measurement
    in_force_level: str
    in_force_streams: int
    gbps: dict[str, float]  # candidate ("l2 12 KB x4") -> median GB/s of weights
    threads: int
    megabytes: int
    measured: str           # UTC date and time


def cpu_identity(ext) -> str:
    """The CPU model a measurement holds for: vendor, CPUID family and model, brand string."""
    return f"{ext.cpu_vendor()} {ext.cpu_model()}"


def tuning_file() -> Path:
    """Shared by every torch version's cache (the CPU, not torch, decides the result)."""
    from torchplug.extension import cache_dir

    return cache_dir().parent / TUNING_FILE


def _records() -> dict[str, dict]:
    try:
        records = json.loads(tuning_file().read_text())
    except (OSError, ValueError):  # none yet, or unreadable: the defaults run; `torchplug tune cpu` rewrites it
        return {}
    return records if isinstance(records, dict) else {}


def _key(cpu: str, isa: str) -> str:
    return f"{cpu} / {isa}"


def recorded(ext, isa: str) -> PrefetchMeasurement | None:
    """The measurement recorded for this CPU model on ISA path `isa`, if any."""
    record = _records().get(_key(cpu_identity(ext), isa))
    try:
        return PrefetchMeasurement(**record) if isinstance(record, dict) else None
    except TypeError:  # written by another layout of this file: ignored until re-measured
        return None


def from_memory_bytes() -> int:
    """Twice the L3 (sysfs), at least MIN_BYTES: weights that size come from memory, as in decode."""
    l3 = 0
    for index in Path("/sys/devices/system/cpu/cpu0/cache").glob("index*"):
        try:
            if (index / "level").read_text().strip() == "3":
                size = (index / "size").read_text().strip()
                l3 = int(size.rstrip("KkMm")) << (20 if size[-1] in "Mm" else 10 if size[-1] in "Kk" else 0)
        except (OSError, ValueError):
            pass
    return max(MIN_BYTES, 2 * l3)


Candidate = tuple[str, int, int]  # (level, KB, streams)


def label(candidate: Candidate) -> str:
    return f"{candidate[0]} {candidate[1]} KB x{candidate[2]}"


def choose(gbps: dict[Candidate, float], in_force: Candidate) -> Candidate:
    """The fastest candidate, if it beats the one in force by MARGIN; else the one in force."""
    fastest = max(gbps, key=gbps.__getitem__)
    return fastest if gbps[fastest] >= MARGIN * gbps[in_force] else in_force


def measure(ext, in_force: Candidate, apply: Callable[[int, str, int], None],
            rounds: int = ROUNDS) -> PrefetchMeasurement:
    """Time every candidate (level, distance, streams), and the one in force, on the active ISA path and
    choose; `apply(kb, level, streams)` sets one. Leaves the one in force set; records nothing."""
    import datetime  # here, not at the top: kernels.py reads records inside ``import torch``
    import statistics
    import time

    candidates = sorted({*((level, kb, streams) for level in LEVELS for kb in CANDIDATES_KB if kb or level == "l1"
                           for streams in STREAMS), in_force})
    matrix_bytes = SHAPE[0] * SHAPE[1] * 2
    count = -(-from_memory_bytes() // matrix_bytes)
    weights = [torch.full(SHAPE, 0.5, dtype=torch.float16) for _ in range(count)]  # written: no shared zero pages
    row = torch.full((1, SHAPE[1]), 0.25, dtype=torch.float16)
    seconds: dict[Candidate, list[float]] = {candidate: [] for candidate in candidates}
    try:
        for weight in weights[:2]:  # warm-up: threads up, code paged in
            torch.nn.functional.linear(row, weight)
        for round_ in range(rounds):
            shift = round_ % len(candidates)
            for level, kb, streams in candidates[shift:] + candidates[:shift]:
                apply(kb, level, streams)
                start = time.perf_counter()
                for weight in weights:
                    torch.nn.functional.linear(row, weight)
                seconds[level, kb, streams].append(time.perf_counter() - start)
    finally:
        apply(in_force[1], in_force[0], in_force[2])
    gbps = {candidate: count * matrix_bytes / statistics.median(times) / 1e9 for candidate, times in seconds.items()}
    level, kb, streams = choose(gbps, in_force)
    return PrefetchMeasurement(
        cpu=cpu_identity(ext), isa=ext.current_isa(), prefetch_kb=kb, prefetch_level=level, streams=streams,
        in_force_kb=in_force[1], in_force_level=in_force[0], in_force_streams=in_force[2],
        gbps={label(c): round(value, 2) for c, value in gbps.items()},
        threads=torch.get_num_threads(),
        megabytes=count * matrix_bytes >> 20,
        measured=datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"))


def record(measurement: PrefetchMeasurement) -> Path:
    """Store `measurement` for its CPU model and ISA path (replacing an earlier one); returns the file.
    OSError if the cache cannot be written."""
    records = _records()
    records[_key(measurement.cpu, measurement.isa)] = measurement._asdict()
    path = tuning_file()
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_suffix(f".{os.getpid()}")
    temporary.write_text(json.dumps(records, indent=1))
    os.replace(temporary, path)
    return path
