"""Collectives called wrongly on emulated devices must raise before any data moves.

Both ranks make each wrong call in step, then a correct all_reduce: if a wrong call had reached
gloo, the ranks would be out of step or the tensors changed. Reports each call's error.
"""

import torch
import torch.distributed as dist

from job import init, report

rank = init("xccl")
xpu = torch.device("xpu", 0)
errors: dict[str, str] = {}


def refused(name: str, call, *untouched: torch.Tensor) -> None:
    before = [t.cpu().clone() for t in untouched]
    try:
        call()
        errors[name] = "no error"
    except Exception as err:
        errors[name] = f"{type(err).__name__}: {err}"
    if any(not torch.equal(b, t.cpu()) for b, t in zip(before, untouched)):
        errors[name] += " [DATA CHANGED]"


out = torch.full((4,), -1.0, device=xpu)
refused("cpu_input_xpu_output", lambda: dist.all_gather_into_tensor(out, torch.ones(2)), out)
cuda = torch.full((3,), float(rank), device="cuda")
refused("cuda_tensor_in_xccl_group", lambda: dist.all_reduce(cuda), cuda)
t = torch.full((3,), float(rank + 1), device=xpu)
dist.all_reduce(t)
report({"rank": rank, "errors": errors, "after": t.cpu().tolist()})
dist.destroy_process_group()
