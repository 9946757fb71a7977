"""The `compile` mode: the op through torch.compile (Inductor) on the device, held to the CPU's eager values."""

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

import torch

from ..cases.opinfo import OpEntry
from ..target import Target
from ..verdicts.compare import Verdict
from .forward import judge, run_forward
from .record import Mode
from .sides import Skip, Unsupported, detach, first_line, sample_args

# torch.compile costs seconds per graph (and each worker imports Inductor once), so the smaller
# tiers compile a sample of ops: smoke compiles one fused reduction.
SMOKE_OPS = ("softmax",)
STANDARD_OPS = (
    "add", "mul", "div.no_rounding_mode", "exp", "tanh", "sigmoid", "where", "clamp", "sum", "mean", "amax",
    "cumsum", "var", "softmax", "log_softmax", "mm", "bmm", "addmm", "cat", "reshape", "permute", "index_select",
    "gather", "masked_fill", "nn.functional.relu", "nn.functional.gelu", "nn.functional.silu",
    "nn.functional.layer_norm", "nn.functional.linear", "nn.functional.embedding", "nn.functional.conv2d",
    "torchplug.rms_norm", "torchplug.silu_and_mul",
)


@contextlib.contextmanager
def _fresh_dynamo() -> Iterator[None]:
    import torch._dynamo

    torch._dynamo.reset()
    try:
        yield
    finally:
        torch._dynamo.reset()


def _compiled(entry: OpEntry) -> Callable[..., Any]:
    return torch.compile(lambda *a, **k: entry.op(*a, **k), backend="inductor", dynamic=False)


def _compile_fails_on_cpu(entry: OpEntry, sample: Any, target: Target) -> str:
    """Why torch.compile of this sample fails with the CPU's stock kernels too (no meta kernel for an
    internal op, a lowering bug, a decomposition that departs from eager), or '' if it works there."""
    args, kwargs = sample_args(sample)
    with _fresh_dynamo(), target.reference():
        expected = entry.op(*detach(args), **detach(kwargs))
        try:
            actual = _compiled(entry)(*detach(args), **detach(kwargs))
        except Exception as err:
            return f"{type(err).__name__}: {first_line(err)}"
    verdict = judge(entry, actual, expected, None)
    return "" if verdict.ok else f"compiled on the CPU it differs from eager: {verdict.detail}"


def compile(entry: OpEntry, sample: Any, target: Target) -> Verdict:
    """The device runs the op through torch.compile; the CPU runs it eagerly. Where the device fails,
    the CPU compiles the sample too: if that fails alike, the limit is torch.compile's, not the device's."""
    if target.compile_reason is not None:
        raise Unsupported(target.compile_reason)
    try:
        with _fresh_dynamo():
            verdict = run_forward(entry, sample, target, device_op=_compiled(entry))
    except (Skip, Unsupported):
        raise
    except Exception:
        if why := _compile_fails_on_cpu(entry, sample, target):
            raise Skip(f"torch.compile fails on the CPU too: {why}") from None
        raise
    if not verdict.ok and (why := _compile_fails_on_cpu(entry, sample, target)):
        raise Skip(f"torch.compile fails on the CPU too: {why}")
    return verdict


# Compiling costs seconds per graph: below the full tier it runs on one dtype, and its groups start first.
MODE = Mode("compile", compile, follows="noncontiguous", holds_to="values", samples={"smoke": 1, "standard": 1},
            tier_ops={"smoke": SMOKE_OPS, "standard": STANDARD_OPS}, one_dtype_in=("smoke", "standard"),
            needs_compile=True, slow=True, pytorch_test=("TestInductorOpInfo", "test_comprehensive"))
