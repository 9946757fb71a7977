"""The ATen-level entries (conformance/aten_db.py) reach the overloads OpInfo's samples never dispatch.

One run of `torchplug check` on emulated xpu over a few `aten.*` entries, one per way an entry reaches
an overload: a backward kernel's out= form under its own keyword (grad_input), a forward op with two
out= tensors (out, indices) and the backward derived from it, an in-place comparison, a random op
(compared by statistics) and a fused optimizer that writes its list arguments.
"""

import json

import pytest
import torch

from conftest import run_cli

pytest.importorskip("expecttest", reason="torch's OpInfo database needs expecttest (pip install expecttest)")
pytest.importorskip("torchplug_xpu", reason="needs the xpu plugin (pip install ./devices/xpu)")

NAMES = ("silu_backward", "max_pool2d_with_indices", "max_pool2d_with_indices_backward", "eq_", "binomial", "_fused_adam_")
OPS = f"^aten\\.({'|'.join(NAMES)})$"
REACHED = ["aten::silu_backward", "aten::silu_backward.grad_input", "aten::max_pool2d_with_indices.out",
           "aten::max_pool2d_with_indices_backward.grad_input", "aten::eq_.Scalar", "aten::binomial",
           "aten::_fused_adam_"]


@pytest.fixture(scope="module")
def aten_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("aten")
    result = run_cli("check", "xpu", "--tier", "standard", "--ops", OPS, "--workers", "1", "--no-runtime-checks",
                     "--coverage", "--report", str(out), TORCHPLUG_EMULATE="xpu")
    assert (out / "report.json").is_file(), result.stdout + result.stderr
    return result, json.loads((out / "report.json").read_text())


def test_the_aten_entries_pass_on_emulated_xpu(aten_run):
    result, report = aten_run
    statuses = {(c["op"], c["mode"], c["status"]) for c in report["cases"]}
    assert {op for op, _, _ in statuses} == {f"aten.{name}" for name in NAMES}
    assert not [s for s in statuses if s[2] not in ("pass", "skip")], result.stdout[-3000:]
    judged = {(op, mode) for op, mode, status in statuses if status == "pass"}
    assert ("aten.silu_backward", "out") in judged and ("aten.max_pool2d_with_indices", "out") in judged
    assert ("aten.binomial", "eager") in judged and ("aten._fused_adam_", "eager") in judged


def test_the_aten_entries_reach_their_overloads(aten_run):
    _, report = aten_run
    exercised = set(report["coverage"]["exercised_overloads"])
    assert [name for name in REACHED if name not in exercised] == []


def test_backward_samples_derive_from_the_forward_by_argument_name():
    """max_pool2d_with_indices_backward's arguments come from the forward's sample and results: its
    grad_output has the forward result's shape, its indices are the forward's indices."""
    from torchplug.conformance.cases import aten_db
    from torchplug.conformance.cases.opinfo import all_ops

    entry = all_ops()["aten.max_pool2d_with_indices_backward"]
    assert entry.out_names == ("grad_input",) and entry.supports_out and not entry.validates_inputs
    sample = entry.samples(torch.float32)[0]
    forward = all_ops()["aten.max_pool2d_with_indices"].samples(torch.float32)[0]
    output, indices = torch.ops.aten.max_pool2d_with_indices(forward.input, *forward.args)
    assert sample.input.shape == output.shape and torch.equal(sample.args[0], forward.input)
    assert torch.equal(sample.args[-1], indices)
    assert aten_db.out_names("nll_loss_forward") == ("output", "total_weight")
    assert all_ops()["aten.binomial"].nondeterministic == "random"
    assert all_ops()["aten._standard_gamma_grad"].nondeterministic is None


def test_a_compile_failure_the_cpu_shares_is_torch_compiles_not_the_devices(tmp_path):
    """torch.compile cannot trace _test_optional_intlist on any device (no meta kernel): the compile mode
    compiles the sample on the CPU too, finds the same failure, and skips with that reason. silu_backward
    compiles on both and passes."""
    result = run_cli("check", "xpu", "--tier", "full", "--modes", "compile", "--dtypes", "float32,int64",
                     "--ops", r"^aten\.(_test_optional_intlist|silu_backward)$", "--workers", "1",
                     "--no-runtime-checks", "--report", str(tmp_path), TORCHPLUG_EMULATE="xpu")
    cases = json.loads((tmp_path / "report.json").read_text())["cases"]
    assert result.returncode == 0, result.stdout[-3000:]
    skipped = [c for c in cases if c["op"] == "aten._test_optional_intlist"]
    assert skipped and all(c["status"] == "skip" for c in skipped)
    assert skipped[0]["detail"].startswith("torch.compile fails on the CPU too: ")
    assert {c["status"] for c in cases if c["op"] == "aten.silu_backward"} == {"pass"}
