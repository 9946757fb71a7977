"""Run a worker script as the ranks of one torch.distributed job, on 127.0.0.1, bounded in time.

Every rank is a real process. The job gets a free port, a process-group timeout (passed to the
worker as TORCHPLUG_TEST_PG_TIMEOUT) and a hard wall-clock limit: when the limit passes, every
rank still running is killed and the test fails with what each rank printed, so no test can hang.
"""

import json
import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from conftest import clean_env

WORKERS = Path(__file__).resolve().parent / "dist_workers"
# Every rank dumps the Python stack of each thread if it crashes (SIGSEGV, SIGABRT), so that a
# crash seen once in CI says where each thread was.
CRASH_REPORTS = {"PYTHONFAULTHANDLER": "1"}
EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


@dataclass
class Rank:
    rank: int
    returncode: int
    stdout: str
    stderr: str

    def json(self) -> dict:
        """The JSON document the worker printed as its last line."""
        return json.loads(self.stdout.strip().splitlines()[-1])


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_ranks(worker: str | Path, *args: str, world_size: int = 2, limit: float = 120.0, pg_timeout: float = 60.0,
              rank_env: dict[int, dict[str, str]] | None = None, python: str = sys.executable, **env: str) -> list[Rank]:
    """Start `world_size` ranks of dist_workers/<worker>.py (or of the script at a Path); wait at most `limit` s."""
    script = worker if isinstance(worker, Path) else WORKERS / f"{worker}.py"
    port = free_port()
    procs = []
    for rank in range(world_size):
        environ = clean_env(**{
            "RANK": str(rank), "LOCAL_RANK": str(rank), "WORLD_SIZE": str(world_size),
            "LOCAL_WORLD_SIZE": str(world_size), "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port),
            "TORCHPLUG_TEST_PG_TIMEOUT": str(pg_timeout), "OMP_NUM_THREADS": "1", **CRASH_REPORTS,
            **env, **(rank_env or {}).get(rank, {}),
        })
        procs.append(subprocess.Popen(
            [python, str(script), *args], env=environ, cwd="/",
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        ))
    deadline = time.monotonic() + limit
    ranks = []
    try:
        for rank, proc in enumerate(procs):
            try:
                out, err = proc.communicate(timeout=max(deadline - time.monotonic(), 0.1))
            except subprocess.TimeoutExpired:
                raise AssertionError(f"rank {rank} of {script.name} still running after {limit:.0f}s:\n"
                                     + _outputs(procs)) from None
            ranks.append(Rank(rank, proc.returncode, out, err))
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    return ranks


def _outputs(procs: list[subprocess.Popen]) -> str:
    for proc in procs:
        if proc.poll() is None:
            proc.kill()
    parts = []
    for rank, proc in enumerate(procs):
        out, err = proc.communicate()
        parts.append(f"--- rank {rank} (exit {proc.returncode})\n{out}\n{err[-4000:]}")
    return "\n".join(parts)


def succeeded(ranks: list[Rank]) -> list[Rank]:
    """`ranks`, after checking that every one exited cleanly (else fail with their output)."""
    failed = [r for r in ranks if r.returncode != 0]
    if failed:
        raise AssertionError("\n".join(f"--- rank {r.rank} exited {r.returncode}\n{r.stdout}\n{r.stderr[-4000:]}"
                                       for r in failed))
    return ranks


def ok(ranks: list[Rank]) -> list[dict]:
    """Every rank's JSON result, after checking that every rank exited cleanly."""
    return [r.json() for r in succeeded(ranks)]


def run_torchrun(script: Path, *args: str, nproc: int = 2, limit: float = 180.0, python: str = sys.executable,
                 **env: str) -> str:
    """`torchrun --nproc-per-node=<nproc> script args` on 127.0.0.1; its output. Killed whole after `limit` s."""
    command = [python, "-m", "torch.distributed.run", f"--nproc-per-node={nproc}",
               "--master-addr=127.0.0.1", f"--master-port={free_port()}", str(script), *args]
    return run_launcher(command, f"torchrun {script.name}", limit, **env)


def run_launcher(command: list[str], name: str, limit: float, **env: str) -> str:
    """Run a launcher that starts the ranks itself (torchrun, accelerate launch); its output (stdout and
    stderr). Killed whole after `limit` s; fails with the output if it exits non-zero."""
    # A session of its own: on timeout the launcher and every rank it started are killed together.
    proc = subprocess.Popen(command, env=clean_env(**CRASH_REPORTS, **env), cwd="/", stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        out, _ = proc.communicate(timeout=limit)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, _ = proc.communicate()
        raise AssertionError(f"{name} still running after {limit:.0f}s:\n{out[-6000:]}") from None
    if proc.returncode != 0:
        raise AssertionError(f"{name} exited {proc.returncode}:\n{out[-6000:]}")
    return out
