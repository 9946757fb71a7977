"""FP16 GEMM on the CPU: torch fp32, stock torch fp16, torchplug fp16 and torch bf16, in GFLOP/s.

    python benchmarks/fp16_gemm.py [--quick | --no-compile | --weight-only] [--threads N] [--json PATH]

Everything is measured in this one run. Stock fp16 runs first, in a subprocess with
TORCHPLUG_DISABLE=cpu that never loads torchplug's kernels. Then this process (torchplug's kernels
registered) measures fp32, torchplug fp16 and bf16 (fp32 and bf16 still run torch's own kernels,
through torchplug's dtype split), calling the dtypes in turn so that load changes hit all alike.
The plugin's cost on the dtypes it does not serve is measured in pairs of fresh processes without
and with it, alternating. Figures are medians; cases that take over ~2 s per call (stock fp16 /
bf16 at 2048^2 on CPUs without AVX512-FP16 / AVX512-BF16) run once.
Then an fp16 MLP (Linear 1024->4096, GELU, Linear 4096->1024) compiled with
torch.compile: torchplug in default mode against stock default and stock max-autotune + freezing
(both in the stock subprocess). A table times the four portable LLM ops (torchplug.ops, served
on the CPU by torchplug's kernels) against their plain-torch reference, and a last one the aten
ops a decode step runs outside the GEMMs (argmax of the logits, F.rms_norm) with torchplug's
kernels withdrawn (stock torch) and registered, in this process. The weight-only table times aten's
_weight_int8pack_mm and _weight_int4pack_mm_for_cpu (group 128) in GB/s of weights (int4: packed
bytes, scales not counted), stock and torchplug, with fp32 / bf16 / fp16 activations, at a decode
row (1 x 2048 by an 8192 x 2048 weight) and a prefill of 128 rows (there stock runs bf16 only: its
fp32 / fp16 loops take seconds a call), beside torchplug's fp16 F.linear on the same weight shape.
A decode row then streams fp16, int8 and int4 weights in the shapes of benchmarks/llm's 499M
decoder layer from memory (views of one buffer of twice the L3), beside a torch.sum of it.
Where the active ISA path rounds decode activations (int4 weights: to int8,
TORCHPLUG_CPU_INT4_ACTIVATIONS; int8 weights: to int16, TORCHPLUG_CPU_INT8_ACTIVATIONS; the avx512
path with AVX512-VNNI, or the avx2 path: TORCHPLUG_CPU_ISA=avx2), a further table times both ops at
1 and 8 decode rows with float and with rounded activations, the two called in turn.
--quick skips the 2048^2 row, the slow stock / bf16 cases, the compiled MLP and the prefill and
from-memory rows of the weight-only tables; --no-compile skips only the MLP; --weight-only runs only
the weight-only tables (and their verdicts).
Verdicts (exit status 1 if one fails): torchplug fp16 >= 1.6x torch fp32 at 1024^2, 2048^2 and the
64x4096 linear; the compiled MLP >= 1.5x faster than stock max-autotune + freezing; both weight-only
ops with fp16 activations >= 20.0x stock at the decode row, and with every activation dtype >= stock's
bf16 path at both shapes; int8 and int4 decode from memory >= 0.9x the fp16 GEMV's GB/s. A figure whose
repeats scatter by more than 1.3x (max/min) is marked ~ and so is a verdict resting on it.
"""

import argparse
import json
import os
import subprocess
import sys
import time
from dataclasses import asdict

import torch
import torch.nn.functional as F

from common import Measurement, Report, clean_env, parser


# (name, flops, setup(dtype) -> zero-argument callable)
def _square(n):
    def setup(dtype):
        a, b = torch.randn(n, n).to(dtype), torch.randn(n, n).to(dtype)
        return lambda: torch.mm(a, b)
    return f"mm {n}x{n} @ {n}x{n}", 2 * n**3, setup


def _linear(m, k, n):
    def setup(dtype):
        x, w = torch.randn(m, k).to(dtype), torch.randn(n, k).to(dtype)
        return lambda: F.linear(x, w)
    return f"linear {m}x{k} @ {k}x{n}", 2 * m * k * n, setup


