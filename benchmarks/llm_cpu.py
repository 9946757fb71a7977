"""A Llama-class decoder on the CPU: prefill and decode tokens/s, torchplug against stock torch and llama.cpp.

    python benchmarks/llm_cpu.py [--model tiny|111m|499m] [--rounds N] [--batches 1,8] [--dtypes fp32,bf16,fp16]
                                 [--quant int8|int4 [--group G] [--no-torchao]] [--threads N] [--no-compile] [--hf] [--quick]
                                 [--json PATH]

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
second. The row "memory read" is the wall it can reach: torch.sum over a 1 GB float32 buffer
(larger than these machines' L3) on the same threads, timed in every round with the engines; a
decode step that streams at that speed cannot get faster at batch 1. Every configuration is
timed once per round and the rounds alternate, so load changes on a shared machine hit them alike;
figures are medians over rounds, and ratios are against llama.cpp (batch 1) in the same run. A
figure whose rounds scatter by more than 1.3x (max/min) is marked ~.
--quick: the tiny model, eager only, batch 1, 16-token prefill, 4 decode steps, 2 rounds.

--quant int8|int4: weight-only quantized decoders instead (--dtypes names the activations,
default fp16). Every matrix but the input embedding is quantized: int8 per output channel,
symmetric (aten._weight_int8pack_mm, called directly: torchao 0.18's Int8WeightOnlyConfig does not
call it, it dequantizes the weight on every call); int4 in groups of --group (default 128) along k,
asymmetric, packed by aten._convert_weight_to_int4pack_for_cpu (aten._weight_int4pack_mm_for_cpu:
through torchao's quantize_ with PrototypeInt4WeightOnlyConfig where torchao imports and --no-torchao
is not given, else called directly: eager, torchao's tensor subclass adds about 11 us of Python per
Linear, its F.linear override, which torch.compile traces away). llama.cpp gets Q8_0 / Q4_0 files written from the same float32 weights by gguf-py's
quantizers. Stock torch runs only with bf16 activations, the one dtype its CPU kernels vectorise
(fp16 and fp32 run scalar loops, 20-40x slower: benchmarks/fp16_gemm.py's weight-only table). The
logits after the prompt are compared, per engine, with a float32 run of the same decoder on the
weights that engine multiplies by (dequantized), and printed. GB/s counts the quantized bytes
(scales included) a decode step streams.

Verdicts (with llama.cpp measured; exit status 1 if one fails): at batch 1, torchplug fp16
compiled decode >= 1.0x llama.cpp F16, eager decode >= 0.8x, eager prefill >= 1.0x; and (with
compile) torchplug fp16 compiled decode >= its eager decode. With --quant: torchplug eager and
compiled decode >= 1.0x llama.cpp Q8_0 / Q4_0 and eager prefill >= 0.8x, for the first of --dtypes.
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
from llm.model import PRESETS, Llama, hf_model, quantize, random_state, streamed_bytes

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}
GGUF_TYPES = {None: "F16", "int8": "Q8_0", "int4": "Q4_0"}
GGUF_BYTES = {"F16": 2, "Q8_0": 34 / 32, "Q4_0": 18 / 32}  # per weight: blocks of 32 with an fp16 scale
VERDICT_QUANT_DECODE, VERDICT_QUANT_PREFILL = 1.0, 0.8
PROMPT = 16
VERDICT_DECODE = {"compile": 1.0, "eager": 0.8}
VERDICT_PREFILL = 1.0
READ_BYTES = 1 << 30  # the memory read's buffer


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
    weight_bytes: int  # what a decode step streams
    samples: dict[str, list[float]] = field(default_factory=lambda: {"prefill": [], "decode": []})


def set_kernels(on: bool | None) -> None:
    from torchplug_cpu import kernels

    if on:
        kernels.load()
    elif on is False:
        kernels.unload()


def tokens(batch: int, n: int, vocab: int) -> torch.Tensor:
    return torch.randint(3, vocab, (batch, n), generator=torch.Generator().manual_seed(n))


def torch_engine(name: str, step: Callable, args, dtype: str, mode: str, batch: int, torchplug: bool,
                 weight_bytes: int) -> Engine:
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
            logits = step(token, torch.tensor(PROMPT + i))
            token = logits.argmax(-1, keepdim=True)
        seconds = time.perf_counter() - start
        if not torch.isfinite(logits).all():  # a wrong engine is not timed (a stale compiled graph once was)
            raise RuntimeError(f"{name} {dtype} {mode} batch {batch}: the decode's last logits are not finite")
        return seconds

    return Engine(name, dtype, mode, batch, torchplug, prefill, decode, weight_bytes)


def memory_read() -> Callable[[], float]:
    """Seconds for one torch.sum over a READ_BYTES float32 buffer: how fast these threads read memory."""
    buffer = torch.ones(READ_BYTES // 4)

    def read() -> float:
        start = time.perf_counter()
        buffer.sum()
        return time.perf_counter() - start

    return read


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
    qtype = GGUF_TYPES[args.quant]
    path = gguf_file.write(Path(workdir) / f"model-{qtype}.gguf", config, state, qtype)
    threads = torch.get_num_threads()
    if args.llama_no_extra_bufts:
        no_extra_buffer_types(llama_cpp)
    llm = llama_cpp.Llama(str(path), n_ctx=max(args.prefill, PROMPT + args.decode) + 8, n_batch=512,
                          n_threads=threads, n_threads_batch=threads, verbose=False)
    prompt = tokens(1, PROMPT, config.vocab)[0].tolist()
    long = tokens(1, args.prefill, config.vocab)[0].tolist()

    def last_logits() -> np.ndarray:
        # llama-cpp-python 0.3.36 keeps `scores` only with logits_all: read the context's last row
        return np.ctypeslib.as_array(llm._ctx.get_logits(), shape=(config.vocab,))

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
            llm.eval([int(np.argmax(last_logits()))])
        return time.perf_counter() - start

    def logits() -> torch.Tensor:
        llm.reset()
        llm.eval(prompt)
        return torch.from_numpy(last_logits().copy())

    streamed = sum(t.numel() * (GGUF_BYTES[qtype] if t.dim() == 2 else 4) for name, t in state.items()
                   if name != "model.embed_tokens.weight")
    engine = Engine(f"llama.cpp {llama_cpp.__version__}", qtype.lower(), "llama.cpp", 1, None, prefill, decode,
                    int(streamed))
    if args.quant:
        check_logits(engine.name, qtype, logits(), gguf_file.round_trip(state, qtype), args)
    return engine


def no_extra_buffer_types(llama_cpp) -> None:
    """Load models without ggml's extra CPU buffer types (AMX, repacked Q4_0): llama-cpp-python 0.3.36
    built with GGML_NATIVE on an AMX-INT8 Xeon VM crashed in ggml_backend_amx_mul_mat on Q8_0 / Q4_0."""
    default = llama_cpp.llama_cpp.llama_model_default_params
    if getattr(default, "no_extra_buffer_types", False):
        return

    def params():
        p = default()
        p.use_extra_bufts = False
        return p
    params.no_extra_buffer_types = True
    llama_cpp.llama_cpp.llama_model_default_params = params


def check_logits(label: str, dtype: str, got: torch.Tensor, reference: dict[str, torch.Tensor], args) -> None:
    """Prints how far logits after the prompt are from a float32 run on `reference` (the weights dequantized)."""
    config = PRESETS[args.model]
    prompt = tokens(1, PROMPT, config.vocab)
    with torch.inference_mode():
        want = Llama(config, reference, torch.float32, PROMPT, 1)(prompt, torch.tensor(0))[0].double()
    got = got.reshape(-1).double()
    error = float((got - want).abs().max() / want.abs().max())
    print(f"logits of {label} ({dtype}) against float32 on its dequantized weights: max error {error:.2e} of "
          f"the largest logit, argmax {'agrees' if int(got.argmax()) == int(want.argmax()) else 'DIFFERS'}")


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
        if args.quant:
            weights, reference = quantize(state, args.quant, DTYPES[dtype], args.group, args.torchao)
            set_kernels(True)
            with torch.inference_mode():
                got = Llama(config, weights, DTYPES[dtype], PROMPT, 1)(tokens(1, PROMPT, config.vocab), torch.tensor(0))
            check_logits(f"torchplug {args.quant}", dtype, got[0], reference, args)
        else:
            weights = {name: t.to(DTYPES[dtype]) for name, t in state.items()}
        weight_bytes = streamed_bytes(weights)
        for batch in args.batches:
            for torchplug in (True, False) if not args.quant or dtype == "bf16" else (True,):
                kind = "torchplug" if torchplug else "stock"
                for mode in args.modes:
                    model = Llama(config, weights, DTYPES[dtype], max_len, batch)
                    step = torch.compile(model, dynamic=False) if mode == "compile" else model
                    found.append(torch_engine(kind, step, args, dtype, mode, batch, torchplug, weight_bytes))
                if args.hf:
                    step = hf_step(hf_model(config, weights, DTYPES[dtype]))
                    found.append(torch_engine(f"{kind} HF", step, args, dtype, "eager", batch, torchplug, weight_bytes))
    return found


def run(args, state) -> tuple[list[Engine], list[float]]:
    """The engines with their samples, and the memory read's seconds, one per round."""
    with tempfile.TemporaryDirectory() as workdir, torch.inference_mode():
        found = engines(args, state, workdir)
        read, reads = memory_read(), []
        read()
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
            reads.append(read())
            print(f"round {round_ + 1} of {args.rounds} done, load average {os.getloadavg()[0]:.2f}")
        set_kernels(True)
    return found, reads


