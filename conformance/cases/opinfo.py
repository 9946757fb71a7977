"""The one wrapper over torch's internal OpInfo database (it changes between releases).

Everything else in the suite sees `OpEntry` objects: a name, the dtypes the CPU supports, a few
capability flags, a callable, and `samples(dtype)`. torchplug's own ops (`torchplug.ops`) join the
database here with samples written for them.
"""

import functools
import itertools
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import torch

SAMPLE_SEED = 1234  # samples are seeded per (op, dtype): a repro regenerates the same sample

# Ops whose outputs are uninitialised or random: compared by shape, dtype, device and statistics.
# ATen-level entries (aten_db.py) are named `aten.<op>`.
_UNDEFINED = re.compile(r"^(aten\.)?(empty|new_empty|empty_like|empty_strided|empty_permuted)")
_RANDOM = re.compile(
    r"^(aten\.)?(rand|randn|randint|randperm|normal|bernoulli|multinomial|uniform|cauchy|exponential|geometric|"
    r"log_normal|binomial|poisson|_standard_gamma(?!_grad)|_sample_dirichlet|"
    r"nn\.functional\.(dropout|rrelu|feature_alpha_dropout|alpha_dropout))"
)


# Tensor arguments that stay on the CPU, by position in (input, *args): the op requires it of every
# device (tensor_split reads its indices on the host, as on CUDA).
HOST_ARGS: dict[str, tuple[int, ...]] = {"tensor_split": (1,)}
# Ops whose out= is written by a Python-level copy_ in torch itself, so every device accepts an out=
# tensor on another device (torch.lu): the out mode does not expect them to refuse one.
COPYING_OUT = frozenset({"lu"})


@dataclass(frozen=True)
class OpEntry:
    name: str  # "acos", "nn.functional.conv2d", "linalg.norm.subgradients_at_zero", "torchplug.rms_norm"
    op: Callable[..., Any]
    dtypes: frozenset[torch.dtype]  # what the CPU supports
    backward_dtypes: frozenset[torch.dtype]
    supports_out: bool
    sample_fn: Callable[[torch.dtype, bool], Iterable[Any]]
    host_args: tuple[int, ...] = ()
    out_copies: bool = False  # out= accepts any device (see COPYING_OUT)
    inplace: Callable[..., Any] | None = None  # the in-place variant (`Tensor.add_`), if the op has one
    error_fn: Callable[[str], Iterable[Any]] | None = None  # OpInfo's error inputs for a device type
    out_names: tuple[str, ...] = ()  # the out= tensors' keywords (grad_input; out, indices), () for `out=`
    # False for internal kernels that trust their caller for consistent arguments (backward kernels given
    # grad_output): torch's CPU kernels read out of bounds on an out-of-range index, a grad_output cut to
    # empty or a bool tensor where a float one belongs, so the suite derives none of those (the errors
    # mode's out-of-range variants, the edge mode's shapes, the scalar_types mode).
    validates_inputs: bool = True

    @property
    def nondeterministic(self) -> str | None:
        """'undefined' or 'random' for ops whose values cannot be compared, else None."""
        if _UNDEFINED.match(self.name):
            return "undefined"
        if _RANDOM.match(self.name):
            return "random"
        return None

    def out_kwargs(self, buffers: Any) -> dict[str, Any]:
        """`buffers` (a tensor or a tuple of them, one per result) as the op's out= keyword arguments."""
        if not self.out_names:
            return {"out": buffers}
        leaves = buffers if isinstance(buffers, (tuple, list)) else (buffers,)
        return dict(zip(self.out_names, leaves))

    def requires_grad(self, dtype: torch.dtype) -> bool:
        return dtype in self.backward_dtypes

    def samples(self, dtype: torch.dtype, count: int | None = None) -> list[Any]:
        """The first `count` samples (default all) for `dtype`, on the CPU, from a fixed seed: always the
        same list, and a shorter one is a prefix of a longer one."""
        torch.manual_seed(SAMPLE_SEED)
        return list(itertools.islice(self.sample_fn(dtype, self.requires_grad(dtype)), count))

    def error_inputs(self, device: str = "cpu") -> list[Any]:
        """OpInfo's error inputs (each a sample, the exception type and a message pattern) as torch
        specifies them for `device`: some differ by device type (narrow_copy's CPU kernel has its own)."""
        if self.error_fn is None:
            return []
        torch.manual_seed(SAMPLE_SEED)
        return list(self.error_fn(device))