def _attention_scores(batch, seq, head_dim):
    def setup(dtype):
        q, k = torch.randn(batch, seq, head_dim).to(dtype), torch.randn(batch, seq, head_dim).to(dtype)
        return lambda: torch.bmm(q, k.transpose(1, 2))
    return f"bmm {batch}x{seq}x{head_dim} @ k^T", 2 * batch * seq * seq * head_dim, setup


CASES = [_square(256), _square(1024), _square(2048), _linear(64, 4096, 4096), _attention_scores(32, 512, 128)]
TARGET_RATIO = 1.6  # torchplug fp16 / torch fp32
MLP_TARGET = 1.5  # compiled MLP: stock max-autotune + freezing / torchplug default
TARGET_CASES = ("mm 1024x1024 @ 1024x1024", "mm 2048x2048 @ 2048x2048", "linear 64x4096 @ 4096x4096")


def median_seconds(fn, budget_s=1.5, max_runs=15, once_above_s=2.0) -> list[float]:
    """Seconds per call over repeated calls; a call slower than `once_above_s` is timed once (no warm-up)."""
    return interleaved({"fn": fn}, budget_s, max_runs, once_above_s)["fn"]


def interleaved(fns, budget_s=1.5, max_runs=15, once_above_s=2.0) -> dict[str, list[float]]:
    """{name: seconds per call, one per repeat}, the functions called in turn so that changes in machine
    load hit them alike; one whose first call takes over `once_above_s` keeps that single timing."""
    first = {}
    for name, fn in fns.items():
        start = time.perf_counter()
        fn()  # warm-up, and the estimate
        first[name] = time.perf_counter() - start
    repeat = {name: fn for name, fn in fns.items() if first[name] <= once_above_s}
    runs = max(3, min(max_runs, int(budget_s / max(sum(first[n] for n in repeat), 1e-6)))) if repeat else 0
    samples = {name: [] for name in repeat}
    for _ in range(runs):
        for name, fn in repeat.items():
            start = time.perf_counter()
            fn()
            samples[name].append(time.perf_counter() - start)
    return {name: samples[name] if name in repeat else [first[name]] for name in fns}


def measure(dtypes, quick, skip_slow=False) -> dict[str, dict[str, Measurement]]:
    """{case: {dtype: GFLOP/s}} for this process's kernels, the dtypes interleaved.

    The slow cases (stock fp16 / bf16 above 2 GFLOP) are skipped with `quick` or `skip_slow`."""
    results = {}
    for name, flops, setup in CASES:
        if quick and "2048" in name:
            continue
        fns = {}
        for dtype in dtypes:
            slow_stock = dtype in ("float16-stock", "bfloat16") and flops > 2e9
            if not ((quick or skip_slow) and slow_stock):
                torch.manual_seed(0)
                fns[dtype] = setup(getattr(torch, dtype.split("-")[0]))
        results[name] = {dtype: Measurement.of(f"{name}, {dtype}", [flops / sec / 1e9 for sec in secs], "GFLOP/s")
                         for dtype, secs in interleaved(fns).items()}
    return results


MLP_BATCHES = (64, 512)


def compiled_mlp_ms(mode) -> dict[int, list[float]]:
    """{batch: ms per call} of an fp16 MLP under torch.compile(mode); 'max-autotune' adds freezing."""
    import torch._inductor.config as inductor_config

    torch._dynamo.reset()
    inductor_config.freezing = mode == "max-autotune"
    torch.manual_seed(0)
    mlp = torch.nn.Sequential(torch.nn.Linear(1024, 4096), torch.nn.GELU(), torch.nn.Linear(4096, 1024)).half().eval()
    compiled = torch.compile(mlp, mode=None if mode == "default" else mode)
    result = {}
    with torch.no_grad():
        for batch in MLP_BATCHES:
            x = torch.randn(batch, 1024).half()
            compiled(x)  # compile (and autotune) outside the timing
            result[batch] = [sec * 1e3 for sec in median_seconds(lambda: compiled(x), budget_s=1.0, max_runs=20)]
    inductor_config.freezing = False
    return result


