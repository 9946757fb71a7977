"""GPU eager kernels: GB/s against the device's memory bandwidth, and speed-ups over the plain-torch
reference and over torch's own F.rms_norm and silu(a) * b, from the same run.

    python benchmarks/gpu_ops.py [--json PATH] [--rows 4096] [--hidden 8192]
    python benchmarks/gpu_ops.py --emulated     # smoke run: Triton's interpreter on emulated cuda

On a machine where torchplug's cuda, rocm or xpu backend runs natively it times, in float16:
rms_norm, fused_add_rms_norm and silu_and_mul at rows x hidden (default 4096 x 8192), and
rotary_embedding on q/k of rows tokens x 32/8 heads x 128. Each figure is the median of repeats of
a timed loop of device time: on CUDA and ROCm the loop queues behind a sleep kernel and device
events time it, so the host's cost of issuing each call is reported apart ("host us"), not mixed in. Peak bandwidth comes from the device's properties
(memory clock x bus width) where torch reports them, else from a large device-to-device copy timed
in the same run (a lower bound of the peak, so the fraction is then an upper bound).
Verdicts (exit status 1 if one fails): rms_norm, fused_add_rms_norm and silu_and_mul each reach
>= 80% of peak bandwidth and >= 2x the plain-torch reference.
Without such a GPU it prints SKIP and exits 0; --emulated runs tiny shapes on emulated cuda under
Triton's interpreter to check the script end to end (its figures mean nothing, no verdicts).
"""

import os
import sys
import time

from common import Report, parser

BANDWIDTH_TARGET, SPEEDUP_TARGET = 0.80, 2.0
GPU_BACKENDS = ("cuda", "rocm", "xpu")


def parse_args():
    p = parser(__doc__)
    p.add_argument("--rows", type=int, default=4096)
    p.add_argument("--hidden", type=int, default=8192)
    p.add_argument("--emulated", action="store_true", help="smoke run on emulated cuda under Triton's interpreter")
    args = p.parse_args()
    if args.emulated:  # read by torchplug inside `import torch`, so set before it
        os.environ.update(TORCHPLUG_EMULATE="cuda", TRITON_INTERPRET="1")
        args.rows, args.hidden = min(args.rows, 8), min(args.hidden, 256)
    return args


def gpu_backend(emulated: bool):
    """The torchplug GPU backend that runs natively here (with --emulated: the emulated one), or None."""
    from torchplug.entrypoints import loaded, loaded_backend

    wanted = "emulated" if emulated else "native"
    found = [loaded_backend(n) for n in GPU_BACKENDS if n in loaded()]
    return next((b for b in found if b.status().mode == wanted), None)


def timed(fn, device_module, *, repeats: int, loops: int) -> list[float]:
    """Seconds per call of fn() on the device, one sample per repeat of `loops` calls. Where the device
    has a sleep kernel (CUDA, ROCm) the calls queue behind it and device events time them, so the
    host's cost of issuing a call (Python, the dispatcher, Triton's launcher) is not counted when it
    exceeds the kernel's; elsewhere wall time between synchronisations."""
    sync = device_module.synchronize
    fn()
    sync()
    held = hasattr(device_module, "_sleep") and hasattr(device_module, "Event")
    samples = []
    for _ in range(repeats):
        if held:
            start, end = device_module.Event(enable_timing=True), device_module.Event(enable_timing=True)
            device_module._sleep(20_000_000)  # ~10 ms on a 2 GHz GPU: longer than issuing the loop takes
            start.record()
            for _ in range(loops):
                fn()
            end.record()
            sync()
            samples.append(start.elapsed_time(end) / 1e3 / loops)
            continue
        began = time.perf_counter()
        for _ in range(loops):
            fn()
        sync()
        samples.append((time.perf_counter() - began) / loops)
    return samples


def host_seconds(fn, device_module, calls: int = 100) -> float:
    """Seconds the host spends issuing one call of fn() (the device may still be running it)."""
    fn()
    device_module.synchronize()
    began = time.perf_counter()
    for _ in range(calls):
        fn()
    spent = time.perf_counter() - began
    device_module.synchronize()
    return spent / calls


def peak_bandwidth(device_module, device, repeats, loops) -> tuple[float, str]:
    """Bytes/s of the device's memory: from its properties, else a timed 1 GiB copy."""
    import torch

    props = device_module.get_device_properties(device)
    clock_khz, bus_bits = getattr(props, "memory_clock_rate", 0), getattr(props, "memory_bus_width", 0)
    if clock_khz and bus_bits:
        return clock_khz * 1e3 * bus_bits / 8 * 2, f"{props.name}: memory clock x bus width (DDR)"
    src = torch.empty(1 << 29, dtype=torch.float16, device=device)
    dst = torch.empty_like(src)
    seconds = min(timed(lambda: dst.copy_(src), device_module, repeats=repeats, loops=loops))
    return 2 * src.nbytes / seconds, f"{props.name}: measured copy (properties lack the memory clock)"


