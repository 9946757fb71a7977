"""A Llama-class decoder on the CPU: prefill and decode tokens/s, torchplug against stock torch and llama.cpp.

    python benchmarks/llm_cpu.py [--model tiny|111m|499m] [--rounds N] [--batches 1,8] [--dtypes fp32,bf16,fp16]
                                 [--threads N] [--no-compile] [--hf] [--quick] [--json PATH]

The model (benchmarks/llm/model.py) is a Llama-architecture decoder with random weights: RMSNorm,
rotary, GQA attention through scaled_dot_product_attention, SwiGLU MLP, untied head, a static KV
cache. It runs in fp32, bf16 and fp16, eager and torch.compile'd, with torchplug's CPU kernels
registered ("torchplug": fp16 GEMMs, and fp32 GEMMs on oneDNN where TORCHPLUG_CPU_FP32 routes
them) and unregistered ("stock": torch's own kernels), at each batch size. With --hf, HF
transformers' LlamaForCausalLM, built from a config with the same weights (nothing downloaded),
runs eagerly too, with its own KV cache. With llama-cpp-python and gguf installed, the same
weights are written as an F16 GGUF and llama.cpp is timed at batch 1 on as many threads as torch.

Prefill: one forward over `--prefill` tokens (default 128) per sequence. Decode: `--decode` greedy
tokens (default 32) after a 16-token prompt; tok/s counts every sequence of the batch. GB/s is the
weight bytes a decode step streams (every parameter but the input embedding) times steps per
second. Every configuration is timed once per round and the rounds alternate, so load changes on
a shared machine hit them alike; figures are medians over rounds, and ratios are against llama.cpp
(batch 1) in the same run. A figure whose rounds scatter by more than 1.3x (max/min) is marked ~.
--quick: the tiny model, eager only, batch 1, 16-token prefill, 4 decode steps, 2 rounds.

Verdicts (with llama.cpp measured; exit status 1 if one fails): at batch 1, torchplug fp16
compiled decode >= 1.0x llama.cpp F16, eager decode >= 0.8x, eager prefill >= 1.0x; and (with
compile) torchplug fp16 compiled decode >= its eager decode.
"""

import os
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import torch

from common import Measurement, Report, isa_path, parser
from llm import gguf_file
from llm.model import PRESETS, Llama, hf_model, random_state, streamed_bytes

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}
PROMPT = 16
VERDICT_DECODE = {"compile": 1.0, "eager": 0.8}
VERDICT_PREFILL = 1.0


@dataclass
class Engine:
    """One configuration: `prefill()` and `decode()` return seconds for one timed run each."""

    name: str
    dtype: str
    mode: str  # eager / compile / llama.cpp
    batch: int
    torchplug: bool | None  # whether torchplug's kernels are registered while it runs (None: not torch)
    prefill: Callable[[], float]
    decode: Callable[[], float]
    samples: dict[str, list[float]] = field(default_factory=lambda: {"prefill": [], "decode": []})


def set_kernels(on: bool | None) -> None:
    from torchplug_cpu import kernels

    if on:
        kernels.load()
    elif on is False:
        kernels.unload()


def tokens(batch: int, n: int, vocab: int) -> torch.Tensor:
    return torch.randint(3, vocab, (batch, n), generator=torch.Generator().manual_seed(n))


def torch_engine(name: str, step: Callable, args, dtype: str, mode: str, batch: int, torchplug: bool) -> Engine:
    """Times `step(tokens, start) -> last logits` (a fresh cache at start 0) with greedy decoding."""
    config = PRESETS[args.model]
    prompt, long = tokens(batch, PROMPT, config.vocab), tokens(batch, args.prefill, config.vocab)

    def prefill() -> float:
        start = time.perf_counter()
        step(long, torch.tensor(0))
        return time.perf_counter() - start

    def decode() -> float:
        token = step(prompt, torch.tensor(0)).argmax(-1, keepdim=True)
        start = time.perf_counter()
        for i in range(args.decode):
            token = step(token, torch.tensor(PROMPT + i)).argmax(-1, keepdim=True)
        return time.perf_counter() - start

    return Engine(name, dtype, mode, batch, torchplug, prefill, decode)


def hf_step(model) -> Callable:
    """HF's decode loop: a new DynamicCache at position 0, then the cache the last call returned."""
    cache = {}

    def step(ids: torch.Tensor, start: torch.Tensor) -> torch.Tensor:
        past = None if int(start) == 0 else cache["past"]
        out = model(ids, past_key_values=past, use_cache=True, logits_to_keep=1)
        cache["past"] = out.past_key_values
        return out.logits[:, -1]

    return step