def report_engines(report: Report, args, found: list[Engine], reads: list[float]) -> None:
    rows, figures = [], {}
    reference = next((e for e in found if e.mode == "llama.cpp"), None)
    for engine in found:
        label = f"{engine.name}, {engine.dtype}, {engine.mode}, batch {engine.batch}"
        tok_prefill = engine.batch * args.prefill
        prefill = report.add(f"{label}: prefill", [tok_prefill / s for s in engine.samples["prefill"]], "tok/s")
        decode = report.add(f"{label}: decode", [engine.batch * args.decode / s for s in engine.samples["decode"]],
                            "tok/s")
        gbs = report.add(f"{label}: decode weights", [engine.weight_bytes * args.decode / s / 1e9
                                                      for s in engine.samples["decode"]], "GB/s")
        figures[(engine.name, engine.dtype, engine.mode, engine.batch)] = (prefill, decode)
        ratios = ["", ""]
        if reference and engine.batch == 1 and engine is not reference:
            ref_prefill, ref_decode = figures[(reference.name, reference.dtype, "llama.cpp", 1)]
            ratios = [report.record(prefill.ratio(ref_prefill, f"{label}: prefill / llama.cpp")).cell + "x",
                      report.record(decode.ratio(ref_decode, f"{label}: decode / llama.cpp")).cell + "x"]
        rows.append([engine.name, engine.dtype, engine.mode, engine.batch, prefill.cell, decode.cell, gbs.cell, *ratios])
    wall = report.add(f"memory read (torch.sum, {READ_BYTES >> 30} GB float32)", [READ_BYTES / s / 1e9 for s in reads],
                      "GB/s")
    rows.append(["memory read", "fp32", "torch.sum", "", "", "", wall.cell, "", ""])
    report.table(["engine", "dtype", "mode", "batch", f"prefill {args.prefill} tok/s", "decode tok/s", "decode GB/s",
                  "prefill vs llama.cpp", "decode vs llama.cpp"], rows)
    verdicts(report, figures, reference, args.dtypes[0] if args.quant else "fp16", bool(args.quant))


