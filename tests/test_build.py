"""`torchplug build`: explicit builds with a progress line, timed apart from doctor's op time."""

import json
import re
import sys
from pathlib import Path

import pytest

from conftest import clean_env, run_process
from torchplug import extension
from torchplug.cli.build import about_to_build

TORCHPLUG = Path(sys.executable).parent / "torchplug"  # the console script, as users run it


def test_build_finds_the_cached_extensions_and_rejects_unknown_targets():
    # conftest built the CPU kernels and the dispatcher's C++ half before the session
    result = run_process([TORCHPLUG, "build", "cpu", "--json"], env=clean_env())
    assert [(r["extension"], r["result"]) for r in json.loads(result.stdout)["results"]] == [
        ("torchplug_dispatch", "cached"), ("torchplug_cpu_ext", "cached")]
    assert "not built yet" not in result.stderr
    wrong = run_process([TORCHPLUG, "build", "cpuu"], check=False, env=clean_env())
    assert wrong.returncode == 2 and "unknown target 'cpuu'; choose from dispatcher, emulation, distributed, cpu" in wrong.stderr


def test_only_commands_that_build_silence_the_not_built_warning():
    assert about_to_build(["/venv/bin/torchplug", "build"])
    assert about_to_build(["/venv/bin/torchplug", "doctor"]) and about_to_build(["torchplug", "doctor", "cpu"])
    assert not about_to_build(["torchplug", "doctor", "xpu"]) and not about_to_build(["torchplug", "list"])
    assert not about_to_build(["script.py", "build"])


def test_progress_line_says_what_builds_for_how_long_against_the_last_build(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("TORCHPLUG_CACHE", str(tmp_path))
    monkeypatch.setattr(extension, "_PROGRESS_EVERY_S", 0.05)
    assert extension.last_build_seconds("demo_ext") is None
    with extension._progress("demo_ext"):
        extension.time.sleep(0.2)
    assert "torchplug: building 'demo_ext': 0 s elapsed (no earlier build here to compare with)" in capsys.readouterr().err
    extension._record_build_seconds("demo_ext", 41.96)
    assert extension.last_build_seconds("demo_ext") == 42.0
    with extension._progress("demo_ext"):
        extension.time.sleep(0.2)
    assert "(the last build here took 42 s)" in capsys.readouterr().err


@pytest.mark.slow
def test_doctor_builds_into_a_fresh_cache_without_warning_and_times_the_build_apart(tmp_path):
    result = run_process([TORCHPLUG, "doctor", "cpu"], timeout=1800, env=clean_env(TORCHPLUG_CACHE=str(tmp_path)))
    assert "not built yet" not in result.stderr and "torchplug: building 'torchplug_cpu_ext'" in result.stderr
    cpu = next(line for line in result.stdout.splitlines() if line.startswith("cpu "))
    built = re.search(r"; built ([\w, ]+) first: \d+ s\)", cpu)
    assert "PASS" in cpu and built and set(built[1].split(", ")) == {"torchplug_dispatch", "torchplug_cpu_ext"}, cpu