def _to_json(results: dict[str, dict[str, Measurement]]) -> dict:
    return {case: {dtype: asdict(m) for dtype, m in row.items()} for case, row in results.items()}


def _from_json(results: dict) -> dict[str, dict[str, Measurement]]:
    return {case: {dtype: Measurement(**m) for dtype, m in row.items()} for case, row in results.items()}


def stock_worker(quick, compile_mlp):
    """Runs in the subprocess: torch without torchplug's kernels."""
    result = {"gemm": _to_json(measure(["float16-stock"], quick))}
    if compile_mlp:
        result["mlp"] = {mode: compiled_mlp_ms(mode) for mode in ("default", "max-autotune")}
    print(json.dumps(result))


def dtype_worker(quick):
    """Runs in a subprocess, with or without the plugin: fp32 and bf16, the slow cases left out."""
    print(json.dumps(_to_json(measure(["float32", "bfloat16"], quick, skip_slow=True))))


def run_worker(flag, quick, threads, plugin=False, compile_mlp=False):
    env = clean_env() if plugin else clean_env(TORCHPLUG_DISABLE="cpu")
    cmd = [sys.executable, os.path.abspath(__file__), flag, f"--threads={threads}"]
    cmd += (["--quick"] if quick else []) + ([] if compile_mlp else ["--no-compile"])
    out = subprocess.run(cmd, env=env, check=True, capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def other_dtype_rows(report, quick, threads, rounds=5):
    """[case, dtype, stock, with torchplug, ratio]: each process's median, over `rounds` pairs of fresh
    processes without (TORCHPLUG_DISABLE=cpu) and with the plugin, alternating."""
    runs = {plugin: [] for plugin in (False, True)}
    for _ in range(rounds):
        for plugin in runs:
            runs[plugin].append(_from_json(run_worker("--dtype-worker", quick, threads, plugin=plugin)))
    rows = []
    for case, dtypes in runs[True][0].items():
        for dtype in dtypes:
            before, after = (report.add(f"{case}, {dtype}, {'with' if plugin else 'without'} torchplug",
                                        [run[case][dtype].median for run in runs[plugin]], "GFLOP/s")
                             for plugin in (False, True))
            ratio = report.record(after.ratio(before))
            rows.append([case, dtype, before.cell, after.cell, ratio.cell])
    return rows


# ---- portable ops ----------------------------------------------------------------------------------
# Plain-torch references, the definitions torchplug.ops documents (fp32 compute, rounded once).

def _wide(t):
    return t.float() if t.dtype in (torch.float16, torch.bfloat16) else t


def ref_rms_norm(x, w, eps):
    return (_wide(x) * torch.rsqrt(_wide(x).pow(2).mean(-1, keepdim=True) + eps) * _wide(w)).to(x.dtype)


def ref_fused_add_rms_norm_(x, residual, w, eps):
    residual.add_(x)
    x.copy_(ref_rms_norm(residual, w, eps))


def ref_silu_and_mul(x):
    a, b = _wide(x).chunk(2, dim=-1)
    return (F.silu(a) * b).to(x.dtype)


def ref_rotary(q, k, cos, sin):
    def rotate(x):
        x1, x2 = _wide(x).chunk(2, dim=-1)
        c, s = _wide(cos).unsqueeze(-2), _wide(sin).unsqueeze(-2)
        return torch.cat([x1 * c - x2 * s, x2 * c + x1 * s], dim=-1).to(x.dtype)
    return rotate(q), rotate(k)


def op_rows(report):
    from torchplug import ops

    tokens, hidden, inter, heads, kv_heads, head_dim, eps = 512, 4096, 11008, 32, 8, 128, 1e-6
    rows = []
    for dtype in (torch.float32, torch.bfloat16, torch.float16):
        torch.manual_seed(0)
        x, res, w = torch.randn(tokens, hidden).to(dtype), torch.randn(tokens, hidden).to(dtype), torch.randn(hidden).to(dtype)
        gate_up = torch.randn(tokens, 2 * inter).to(dtype)
        q, k = torch.randn(tokens, heads, head_dim).to(dtype), torch.randn(tokens, kv_heads, head_dim).to(dtype)
        angle = torch.randn(tokens, head_dim // 2)
        cos, sin = angle.cos().to(dtype), angle.sin().to(dtype)
        cases = [
            ("rms_norm", f"{tokens}x{hidden}", lambda: ref_rms_norm(x, w, eps), lambda: ops.rms_norm(x, w, eps)),
            # in place on the same buffers every call: the values drift, the work does not
            ("fused_add_rms_norm", f"{tokens}x{hidden}", lambda: ref_fused_add_rms_norm_(x, res, w, eps),
             lambda: ops.fused_add_rms_norm(x, res, w, eps)),
            ("silu_and_mul", f"{tokens}x{2 * inter}", lambda: ref_silu_and_mul(gate_up), lambda: ops.silu_and_mul(gate_up)),
            ("rotary_embedding", f"q {tokens}x{heads}x{head_dim}, k x{kv_heads}", lambda: ref_rotary(q, k, cos, sin),
             lambda: ops.rotary_embedding(q, k, cos, sin)),
        ]
        for name, shape, ref, ours in cases:
            dtype_name = str(dtype).replace("torch.", "")
            t_ref, t_ours = (report.add(f"{name} {dtype_name}, {who}", [sec * 1e6 for sec in
                                        median_seconds(fn, budget_s=0.5, max_runs=25)], "us")
                             for who, fn in (("torch reference", ref), ("torchplug.ops", ours)))
            rows.append([name, dtype_name, shape, t_ref.cell, t_ours.cell, report.record(t_ref.ratio(t_ours)).cell])
    return rows


def decode_op_rows(report):
    from torchplug_cpu import kernels

    rows = []
    for dtype in (torch.float32, torch.bfloat16, torch.float16):
        torch.manual_seed(0)
        logits, w = torch.randn(1, 32000).to(dtype), torch.randn(1024).to(dtype)
        cases = [("argmax(-1)", "1x32000", lambda: logits.argmax(-1, keepdim=True))]
        for shape in ((1, 128, 1024), (1, 1, 1024)):
            x = torch.randn(shape).to(dtype)
            cases.append(("F.rms_norm", "x".join(map(str, shape)), lambda x=x: F.rms_norm(x, (1024,), w, 1e-6)))
        dtype_name = str(dtype).replace("torch.", "")
        for name, shape, fn in cases:
            def microseconds(who, fn=fn, label=f"{name} {shape} {dtype_name}"):
                return report.add(f"{label}, {who}", [sec * 1e6 for sec in median_seconds(fn, budget_s=0.5, max_runs=25)],
                                  "us")

            kernels.unload()
            stock = microseconds("stock")
            kernels.load()
            ours = microseconds("torchplug")
            rows.append([name, dtype_name, shape, stock.cell, ours.cell, report.record(stock.ratio(ours)).cell])
    return rows


# ---- weight-only quantized products ----------------------------------------------------------------

QUANT_SHAPES = ((1, 2048, 8192), (128, 2048, 8192))  # (m, k, n): a decode row, a prefill of 128 tokens
QUANT_GROUP = 128
QUANT_FP16_TARGET = 20.0  # fp16 activations at the decode row, torchplug / stock


def quant_weight(op, n, k, gen):
    """op's n x k weight from gen (int8, or int4 packed as torch packs it on this CPU) and its bytes."""
    if op == "_weight_int8pack_mm":
        return torch.randint(-128, 128, (n, k), dtype=torch.int8, generator=gen), n * k
    packed = torch.ops.aten._convert_weight_to_int4pack_for_cpu(torch.randint(0, 16, (n, k), dtype=torch.int32,
                                                                              generator=gen), 1)
    return packed, n * k // 2


def quant_call(op, x, w, gen):
    """A call of op on activations x and quant_weight's w, with random scales (from gen) in x's dtype."""
    n = w.shape[0]
    if op == "_weight_int8pack_mm":
        scales = (torch.rand(n, generator=gen) * 0.01).to(x.dtype)
        return lambda: torch.ops.aten._weight_int8pack_mm(x, w, scales)
    sz = (torch.rand(x.shape[1] // QUANT_GROUP, n, 2, generator=gen) * 0.01).to(x.dtype)
    return lambda: torch.ops.aten._weight_int4pack_mm_for_cpu(x, w, QUANT_GROUP, sz)


def quant_rows(report, quick):
    """[shape, op, dtype, stock GB/s, torchplug GB/s, vs stock, vs stock bf16] and the verdicts' (ok, text, ratio)."""
    from torchplug_cpu import kernels

    rows, checks = [], []
    gen = torch.Generator().manual_seed(0)
    for m, k, n in QUANT_SHAPES[:1] if quick else QUANT_SHAPES:
        shape = f"{m}x{k} @ {n}x{k}^T"
        for op in ("_weight_int8pack_mm", "_weight_int4pack_mm_for_cpu"):
            w, weight_bytes = quant_weight(op, n, k, gen)
            figures = {}
            for dtype in (torch.float32, torch.bfloat16, torch.float16):
                fn = quant_call(op, torch.randn(m, k, generator=gen).to(dtype), w, gen)
                name = f"{op} {shape} {str(dtype).replace('torch.', '')}"
                for who in ("stock", "torchplug"):
                    if who == "stock" and m > 1 and dtype != torch.bfloat16:
                        continue
                    (kernels.unload if who == "stock" else kernels.load)()
                    figures[dtype, who] = report.add(f"{name}, {who}", [weight_bytes / s / 1e9 for s in
                                                                         median_seconds(fn, budget_s=1.0)], "GB/s")
                kernels.load()
            for dtype in (torch.float32, torch.bfloat16, torch.float16):
                ours, stock, stock_bf16 = (figures.get(key) for key in ((dtype, "torchplug"), (dtype, "stock"),
                                                                        (torch.bfloat16, "stock")))
                ratio = report.record(ours.ratio(stock)) if stock else None
                vs_bf16 = report.record(ours.ratio(stock_bf16))
                dtype_name = str(dtype).replace("torch.", "")
                rows.append([shape, op, dtype_name, stock.cell if stock else "-", ours.cell,
                             ratio.cell + "x" if ratio else "-", vs_bf16.cell + "x"])
                checks.append((vs_bf16.median >= 1.0, f"{op} {shape} {dtype_name}: torchplug / stock bf16 = "
                                                      f"{vs_bf16.cell}x (target >= 1.0)", vs_bf16))
                if dtype == torch.float16 and m == 1:
                    checks.append((ratio.median >= QUANT_FP16_TARGET, f"{op} {shape} float16: torchplug / stock = "
                                   f"{ratio.cell}x (target >= {QUANT_FP16_TARGET:g})", ratio))
        x16, w16 = torch.randn(m, k, generator=gen).half(), torch.randn(n, k, generator=gen).half()
        linear = report.add(f"F.linear {shape} float16, torchplug", [n * k * 2 / s / 1e9 for s in
                                                                     median_seconds(lambda: F.linear(x16, w16))], "GB/s")
        rows.append([shape, "F.linear (fp16 weights)", "float16", "", linear.cell, "", ""])
    return rows, checks


# One layer of benchmarks/llm's 499M decoder (q, k, v, o, gate, up, down), as (n, k) weights.
DECODER_LAYER = ((2048, 2048), (512, 2048), (512, 2048), (2048, 2048), (5632, 2048), (5632, 2048), (2048, 5632))
STREAM_TARGET = 0.9  # int8 / int4 decode GB/s from memory, against the fp16 GEMV's


def stream_rows(report):
    """[weights, MB, GB/s, vs fp16] and the verdicts: one decode row (fp16 activations) against fp16,
    int8 and int4 weights in the decoder layer's shapes, and torch.sum (the wall), called in turn.
    All four read the same buffer of twice the L3 (as decode reads its weights: from memory; the op
    table's 8192 x 2048 weight may sit in a large L3), as many whole layers of each format as fit:
    on a VM, where a buffer lands in the host's memory moves its speed by tens of percent, so sets
    of their own would compare placements, not kernels. GB/s counts the weight bytes (the scales,
    shared by every copy of a layer, stay in cache)."""
    from torchplug_cpu.tuning import from_memory_bytes

    gen = torch.Generator().manual_seed(0)
    memory = torch.full((from_memory_bytes(),), 0x3C, dtype=torch.uint8)  # fp16 1.06, int8 60, nibbles 12 and 3
    twice_bytes = {"fp16": 4, "int8": 2, "int4": 1}  # twice the bytes of one weight
    views = {"fp16": lambda w, n, k: w.view(torch.float16).view(n, k),
             "int8": lambda w, n, k: w.view(torch.int8).view(n, k),
             "int4": lambda w, n, k: w.view(n, k // 2)}  # _convert_weight_to_int4pack_for_cpu's [n, k / 2] bytes
    scales = {"fp16": lambda n, k: (),
              "int8": lambda n, k: ((torch.rand(n, generator=gen) * 0.01).half(),),
              "int4": lambda n, k: ((torch.rand(k // QUANT_GROUP, n, 2, generator=gen) * 0.01).half(),)}
    calls = {"fp16": lambda x, w: F.linear(x, w),
             "int8": lambda x, w, s: torch.ops.aten._weight_int8pack_mm(x, w, s),
             "int4": lambda x, w, sz: torch.ops.aten._weight_int4pack_mm_for_cpu(x, w, QUANT_GROUP, sz)}
    rows_x = {k: torch.randn(1, k, generator=gen).half() for _, k in DECODER_LAYER}
    fns, sizes = {}, {}
    for name, x2 in twice_bytes.items():
        layer_scales = [scales[name](n, k) for n, k in DECODER_LAYER]
        layer_bytes = sum(n * k * x2 // 2 for n, k in DECODER_LAYER)
        flat, offset = [], 0
        for _ in range(memory.numel() // layer_bytes):
            for (n, k), extra in zip(DECODER_LAYER, layer_scales):
                size = n * k * x2 // 2
                flat.append((k, views[name](memory[offset:offset + size], n, k), *extra))
                offset += size
        fns[name] = lambda flat=flat, call=calls[name]: [call(rows_x[k], *tensors) for k, *tensors in flat]
        sizes[name] = offset
    fns["memory read (torch.sum)"], sizes["memory read (torch.sum)"] = memory.view(torch.float32).sum, memory.numel()
    secs = interleaved(fns, budget_s=8.0, max_runs=11)
    figures = {name: report.add(f"decode row from memory, {name} weights", [sizes[name] / t / 1e9 for t in secs[name]],
                                "GB/s") for name in fns}
    rows, checks = [], []
    for name, gbps in figures.items():
        ratio = report.record(gbps.ratio(figures["fp16"], f"decode row from memory, {name} / fp16 GB/s"))
        rows.append([name, sizes[name] >> 20, gbps.cell, ratio.cell + "x"])
        if name.startswith("int"):
            checks.append((ratio.median >= STREAM_TARGET, f"{name} decode from memory: {ratio.cell}x the fp16 GEMV's "
                           f"GB/s (target >= {STREAM_TARGET:g})", ratio))
    return rows, checks


ROUNDED_ACTIVATION_SHAPES = ((1, 2048, 8192), (8, 2048, 8192), (1, 2048, 512))  # decode rows; a weight in L2


def rounded_activation_rows(report):
    """[op, shape, activations, float GB/s, rounded GB/s, rounded / float]: int4 and int8 decode rows on
    the active ISA path with their activations kept in fp32 and rounded (int4: to int8,
    TORCHPLUG_CPU_INT4_ACTIVATIONS; int8: to int16, TORCHPLUG_CPU_INT8_ACTIVATIONS), called in turn
    (an op whose path has no rounded activations is left out)."""
    from torchplug_cpu import kernels

    ext = kernels.load()
    ops = [op for op in (("_weight_int4pack_mm_for_cpu", ext.int4_int8_dots_supported(), ext.set_int4_int8_dots),
                         ("_weight_int8pack_mm", ext.int8_int16_dots_supported(), ext.set_int8_int16_dots)) if op[1]]
    rows, gen = [], torch.Generator().manual_seed(0)
    try:
        for op, _, allow in ops:
            for m, k, n in ROUNDED_ACTIVATION_SHAPES:
                shape = f"{m}x{k} @ {n}x{k}^T"
                w, weight_bytes = quant_weight(op, n, k, gen)
                for dtype in (torch.bfloat16, torch.float16):
                    fn = quant_call(op, torch.randn(m, k, generator=gen).to(dtype), w, gen)
                    secs = interleaved({"float": lambda fn=fn: (allow(False), fn()),
                                        "rounded": lambda fn=fn: (allow(True), fn())}, budget_s=2.0, max_runs=101)
                    dtype_name = str(dtype).replace("torch.", "")
                    fl, rounded = (report.add(f"{op} {shape} {dtype_name}, {name} activations",
                                              [weight_bytes / t / 1e9 for t in secs[name]], "GB/s")
                                   for name in ("float", "rounded"))
                    rows.append([op, shape, dtype_name, fl.cell, rounded.cell,
                                 report.record(rounded.ratio(fl)).cell + "x"])
    finally:
        ext.set_int4_int8_dots(kernels.int4_activations() == "int8")
        ext.set_int8_int16_dots(kernels.int8_activations() == "int16")
    return rows


def main():
    cli = parser(__doc__)
    cli.add_argument("--quick", action="store_true",
                     help="skip the 2048x2048 row, the stock fp16 / bf16 cases above 2 GFLOP per call, and the "
                          "compiled MLP (the fp32 / bf16 comparison and the portable ops still run)")
    cli.add_argument("--no-compile", action="store_true", help="skip only the compiled MLP table and its verdicts")
    cli.add_argument("--threads", type=int, default=torch.get_num_threads(), help="torch threads (default: all)")
    cli.add_argument("--weight-only", action="store_true", help="only the weight-only quantized table")
    cli.add_argument("--stock-worker", action="store_true", help=argparse.SUPPRESS)
    cli.add_argument("--dtype-worker", action="store_true", help=argparse.SUPPRESS)
    args = cli.parse_args()
    torch.set_num_threads(args.threads)
    compile_mlp = not (args.quick or args.no_compile)
    if args.stock_worker:
        return stock_worker(args.quick, compile_mlp)
    if args.dtype_worker:
        return dtype_worker(args.quick)

    report = Report("fp16_gemm", args)
    if args.weight_only:
        return weight_only_table(report, args)
    stock_run = run_worker("--stock-worker", args.quick, args.threads, compile_mlp=compile_mlp)
    stock = _from_json(stock_run["gemm"])
    from torchplug_cpu import kernels

    ext = kernels.load()  # autoload registered them if built; this builds them if not
    ours = measure(["float32", "float16", "bfloat16"], args.quick)
    mlp = compiled_mlp_ms("default") if compile_mlp else None
    for results in (stock, ours):
        for row in results.values():
            for m in row.values():
                report.record(m)

    print(f"{torch.get_num_threads()} threads, torch {torch.__version__}, "
          f"torchplug ISA path: {ext.current_isa()} (of {', '.join(ext.supported_isas())})\n")
    print("GFLOP/s, medians (* = timed once: over 2 s per call; - = skipped by --quick)\n")

    def cell(results, case, dtype):
        if dtype not in results.get(case, {}):
            return "-"
        m = results[case][dtype]
        return m.cell + ("*" if m.repeats == 1 else "")

    rows, checks = [], []
    for case in ours:
        ratio = report.record(ours[case]["float16"].ratio(ours[case]["float32"], f"{case}, torchplug fp16 / torch fp32"))
        rows.append([case, cell(ours, case, "float32"), cell(stock, case, "float16-stock"), cell(ours, case, "float16"),
                     cell(ours, case, "bfloat16"), ratio.cell])
        if case in TARGET_CASES:
            checks.append((ratio.median >= TARGET_RATIO,
                           f"{case}: torchplug fp16 / torch fp32 = {ratio.cell} (target >= {TARGET_RATIO})", ratio))
    report.table(["shape", "torch fp32", "torch fp16 (stock)", "torchplug fp16", "torch bf16", "torchplug fp16 / fp32"],
                 rows)
    print()
    for ok, text, ratio in checks:
        report.verdict(ok, text, ratio)
    print("\nfp32 / bf16 GFLOP/s without torchplug and with it: medians of 5 pairs of fresh processes, "
          "alternating (target: within 3%)\n")
    report.table(["shape", "dtype", "stock", "with torchplug", "ratio"], other_dtype_rows(report, args.quick, args.threads))
    if mlp:
        print("\nfp16 MLP 1024->4096->1024 (GELU) under torch.compile, ms per call (median)\n")
        mlp_rows, speedups = [], []
        for batch in MLP_BATCHES:
            stock_default, best_stock = (report.add(f"compiled MLP batch {batch}, stock {mode}",
                                                    stock_run["mlp"][mode][str(batch)], "ms")
                                         for mode in ("default", "max-autotune"))
            ours_mlp = report.add(f"compiled MLP batch {batch}, torchplug default", mlp[batch], "ms")
            speedup = report.record(best_stock.ratio(ours_mlp, f"compiled MLP batch {batch}, speed-up vs stock best"))
            mlp_rows.append([batch, stock_default.cell, best_stock.cell, ours_mlp.cell, speedup.cell])
            speedups.append((batch, speedup))
        report.table(["batch", "stock default", "stock max-autotune + freezing", "torchplug default",
                      "speed-up vs stock best"], mlp_rows)
        print()
        for batch, speedup in speedups:
            report.verdict(speedup.median >= MLP_TARGET, f"compiled MLP batch {batch}: stock max-autotune+freezing / "
                           f"torchplug default = {speedup.cell} (target >= {MLP_TARGET})", speedup)
    print("\nPortable ops, microseconds (median), plain-torch reference vs torchplug's kernel\n")
    report.table(["op", "dtype", "shape", "torch reference", "torchplug.ops", "speed-up"], op_rows(report))
    print("\naten ops of a decode step, microseconds (median): torch's kernels (torchplug's withdrawn) vs torchplug's\n")
    report.table(["op", "dtype", "shape", "stock torch", "torchplug", "speed-up"], decode_op_rows(report))
    return weight_only_table(report, args)


def weight_only_table(report, args):
    from torchplug_cpu import kernels

    kernels.load()
    print(f"\nWeight-only quantized products, {torch.get_num_threads()} threads, torchplug ISA path "
          f"{kernels.current_isa()}: GB/s of weights (median; int4: packed bytes; group {QUANT_GROUP})\n")
    rows, quant_checks = quant_rows(report, args.quick)
    report.table(["shape", "op", "activations", "stock", "torchplug", "vs stock", "vs stock bf16"], rows)
    if not args.quick:
        print("\nOne decode row (fp16 activations) over the 499M decoder's layer shapes, fp16, int8 and int4 weights "
              "as views of one buffer of twice the L3, and torch.sum over it, called in turn: GB/s of weights (median)\n")
        rows, stream_checks = stream_rows(report)
        report.table(["weights", "MB", "GB/s", "vs fp16"], rows)
        quant_checks += stream_checks
    rounded_rows = rounded_activation_rows(report)
    if rounded_rows:
        print(f"\nDecode rows with float and rounded activations (int4 weights: int8, TORCHPLUG_CPU_INT4_ACTIVATIONS; "
              f"int8 weights: int16, TORCHPLUG_CPU_INT8_ACTIVATIONS), ISA path {kernels.current_isa()}, torch's "
              f"{torch.backends.cpu.get_cpu_capability()} layout, called in turn: GB/s of weights (median)\n")
        report.table(["op", "shape", "activations", "float", "rounded", "rounded / float"], rounded_rows)
    print()
    for ok, text, ratio in quant_checks:
        report.verdict(ok, text, ratio)
    return report.finish()


if __name__ == "__main__":
    sys.exit(main())
