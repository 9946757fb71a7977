"""The dispatcher's promises under a new user's hands: checked Python kernels and honest coverage.

Each test fails before its fix: a `...` kernel made F.gelu return None silently; coverage called
866 ops `missing` until the emulated runtime happened to start, gave counts only, listed 1,506
"native" ops for a device that cannot run, and printed a traceback into `| head`.
"""

import subprocess
import sys

import pytest

from conftest import clean_env
from emulation_helpers import CHECKS, run_json

SESSION = CHECKS + '''
import contextlib, io, warnings
import torch, torch.nn.functional as F
from torchplug import dispatcher
from torchplug.cli import main
warnings.simplefilter("ignore")

# Coverage first, before any tensor exists on the device: the runtime must not need a head start.
before = dispatcher.coverage("xpu").routes
torch.ones(1, device="xpu")
after = dispatcher.coverage("xpu").routes
RESULTS["coverage"] = {"same": before == after, "lshift": before["aten::__lshift__.Scalar"],
                       "pool": before["aten::adaptive_avg_pool2d"], "cudnn_rnn": before["aten::_cudnn_rnn"]}

def cli(*argv):
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(list(argv))
    return [code, out.getvalue(), err.getvalue()]
RESULTS["cli"] = {name: cli(*argv) for name, argv in {
    "summary": ["coverage", "xpu"],
    "match": ["coverage", "xpu", "--match", "aten::adaptive_avg_pool2d*"],
    "route": ["coverage", "xpu", "--route", "missing", "--match", "cudnn"],
    "compare": ["coverage", "xpu", "--compare", "cpu", "--differing", "--match", "aten::_copy_from*"],
    "unavailable": ["coverage", "cuda"],
    "bad_route": ["coverage", "xpu", "--route", "natve"],
}.items()}

x = torch.randn(4, device="xpu")
def register(op, fn):
    dispatcher.register(op, "xpu", fn)

register("aten::gelu", lambda x, approximate="none": None)  # the README's `...` body
check("none", lambda: F.gelu(x))
register("aten::neg", lambda x: torch.zeros(4))
check("device", lambda: torch.neg(x))
register("aten::sin.out", lambda x, *, out: torch.sin(x))
check("out", lambda: torch.sin(x, out=torch.empty(4, device="xpu")))
register("aten::sum.dim_IntList", lambda x, dim, keepdim=False, *, dtype=None: torch.zeros(x.shape[1:], device=x.device))
check("dtype", lambda: torch.sum(x, 0, dtype=torch.float64))
check("dtype_default", lambda: torch.sum(x, 0).dtype)
register("aten::max.dim", lambda x, dim, keepdim=False: x)
check("count", lambda: torch.max(x, 0))
register("aten::add_.Tensor", lambda x, other, *, alpha=1: x.mul_(2))
check("inplace_ok", lambda: (lambda y: y.add_(y) is y)(torch.ones(2, device="xpu")))
register("aten::cos", lambda x: x.abs())
check("good", lambda: torch.cos(x).equal(x.abs()))
print(json.dumps(RESULTS, default=str))
'''


@pytest.fixture(scope="module")
def session():
    return run_json(SESSION, TORCHPLUG_EMULATE="xpu")


def test_coverage_does_not_depend_on_the_runtime_having_started(session):
    # _cudnn_rnn has no CPU kernel, so the emulated runtime cannot run it either.
    assert session["coverage"] == {"same": True, "lshift": "native", "pool": "composite", "cudnn_rnn": "missing"}


def test_coverage_lists_filters_and_compares_per_op(session):
    cli = session["cli"]
    code, out, _ = cli["summary"]
    assert code == 0 and "native" in out and "--ops" in out
    code, out, _ = cli["match"]
    assert code == 0 and out.splitlines()[0].split() == ["OP", "ROUTE", "KERNEL", "DTYPES"]
    assert [line.split()[0] for line in out.splitlines()[1:]] == ["aten::adaptive_avg_pool2d",
                                                                  "aten::adaptive_avg_pool2d.out"]
    code, out, _ = cli["route"]
    rows = [line.split() for line in out.splitlines()[1:]]
    assert code == 0 and rows and all(r[1] == "missing" and "cudnn" in r[0] for r in rows)
    code, out, _ = cli["compare"]  # _copy_from has no CPU kernel; the emulated xpu serves it itself
    assert code == 0 and out.splitlines()[0].split() == ["OP", "XPU", "CPU"]
    assert ["aten::_copy_from", "native", "missing"] in [line.split() for line in out.splitlines()[1:]]
    code, out, err = cli["bad_route"]
    assert code == 2 and "natve" in err and "native" in err


def test_coverage_of_an_unavailable_device_reports_it_unavailable(session):
    code, out, err = session["cli"]["unavailable"]
    assert code == 2 and out == ""
    assert "unavailable" in err and "TORCHPLUG_EMULATE=cuda" in err


def test_coverage_into_a_closed_pipe_is_quiet():
    command = f"'{sys.executable}' -m torchplug.cli coverage cpu --ops | head -n 1"
    result = subprocess.run(["sh", "-c", command], env=clean_env(), cwd="/", capture_output=True, text=True,
                            timeout=300)
    assert result.stdout.split() == ["OP", "ROUTE", "KERNEL", "DTYPES"]
    assert "Traceback" not in result.stderr and "BrokenPipe" not in result.stderr, result.stderr


@pytest.mark.parametrize("name,says", [
    ("none", "returned None as result 0, not a Tensor"),
    ("device", "returned a tensor on cpu as result 0, not on the xpu device"),
    ("out", "returned a new tensor as result 0, not the argument 'out'"),
    ("dtype", "returned torch.float32 as result 0, but the call asked for dtype=torch.float64"),
    ("count", "returned Tensor, not a tuple of 2"),
])
def test_python_kernel_results_are_checked_against_the_schema(session, name, says):
    record = session[name]
    assert not record["ok"] and record["error"] == "KernelResultError", record
    assert says in record["message"] and "the xpu kernel for aten::" in record["message"], record["message"]
    assert "<lambda>" in record["message"]  # the kernel is named


def test_kernels_that_keep_the_contract_pass_the_check(session):
    assert session["dtype_default"] == {"ok": True, "value": "torch.float32"}
    assert session["inplace_ok"] == {"ok": True, "value": True}
    assert session["good"] == {"ok": True, "value": True}
