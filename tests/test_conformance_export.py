"""`torchplug check --export pytorch`: a manifest applied by PyTorch's own test machinery.

The exported files are loaded the way a vendor would (TORCH_TEST_DEVICES, DISABLED_TESTS_FILE) by
an OpInfo test written in PyTorch's style, run by torch's runner on emulated xpu.
"""

import json
import sys
from pathlib import Path

from conftest import clean_env, run_cli, run_process
from torchplug.conformance.verdicts.manifest import Entry

GENERIC_TESTS = Path(__file__).with_name("pytorch_export") / "generic_tests.py"
# Written with the manifest's own writer (its round trip is tested in test_conformance_units).
MANIFEST = "\n\n".join(entry.to_toml() for entry in (
    Entry("xfail", "abs fails in float32", ("abs",), dtypes=("float32",), modes=("out",), category="value"),
    Entry("skip", "neg hangs", ("neg",), modes=("out",), category="crash", issue="https://example.org/issues/7"),
    Entry("skip", "exp is not implemented at all", ("exp",), category="unsupported"),
    Entry("xfail", "abs loses storage sharing", ("abs",), modes=("alias",), category="layout"),
))


def test_the_export_drives_pytorchs_own_test_runner(tmp_path):
    manifest = tmp_path / "conformance.toml"
    manifest.write_text(MANIFEST)
    out = tmp_path / "export"
    result = run_cli("check", "xpu", "--manifest", str(manifest), "--export", "pytorch", str(out), TORCHPLUG_EMULATE="xpu")
    assert result.returncode == 0, result.stderr
    assert "modes alias have no PyTorch counterpart" in result.stdout  # said, not silently dropped
    disabled = json.loads((out / "disabled_tests.json").read_text())
    assert disabled["test_out_neg (__main__.TestCommon)"] == ["https://example.org/issues/7", []]
    assert "test_out_abs_xpu_float32 (__main__.TestCommon)" not in disabled  # an xfail runs, expected to fail

    env = clean_env(TORCHPLUG_EMULATE="xpu", TORCH_TEST_DEVICES=str(out / "test_configs.py"),
                    DISABLED_TESTS_FILE=str(out / "disabled_tests.json"))
    ran = json.loads(run_process([sys.executable, GENERIC_TESTS], env=env, cwd=tmp_path).stdout.splitlines()[-1])
    assert ran == {"xfail": ["test_out_abs_xpu_float32"],
                   "skipped": ["test_out_neg_xpu_float32", "test_out_neg_xpu_float64"],
                   "failed": ["test_out_abs_xpu_float64"]}, ran  # exp: left out of the op allowlist


def test_export_refuses_an_unknown_format(tmp_path):
    result = run_cli("check", "xpu", "--export", "junit", str(tmp_path), TORCHPLUG_EMULATE="xpu")
    assert result.returncode == 2 and "cannot export to 'junit'; the formats are: pytorch" in result.stderr