def _opinfo_entry(info: Any) -> OpEntry:
    name = info.name + (f".{info.variant_test_name}" if info.variant_test_name else "")
    backward = info.supported_backward_dtypes("cpu") if info.supports_autograd else set()
    return OpEntry(
        name=name, op=info.op, dtypes=frozenset(info.supported_dtypes("cpu")),
        backward_dtypes=frozenset(backward), supports_out=bool(info.supports_out),
        sample_fn=lambda dtype, grad: info.sample_inputs("cpu", dtype, requires_grad=grad),
        host_args=HOST_ARGS.get(name, ()), out_copies=name in COPYING_OUT, inplace=info.inplace_variant,
        error_fn=info.error_inputs if info.error_inputs_func is not None else None,
    )


def _torchplug_entries() -> list[OpEntry]:
    from torch.testing import make_tensor
    from torch.testing._internal.opinfo.core import SampleInput

    from ... import ops
    from ...dispatcher.portable import PUBLIC_OPS

    dtypes = frozenset({torch.float32, torch.float16, torch.bfloat16, torch.float64})

    def tensor(shape: Sequence[int], dtype: torch.dtype, grad: bool) -> torch.Tensor:
        return make_tensor(shape, dtype=dtype, device="cpu", low=-2, high=2, requires_grad=grad)

    def norm_samples(dtype: torch.dtype, grad: bool):
        for shape in ((4, 16), (2, 3, 32), (1, 7)):
            yield SampleInput(tensor(shape, dtype, grad), args=(tensor(shape[-1:], dtype, grad), 1e-6))

    def fused_samples(dtype: torch.dtype, grad: bool):
        for shape in ((4, 16), (2, 3, 32)):
            yield SampleInput(tensor(shape, dtype, False), args=(tensor(shape, dtype, False),
                                                                 tensor(shape[-1:], dtype, False), 1e-6))

    def gated_samples(dtype: torch.dtype, grad: bool):
        for shape in ((4, 32), (2, 3, 16), (1, 2)):
            yield SampleInput(tensor(shape, dtype, grad))

    def rotary_samples(dtype: torch.dtype, grad: bool):
        for tokens, heads, kv_heads, dim in ((5, 4, 2, 16), (1, 2, 2, 8)):
            yield SampleInput(tensor((tokens, heads, dim), dtype, grad),
                              args=(tensor((tokens, kv_heads, dim), dtype, grad),
                                    tensor((tokens, dim // 2), dtype, False), tensor((tokens, dim // 2), dtype, False)))

    def entry(name: str, op: Callable[..., Any], samples: Callable, grad: bool = True) -> OpEntry:
        return OpEntry(f"torchplug.{name}", op, dtypes, dtypes if grad else frozenset(), False, samples)

    samples = {"rms_norm": norm_samples, "fused_add_rms_norm": fused_samples, "silu_and_mul": gated_samples,
               "rotary_embedding": rotary_samples}
    # fused_add_rms_norm writes its inputs in place: no autograd samples (leaf tensors cannot be)
    return [entry(name, getattr(ops, name), samples[name], grad=name != "fused_add_rms_norm") for name in PUBLIC_OPS]


@functools.cache
def all_ops() -> dict[str, OpEntry]:
    """Every op the suite knows, by name: torch's OpInfo database, torchplug's own ops, then the ATen-level
    entries (aten_db.py) for overloads no OpInfo sample dispatches."""
    from torch.testing._internal.common_methods_invocations import op_db

    from .aten_db import entries as aten_entries

    entries = [_opinfo_entry(info) for info in op_db] + _torchplug_entries() + aten_entries(OpEntry)
    return {entry.name: entry for entry in entries}


def find(name: str) -> OpEntry:
    ops = all_ops()
    if name not in ops:
        close = [n for n in ops if name in n][:5]
        hint = f"; did you mean {', '.join(close)}?" if close else ""
        raise KeyError(f"no op named {name!r} in torch {torch.__version__}'s OpInfo database or torchplug.ops{hint}")
    return ops[name]