def llama_cpp_engine(args, state, workdir: str) -> Engine | None:
    try:
        import gguf  # noqa: F401
        import llama_cpp
        import numpy as np
    except ImportError as err:
        print(f"llama.cpp: not measured ({err.name} is not installed; see docs/cpu-fp16.md, 'Models')")
        return None
    config = PRESETS[args.model]
    path = gguf_file.write(Path(workdir) / "model-f16.gguf", config, state)
    threads = torch.get_num_threads()
    llm = llama_cpp.Llama(str(path), n_ctx=max(args.prefill, PROMPT + args.decode) + 8, n_batch=512,
                          n_threads=threads, n_threads_batch=threads, verbose=False)
    prompt = tokens(1, PROMPT, config.vocab)[0].tolist()
    long = tokens(1, args.prefill, config.vocab)[0].tolist()

    def prefill() -> float:
        llm.reset()
        start = time.perf_counter()
        llm.eval(long)
        return time.perf_counter() - start

    def decode() -> float:
        llm.reset()
        llm.eval(prompt)
        start = time.perf_counter()
        for _ in range(args.decode):
            llm.eval([int(np.argmax(llm.scores[llm.n_tokens - 1]))])
        return time.perf_counter() - start

    return Engine(f"llama.cpp {llama_cpp.__version__}", "fp16", "llama.cpp", 1, None, prefill, decode)


def engines(args, state, workdir: str) -> list[Engine]:
    import torch._dynamo

    torch._dynamo.config.cache_size_limit = 256  # one compiled step per engine and shape, all on Llama.forward
    torch._dynamo.config.accumulated_cache_size_limit = 1024
    found = []
    llama_cpp = llama_cpp_engine(args, state, workdir)
    config = PRESETS[args.model]
    if llama_cpp:
        found.append(llama_cpp)
    max_len = max(args.prefill, PROMPT + args.decode)
    for dtype in args.dtypes:
        weights = {name: t.to(DTYPES[dtype]) for name, t in state.items()}
        for batch in args.batches:
            for torchplug in (True, False):
                kind = "torchplug" if torchplug else "stock"
                for mode in args.modes:
                    model = Llama(config, weights, DTYPES[dtype], max_len, batch)
                    step = torch.compile(model, dynamic=False) if mode == "compile" else model
                    found.append(torch_engine(kind, step, args, dtype, mode, batch, torchplug))
                if args.hf:
                    step = hf_step(hf_model(config, weights, DTYPES[dtype]))
                    found.append(torch_engine(f"{kind} HF", step, args, dtype, "eager", batch, torchplug))
    return found


def run(args, state) -> list[Engine]:
    with tempfile.TemporaryDirectory() as workdir, torch.inference_mode():
        found = engines(args, state, workdir)
        for engine in found:  # warm-up: compiles, allocates the caches, fills llama.cpp's buffers
            set_kernels(engine.torchplug)
            start = time.perf_counter()
            engine.prefill(), engine.decode()
            if engine.mode == "compile":
                print(f"compiled {engine.name} {engine.dtype} batch {engine.batch} in {time.perf_counter() - start:.0f} s")
        for round_ in range(args.rounds):
            for engine in found:
                set_kernels(engine.torchplug)
                engine.samples["prefill"].append(engine.prefill())
                engine.samples["decode"].append(engine.decode())
            print(f"round {round_ + 1} of {args.rounds} done, load average {os.getloadavg()[0]:.2f}")
        set_kernels(True)
    return found


def report_engines(report: Report, args, found: list[Engine], state) -> None:
    rows, figures = [], {}
    reference = next((e for e in found if e.mode == "llama.cpp"), None)
    for engine in found:
        label = f"{engine.name}, {engine.dtype}, {engine.mode}, batch {engine.batch}"
        tok_prefill = engine.batch * args.prefill
        prefill = report.add(f"{label}: prefill", [tok_prefill / s for s in engine.samples["prefill"]], "tok/s")
        decode = report.add(f"{label}: decode", [engine.batch * args.decode / s for s in engine.samples["decode"]],
                            "tok/s")
        weight_bytes = streamed_bytes(state, DTYPES[engine.dtype])
        gbs = report.add(f"{label}: decode weights", [weight_bytes * args.decode / s / 1e9
                                                      for s in engine.samples["decode"]], "GB/s")
        figures[(engine.name, engine.dtype, engine.mode, engine.batch)] = (prefill, decode)
        ratios = ["", ""]
        if reference and engine.batch == 1 and engine is not reference:
            ref_prefill, ref_decode = figures[(reference.name, "fp16", "llama.cpp", 1)]
            ratios = [report.record(prefill.ratio(ref_prefill, f"{label}: prefill / llama.cpp")).cell + "x",
                      report.record(decode.ratio(ref_decode, f"{label}: decode / llama.cpp")).cell + "x"]
        rows.append([engine.name, engine.dtype, engine.mode, engine.batch, prefill.cell, decode.cell, gbs.cell, *ratios])
    report.table(["engine", "dtype", "mode", "batch", f"prefill {args.prefill} tok/s", "decode tok/s", "decode GB/s",
                  "prefill vs llama.cpp", "decode vs llama.cpp"], rows)
    verdicts(report, figures, reference)


