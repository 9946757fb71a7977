"""pytest plugin (entry point `pytest11`): `pytest --torchplug-backend=xpu -k softmax` runs the suite's
cases as pytest items, one per (op, dtype, mode, sample), in the same worker processes.

Collection plans the cases exactly as `torchplug check` does; the first item to run sends every
selected case (after -k and -m deselection) to the workers, and each item then reports its own
result: a fail, crash or timeout fails with the detail and the repro line, a manifest xfail is
an xfail, an xpass fails (the manifest is out of date), skips and unsupported cases skip.
Without --torchplug-backend the plugin does nothing (and imports nothing heavy).
"""

from typing import Any

import pytest

from .cases.case import Case, CaseResult
from .cases.tiers import TIERS, Selection, default_dtypes
from .verdicts.status import NOT_JUDGED

SUITE = pytest.StashKey["Suite"]()


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("torchplug", "torchplug conformance cases")
    group.addoption("--torchplug-backend", help="collect torchplug check's cases for this backend")
    group.addoption("--torchplug-tier", choices=TIERS, default="smoke")
    group.addoption("--torchplug-modes", help="comma-separated mode names (default: every mode)")
    group.addoption("--torchplug-dtypes", help="comma-separated dtype names (default: the tier's)")
    group.addoption("--torchplug-ops", help="regular expression over op names")
    group.addoption("--torchplug-workers", type=int, default=2)
    group.addoption("--torchplug-timeout", type=float, default=60.0)


class Suite:
    """The run shared by every item of the session: workers, manifest, results by case key."""

    def __init__(self, config: pytest.Config) -> None:
        from .cases.plan import worker_environment
        from .modes import mode_names
        from .running.runner import Runner
        from .verdicts.manifest import load, locate

        option = config.getoption
        self.backend = option("--torchplug-backend")
        tier, dtypes, modes = option("--torchplug-tier"), option("--torchplug-dtypes"), option("--torchplug-modes")
        self.selection = Selection(tier, tuple(modes.split(",")) if modes else mode_names(),
                                   tuple(dtypes.split(",")) if dtypes else default_dtypes(tier), option("--torchplug-ops"))
        self.manifest = load(locate(self.backend))
        self.results: dict[str, CaseResult] = {}
        self.runner = Runner(self.backend, worker_environment(), option("--torchplug-workers"), option("--torchplug-timeout"),
                             self._record, lambda check: None)
        self.ran = False

    def _record(self, result: CaseResult) -> None:
        self.results[result.case.key] = self.manifest.apply(result, self.selection.tier)

    def cases(self) -> list[Case]:
        """Every case of the plan, with its samples counted (samples are generated here, on the CPU)."""
        import torch

        from .cases import opinfo
        from .cases.plan import plan_on

        plan, _ = plan_on(self.runner, self.selection, self.manifest)
        for result in plan.unrunnable:
            self.results[result.case.key] = result
        cases = [r.case for r in plan.unrunnable]
        for group in plan.groups:
            count = len(opinfo.find(group.op).samples(getattr(torch, group.dtype)))
            for mode in group.modes:
                limit = group.limit[mode]
                cases += [Case(group.op, group.dtype, mode, i) for i in range(count if limit is None else min(count, limit))]
        return sorted(cases)

    def run(self, cases: list[Case]) -> None:
        from .cases.plan import Group
        from .running.runner import Job

        self.ran = True
        wanted: dict[tuple[str, str], dict[str, list[int]]] = {}
        for case in cases:
            if case.key not in self.results:
                wanted.setdefault((case.op, case.dtype), {}).setdefault(case.mode, []).append(case.sample)
        self.runner.run([Job(Group(op, dtype, modes)) for (op, dtype), modes in wanted.items()])


class CaseItem(pytest.Item):
    def __init__(self, *, case: Case, suite: Suite, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.case, self.suite = case, suite

    def runtest(self) -> None:
        from .report.schema import repro_command

        suite = self.suite
        if not suite.ran:
            suite.run([item.case for item in self.session.items if isinstance(item, CaseItem)])
        result = suite.results.get(self.case.key)
        if result is None:
            pytest.skip("the sample does not exist in this torch version")
        repro = repro_command(suite.backend, self.case)
        if result.status in NOT_JUDGED:
            pytest.skip(f"{result.status}: {result.manifest_reason or result.detail}")
        if result.status == "xfail":
            pytest.xfail(f"{result.manifest_reason} ({result.detail})")
        if result.status == "xpass":
            raise AssertionError(f"passes, but the manifest expects a failure: {result.manifest_reason}\n{repro}")
        if result.status != "pass":
            raise AssertionError(f"{result.status}: {result.detail}\nrepro: {repro}")

    def repr_failure(self, excinfo: Any, style: Any = None) -> str:
        if isinstance(excinfo.value, AssertionError):
            return str(excinfo.value)
        return super().repr_failure(excinfo)

    def reportinfo(self) -> tuple[str, int, str]:
        return f"torchplug check {self.suite.backend}", 0, self.name


@pytest.hookimpl(tryfirst=True)  # before -k / -m deselect, so they see these items
def pytest_collection_modifyitems(session: pytest.Session, config: pytest.Config, items: list[pytest.Item]) -> None:
    if not config.getoption("--torchplug-backend"):
        return
    from .running.runner import CheckError

    try:
        suite = config.stash[SUITE] = Suite(config)
        cases = suite.cases()
    except CheckError as err:  # a usage problem (no such backend, not emulated): one line, not a traceback
        raise pytest.UsageError(f"--torchplug-backend={config.getoption('--torchplug-backend')}: {err}") from None
    for case in cases:
        name = f"{suite.backend}::{case.op}[{case.dtype}-{case.mode}-{case.sample}]"
        items.append(CaseItem.from_parent(session, name=name, case=case, suite=suite))


def pytest_sessionfinish(session: pytest.Session) -> None:
    suite = session.config.stash.get(SUITE, None)
    if suite is not None:
        suite.runner.close()
