"""The conformance suite's pieces that need no device: comparison, arbitration, manifests, grouping."""

import math
import warnings

import pytest
import torch

from torchplug.conformance.cases.case import Case, CaseResult
from torchplug.conformance.report.groups import cause, failure_groups
from torchplug.conformance.verdicts.compare import compare, statistics
from torchplug.conformance.verdicts.manifest import Entry, Manifest, ManifestError, load, updated


def test_per_dtype_tolerance_and_nan():
    expected = torch.tensor([1.0, float("nan"), float("inf")])
    assert compare([expected.clone()], [expected]).ok
    off = expected + torch.tensor([1e-3, 0.0, 0.0])
    verdict = compare([off], [expected])
    assert not verdict.ok and verdict.mismatches == 1 and verdict.max_abs == pytest.approx(1e-3, rel=1e-3)
    half = torch.tensor([1.0, 2.0], dtype=torch.float16)
    assert compare([half + torch.tensor([0.0, 1e-3], dtype=torch.float16)], [half]).ok  # within fp16's rtol


def test_structure_mismatches_name_what_differs():
    x = torch.ones(3)
    assert "dtype torch.float64" in compare([x.double()], [x]).detail
    assert "shape (2,)" in compare([torch.ones(2)], [x]).detail
    assert "2 outputs" in compare([x, x], [x]).detail
    assert not compare([3], [4]).ok and compare([math.nan], [math.nan]).ok


def test_float64_arbitration_accepts_a_device_closer_to_float64_than_the_cpu():
    ulp = 2.0 ** -10  # float16 spacing at 1.0
    exact = torch.tensor([1.0015], dtype=torch.float64)
    cpu = torch.tensor([1.0], dtype=torch.float16)  # CPU error 1.5e-3
    closer = torch.tensor([1 + 2 * ulp], dtype=torch.float16)  # 2 ulps from the CPU: a mismatch, error 4.5e-4
    accepted = compare([closer], [cpu], lambda: [exact])
    assert accepted.ok and accepted.arbitrated and "within 4x" in accepted.detail
    assert not compare([closer], [cpu]).ok  # without float64 it is a mismatch
    farther = torch.tensor([1 + 8 * ulp], dtype=torch.float16)  # error 6.3e-3 > 4 x 1.5e-3
    rejected = compare([farther], [cpu], lambda: [exact])
    assert not rejected.ok and rejected.arbitrated and "float64 arbitration" in rejected.detail


def test_random_ops_get_statistics_not_values():
    torch.manual_seed(0)
    a, b = torch.randn(4096), torch.randn(4096)
    assert statistics([a], [b], "random").ok
    assert not statistics([a + 3], [b], "random").ok
    assert statistics([torch.empty(5)], [torch.empty(5)], "undefined").ok


def _result(op, dtype, mode, status, detail=""):
    return CaseResult(Case(op, dtype, mode, 0), status, detail)


def test_manifest_xfail_xpass_and_runtime(tmp_path):
    path = tmp_path / "conformance.toml"
    path.write_text('[[xfail]]\nreason = "known"\ncategory = "value"\nops = ["linalg.*"]\nmodes = ["out"]\n'
                    'runtime = ["emulated"]\n')
    manifest = load(path)
    manifest.runtime = "emulated"
    assert manifest.apply(_result("linalg.svd", "float32", "out", "fail", "x"), "smoke").status == "xfail"
    assert manifest.apply(_result("linalg.svd", "float32", "out", "pass"), "smoke").status == "xpass"
    assert manifest.apply(_result("linalg.svd", "float32", "eager", "fail"), "smoke").status == "fail"
    manifest.runtime = "native"
    assert manifest.apply(_result("linalg.svd", "float32", "out", "fail"), "smoke").status == "fail"
    path.write_text('[[xfail]]\nops = ["a"]\n')
    with pytest.raises(ManifestError, match="needs a reason and ops"):
        load(path)


