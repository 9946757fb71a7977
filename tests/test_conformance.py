"""`torchplug check` reports what it should, on a plugin written to misbehave (`tpbad`).

tpbad is an emulated PrivateUse1 device with two kernels of its own: `neg` is wrong for float16
only, and `exp` segfaults on float32. It also breaks the CPU's own `sin` for float16 (a segfault),
as torch's CPU kernels do on a few samples: the reference crashes there, not the device. Its manifest expects `abs` to fail, which it does not. It has
no Inductor target. One run of the suite on it (in worker processes, as users run it) gives every
result the tests below look at.
"""

import json
import shutil

import pytest

from conftest import make_plugin, plugin_source, run_cli, run_python

pytest.importorskip("expecttest", reason="torch's OpInfo database needs expecttest (pip install expecttest)")

TPBAD = plugin_source("tpbad", tail='''
import ctypes
import os
from torchplug.entrypoints import STANDARD_DTYPES

FakeBackend.spec = BackendSpec(name="tpbad", device_type="tpbad", dispatch_key="PrivateUse1",
                               dtypes=STANDARD_DTYPES, torch_range=">=2.13,<2.16")
FakeBackend.native_unavailable_reason = lambda self: "tpbad is a test device"
FakeBackend.codegen = lambda self: None  # no Inductor target: compile must be reported unsupported
_lib = torch.library.Library("aten", "IMPL")

def wrong_neg(x):
    result = torch.neg(x.cpu())
    return (result + 1 if x.dtype == torch.float16 else result).to(x.device)

def crashing_exp(x):
    if x.dtype == torch.float32:
        ctypes.string_at(0)  # a segfault, as a broken native kernel gives
    return torch.exp(x.cpu()).to(x.device)

def crashing_cpu_sin(x):
    if x.dtype == torch.float16:
        ctypes.string_at(0)
    return torch.ops.aten.sin.default.redispatch(torch._C.DispatchKeySet("CPU"), x)

_lost = []  # set by sticky_cos: the device is "lost", as a CUDA context after a device-side assert

def sticky_cos(x):
    marker = os.environ["TPBAD_BREAK_ONCE"]  # once per run, whichever worker gets there first
    if x.dtype == torch.float32 and not os.path.exists(marker):
        open(marker, "w").close()
        _lost.append(True)
    return torch.cos(x.cpu()).to(x.device)

def synchronize(device=None):
    if _lost:
        raise RuntimeError("tpbad error: device-side assert triggered")

def setup(self):
    super(FakeBackend, self).setup()
    from torchplug import emulation

    emulation.ensure()  # the runtime registers its own structured-op kernels when it loads: ours go after
    _lib.impl("neg", wrong_neg, "PrivateUse1")
    _lib.impl("exp", crashing_exp, "PrivateUse1")
    _lib.impl("sin", crashing_cpu_sin, "AutogradCPU")  # the CPU reference only: the device never runs it
    _lib.impl("cos", sticky_cos, "PrivateUse1")
    torch.tpbad.synchronize = synchronize

FakeBackend.setup = setup
backend = FakeBackend()
''')
MANIFEST = '''
[[xfail]]
reason = "abs is expected to fail (it does not: xpass)"
category = "value"
ops = ["abs"]
modes = ["eager"]
dtypes = ["float32"]
'''


@pytest.fixture(scope="module")
def tpbad_run(tmp_path_factory):
    root = tmp_path_factory.mktemp("tpbad")
    make_plugin(root, "tpbad", TPBAD)
    (root / "conformance.toml").write_text(MANIFEST)
    out = root / "out"
    result = run_cli("check", "tpbad", "--ops", "^(neg|exp|abs|sin|cos)$", "--dtypes", "float32,float16",
                     "--modes", "eager,compile", "--no-runtime-checks", "--report", str(out),
                     path=root, TORCHPLUG_EMULATE="tpbad", TPBAD_BREAK_ONCE=str(root / "broke"))
    assert (out / "report.json").is_file(), result.stdout + result.stderr
    report = json.loads((out / "report.json").read_text())
    return root, out, report, result