def main() -> int:
    args = parse_args()
    import torch
    import torch.nn.functional as F

    from torchplug import dispatcher, ops
    from torchplug.dispatcher import portable as reference

    found = gpu_backend(args.emulated)
    if found is None:
        print("SKIP: no GPU here that torchplug's cuda, rocm or xpu backend drives natively "
              "(native runs are unverified on this machine); --emulated runs a smoke test")
        return 0
    report = Report("gpu_ops", args)
    name, device_module = found.spec.name, getattr(torch, found.spec.device_type)
    device = torch.device(found.spec.device_type, 0)
    repeats, loops = (3, 1) if args.emulated else (7, 20)
    rows, hidden = args.rows, args.hidden
    gen = torch.Generator(device="cpu").manual_seed(0)
    x = torch.randn(rows, hidden, generator=gen).half().to(device)
    residual, w = torch.randn_like(x), torch.randn(hidden, generator=gen).half().to(device)
    gated = torch.randn(rows, 2 * hidden, generator=gen).half().to(device)
    heads, kv_heads, head_dim = 32, 8, 128
    q = torch.randn(rows, heads, head_dim, generator=gen).half().to(device)
    k = torch.randn(rows, kv_heads, head_dim, generator=gen).half().to(device)
    angle = torch.randn(rows, head_dim // 2, generator=gen)
    cos, sin = angle.cos().to(device), angle.sin().to(device)
    element = x.element_size()

    def silu_mul_torch(t):  # torch's own ops, in the input's dtype
        a, b = t.chunk(2, dim=-1)
        return F.silu(a) * b

    cases = [  # name, bytes moved, torchplug op, plain-torch reference, torch's own op (or None)
        ("rms_norm", 2 * x.numel() * element, lambda: ops.rms_norm(x, w, 1e-6),
         lambda: reference.rms_norm_ref(x, w, 1e-6), lambda: F.rms_norm(x, (hidden,), w, 1e-6)),
        ("fused_add_rms_norm", 4 * x.numel() * element,
         lambda: torch.ops.torchplug.fused_add_rms_norm_(x, residual, w, 1e-6),
         lambda: reference.fused_add_rms_norm_ref_(x, residual, w, 1e-6), None),
        ("silu_and_mul", 3 * x.numel() * element, lambda: ops.silu_and_mul(gated),
         lambda: reference.silu_and_mul_ref(gated), lambda: silu_mul_torch(gated)),
        ("rotary_embedding", 2 * (q.numel() + k.numel()) * element, lambda: ops.rotary_embedding(q, k, cos, sin),
         lambda: (reference.rotate(q, cos, sin), reference.rotate(k, cos, sin)), None),
    ]
    peak, peak_source = peak_bandwidth(device_module, device, repeats, max(1, loops // 4))
    print(f"{name} backend, {device}; peak bandwidth {peak / 1e9:.0f} GB/s ({peak_source})\n")
    rows_out, checks = [], []
    for op, nbytes, ours, plain, torch_own in cases:
        with dispatcher.trace() as t:
            ours()
        served = next((e.served_by for e in t.events if e.op.startswith("torchplug::")), "")
        samples = timed(ours, device_module, repeats=repeats, loops=loops)
        mine = report.add(f"{op} torchplug", samples, "s")
        ref = report.add(f"{op} plain-torch reference", timed(plain, device_module, repeats=repeats, loops=loops), "s")
        own = (report.add(f"{op} torch", timed(torch_own, device_module, repeats=repeats, loops=loops), "s")
               if torch_own else None)
        gbs = report.add(f"{op} GB/s", [nbytes / seconds / 1e9 for seconds in samples], "GB/s")
        vs_ref = report.record(ref.ratio(mine, f"{op} speed-up vs reference"))
        vs_own = report.record(own.ratio(mine, f"{op} speed-up vs torch")) if own else None
        host = host_seconds(ours, device_module, calls=max(loops, 10))
        rows_out.append([op, served or "(not a kernel route)", f"{mine.median * 1e6:.1f}", f"{host * 1e6:.1f}", gbs.cell,
                         f"{gbs.median * 1e9 / peak:.0%}", vs_ref.cell, vs_own.cell if vs_own else "-"])
        if op != "rotary_embedding":
            checks.append((op, gbs, vs_ref))
    report.table(["op", "served by", "device us", "host us", "GB/s", "of peak", "x reference", "x torch"], rows_out)
    if not args.emulated:
        for op, gbs, vs_ref in checks:
            report.verdict(gbs.median * 1e9 >= BANDWIDTH_TARGET * peak,
                           f"{op} >= {BANDWIDTH_TARGET:.0%} of peak bandwidth at {rows}x{hidden} fp16", gbs)
            report.verdict(vs_ref.median >= SPEEDUP_TARGET, f"{op} >= {SPEEDUP_TARGET}x the plain-torch reference",
                           vs_ref)
    return report.finish()


if __name__ == "__main__":
    sys.exit(main())
