"""The `twice` mode (an example): the op run twice on the device gives the same result both times."""

from typing import Any

from ..cases.opinfo import OpEntry
from ..target import Target
from ..verdicts.compare import Verdict, compare, outputs
from .mode import Mode
from .sides import Skip, host, on_device, on_target, sample_args


def twice(entry: OpEntry, sample: Any, target: Target) -> Verdict:
    if entry.nondeterministic:
        raise Skip("the op's results are random: two runs differ by design")
    args, kwargs = sample_args(sample)

    def run() -> Any:
        dev_args, dev_kwargs = on_device(entry, args, kwargs, target)
        return host(entry.op(*dev_args, **dev_kwargs))
    first = on_target(run)
    return compare(outputs(on_target(run)), outputs(first))


MODE = Mode("twice", twice, follows="meta", holds_to="values", samples={"smoke": 1, "standard": 2})
