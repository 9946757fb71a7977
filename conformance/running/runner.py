"""Run a plan in worker processes: a crash or a hang is a case result, and the run goes on."""

import json
import os
import selectors
import signal
import subprocess
import sys
import tempfile
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..cases.case import Case, CaseResult
from ..cases.plan import Group
from ..modes import mode
from ..modes.record import SLOW_TIMEOUT_FACTOR

STARTUP_TIMEOUT_S = 600.0  # the first use of an emulated device may compile its runtime


class CheckError(RuntimeError):
    """The run cannot start (the backend is unavailable, a worker cannot start)."""


@dataclass
class Job:
    """A group, or the runtime checks, with what is already done (kept across worker restarts)."""

    group: Group | None = None
    checks: tuple[str, ...] = ()  # runtime check names, for the job that runs them
    done: set[str] = field(default_factory=set)
    crashes_without_case: int = 0

    def message(self) -> dict[str, Any]:
        if self.group is None:
            return {"checks": [c for c in self.checks if f"check:{c}" not in self.done]}
        return {"group": self.group.request(self.done)}


class Worker:
    def __init__(self, backend: str, env: dict[str, str], log_dir: Path, index: int) -> None:
        self.log = log_dir / f"worker{index}-{time.monotonic_ns()}.log"
        with open(self.log, "wb") as log:
            # A session of its own: Ctrl-C in the terminal reaches only the runner, which stops the workers
            # itself (a worker interrupted mid-case would print a traceback and look like a crash).
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "torchplug.conformance.running.worker", backend],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log, env=env, start_new_session=True,
            )
        self.buffer = b""
        self.info: dict[str, Any] | None = None
        self.relevant: list[str] = []  # the backend's ATen overloads, and those the cases dispatched to (exercised.py)
        self.exercised: set[str] = set()
        self.job: Job | None = None
        self.case: str | None = None  # the key of the case running now
        self.side = "device"  # or "reference": the worker is running the case's CPU reference (worker.py)
        self.since = time.monotonic()
        self.retired = False  # it said it would exit: the device was left unusable (worker.py)

    def send(self, message: dict[str, Any]) -> None:
        self.proc.stdin.write((json.dumps(message) + "\n").encode())
        self.proc.stdin.flush()

    def read(self) -> list[dict[str, Any]] | None:
        """The complete messages available now; None at end of stream (the worker died)."""
        chunk = os.read(self.proc.stdout.fileno(), 1 << 16)
        if not chunk:
            return None
        self.buffer += chunk
        *lines, self.buffer = self.buffer.split(b"\n")
        return [json.loads(line) for line in lines if line.strip()]

    def stderr_tail(self, lines: int = 12) -> str:
        try:
            text = self.log.read_text(errors="replace")
        except OSError:
            return ""
        return "\n".join(text.strip().splitlines()[-lines:])

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.stdin.close()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.kill()


def _death(worker: Worker) -> str:
    code = worker.proc.wait()
    if code < 0:
        try:
            how = signal.Signals(-code).name
        except ValueError:
            how = f"signal {-code}"
    else:
        how = f"exit code {code}"
    tail = worker.stderr_tail()
    fatal = [line for line in tail.splitlines() if "Fatal Python error" in line or "Error" in line]
    return f"worker process died ({how})" + (f": {fatal[0].strip()}" if fatal else "")


def _limit_s(key: str | None, timeout_s: float) -> float:
    """How long the case `key` (a runtime check's "check:NAME" too) may run."""
    slow = key is not None and not key.startswith("check:") and mode(Case.from_key(key).mode).slow
    return timeout_s * (SLOW_TIMEOUT_FACTOR if slow else 1)


