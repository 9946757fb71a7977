"""The statuses a conformance case or runtime check ends in, and the groups every reader uses.

One source: the worker, runner and manifest set them; the reports, the pytest plugin and the exit
code read the groups below.
"""

from typing import Literal

Status = Literal["pass", "fail", "xfail", "xpass", "skip", "crashed", "timeout", "unsupported-dtype", "unsupported"]
STATUSES: tuple[Status, ...] = ("pass", "fail", "xfail", "xpass", "skip", "crashed", "timeout", "unsupported-dtype",
                                "unsupported")
PASSING: tuple[Status, ...] = ("pass", "xfail")  # what a pass rate counts as passing (an xfail is known and accepted)
CRASHES: tuple[Status, ...] = ("crashed", "timeout")  # the worker died or stopped answering
# What fails a run (`torchplug check` exits 1), and what a manifest's xfail can expect.
FAILING: tuple[Status, ...] = ("fail", *CRASHES)
PROBLEMS: tuple[Status, ...] = (*FAILING, "xpass")  # what reports group, with a repro snippet each
NOT_JUDGED: tuple[Status, ...] = ("skip", "unsupported", "unsupported-dtype")  # outside pass rates