def _cases(report, op, dtype, mode="eager"):
    return [c for c in report["cases"] if (c["op"], c["dtype"], c["mode"]) == (op, dtype, mode)]


def test_a_kernel_wrong_for_one_dtype_fails_with_its_repro(tpbad_run):
    _, _, report, result = tpbad_run
    assert result.returncode == 1  # failures and crashes fail the run
    wrong = _cases(report, "neg", "float16")
    assert wrong and all(c["status"] == "fail" for c in wrong)
    assert wrong[0]["mismatches"] > 0 and wrong[0]["max_abs"] == pytest.approx(1.0, rel=1e-2)
    assert wrong[0]["repro"] == f"torchplug check tpbad --op neg --dtype float16 --mode eager --sample {wrong[0]['sample']}"
    assert "modes.case_input(entry, torch.float16, 'eager'" in wrong[0]["snippet"]
    assert all(c["status"] == "pass" for c in _cases(report, "neg", "float32"))
    assert "fail [eager]" in result.stdout and "--op neg --dtype float16" in result.stdout


def test_a_segfaulting_kernel_is_crashed_and_the_run_finishes(tpbad_run):
    _, _, report, _ = tpbad_run
    crashed = _cases(report, "exp", "float32")
    assert crashed and all(c["status"] == "crashed" for c in crashed)
    assert "SIGSEGV" in crashed[0]["detail"]
    assert all(c["status"] == "pass" for c in _cases(report, "exp", "float16"))  # after the crashes, same op


def test_a_device_left_unusable_fails_its_case_and_a_fresh_worker_runs_the_rest(tpbad_run):
    """A GPU kernel's device-side assert surfaces at the next synchronisation and poisons the context:
    the case that caused it fails with the error, and the worker retires so no later case inherits it."""
    _, _, report, _ = tpbad_run
    cases = _cases(report, "cos", "float32")
    failed = [c for c in cases if c["status"] != "pass"]
    assert len(failed) == 1 and failed[0]["status"] == "fail", cases
    assert "device-side assert triggered" in failed[0]["detail"]
    assert len(cases) > 1 and all(c["status"] == "pass" for c in _cases(report, "cos", "float16"))


def test_a_crash_of_the_cpu_reference_is_not_blamed_on_the_device(tpbad_run):
    _, _, report, _ = tpbad_run
    skipped = _cases(report, "sin", "float16")
    assert skipped and all(c["status"] == "skip" for c in skipped)
    assert "the CPU reference crashed (worker process died (SIGSEGV)), not the device" in skipped[0]["detail"]
    assert all(c["status"] == "pass" for c in _cases(report, "sin", "float32"))


def test_a_manifest_xfail_that_passes_is_an_xpass(tpbad_run):
    root, _, report, _ = tpbad_run
    assert report["backend"]["manifest"] == str(root / "conformance.toml")
    xpassed = _cases(report, "abs", "float32")
    assert xpassed and all(c["status"] == "xpass" for c in xpassed)
    assert xpassed[0]["manifest_reason"].startswith("abs is expected to fail")
    assert all(c["status"] == "pass" for c in _cases(report, "abs", "float16"))  # the entry names float32 only


def test_no_compile_target_reports_compile_unsupported_with_the_reason(tpbad_run):
    _, _, report, result = tpbad_run
    assert report["unsupported_modes"] == {"compile": "no Inductor target registered for 'tpbad'"}
    assert not [c for c in report["cases"] if c["mode"] == "compile"]
    assert "no Inductor target registered for 'tpbad'" in result.stdout


