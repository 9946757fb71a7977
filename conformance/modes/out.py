"""The `out` mode: the op's out= form writes (and returns) the tensors it is given, with the CPU's values."""

from typing import Any

import torch

from ..cases.opinfo import OpEntry
from ..target import Target
from ..verdicts.compare import Verdict, outputs
from .forward import float64_reference, judge
from .record import Mode
from .sides import Skip, Unsupported, detach, has_tensor, on_cpu, on_device, on_target, sample_args


def out(entry: OpEntry, sample: Any, target: Target) -> Verdict:
    if not entry.supports_out:
        raise Unsupported(f"{entry.name} has no out= variant")
    args, kwargs = sample_args(sample)
    expected = on_cpu(target, lambda: entry.op(*detach(args), **detach(kwargs)))
    leaves = outputs(expected)
    if not leaves or not all(isinstance(t, torch.Tensor) for t in leaves):
        raise Skip("the op's result is not only tensors")

    def buffers(device: torch.device) -> Any:
        made = [torch.empty_like(t, device=device) for t in leaves]
        return made[0] if isinstance(expected, torch.Tensor) else tuple(made)

    cpu_buffers = buffers(torch.device("cpu"))
    cpu_returned = on_cpu(target, lambda: entry.op(*detach(args), **detach(kwargs), **entry.out_kwargs(cpu_buffers)))
    if not (own := judge(entry, outputs(cpu_buffers), leaves, None)).ok:  # fft.ihfftn(out=) on some samples
        raise Skip(f"the CPU's own out= differs from its result without out= ({own.detail}): nothing to hold the device to")
    dev_args, dev_kwargs = on_target(lambda: on_device(entry, args, kwargs, target))
    out_buffers = on_target(lambda: buffers(target.device))
    returned = on_target(lambda: entry.op(*dev_args, **dev_kwargs, **entry.out_kwargs(out_buffers)))
    written = outputs(out_buffers)
    # Ops whose out= form returns nothing on the CPU (split_with_sizes_copy, ...) may return nothing here.
    if cpu_returned is not None and not all(r is w for r, w in zip(outputs(returned), written)):
        return Verdict(False, "the op did not return the out= tensors it was given")
    verdict = judge(entry, written, leaves, float64_reference(entry.op, args, kwargs, target))
    if (verdict.ok and target.device.type != "cpu" and has_tensor(args) and "device" not in kwargs
            and not entry.out_copies):
        wrong = buffers(torch.device("cpu"))
        try:
            entry.op(*dev_args, **dev_kwargs, **entry.out_kwargs(wrong))
        except Exception:
            pass  # refused, as it must be
        else:
            inputs = ", ".join(str(tuple(t.shape)) for t in outputs(dev_args) if isinstance(t, torch.Tensor))
            shapes = ", ".join(str(tuple(t.shape)) for t in outputs(wrong))
            return Verdict(False, f"accepted an out= tensor on the cpu [{shapes}] for inputs on {target.device} [{inputs}]")
    return verdict


MODE = Mode("out", out, follows="autograd", holds_to="values", samples={"smoke": 1, "standard": 6},
            applies=lambda entry, dtype: entry.supports_out, pytorch_test=("TestCommon", "test_out"))
