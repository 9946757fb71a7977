"""torch.compile on an emulated device vs on the CPU, in one run: speed-ups and first-compile times.

    python benchmarks/compile.py [--device xpu] [--rounds 7] [--json PATH]

For a small MLP and a transformer block, in float32 and float16 (inference), the compiled/eager
speed-up is measured on the CPU and on the emulated device (torchplug's host target: Inductor's
C++ kernels on host memory). Each round times eager and compiled on both devices, alternating, so
drift in machine load hits all four alike; the table shows medians. The first compile of each
model (Dynamo + Inductor + C++ build, with an empty Inductor cache) is timed once per device.
Verdict (exit status 1 if one fails): on each case, the emulated device's speed-up is >= 0.9x the
CPU's. A compiled result that differs from eager is an error.
"""

import copy
import os
import sys
import tempfile
import time
from collections.abc import Callable

DEVICE = "xpu"
for i, arg in enumerate(sys.argv):  # the device must be emulated before torch is imported
    if arg == "--device" and i + 1 < len(sys.argv):
        DEVICE = sys.argv[i + 1]
os.environ.setdefault("TORCHPLUG_EMULATE", DEVICE)
# First compiles are measured from an empty cache: a warm one would time a cache hit.
os.environ["TORCHINDUCTOR_CACHE_DIR"] = tempfile.mkdtemp(prefix="torchplug-compile-bench-")

import torch  # noqa: E402

from common import Measurement, Report, parser  # noqa: E402

TARGET = 0.9  # the emulated speed-up, as a fraction of the CPU's


def mlp() -> tuple[torch.nn.Module, torch.Tensor]:
    model = torch.nn.Sequential(torch.nn.Linear(256, 1024), torch.nn.GELU(), torch.nn.Linear(1024, 256),
                                torch.nn.LayerNorm(256))
    return model, torch.randn(64, 256)


class Block(torch.nn.Module):
    """A pre-norm transformer block (attention through scaled_dot_product_attention, then a GELU MLP).

    Written out rather than nn.TransformerEncoderLayer, whose inference fast path runs one fused
    native kernel on the CPU (and not on other devices) and is not what torch.compile generates.
    """

    def __init__(self, dim: int = 256, heads: int = 4) -> None:
        super().__init__()
        self.heads = heads
        self.norm1, self.norm2 = torch.nn.LayerNorm(dim), torch.nn.LayerNorm(dim)
        self.qkv, self.proj = torch.nn.Linear(dim, 3 * dim), torch.nn.Linear(dim, dim)
        self.mlp = torch.nn.Sequential(torch.nn.Linear(dim, 4 * dim), torch.nn.GELU(), torch.nn.Linear(4 * dim, dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch, seq, dim = x.shape
        q, k, v = self.qkv(self.norm1(x)).view(batch, seq, 3, self.heads, dim // self.heads).unbind(2)
        attention = torch.nn.functional.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2),
                                                                     v.transpose(1, 2), is_causal=True)
        x = x + self.proj(attention.transpose(1, 2).reshape(batch, seq, dim))
        return x + self.mlp(self.norm2(x))


def transformer_block() -> tuple[torch.nn.Module, torch.Tensor]:
    return Block(), torch.randn(8, 64, 256)


MODELS = {"MLP 256-1024-256": (mlp, 30), "transformer block d256 seq64": (transformer_block, 8)}  # calls per round
DTYPES = {"fp32": torch.float32, "fp16": torch.float16}


def _time(fn: Callable[[], object], calls: int) -> float:
    start = time.perf_counter()
    for _ in range(calls):
        fn()
    return (time.perf_counter() - start) / calls * 1e3


def _first_compile(model: torch.nn.Module, x: torch.Tensor) -> tuple[Callable[[], torch.Tensor], float]:
    compiled = torch.compile(model)
    start = time.perf_counter()
    got = compiled(x)
    seconds = time.perf_counter() - start
    torch.testing.assert_close(got.float().cpu(), model(x).float().cpu(), rtol=2e-2, atol=2e-2)
    return (lambda: compiled(x)), seconds


def measure(report: Report, device: str, rounds: int) -> list[dict[str, object]]:
    results = []
    for model_name, (make, calls) in MODELS.items():
        for dtype_name, dtype in DTYPES.items():
            torch.manual_seed(0)
            model, x = make()
            model = model.eval().to(dtype)
            case = f"{model_name} {dtype_name}"
            sides = {}
            for side in ("cpu", device):
                m, xs = copy.deepcopy(model).to(side), x.to(side, dtype)  # .to() moves a module in place
                compiled, first = _first_compile(m, xs)
                sides[side] = {"eager": (lambda m=m, xs=xs: m(xs)), "compiled": compiled, "first": first}
            for side in sides.values():  # warm-up
                _time(side["eager"], 2), _time(side["compiled"], 2)
            times = {(side, kind): [] for side in sides for kind in ("eager", "compiled")}
            for _ in range(rounds):
                for side, fns in sides.items():
                    for kind in ("eager", "compiled"):
                        times[side, kind].append(_time(fns[kind], calls))
            row = {"case": case}
            for side in sides:
                eager = report.add(f"{case}, {side} eager", times[side, "eager"], "ms")
                compiled = report.add(f"{case}, {side} compiled", times[side, "compiled"], "ms")
                row[side] = (eager, compiled, report.record(eager.ratio(compiled, f"{case}, {side} speed-up")),
                             report.add(f"{case}, {side} first compile", [sides[side]["first"]], "s"))
            row["relative"] = report.record(row[device][2].ratio(row["cpu"][2], f"{case}, {device} / cpu speed-up"))
            results.append(row)
    return results


def main() -> int:
    cli = parser(__doc__)
    cli.add_argument("--device", default=DEVICE, help="emulated device type (default: xpu)")
    cli.add_argument("--rounds", type=int, default=7, help="alternating rounds per case (default: 7)")
    args = cli.parse_args()
    report = Report("compile", args)
    with torch.no_grad():
        results = measure(report, args.device, args.rounds)
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, emulated {args.device}, "
          f"medians of {args.rounds} rounds, times per call in ms\n")
    d = args.device
    header = ("case", "cpu eager", "cpu compiled", "cpu speed-up", f"{d} eager", f"{d} compiled", f"{d} speed-up",
              f"{d} / cpu", "first compile cpu (s)", f"first compile {d} (s)")
    rows = []
    for r in results:
        (ce, cc, cs, cf), (de, dc, ds, df) = r["cpu"], r[d]
        rows.append((r["case"], ce.cell, cc.cell, cs.cell, de.cell, dc.cell, ds.cell, r["relative"].cell, cf.cell,
                     df.cell))
    report.table(header, rows)
    print()
    for r in results:
        relative: Measurement = r["relative"]
        report.verdict(relative.median >= TARGET,
                       f"{r['case']}: emulated {d} speed-up / cpu speed-up = {relative.cell} (target >= {TARGET})",
                       relative)
    return report.finish()


if __name__ == "__main__":
    sys.exit(main())
