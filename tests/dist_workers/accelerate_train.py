"""Multi-process training through HF accelerate, as `accelerate launch --multi_gpu` runs a script.

What GPU training scripts ask of the collectives: DDP with accelerate's bf16 communication hook,
`accelerator.gather` (a flat all_gather_into_tensor output wherever the backend is not gloo) and
`accelerator.pad_across_processes` (which gathers every rank's shape first). Each rank prints what
it saw as JSON in <argv[1]>/rank<N>.json (the launcher merges the ranks' output streams).
"""

import json
import sys
from pathlib import Path

import torch
from accelerate import Accelerator
from accelerate.utils import DDPCommunicationHookType, DistributedDataParallelKwargs

accelerator = Accelerator(kwargs_handlers=[DistributedDataParallelKwargs(comm_hook=DDPCommunicationHookType.BF16)])
rank, device = accelerator.process_index, accelerator.device

torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.Tanh(), torch.nn.Linear(32, 4))
optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
model, optimizer = accelerator.prepare(model, optimizer)

data = torch.Generator().manual_seed(1000 + rank)
for _ in range(4):
    x, y = torch.randn(8, 16, generator=data).to(device), torch.randn(8, 4, generator=data).to(device)
    loss = torch.nn.functional.mse_loss(model(x), y)
    optimizer.zero_grad()
    accelerator.backward(loss)
    optimizer.step()

gathered = accelerator.gather(torch.full((2, 3), float(rank), device=device))
padded = accelerator.pad_across_processes(torch.full((rank + 1, 2), rank + 1.0, device=device), dim=0, pad_index=-1)
weights = torch.cat([p.detach().flatten() for p in accelerator.unwrap_model(model).parameters()])
Path(sys.argv[1], f"rank{rank}.json").write_text(json.dumps({
    "rank": rank, "device": str(device), "backend": accelerator.state.backend,
    "distributed_type": str(accelerator.distributed_type),
    "comm_hook": model._get_ddp_logging_data().get("comm_hook"),
    "loss": loss.item(),
    "gathered": gathered.cpu().tolist(),
    "padded_gathered": accelerator.gather(padded).cpu().tolist(),
    "weights_everywhere_equal": bool(torch.equal(*accelerator.gather(weights[None]).cpu())),
}))
accelerator.end_training()