def verdicts(report: Report, figures: dict, reference: Engine | None) -> None:
    eager = figures.get(("torchplug", "fp16", "eager", 1))
    compiled = figures.get(("torchplug", "fp16", "compile", 1))
    if reference and eager:
        ref_prefill, ref_decode = figures[(reference.name, "fp16", "llama.cpp", 1)]
        for mode, ours in (("compile", compiled), ("eager", eager)):
            if ours:
                ratio = ours[1].ratio(ref_decode)
                report.verdict(ratio.median >= VERDICT_DECODE[mode], f"torchplug fp16 {mode} decode, batch 1: "
                               f"{ratio.median:.2f}x llama.cpp F16 (target >= {VERDICT_DECODE[mode]}x)", ratio)
        ratio = eager[0].ratio(ref_prefill)
        report.verdict(ratio.median >= VERDICT_PREFILL, f"torchplug fp16 eager prefill, batch 1: {ratio.median:.2f}x "
                       f"llama.cpp F16 (target >= {VERDICT_PREFILL}x)", ratio)
    if eager and compiled:
        ratio = compiled[1].ratio(eager[1])
        report.verdict(ratio.median >= 1.0, f"torchplug fp16 compiled decode, batch 1: {ratio.median:.2f}x eager "
                       "(target >= 1.0x)", ratio)


def main() -> int:
    cli = parser(__doc__)
    cli.add_argument("--model", choices=sorted(PRESETS), default="111m", help="decoder size (default 111m)")
    cli.add_argument("--rounds", type=int, default=5, help="alternating rounds (default 5)")
    cli.add_argument("--batches", default="1,8", help="comma-separated batch sizes (default 1,8)")
    cli.add_argument("--dtypes", default="fp32,bf16,fp16", help="comma-separated, of fp32, bf16, fp16")
    cli.add_argument("--prefill", type=int, default=128, help="prefill tokens per sequence (default 128)")
    cli.add_argument("--decode", type=int, default=32, help="decode steps timed (default 32)")
    cli.add_argument("--threads", type=int, help="threads for torch and llama.cpp (default: torch's default)")
    cli.add_argument("--no-compile", action="store_true", help="eager only")
    cli.add_argument("--hf", action="store_true", help="also time HF transformers' LlamaForCausalLM (eager)")
    cli.add_argument("--quick", action="store_true", help="tiny model, eager, batch 1, short runs, 2 rounds")
    args = cli.parse_args()
    if args.quick:
        args.model, args.rounds, args.batches, args.prefill, args.decode, args.no_compile = "tiny", 2, "1", 16, 4, True
    unknown = set(args.dtypes.split(",")) - set(DTYPES)
    if unknown:
        cli.error(f"--dtypes: unknown {', '.join(sorted(unknown))}; choose from {', '.join(DTYPES)}")
    if args.rounds < 1 or args.prefill < 1 or args.decode < 1:
        cli.error("--rounds, --prefill and --decode must be at least 1")
    if args.threads:
        torch.set_num_threads(args.threads)
    args.dtypes = args.dtypes.split(",")
    args.batches = [int(b) for b in args.batches.split(",")]
    args.modes = ["eager"] if args.no_compile else ["eager", "compile"]
    report = Report("llm_cpu", args)
    from torchplug_cpu import kernels

    kernels.load()
    isa = isa_path()
    state = random_state(PRESETS[args.model])
    print(f"model {args.model}: {sum(t.numel() for t in state.values()) / 1e6:.0f}M parameters, "
          f"{torch.get_num_threads()} threads; torchplug ISA path {isa['current']}; {kernels.fp32_status()}")
    found = run(args, state)
    report_engines(report, args, found, state)
    return report.finish()


if __name__ == "__main__":
    sys.exit(main())
