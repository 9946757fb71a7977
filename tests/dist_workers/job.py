"""What every worker shares: joining the job the test started (tests/distributed_helpers.py)."""

import json
import os
from collections.abc import Callable
from datetime import timedelta

import torch
import torch.distributed as dist


def init(backend: str | None = None) -> int:
    """Join the process group with the test's timeout; returns this rank. backend None: torch's default."""
    timeout = timedelta(seconds=float(os.environ.get("TORCHPLUG_TEST_PG_TIMEOUT", "60")))
    dist.init_process_group(backend or None, timeout=timeout)
    return dist.get_rank()


def report(result: object) -> None:
    """The worker's result, as the last line the test reads."""
    print(json.dumps(result), flush=True)


def refusal(call: Callable[[], object], *untouched: torch.Tensor) -> str:
    """The error `call` raises ("no error" if none), marked if any of `untouched` changed meanwhile."""
    before = [t.cpu().clone() for t in untouched]
    try:
        call()
        message = "no error"
    except Exception as err:
        message = f"{type(err).__name__}: {err}"
    changed = any(not torch.equal(b, t.cpu()) for b, t in zip(before, untouched))
    return message + (" [DATA CHANGED]" if changed else "")