@pytest.mark.parametrize("extra, message", [
    ('', r"\[\[skip\]\] entry 2 \(ops \['b\*'\]\) has no category: give one of dtype, value, error-message, "
         r"unsupported, layout, crash, other"),
    ('category = "flaky"\n', r"entry 2 \(ops \['b\*'\]\) has category 'flaky': give one of dtype"),
    ('category = "crash"\nissue = "#12"\n', r"entry 2 \(ops \['b\*'\]\) has issue '#12': give a link"),
])
def test_manifest_entries_need_a_reason_category_and_an_issue_link_if_any(tmp_path, extra, message):
    path = tmp_path / "conformance.toml"
    first = '[[skip]]\nreason = "ok"\ncategory = "crash"\nissue = "https://github.com/o/r/issues/1"\nops = ["a"]\n\n'
    path.write_text(first + f'[[skip]]\nreason = "bad"\n{extra}ops = ["b*"]\n')
    with pytest.raises(ManifestError, match=message):
        load(path)
    path.write_text(first)
    entry = load(path).entries[0]
    assert (entry.category, entry.issue) == ("crash", "https://github.com/o/r/issues/1")
    assert load_text(tmp_path, entry.to_toml()).entries == [entry]  # written back as read


def load_text(tmp_path, text):
    path = tmp_path / "written.toml"
    path.write_text(text)
    return load(path)


def test_update_manifest_drops_fixed_entries_and_groups_new_failures():
    old = Manifest(None, [Entry("xfail", "fixed now", ("abs",)), Entry("xfail", "other tier", ("sin",), tiers=("full",))])
    cases = [
        {"op": "abs", "dtype": "float32", "mode": "eager", "sample": 0, "status": "xpass", "detail": ""},
        {"op": "neg", "dtype": "float16", "mode": "eager", "sample": 0, "status": "fail", "detail": "output 0: 3 of 4 differ"},
        {"op": "exp", "dtype": "float16", "mode": "eager", "sample": 1, "status": "fail", "detail": "output 0: 1 of 9 differ"},
    ]
    report = {"selection": {"tier": "smoke", "dtypes": ["float32", "float16"]}, "backend": {"name": "x", "mode": "native"},
              "cases": cases}
    text = updated(old, report)
    assert "fixed now" not in text and "other tier" in text
    assert 'ops = ["exp", "neg"]' in text and 'dtypes = ["float16"]' in text and 'modes = ["eager"]' in text
    assert 'category = "value"' in text  # a values mismatch, for the author to review
    assert len(failure_groups(cases)) == 2  # the xpass, and the two failures with one cause
    assert cause("output 0: 3 of 4 differ (max abs 1.5)") == cause("output 1: 7 of 8 differ (max abs 2)")


@pytest.mark.parametrize("op, why", [
    ("aten::transpose.int", "a view op"), ("aten::add_.Tensor", "an in-place op on device memory"),
    ("aten::bernoulli.p", "a random op"), ("aten::zeros_like", "a factory"),
    ("aten::add.Tensor", None), ("aten::add.out", None),  # out= writes arguments the caller handed over
])
def test_ops_that_must_never_fall_back_are_told_by_their_schema(op, why):
    from torchplug.conformance.verdicts.fallback import why_illegal

    assert why_illegal(op) == why


def test_fallback_verdicts_and_the_manifests_native_ops(tmp_path):
    path = tmp_path / "conformance.toml"
    path.write_text('native = ["aten::mm"]\n\n[[xfail]]\nreason = "known"\ncategory = "other"\nops = ["sum"]\n')
    manifest = load(path)
    assert manifest.native == ("aten::mm",)

    def judged(op, status, fallback_ops):
        result = _result(op, "float32", "eager", status)
        result.fallback_ops = fallback_ops
        return manifest.apply(result, "standard")

    assert judged("add", "pass", {}).route == "native"
    assert judged("add", "pass", {"aten::nonzero": 1}).route == "fallback"
    illegal = judged("mm", "pass", {"aten::mm": 2})
    assert (illegal.status, illegal.route) == ("fail", "illegal-fallback")
    assert illegal.detail.startswith("illegal-fallback: aten::mm is declared native")
    assert judged("sum", "pass", {"aten::zeros_like": 1}).status == "xfail"  # a known illegal fallback
    path.write_text('native = ["mm"]\n')
    with pytest.raises(ManifestError, match="qualified op names"):
        load(path)
    path.write_text('nativ = ["aten::mm"]\n')
    with pytest.raises(ManifestError, match="unknown top-level keys"):
        load(path)


