"""Collectives called wrongly on emulated devices must raise before any data moves.

Both ranks make each wrong call in step, then a correct all_reduce: if a wrong call had reached
gloo, the ranks would be out of step or the tensors changed. Reports each call's error.
"""

import torch
import torch.distributed as dist

from job import init, refusal, report

rank = init("xccl")
xpu = torch.device("xpu", 0)
errors: dict[str, str] = {}


out = torch.full((4,), -1.0, device=xpu)
errors["cpu_input_xpu_output"] = refusal(lambda: dist.all_gather_into_tensor(out, torch.ones(2)), out)
cuda = torch.full((3,), float(rank), device="cuda")
errors["cuda_tensor_in_xccl_group"] = refusal(lambda: dist.all_reduce(cuda), cuda)
t = torch.full((3,), float(rank + 1), device=xpu)
dist.all_reduce(t)
report({"rank": rank, "errors": errors, "after": t.cpu().tolist()})
dist.destroy_process_group()
