"""Tensors as [rows, hidden] for the row kernels, whatever their strides."""

from collections.abc import Iterator
from contextlib import contextmanager

from torch import Tensor


def one_device(*tensors: Tensor) -> bool:
    """All on one device: the kernels' case. Mixed devices go to the reference, which raises torch's error."""
    return len({t.device for t in tensors}) == 1


def rows_view(t: Tensor) -> Tensor | None:
    """`t` as a [rows, hidden] view of the same memory, or None when its strides do not allow one."""
    try:
        return t.view(-1, t.shape[-1])
    except RuntimeError:
        return None


def read_rows(t: Tensor) -> Tensor:
    """`t` as [rows, hidden] to read from: a view when possible, else a copy."""
    return t.reshape(-1, t.shape[-1])


@contextmanager
def written_rows(t: Tensor) -> Iterator[Tensor]:
    """`t` as [rows, hidden] for a kernel to write (or update): its own memory when the strides
    allow, else a contiguous copy that is written back into `t` when the block ends."""
    rows = rows_view(t)
    if rows is not None:
        yield rows
        return
    buffer = t.contiguous().view(-1, t.shape[-1])
    yield buffer
    t.copy_(buffer.view(t.shape))
