"""`torchplug check`'s command line where a run does not go to the end: Ctrl-C, a device that is not there."""

import json
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from conftest import clean_env, run_process, run_python

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


# A device that is not here: `torchplug check xpu` and the bare `torchplug check` (whose default is xpu)
# behave alike, emulating it; `--native` and an emulation that cannot run are refused before anything slow.

ONE_CASE = ["--op", "add", "--dtype", "float32", "--mode", "eager", "--no-runtime-checks", "--json"]


@pytest.mark.parametrize("named", [["xpu"], []], ids=["check-xpu", "bare-check"])
def test_a_device_that_is_not_here_is_emulated_whether_named_or_the_default(tmp_path, named):
    result = run_process([TORCHPLUG, "check", *named, *ONE_CASE], cwd=tmp_path, env=clean_env())
    report = json.loads(result.stdout)
    assert report["backend"]["name"] == "xpu" and report["backend"]["mode"] == "emulated", report["backend"]
    assert report["summary"]["eager"]["counts"] == {"pass": 2}, report["summary"]
    said = [line for line in result.stderr.splitlines() if line.startswith("torchplug check: no xpu device here")]
    assert len(said) == 1 and "checking an emulated xpu in host memory" in said[0] and "--native" in said[0], result.stderr


REFUSE = """
    import sys
    from torchplug.cli import main
    code = main(["check", "xpu", *sys.argv[1:]])
    slow = ("torchplug.conformance.running.runner", "torch.testing._internal.opinfo.core", "torch._inductor")
    print(code, *(name in sys.modules for name in slow))
"""


@pytest.mark.parametrize("args, env, said", [
    (["--native"], {}, "and --native asks for the real device. Fix: run where the hardware and a torch build "
                       "for it are present, or drop --native to check an emulated xpu"),
    ([], {"TORCHPLUG_EMULATE_GPU": "xpu=bogus"}, "nor can it be emulated here: TORCHPLUG_EMULATE_GPU: backend 'xpu' "
                                                 "has no model 'bogus'"),
    ([], {"TORCHPLUG_EMULATE": "xpu", "TORCHPLUG_EMULATE_MEMORY": "0"}, "TORCHPLUG_EMULATE_MEMORY"),
], ids=["native", "bad-model", "bad-memory"])
def test_a_device_that_cannot_be_checked_is_refused_before_the_suite_starts(args, env, said):
    result = run_python(REFUSE.replace("sys.argv[1:]", repr(args)), check=False, **env)
    assert result.stdout.split() == ["2", "False", "False", "False"], result.stdout + result.stderr
    error = [line for line in result.stderr.splitlines() if line.startswith("torchplug check: error: ")]
    assert len(error) == 1 and said in error[0], result.stderr