class Runner:
    """Keeps `workers` processes busy with jobs; `on_result` sees each CaseResult as it arrives."""

    def __init__(self, backend: str, env: dict[str, str], workers: int, timeout_s: float,
                 on_result: Callable[[CaseResult], None], on_check: Callable[[dict[str, Any]], None],
                 on_job_done: Callable[[Job], None] = lambda job: None) -> None:
        self.backend, self.env, self.timeout_s = backend, env, timeout_s
        self.on_result, self.on_check, self.on_job_done = on_result, on_check, on_job_done
        self.log_dir = Path(tempfile.mkdtemp(prefix="torchplug-check-"))
        self.selector = selectors.DefaultSelector()
        self.workers: list[Worker] = []
        self.info: dict[str, Any] | None = None
        self.relevant: list[str] = []  # the backend's ATen overloads, and those the cases dispatched to (exercised.py)
        self.exercised: set[str] = set()
        for i in range(max(1, workers)):
            self._spawn(i)

    def _spawn(self, index: int) -> Worker:
        worker = Worker(self.backend, self.env, self.log_dir, index)
        self.selector.register(worker.proc.stdout, selectors.EVENT_READ, worker)
        if index < len(self.workers):
            self.workers[index] = worker
        else:
            self.workers.append(worker)
        return worker

    def hello(self) -> dict[str, Any]:
        """Wait until a worker has opened the backend; what it reports about the device."""
        deadline = time.monotonic() + STARTUP_TIMEOUT_S
        while self.info is None:
            if time.monotonic() > deadline:
                raise CheckError(f"no worker started within {STARTUP_TIMEOUT_S:.0f} s")
            self._pump(1.0, deque())
        return self.info

    def run(self, jobs: list[Job]) -> None:
        queue = deque(jobs)
        while queue or any(w.job is not None for w in self.workers):
            for worker in self.workers:
                if worker.job is None and worker.info is not None and queue:
                    worker.job = queue.popleft()
                    worker.case, worker.since = None, time.monotonic()
                    worker.send(worker.job.message())
            self._pump(0.5, queue)

    def close(self) -> None:
        for worker in self.workers:
            self.selector.unregister(worker.proc.stdout)
            worker.close()

    def kill(self) -> None:
        """Stop every worker now, cases in flight included (an interrupted run)."""
        for worker in self.workers:
            worker.kill()

    def _pump(self, wait_s: float, queue: deque) -> None:
        for key, _ in self.selector.select(timeout=wait_s):
            worker: Worker = key.data
            messages = worker.read()
            if messages is None:
                if worker.retired:  # it left on purpose, between cases: a fresh worker takes the rest
                    self._restart(worker, queue, "retired", "")
                else:
                    self._restart(worker, queue, "crashed", _death(worker))
                continue
            for message in messages:
                self._handle(worker, message)
        now = time.monotonic()
        for worker in list(self.workers):
            limit = _limit_s(worker.case, self.timeout_s)
            if worker.case is not None and now - worker.since > limit:
                worker.kill()
                self._restart(worker, queue, "timeout", f"no result after {limit:.0f} s (--timeout); worker killed")

    def _handle(self, worker: Worker, message: dict[str, Any]) -> None:
        if "hello" in message:
            worker.info = message["hello"]
            self.info = self.info or worker.info
        elif "fatal" in message:
            raise CheckError(message["fatal"])
        elif "start" in message:
            worker.case, worker.since, worker.side = message["start"], time.monotonic(), "device"
        elif "side" in message:
            worker.side = message["side"]
        elif "result" in message:
            result = CaseResult.from_json(message["result"])
            worker.job.done.add(result.case.key)
            worker.case = None
            self.on_result(result)
        elif "check" in message:
            worker.job.done.add(f"check:{message['check']['name']}")
            worker.case = None
            self.on_check(message["check"])
        elif "overloads" in message:
            self.exercised.update(message["overloads"])
        elif "relevant" in message:
            self.relevant = self.relevant or message["relevant"]
        elif "retire" in message:
            worker.retired = True
        elif "idle" in message:
            self.on_job_done(worker.job)
            worker.job, worker.case = None, None

    def _restart(self, worker: Worker, queue: deque, status: str, detail: str) -> None:
        """Record the case that took the worker down, start a fresh worker, requeue the rest of its job."""
        self.selector.unregister(worker.proc.stdout)
        worker.kill()
        if worker.info is None and self.info is None:
            raise CheckError(f"the worker could not start: {detail}\n{worker.stderr_tail()}")
        job, key = worker.job, worker.case
        index = self.workers.index(worker)
        fresh = self._spawn(index)
        fresh.info = None
        if job is None:
            return
        if key is None and status == "retired":
            queue.appendleft(job)
            return
        if key is None:
            job.crashes_without_case += 1
            if job.crashes_without_case < 2:
                queue.appendleft(job)
            elif job.group is not None:  # it dies before any case: blame the group's first case
                first_mode = next(iter(job.group.modes))
                self.on_result(CaseResult(Case(job.group.op, job.group.dtype, first_mode, 0), status, detail))
            self.on_job_done(job)
            return
        job.done.add(key)
        if worker.side == "reference":  # torch's CPU kernel died on the sample: the device was never judged
            status, detail = "skip", f"the CPU reference {status} ({detail}), not the device: the case cannot judge it"
        if key.startswith("check:"):
            self.on_check({"name": key.removeprefix("check:"), "status": status, "detail": detail, "time_s": 0.0})
        else:
            self.on_result(CaseResult(Case.from_key(key), status, detail, time_s=round(time.monotonic() - worker.since, 3)))
        queue.appendleft(job)