def verdicts(report: Report, figures: dict, reference: Engine | None, dtype: str, quant: bool) -> None:
    eager = figures.get(("torchplug", dtype, "eager", 1))
    compiled = figures.get(("torchplug", dtype, "compile", 1))
    targets = ({"compile": VERDICT_QUANT_DECODE, "eager": VERDICT_QUANT_DECODE}, VERDICT_QUANT_PREFILL) if quant else (
        VERDICT_DECODE, VERDICT_PREFILL)
    if reference and eager:
        ref_prefill, ref_decode = figures[(reference.name, reference.dtype, "llama.cpp", 1)]
        what = f"llama.cpp {reference.dtype.upper()}"
        for mode, ours in (("compile", compiled), ("eager", eager)):
            if ours:
                ratio = ours[1].ratio(ref_decode)
                report.verdict(ratio.median >= targets[0][mode], f"torchplug {dtype} {mode} decode, batch 1: "
                               f"{ratio.median:.2f}x {what} (target >= {targets[0][mode]}x)", ratio)
        ratio = eager[0].ratio(ref_prefill)
        report.verdict(ratio.median >= targets[1], f"torchplug {dtype} eager prefill, batch 1: {ratio.median:.2f}x "
                       f"{what} (target >= {targets[1]}x)", ratio)
    if eager and compiled and not quant:
        ratio = compiled[1].ratio(eager[1])
        report.verdict(ratio.median >= 1.0, f"torchplug fp16 compiled decode, batch 1: {ratio.median:.2f}x eager "
                       "(target >= 1.0x)", ratio)


