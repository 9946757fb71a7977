"""Sweep the launch configurations of torchplug's shared Triton kernels on a real GPU.

    python benchmarks/gpu_launch_sweep.py [--rows 4096] [--hidden 8192]

For each kernel and each variant of the backend's LaunchConfig it prints the device time (timed as
gpu_ops.py times it, without the host's cost of issuing the calls), the
host's cost of one call, and GB/s as a fraction of a device-to-device copy of the same bytes
measured in the same run (the bandwidth the memory really gives, below the spec sheet's peak).
Verdicts: none; it informs the launch settings in kernels/launch.py, and gpu_ops.py holds the verdicts.
Without a CUDA GPU it prints SKIP and exits 0.
"""

import dataclasses
import statistics

from common import Report, parser
from gpu_ops import host_seconds, timed


def main() -> int:
    p = parser(__doc__)
    p.add_argument("--rows", type=int, default=4096)
    p.add_argument("--hidden", type=int, default=8192)
    args = p.parse_args()
    import torch

    from torchplug.kernels import norms, activations
    from torchplug_cuda import PROFILE

    if not torch.cuda.is_available():
        print("SKIP: no CUDA GPU")
        return 0
    base = PROFILE.launch
    rows, hidden = args.rows, args.hidden
    x = torch.randn(rows, hidden, device="cuda", dtype=torch.float16)
    residual, w = torch.randn_like(x), torch.randn(hidden, device="cuda", dtype=torch.float16)
    gated = torch.randn(rows, 2 * hidden, device="cuda", dtype=torch.float16)
    copy_src = torch.empty(rows * hidden * 2, device="cuda", dtype=torch.float16)
    copy_dst = torch.empty_like(copy_src)
    def device_seconds(fn) -> float:
        return statistics.median(timed(fn, torch.cuda, repeats=3, loops=20))

    copy_gbs = 2 * copy_src.nbytes / device_seconds(lambda: copy_dst.copy_(copy_src)) / 1e9
    print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}; device-to-device copy {copy_gbs:.0f} GB/s")
    report, rows_out = Report("gpu_launch_sweep", args), []
    variants = {"default": base}
    for warps in (4, 8, 16, 32):
        variants[f"max_warps={warps},vector_bytes=4"] = dataclasses.replace(base, max_warps=warps, vector_bytes=4)
    for block in (2048, 4096, 8192):
        for vector in (16, 8):
            variants[f"elementwise_block={block},vector_bytes={vector}"] = dataclasses.replace(
                base, elementwise_block=block, vector_bytes=vector)
    element = x.element_size()
    kernels = {
        "rms_norm": (2 * x.numel() * element, lambda c: norms.rms_norm(x, w, 1e-6, c)),
        "fused_add_rms_norm": (4 * x.numel() * element,
                               lambda c: norms.fused_add_rms_norm_(x, residual, w, 1e-6, c)),
        "silu_and_mul": (3 * x.numel() * element, lambda c: activations.silu_and_mul(gated, c)),
        "torch F.rms_norm": (2 * x.numel() * element,
                             lambda c: torch.nn.functional.rms_norm(x, (hidden,), w, 1e-6)),
    }
    for name, (nbytes, run) in kernels.items():
        for label, config in (variants.items() if not name.startswith("torch") else [("-", base)]):
            seconds = device_seconds(lambda: run(config))
            host = host_seconds(lambda: run(config), torch.cuda)
            gbs = nbytes / seconds / 1e9
            rows_out.append([name, label, f"{seconds * 1e6:.1f}", f"{host * 1e6:.1f}", f"{gbs:.0f}",
                             f"{gbs / copy_gbs:.0%}"])
    report.table(["kernel", "variant", "device us", "host us", "GB/s", "of copy"], rows_out)
    return report.finish()


if __name__ == "__main__":
    raise SystemExit(main())
