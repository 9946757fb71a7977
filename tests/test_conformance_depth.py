"""`torchplug check` judges semantics, not only values: a plugin with planted defects fails by name.

torchplug-acme (tests/planted_plugin) is a new PrivateUse1 device, pip-installed into a fresh venv as a
vendor's plugin would be. With ACME_DEFECTS=1 four of its kernels give the right values with the wrong
semantics: transpose copies instead of viewing, clone drops the input's layout under preserve_format,
index_select raises ValueError for an out-of-range index (torch: IndexError), and zeros_like (a
factory) runs through the CPU fallback. Without the variable it is the emulated runtime alone.
"""

import json
import shutil

import pytest

from conftest import LOCAL_ONLY, REPO, pip_install, run_cli, venv_over_ours

pytest.importorskip("expecttest", reason="torch's OpInfo database needs expecttest (pip install expecttest)")

OPS = "^(transpose|clone|index_select|zeros_like)$"
# (mode, op, words of the failure's cause as printed, numbers blanked): every planted defect, by mode and op.
DEFECTS = [
    ("alias", "transpose", "is fresh; on the CPU it is a view of input"),
    ("layout", "clone", "column-major inputs"),
    ("errors", "index_select", "raised ValueError: index out of range in self; the CPU raises IndexError"),
    ("eager", "zeros_like", "illegal-fallback: aten::zeros_like is a factory"),
]


@pytest.fixture(scope="module")
def acme_python(tmp_path_factory) -> str:
    root = tmp_path_factory.mktemp("acme")
    source = root / "planted_plugin"
    shutil.copytree(REPO / "tests" / "planted_plugin", source, ignore=LOCAL_ONLY)
    bin_dir = venv_over_ours(root)
    pip_install(bin_dir, [source], cwd=root)
    return str(bin_dir / "python")


def _check(python: str, out, defects: str):
    result = run_cli("check", "acme", "--tier", "standard", "--ops", OPS, "--no-runtime-checks", "--report", str(out),
                     python=python, TORCHPLUG_EMULATE="acme", ACME_DEFECTS=defects)
    assert (out / "report.json").is_file(), result.stdout + result.stderr
    return result, json.loads((out / "report.json").read_text())


@pytest.fixture(scope="module")
def defective_run(acme_python, tmp_path_factory):
    return _check(acme_python, tmp_path_factory.mktemp("defective"), "1")


def _named(stdout: str, mode: str, op: str) -> str:
    """The failure group line naming `mode` whose ops line names `op`, or ''."""
    lines = stdout.splitlines()
    return next((line for line, ops in zip(lines, lines[1:])
                 if line.strip().startswith(f"fail [{mode}]") and op in ops.split("ops:")[-1].split(";")[0]), "")


@pytest.mark.parametrize("mode, op, cause", DEFECTS, ids=[f"{m}-{o}" for m, o, _ in DEFECTS])
def test_each_planted_defect_fails_named_by_mode_and_op(defective_run, mode, op, cause):
    result, report = defective_run
    assert result.returncode == 1
    line = _named(result.stdout, mode, op)
    assert cause in line, result.stdout
    failing = [c for c in report["cases"] if (c["op"], c["mode"], c["status"]) == (op, mode, "fail")]
    assert failing and all(c["repro"].startswith(f"torchplug check acme --op {op} ") for c in failing)
    assert all(cause.split(":")[0] in c["detail"] for c in failing)


def test_defects_with_right_values_still_pass_the_value_modes(defective_run):
    # The planted kernels compute the right numbers: only the semantic modes (and the fallback verdict) see them.
    _, report = defective_run
    eager = [c for c in report["cases"] if c["mode"] == "eager" and c["op"] != "zeros_like"]
    assert eager and all(c["status"] == "pass" for c in eager)
    assert report["fallback"]["counts"]["illegal-fallback"] > 0
    assert {c["route"] for c in report["cases"] if c["op"] == "zeros_like" and c["status"] == "fail"} == {"illegal-fallback"}


def test_the_plugin_without_its_defects_passes(acme_python, tmp_path):
    result, report = _check(acme_python, tmp_path / "clean", "0")
    assert result.returncode == 0, result.stdout + result.stderr
    for mode in ("alias", "layout", "errors"):
        assert report["summary"][mode]["pass_rate"] == 1.0 and report["summary"][mode]["judged"] > 0
    assert report["fallback"]["counts"] == {"pass-native": report["fallback"]["total"], "pass-fallback": 0,
                                            "illegal-fallback": 0}