def torchao_imports() -> bool:
    try:
        import torchao.prototype.quantization.int4.inference_workflow  # noqa: F401
    except Exception as err:  # not installed, or built for another torch
        print(f"torchao: not used ({type(err).__name__}: {str(err)[:80]}); int4 weights by direct op calls")
        return False
    return True


def main() -> int:
    cli = parser(__doc__)
    cli.add_argument("--model", choices=sorted(PRESETS), default="111m", help="decoder size (default 111m)")
    cli.add_argument("--rounds", type=int, default=5, help="alternating rounds (default 5)")
    cli.add_argument("--batches", default="1,8", help="comma-separated batch sizes (default 1,8)")
    cli.add_argument("--dtypes", help="comma-separated, of fp32, bf16, fp16 (default: all three; fp16 with --quant)")
    cli.add_argument("--prefill", type=int, default=128, help="prefill tokens per sequence (default 128)")
    cli.add_argument("--decode", type=int, default=32, help="decode steps timed (default 32)")
    cli.add_argument("--threads", type=int, help="threads for torch and llama.cpp (default: torch's default)")
    cli.add_argument("--no-compile", action="store_true", help="eager only")
    cli.add_argument("--hf", action="store_true", help="also time HF transformers' LlamaForCausalLM (eager)")
    cli.add_argument("--quant", choices=("int8", "int4"), help="weight-only quantized decoders (see above)")
    cli.add_argument("--group", type=int, default=128, choices=(32, 64, 128, 256), help="int4 group size (default 128)")
    cli.add_argument("--llama-no-extra-bufts", action="store_true",
                     help="load llama.cpp models without ggml's extra CPU buffer types (AMX, Q4_0 repack): a workaround "
                          "for builds whose AMX kernels crash (docs/cpu-fp16.md, 'Weight-only int8 and int4')")
    cli.add_argument("--no-torchao", action="store_true",
                     help="int4 weights by direct op calls even where torchao imports (without its per-call Python)")
    cli.add_argument("--quick", action="store_true", help="tiny model, eager, batch 1, short runs, 2 rounds")
    args = cli.parse_args()
    if args.quick:
        args.model, args.rounds, args.batches, args.prefill, args.decode, args.no_compile = "tiny", 2, "1", 16, 4, True
    args.dtypes = args.dtypes or ("fp16" if args.quant else "fp32,bf16,fp16")
    if args.quant and args.hf:
        cli.error("--hf runs unquantized weights only")
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
    args.torchao = args.quant == "int4" and not args.no_torchao and torchao_imports()
    isa = isa_path()
    state = random_state(PRESETS[args.model])
    print(f"model {args.model}: {sum(t.numel() for t in state.values()) / 1e6:.0f}M parameters, "
          f"{torch.get_num_threads()} threads; torchplug ISA path {isa['current']}; {kernels.fp16_status()}; {kernels.fp32_status()}"
          + (f"; {args.quant} weights ({'torchao quantize_' if args.torchao else 'direct op calls'})" if args.quant else ""))
    found, reads = run(args, state)
    report_engines(report, args, found, reads)
    return report.finish()


if __name__ == "__main__":
    sys.exit(main())
