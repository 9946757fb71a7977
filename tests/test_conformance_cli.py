"""`torchplug check`'s command line where a run does not go to the end: Ctrl-C, a device that is not there."""

import json
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from conftest import clean_env

pytest.importorskip("expecttest", reason="torch's OpInfo database needs expecttest (pip install expecttest)")

TORCHPLUG = Path(sys.executable).parent / "torchplug"


def _children(pid: int) -> list[int]:
    """The live processes whose parent is `pid` (the workers: each runs in a session of its own)."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            found.append(int(stat.parent.name))
    return found


def test_ctrl_c_keeps_a_partial_report_marked_interrupted_and_exits_130(tmp_path):
    # The standard tier runs for minutes: it is still running when the first progress line comes (10 s in).
    proc = subprocess.Popen(
        [TORCHPLUG, "check", "xpu", "--tier", "standard", "--report", tmp_path], cwd=tmp_path, text=True,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=clean_env(TORCHPLUG_EMULATE="xpu"),
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))  # as a shell's foreground job gets it
    watchdog = threading.Timer(600, proc.kill)
    watchdog.start()
    before = []
    for line in proc.stderr:
        before.append(line)
        if "op×dtype groups" in line:
            break
    workers = _children(proc.pid)
    proc.send_signal(signal.SIGINT)
    out, after = proc.communicate(timeout=120)
    watchdog.cancel()
    assert proc.returncode == 130, "".join(before) + after
    assert len(workers) == 2 and not [pid for pid in workers if Path(f"/proc/{pid}").exists()], workers
    lines = after.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("torchplug check: interrupted (Ctrl-C) after "), after
    assert f"partial report in {tmp_path / 'report.json'}" in lines[0]

    report = json.loads((tmp_path / "report.json").read_text())
    assert report["interrupted"] is True and 0 < report["groups"]["done"] < report["groups"]["planned"]
    assert report["cases"] and sum(sum(m["counts"].values()) for m in report["summary"].values()) == len(report["cases"])
    said = f"(Ctrl-C) after {report['wall_s']:.1f} s, {report['groups']['done']} of {report['groups']['planned']} op×dtype groups done"
    assert f"interrupted {said}" in lines[0] and f"INTERRUPTED {said}" in out
    assert f"**Interrupted** {said}" in (tmp_path / "report.md").read_text()
    assert f'<p class="interrupted"><b>Interrupted</b> {said}' in (tmp_path / "report.html").read_text()
    assert 'type="interrupted"' in (tmp_path / "junit.xml").read_text()
