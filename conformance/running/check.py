"""`torchplug check`'s engine: plan the cases, run them in workers, build the JSON report."""

import datetime
import shlex
import signal
import sys
import time
from typing import Any, TextIO

from ..cases.case import CaseResult
from ..cases.plan import plan_on, worker_environment
from ..cases.tiers import Selection
from ..modes import mode
from ..report.schema import SCHEMA, fallback_shares, machine, repro_command, repro_snippet, summary
from ..verdicts.manifest import Manifest, locate
from ..verdicts.manifest import load as load_manifest
from ..verdicts.status import PROBLEMS
from .progress import Progress
from .runner import Job, Runner


def run(backend: str, selection: Selection, *, workers: int = 2, timeout_s: float = 60.0,
        env: dict[str, str] | None = None, stream: TextIO = sys.stderr, runtime_checks: bool = True,
        manifest: Manifest | None = None) -> dict[str, Any]:
    """Run the selected cases (and the runtime checks) on `backend`; returns the report (schema v1).

    `manifest` defaults to the backend's own conformance.toml. Ctrl-C (KeyboardInterrupt) stops the
    workers at once and returns the report of the cases that finished, marked "interrupted"; before
    the first case has started there is nothing to report, and KeyboardInterrupt propagates.
    """
    from ..cases import opinfo
    from .exercised import audit
    from .runtime_checks import CHECKS

    started = time.monotonic()
    manifest = manifest if manifest is not None else load_manifest(locate(backend))
    results: list[CaseResult] = []
    checks: list[dict[str, Any]] = []
    progress: Progress | None = None
    interrupted, sigint = False, None

    def on_result(result: CaseResult) -> None:
        results.append(manifest.apply(result, selection.tier))
        if progress is not None:
            progress.case(result.status)

    def on_job_done(job: Job) -> None:
        if progress is not None:
            progress.group_done()

    runner = Runner(backend, worker_environment(env), workers, timeout_s, on_result, checks.append, on_job_done)
    try:
        opinfo.all_ops()  # the parent reads the op database while the workers start
        plan, info = plan_on(runner, selection, manifest)
        # A slow mode's groups (compiling) start first, so the other worker's quicker groups overlap them.
        jobs = [Job(group) for group in sorted(plan.groups, key=lambda g: not any(mode(m).slow for m in g.modes))]
        if runtime_checks and selection.op is None:
            jobs.insert(0, Job(checks=tuple(CHECKS)))
        progress = Progress(len(jobs), stream)
        runner.run(jobs)
        progress.finish()
    except KeyboardInterrupt:
        sigint = signal.signal(signal.SIGINT, signal.SIG_IGN)  # a second Ctrl-C must not cut the clean-up short
        interrupted = True
        runner.kill()
        if progress is not None:
            progress.interrupted()
    finally:
        runner.close()
    try:
        if progress is None:  # no case had started yet: nothing to report
            raise KeyboardInterrupt
        results += plan.unrunnable
        results.sort(key=lambda r: r.case)
        info["manifest"] = str(manifest.path) if manifest.path else None
        report = build_report(backend, info, selection, results, checks, plan.mode_notes, time.monotonic() - started)
        report["coverage"] = audit(runner.relevant, runner.exercised)
        report["interrupted"] = interrupted
        report["groups"] = {"planned": len(jobs), "done": progress.done}
    finally:
        if sigint is not None:
            signal.signal(signal.SIGINT, sigint)
    return report


def build_report(backend: str, info: dict[str, Any], selection: Selection, results: list[CaseResult],
                 checks: list[dict[str, Any]], mode_notes: dict[str, str], wall_s: float) -> dict[str, Any]:
    cases = []
    for result in results:
        data = result.to_json()
        data["repro"] = repro_command(backend, result.case)
        if result.status in PROBLEMS:
            data["snippet"] = repro_snippet(backend, info["device"], result.case)
        cases.append(data)
    return {
        "schema": SCHEMA,
        "created": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "command": shlex.join(["torchplug", *sys.argv[1:]]) if sys.argv[0].endswith("torchplug") else "",
        "backend": {k: v for k, v in info.items() if k != "versions"},
        "versions": info["versions"],
        "machine": machine(),
        "selection": {"tier": selection.tier, "modes": list(selection.modes), "dtypes": list(selection.dtypes),
                      "ops": selection.ops, "op": selection.op, "sample": selection.sample},
        "wall_s": round(wall_s, 2),
        "unsupported_modes": mode_notes,
        "summary": summary(cases),
        "fallback": fallback_shares(cases),
        "runtime_checks": sorted(checks, key=lambda c: c["name"]),
        "cases": cases,
    }
