"""The canary compile: a small fused graph compiled for a device and checked against eager.

torchplug's compile targets patch torch internals (patches.py); if a torch release changes them,
this fails first, with the reason. `torchplug doctor` runs it for every emulated device. It cannot
run inside another compile (torch.compile's compile lock would deadlock), so it is never run
implicitly on a user's first compile.
"""

import torch

from .patches import TORCH_RANGE


def canary(device: torch.device) -> str:
    """Compile x -> layer_norm(softmax(x * 2 + 1)) with a reduction and a matmul; raise if it is wrong."""

    def fused(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.layer_norm(torch.softmax(x * 2 + 1, -1) @ w, (8,))

    generator = torch.Generator().manual_seed(0)
    x, w = torch.randn(4, 16, generator=generator), torch.randn(16, 8, generator=generator)
    try:
        got = torch.compile(fused)(x.to(device), w.to(device)).cpu()
    except Exception as err:
        raise RuntimeError(
            f"the torch.compile canary failed on {device} ({type(err).__name__}: {str(err).strip().splitlines()[0]}); "
            f"torchplug's compile targets are verified for torch {TORCH_RANGE}, this is torch {torch.__version__}"
        ) from err
    error = float((got - fused(x, w)).abs().max())
    if error > 1e-4:
        raise RuntimeError(f"the torch.compile canary on {device} is off by {error} from eager")
    return f"compiled softmax+matmul+layer_norm matches eager on {device}"