def test_zero_signs_are_held_to_the_cpus():
    from torchplug.conformance.verdicts.compare import zero_signs

    cpu = [torch.tensor([0.0, -0.0, 1.0])]
    assert zero_signs([torch.tensor([0.0, -0.0, 1.0])], cpu) == ""
    assert "1 zeros have the other sign" in zero_signs([torch.tensor([0.0, 0.0, 1.0])], cpu)
    assert compare([torch.tensor([0.0, 0.0, 1.0])], cpu).ok  # values alone cannot tell


def test_scalar_type_variants_put_integers_and_bools_where_the_sample_has_floats():
    from torch.testing._internal.opinfo.core import SampleInput

    from torchplug.conformance.modes.scalar_types import scalar_type_variants

    x, exponent = torch.randn(3), torch.tensor([1.4, -2.6, float("inf")])
    variants = dict(scalar_type_variants(SampleInput(x, args=(exponent,), kwargs={"weight": torch.ones(3)})))
    ints, bools = variants["int64 arguments"], variants["bool arguments"]
    assert ints.input is x and bools.input is x  # the first input keeps the case's dtype
    assert ints.args[0].tolist() == [1, -3, 64] and ints.kwargs["weight"].dtype == torch.int64  # inf clamped
    assert bools.args[0].dtype == torch.bool and bools.args[0].all()
    assert list(scalar_type_variants(SampleInput(x, args=(torch.arange(3),)))) == []  # nothing floating to swap


def test_the_audit_counts_what_is_in_reach_and_says_why_the_rest_is_not_exercised():
    from torchplug.conformance.running.exercised import audit

    relevant = ["aten::add.Tensor", "aten::add.out", "aten::_sparse_mm", "aten::gelu_backward", "aten::lerp.Scalar",
                "aten::gelu_backward.grad_input", "aten::_foobar"]
    cov = audit(relevant, {"aten::add.Tensor", "aten::not_relevant"})
    assert (cov["relevant"], cov["exercised"], cov["percent"]) == (7, 1, 14.3)
    assert (cov["in_reach"], cov["percent_in_reach"]) == (6, 16.7)  # the out= forms of backward kernels are called directly
    assert cov["unexercised"]["aten::gelu_backward.grad_input"] == "the out= form of a backward kernel no case calls"
    assert cov["unexercised"]["aten::_sparse_mm"].startswith("out of reach")
    assert cov["unexercised"]["aten::_foobar"] == "a torch test-only op no case calls"
    assert cov["unexercised"]["aten::gelu_backward"] == "a backward kernel no case reached"
    assert cov["unexercised"]["aten::add.out"] == "an out= overload no out case reached"
    assert cov["unexercised"]["aten::lerp.Scalar"] == "no case dispatches to it"


def test_the_standard_tier_runs_integer_and_bool_cases_by_default():
    from torchplug.conformance.cases.tiers import default_dtypes

    assert default_dtypes("smoke") == ("float32", "float16", "bfloat16")
    assert {"int64", "bool"} <= set(default_dtypes("standard")) and default_dtypes("full") == default_dtypes("standard")


def test_the_out_mode_skips_an_op_whose_cpu_out_disagrees_with_the_cpu_itself():
    """torch's fft.ihfftn(out=) gives the CPU another result than ihfftn() on some samples: the
    device cannot be held to either. A fake op with that defect shows the verdict."""
    from torch.testing._internal.opinfo.core import SampleInput

    from torchplug.conformance.cases.opinfo import OpEntry
    from torchplug.conformance.modes.out import out
    from torchplug.conformance.modes.sides import Skip
    from torchplug.conformance.target import Target

    def doubled(x, *, out=None):
        if out is None:
            return x * 2
        return torch.mul(x, 3, out=out)  # the out= form computes something else, on every device

    entry = OpEntry("doubled", doubled, frozenset({torch.float32}), frozenset(), True,
                    lambda dtype, grad: [SampleInput(torch.arange(4.0))])
    with pytest.raises(Skip, match="the CPU's own out= differs from its result without out="):
        out(entry, entry.samples(torch.float32)[0], Target("cpu", torch.device("cpu")))


