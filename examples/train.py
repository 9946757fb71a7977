"""An ordinary CUDA training script: forward, backward, AdamW, gradient clipping, AMP, torch.compile.

    TORCHPLUG_EMULATE=cuda python examples/train.py --amp fp16     # emulated cuda, CPU wheel of torch
    TORCHPLUG_EMULATE=rocm python examples/train.py --amp bf16     # the rocm backend's emulated 'cuda'
    python examples/train.py --device cpu --amp fp16               # the same steps on the CPU

Nothing in it knows about torchplug. It prints the final loss and a checksum of the weights, and
with --save writes them, so runs on different devices can be compared.
"""

import argparse

import torch

AMP_DTYPES = {"fp16": torch.float16, "bf16": torch.bfloat16}


def train(device: str, steps: int = 8, amp: str | None = None, compile: bool = False) -> dict[str, torch.Tensor]:
    """Train a small MLP for `steps` steps on `device`; the trained weights, on the CPU."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Linear(16, 64), torch.nn.GELU(), torch.nn.Linear(64, 64), torch.nn.GELU(), torch.nn.Linear(64, 4),
    ).to(device)
    forward = torch.compile(model) if compile else model
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    device_type = torch.device(device).type
    # fp16 gradients can overflow: the scaler scales the loss up and skips steps with inf gradients.
    scaler = torch.amp.GradScaler(device_type, enabled=amp == "fp16")
    data = torch.Generator().manual_seed(1)
    for _ in range(steps):
        x = torch.randn(32, 16, generator=data).to(device, non_blocking=True)
        y = torch.randn(32, 4, generator=data).to(device, non_blocking=True)
        with torch.autocast(device_type, dtype=AMP_DTYPES.get(amp, torch.float32), enabled=amp is not None):
            loss = torch.nn.functional.mse_loss(forward(x), y)
        optimizer.zero_grad()
        scaler.scale(loss).backward()
        scaler.unscale_(optimizer)
        torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=1.0)
        scaler.step(optimizer)
        scaler.update()
    print(f"device={device} amp={amp} compile={compile} steps={steps} loss={loss.item():.6f} "
          f"checksum={sum(float(p.double().sum()) for p in model.parameters()):.6f}")
    return {name: value.detach().cpu() for name, value in model.state_dict().items()}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--amp", choices=sorted(AMP_DTYPES), help="autocast to this dtype")
    parser.add_argument("--compile", action="store_true", help="train the torch.compile'd model")
    parser.add_argument("--save", help="write the trained state_dict here (torch.save)")
    args = parser.parse_args()
    state = train(args.device, args.steps, args.amp, args.compile)
    if args.save:
        torch.save(state, args.save)


if __name__ == "__main__":
    main()