def test_reports_derive_from_the_json(tpbad_run):
    _, out, report, _ = tpbad_run
    assert report["schema"] == 1 and report["backend"]["mode"] == "emulated"
    assert report["versions"]["torch"].startswith("2.") and report["machine"]["cpus"] >= 1
    junit = (out / "junit.xml").read_text()
    assert 'type="fail"' in junit and 'type="crashed"' in junit and 'type="xpass"' in junit
    markdown = (out / "report.md").read_text()
    assert "| eager |" in markdown and "## Op × dtype matrix" in markdown
    page = (out / "report.html").read_text()
    assert '<script type="application/json" id="data">' in page and "--op neg --dtype float16" in page


def test_compare_finds_a_planted_regression(tpbad_run, tmp_path):
    _, out, report, _ = tpbad_run
    shutil.copy(out / "report.json", tmp_path / "before.json")
    planted = json.loads((out / "report.json").read_text())
    victim = next(c for c in planted["cases"] if (c["op"], c["dtype"], c["status"]) == ("abs", "float16", "pass"))
    victim["status"], victim["detail"] = "fail", "planted"
    (tmp_path / "after.json").write_text(json.dumps(planted))
    result = run_cli("check", "--compare", str(tmp_path / "before.json"), str(tmp_path / "after.json"))
    assert result.returncode == 1, result.stdout + result.stderr
    assert "REGRESSIONS: 1" in result.stdout and "abs float16 eager" in result.stdout
    assert "NEW CRASHES: 0" in result.stdout
    same = run_cli("check", "--compare", str(tmp_path / "before.json"), str(tmp_path / "before.json"))
    assert same.returncode == 0 and "REGRESSIONS: 0" in same.stdout


def test_pytest_runs_the_same_cases_as_items(tpbad_run, tmp_path):
    root, _, report, _ = tpbad_run
    code = (f"import sys, pytest; sys.exit(pytest.main(['-p', 'no:cacheprovider', '--torchplug-backend=tpbad', "
            "'--torchplug-ops=^neg$', '--torchplug-modes=eager', '--torchplug-dtypes=float32,float16', "
            f"'--torchplug-workers=1', '-rA', '-q', {str(tmp_path)!r}]))")  # an empty folder: only the cases
    result = run_python(code, path=root, check=False, TORCHPLUG_EMULATE="tpbad")
    expected = {f"tpbad::neg[{c['dtype']}-eager-{c['sample']}]": c["status"]
                for c in report["cases"] if c["op"] == "neg" and c["mode"] == "eager"}
    # "-rA" summary lines: "OUTCOME nodeid" and, for failures on newer pytest, " - message" after it
    outcomes = {line.split()[1].split("::", 1)[1]: line.split()[0] for line in result.stdout.splitlines()
                if line.startswith(("PASSED", "FAILED")) and "::" in line}
    assert outcomes == {name: "PASSED" if status == "pass" else "FAILED" for name, status in expected.items()}, \
        result.stdout[-3000:]
    assert "repro: torchplug check tpbad --op neg --dtype float16 --mode eager" in result.stdout


def test_the_coverage_audit_names_what_the_cases_dispatched_to_the_device(tpbad_run):
    """The emulated runtime notes each overload reaching the device key: abs's samples reach aten::abs.out
    (abs is a composite of it), nothing reached aten::lerp, and sparse overloads are out of reach on a
    device of strided tensors."""
    _, _, report, result = tpbad_run
    cov = report["coverage"]
    assert "aten::abs.out" in cov["exercised_overloads"] and "aten::lerp.Scalar" not in cov["exercised_overloads"]
    assert cov["unexercised"]["aten::lerp.Scalar"] == "no case dispatches to it"
    assert cov["unexercised"]["aten::_to_sparse_csr"].startswith("out of reach")
    assert cov["relevant"] > 1000 and cov["percent"] == round(100 * cov["exercised"] / cov["relevant"], 1)
    assert f"COVERAGE  {cov['percent']:.1f}% of {cov['relevant']} backend-relevant ATen overloads" in result.stdout
