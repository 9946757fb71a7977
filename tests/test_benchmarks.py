"""The benchmark scripts' shared report: noisy figures are marked, a FAIL exits non-zero, --json holds the context."""

import argparse
import ast
import importlib.util
import json
import re
import sys

import pytest

from conftest import REPO, clean_env, run_process

BENCHMARKS = REPO / "benchmarks"
SCRIPTS = sorted(p.name for p in BENCHMARKS.glob("*.py") if p.name != "common.py")


def _load_common():
    spec = importlib.util.spec_from_file_location("benchmarks_common", BENCHMARKS / "common.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


common = _load_common()


def test_a_figure_whose_repeats_scatter_is_marked_noisy_and_so_is_its_ratio():
    steady = common.Measurement.of("steady", [10.0, 11.0, 12.0], "ms")
    noisy = common.Measurement.of("noisy", [10.0, 11.0, 14.0], "ms")
    assert (steady.median, steady.min, steady.max, steady.repeats, steady.noisy) == (11.0, 10.0, 12.0, 3, False)
    assert steady.cell == "11.00" and noisy.cell == "11.00~"
    ratio = steady.ratio(noisy)
    assert ratio.median == pytest.approx(1.0) and ratio.noisy and ratio.cell.endswith("~")
    assert (ratio.min, ratio.max) == pytest.approx((10 / 14, 12 / 10))


def test_a_failed_verdict_makes_the_exit_status_non_zero_and_the_json_says_why(tmp_path, capsys):
    out = tmp_path / "figures.json"
    report = common.Report("demo", argparse.Namespace(json=str(out), runs=3))
    noisy = report.add("spread", [1.0, 2.0], "ms")
    assert report.verdict(True, "holds") and not report.verdict(False, "misses", noisy)
    assert report.finish() == 1
    printed = capsys.readouterr().out
    assert "PASS: holds\n" in printed and "FAIL: misses (noisy" in printed and "1 of 2 verdicts FAILED" in printed
    figures = json.loads(out.read_text())
    assert figures["passed"] is False and figures["arguments"] == {"runs": 3}
    assert figures["torch"] and figures["machine"]["cores"] and "current" in figures["isa"]
    assert len(figures["load_average"]["before"]) == len(figures["load_average"]["after"]) == 3
    assert figures["measurements"] == [{"name": "spread", "unit": "ms", "median": 1.5, "min": 1.0, "max": 2.0,
                                        "repeats": 2, "noisy": True}]
    passing = common.Report("demo", argparse.Namespace(json=None))
    passing.verdict(True, "holds")
    assert passing.finish() == 0


@pytest.mark.parametrize("script", SCRIPTS)
def test_every_benchmark_takes_json_and_its_help_states_the_targets_its_code_holds(script):
    # Each numeric *TARGET* constant the verdicts compare against must be the figure --help states,
    # so a target changed in code and not in the docs (or the other way round) fails here.
    result = run_process([sys.executable, BENCHMARKS / script, "--help"], env=clean_env())
    assert "--json PATH" in result.stdout
    verdicts = result.stdout[result.stdout.index("Verdict"):]
    targets = {node.targets[0].id: node.value.value for node in ast.parse((BENCHMARKS / script).read_text()).body
               if isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Name)
               and "TARGET" in node.targets[0].id and isinstance(node.value, ast.Constant)
               and isinstance(node.value.value, float)}
    stated = {float(n) for n in re.findall(r"(?<![\w.])(\d+\.\d+)", verdicts)}
    assert {name: value for name, value in targets.items() if value not in stated} == {}


def test_emulation_benchmark_writes_its_figures_and_exits_by_its_verdicts(tmp_path):
    out = tmp_path / "emulation.json"
    result = run_process([sys.executable, BENCHMARKS / "emulation.py", "--rounds", "2", "--json", out],
                         check=False, env=clean_env())
    assert out.exists(), result.stdout + result.stderr
    figures = json.loads(out.read_text())
    assert result.returncode == (0 if figures["passed"] else 1), result.stdout + result.stderr
    assert len(figures["verdicts"]) == 3 and all(m["repeats"] == 2 for m in figures["measurements"])
    assert "emulated xpu" in result.stdout


def test_llm_benchmark_quick_times_every_dtype_torchplug_and_stock(tmp_path):
    out = tmp_path / "llm.json"
    result = run_process([sys.executable, BENCHMARKS / "llm_cpu.py", "--quick", "--json", out],
                         check=False, env=clean_env())
    assert out.exists(), result.stdout + result.stderr
    figures = json.loads(out.read_text())
    assert result.returncode == (0 if figures["passed"] else 1), result.stdout + result.stderr
    names = {m["name"] for m in figures["measurements"]}
    for kind in ("torchplug", "stock"):
        for dtype in ("fp32", "bf16", "fp16"):
            label = f"{kind}, {dtype}, eager, batch 1"
            assert {f"{label}: prefill", f"{label}: decode", f"{label}: decode weights"} <= names
    assert all(m["repeats"] == 2 for m in figures["measurements"] if not m["name"].endswith("/ llama.cpp"))
    assert "memory read (torch.sum, 1 GB float32)" in names  # the wall decode's GB/s is read against
    assert "torchplug ISA path" in result.stdout and "decode GB/s" in result.stdout