def test_the_out_mode_arbitrates_a_rounding_difference_with_float64():
    """A device whose out= result differs from the CPU's by summation order alone (as a GEMM on
    another library does) passes when it is closer to float64; a wrong result still fails."""
    import contextlib

    from torch.testing._internal.opinfo.core import SampleInput

    from torchplug.conformance.cases.opinfo import OpEntry
    from torchplug.conformance.modes.out import out
    from torchplug.conformance.target import Target

    on_reference = []

    @contextlib.contextmanager
    def reference():
        on_reference.append(True)
        try:
            yield
        finally:
            on_reference.pop()

    def total(x, *, out=None, error=0.0):
        # The CPU adds one element at a time in the input's dtype (1 + 3e-8 is 1 in float32); the
        # device sums exactly and rounds once, plus a planted `error`.
        if on_reference:
            result = torch.zeros(1, dtype=x.dtype)
            for value in x:
                result += value
        else:
            result = (x.double().sum() + error).to(x.dtype).reshape(1)
        return result if out is None else out.copy_(result)

    x = torch.cat([torch.ones(1), torch.full((1000,), 3e-8)])
    target = Target("cpu", torch.device("cpu"), reference)
    for error, ok in ((0.0, True), (1e-3, False)):
        entry = OpEntry("total", lambda x, *, out=None, _e=error: total(x, out=out, error=_e), frozenset({torch.float32}),
                        frozenset(), True, lambda dtype, grad: [SampleInput(x)])
        verdict = out(entry, entry.samples(torch.float32)[0], target)
        assert verdict.ok is ok and verdict.arbitrated, verdict.detail


def test_every_report_names_every_status_and_the_groups_come_from_one_place():
    from torchplug.conformance.verdicts import status
    from torchplug.conformance.report import html, markdown

    assert set(markdown.SYMBOLS) == set(html.COLOURS) == set(status.STATUSES)
    assert set(status.PROBLEMS) == {*status.FAILING, "xpass"} and set(status.PASSING).isdisjoint(status.FAILING)
    assert set(status.NOT_JUDGED) | set(status.PASSING) | set(status.PROBLEMS) == set(status.STATUSES)


def test_edge_values_fill_strided_inputs_and_leave_a_sparse_one_as_it_is():
    """sparse.mm.reduce takes a CSR matrix: filling it as a whole failed the CPU backend's edge
    mode with copy_'s layout error, a defect of the suite, not of the backend."""
    from torch.testing._internal.opinfo.core import SampleInput

    from torchplug.conformance.modes.edge import edge_variants

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "Sparse CSR tensor support is in beta state"
        csr = torch.eye(3).to_sparse_csr()
    sample = SampleInput(csr, args=(torch.ones(3, 2),), kwargs={"reduce": "sum"})
    variants = dict(edge_variants(sample))
    assert set(variants) == {"edge values"}  # no empty or 0-dim slice of a CSR matrix either
    filled = variants["edge values"]
    assert filled.input is csr
    assert filled.args[0][0, 0] == 0.0 and filled.args[0][1, 0] == math.inf and filled.args[0][2, 0].isnan()
    assert not dict(edge_variants(SampleInput(csr)))


def test_the_aten_table_leaves_out_ops_this_torch_lacks(monkeypatch):
    """The table spans torch releases: an op an older torch lacks (2.11 has no _upsample_lanczos2d_aa)
    is left out, where it stopped `torchplug check` before any case ran."""
    from torchplug.conformance.cases import aten_db
    from torchplug.conformance.cases.opinfo import OpEntry

    table = aten_db.forward_table()
    monkeypatch.setattr(aten_db, "forward_table", lambda: {**table, "_not_in_this_torch": lambda: []})
    names = {entry.name for entry in aten_db.entries(OpEntry)}
    assert "aten._not_in_this_torch" not in names and len(names) > 100
