"""Defects PyTorch's own device-generic tests (TestCommon) found in the emulated runtime.

Each test fails on the runtime before its fix: a CPU tensor accepted as out= (and resized), a
composite kernel reaching a DispatchStub with the emulated device type, ctc_loss and
mm(out_dtype=) on 'cuda' asking for CUDA-only ops, narrow_copy raising the CPU kernel's error
instead of a GPU's, addr_ silently resizing a 0-dim self (a wrong result where the CPU and GPUs
refuse), a crash on a conj-bit CPU scalar, and a sparse result refused with an error that named
neither the op nor a way out.
"""

import json
import sys
from pathlib import Path

import pytest

from conftest import clean_env, run_process, run_python
from emulation_helpers import CHECKS, run_json

SWEEP = Path(__file__).with_name("stub_sweep.py")
SETTINGS = {"TORCHPLUG_EMULATE": "xpu,cuda"}

SESSION = CHECKS + '''
import warnings
import torch
warnings.simplefilter("ignore")
torch.manual_seed(0)

def cpu_out():
    out = torch.tensor(0.)
    try:
        torch.sin(torch.randn(3, device="xpu"), out=out)
    finally:
        RESULTS["cpu_out_shape"] = list(out.shape)
check("cpu_out", cpu_out)
check("cpu_self", lambda: torch.tensor(2.).mul_(torch.tensor(3., device="xpu")))
check("cpu_scalar_input", lambda: torch.mul(torch.ones(2, device="xpu"), torch.tensor(3.)).tolist())

def stubs():
    """Composite kernels that call a DispatchStub by device type, against the CPU's results."""
    x = torch.randint(0, 3, (4, 5)).float()
    v, i = torch.empty(0, device="xpu"), torch.empty(0, dtype=torch.long, device="xpu")
    torch.mode(x.to("xpu"), 1, out=(v, i))
    c = torch.randn(3, 3, dtype=torch.cfloat)
    d = c.to("xpu").conj_physical_()
    outs = tuple(torch.empty(0, dtype=t.dtype, device="xpu") for t in torch.svd(c))
    torch.svd(c.to("xpu"), out=outs)
    return {"mode": torch.equal(v.cpu(), torch.mode(x, 1).values) and torch.equal(i.cpu(), torch.mode(x, 1).indices),
            "conj_physical_": torch.equal(d.cpu(), c.conj_physical()),
            "svd": torch.allclose(outs[1].cpu(), torch.svd(c).S, atol=1e-5)}
check("stubs", stubs)

def integer_exponents_and_windows():
    """Composites that reach a DispatchStub only with an integer argument (ldexp) or as a factory."""
    x, e = torch.randn(3, 4), torch.randint(-3, 4, (3, 4))
    out = torch.empty(0, device="xpu")
    torch.ldexp(x.to("xpu"), e.to("xpu"), out=out)
    in_place = x.to("xpu").ldexp_(e.to("xpu"))
    windows = [torch.kaiser_window(7, device="xpu"), torch.kaiser_window(7, False, device="xpu"),
               torch.kaiser_window(7, True, 3.0, dtype=torch.float64, device="xpu")]
    want = [torch.kaiser_window(7), torch.kaiser_window(7, False), torch.kaiser_window(7, True, 3.0, dtype=torch.float64)]
    return {"ldexp": torch.equal(torch.ldexp(x.to("xpu"), e.to("xpu")).cpu(), torch.ldexp(x, e)),
            "ldexp_out": torch.equal(out.cpu(), torch.ldexp(x, e)),
            "ldexp_": torch.equal(in_place.cpu(), x.clone().ldexp_(e)),
            "kaiser_window": all(w.device.type == "xpu" and torch.equal(w.cpu(), c) for w, c in zip(windows, want))}
check("integer_exponents_and_windows", integer_exponents_and_windows)

def ctc_on_cuda():
    """ctc_loss asks the CUDA-only _use_cudnn_ctc_loss on a 'cuda' device."""
    log_probs = torch.randn(6, 2, 5).log_softmax(2)
    targets, lengths, target_lengths = torch.randint(1, 5, (2, 3)), torch.full((2,), 6), torch.full((2,), 3)
    loss = torch.nn.functional.ctc_loss(log_probs.to("cuda"), targets.to("cuda"), lengths, target_lengths)
    return torch.allclose(loss.cpu(), torch.nn.functional.ctc_loss(log_probs, targets, lengths, target_lengths))
check("ctc_on_cuda", ctc_on_cuda)

def addr_in_place():
    v, w = torch.arange(3.), torch.arange(2.)
    m = torch.ones(3, 2, device="xpu")
    return torch.equal(m.addr_(v.to("xpu"), w.to("xpu")).cpu(), torch.ones(3, 2).addr_(v, w))
check("addr_in_place", addr_in_place)
check("addr_in_place_0dim", lambda: torch.tensor(2., device="xpu").addr_(torch.ones(3, device="xpu"),
                                                                          torch.ones(2, device="xpu")).tolist())
check("narrow_copy_bad_dim", lambda: torch.narrow_copy(torch.ones(2, 3, 4, device="xpu"), 3, 0, 0))

def out_dtype_matmuls():
    """torch.mm(..., out_dtype=) and its kin exist only in CUDA builds; linear_cross_entropy uses them on 'cuda'."""
    a, b = torch.randn(4, 8, dtype=torch.float16), torch.randn(8, 3, dtype=torch.float16)
    ref = a.float() @ b.float()
    got = torch.mm(a.to("cuda"), b.to("cuda"), out_dtype=torch.float32)
    out = torch.empty(0, device="cuda")
    torch.mm(a.to("cuda"), b.to("cuda"), out_dtype=torch.float32, out=out)
    bias = torch.randn(3)
    added = torch.addmm(bias.to("cuda"), a.to("cuda"), b.to("cuda"), out_dtype=torch.float32)
    return [got.dtype == torch.float32 and torch.allclose(got.cpu(), ref), torch.allclose(out.cpu(), ref),
            torch.allclose(added.cpu(), bias + ref, atol=1e-5)]
check("out_dtype_matmuls", out_dtype_matmuls)
check("out_dtype_refused", lambda: torch.mm(torch.ones(2, 2, device="cuda"), torch.ones(2, 2, device="cuda"),
                                            out_dtype=torch.float16))

def sparse():
    torch.randn(3, 3, device="xpu").to_sparse()
check("sparse", sparse)
for layout in ("to_sparse", "to_sparse_csr", "to_sparse_csc"):
    check(f"sparse_move_{layout}", lambda layout=layout: str(getattr(torch.eye(3), layout)().to("xpu").layout))
def torchcts_values():
    """TorchCTS's value findings on emulated xpu, each held bitwise to the CPU (None: the same bits)."""
    def same(fn):
        cpu, dev = fn("cpu"), fn("xpu")
        return None if torch.equal(dev.cpu().view(-1).view(torch.uint8), cpu.view(-1).view(torch.uint8)) else (cpu, dev)
    def logit_grad(device, eps):
        x = torch.tensor([-0.0, 0.0, 0.25, 1.0], device=device, requires_grad=True)
        torch.logit(x, eps).sum().backward()
        return x.grad
    def grid_grads(device, dtype, dims):
        g = torch.Generator().manual_seed(0)
        shape = (1, 2, 4, 4) if dims == 2 else (1, 2, 3, 4, 4)
        inp = torch.randn(shape, generator=g).to(dtype).to(device).requires_grad_()
        grid = (torch.rand((1, 3, 3, dims) if dims == 2 else (1, 2, 3, 3, 3), generator=g) * 2 - 1)
        grid = grid.to(dtype).to(device).requires_grad_()
        torch.nn.functional.grid_sample(inp, grid, align_corners=False).sum().backward()
        return torch.cat([inp.grad.flatten(), grid.grad.flatten()])
    def matrix_exp(device, dtype):
        a = torch.randn(4, 3, 3, generator=torch.Generator().manual_seed(0)) / 3
        return torch.linalg.matrix_exp(a.to(dtype).to(device))
    def histc(device):
        return torch.histc(torch.arange(100000.).remainder(7).to(device), bins=7, min=0, max=7)
    found = {f"logit_backward_eps_{eps}": same(lambda d: logit_grad(d, eps)) for eps in (None, 0.0, 0.1)}
    for dtype in (torch.float16, torch.bfloat16):
        for dims in (2, 3):
            found[f"grid_sampler_{dims}d_backward_{dtype}"] = same(lambda d: grid_grads(d, dtype, dims))
        found[f"matrix_exp_{dtype}"] = same(lambda d: matrix_exp(d, dtype))
    found["histc_counts"] = same(histc)
    return {k: repr(v) for k, v in found.items() if v is not None}
check("torchcts_values", torchcts_values)
def lu_solve_out_conj():
    """linalg_lu_solve.out(left=False) conjugates out= by its conj bit, which the device tensor must keep."""
    A, B = torch.randn(3, 3, dtype=torch.cfloat), torch.randn(4, 3, dtype=torch.cfloat)
    LU, pivots = torch.linalg.lu_factor(A)
    out = torch.empty(4, 3, dtype=torch.cfloat, device="xpu")
    torch.linalg.lu_solve(LU.to("xpu"), pivots.to("xpu"), B.to("xpu"), left=False, adjoint=True, out=out)
    return torch.allclose(out.cpu(), torch.linalg.lu_solve(LU, pivots, B, left=False, adjoint=True))
check("lu_solve_out_conj", lu_solve_out_conj)
check("histc_long", lambda: torch.histc(torch.tensor([1, 2, 2]).to("xpu"), bins=3))
print(json.dumps(RESULTS, default=str))
'''

# Run alone: before the fix it killed the interpreter (SIGSEGV), which must not take the other checks with it.
CONJ_SCALAR = '''
import torch
x = torch.randn(5, 10, dtype=torch.cfloat)
s = torch.tensor(0.4 + 0.6j).conj()
assert torch.equal((x.to("xpu") * s).cpu(), x * s)
leaf = x.to("xpu").requires_grad_()
(leaf * (0.4 + 0.6j)).abs().sum().backward()
ref = x.clone().requires_grad_()
(ref * (0.4 + 0.6j)).abs().sum().backward()
assert torch.allclose(leaf.grad.cpu(), ref.grad), (leaf.grad, ref.grad)
print("ok")
'''


@pytest.fixture(scope="module")
def session():
    return run_json(SESSION, **SETTINGS)


def test_cpu_out_and_cpu_self_are_refused_like_a_gpu(session):
    for name in ("cpu_out", "cpu_self"):
        record = session[name]
        assert not record["ok"] and "Expected all tensors to be on the same device" in record["message"], record
        assert "cpu" in record["message"] and "xpu:0" in record["message"]
    assert session["cpu_out_shape"] == [], "the refused CPU out= tensor was resized"
    assert session["cpu_scalar_input"] == {"ok": True, "value": [3.0, 3.0]}, "CPU scalars stay accepted as inputs"


def test_dispatch_stub_composites_run(session):
    record = session["stubs"]
    assert record["ok"], record
    assert record["value"] == {"mode": True, "conj_physical_": True, "svd": True}


def test_ldexp_with_an_integer_exponent_and_kaiser_window_run_on_the_host_path(session):
    """TorchCTS found both hitting DispatchStub's internal assert ("An unexpected device type was provided xpu")."""
    record = session["integer_exponents_and_windows"]
    assert record["ok"], record
    assert record["value"] == {"ldexp": True, "ldexp_out": True, "ldexp_": True, "kaiser_window": True}


@pytest.mark.parametrize("device", ["xpu", "mps"])
def test_no_composite_kernel_reaches_a_dispatch_stub(device):
    """tests/stub_sweep.py calls every composite-only ATen op with schema-made arguments in float,
    integer and bool profiles on the emulated device: none may end in a DispatchStub assertion."""
    result = run_process([sys.executable, SWEEP, "--device", device], check=False,
                         env=clean_env(TORCHPLUG_EMULATE=device), cwd="/")
    found = json.loads(result.stdout)
    assert found["stub"] == {}, found["stub"]
    ran = int(result.stderr.split(" of ")[0].split()[-1])
    assert ran > 900, result.stderr[-2000:]  # the argument guesses still reach most ops


def test_ctc_loss_on_emulated_cuda_skips_cudnn(session):
    assert session["ctc_on_cuda"] == {"ok": True, "value": True}, session["ctc_on_cuda"]


def test_narrow_copy_raises_the_accelerator_error(session):
    """PyTorch's error_inputs expect off-CPU devices to run narrow_copy's composite, not the CPU kernel."""
    record = session["narrow_copy_bad_dim"]
    assert record["error"] == "IndexError" and "Dimension out of range" in record["message"], record


def test_addr_in_place_refuses_a_0dim_self_instead_of_a_wrong_result(session):
    assert session["addr_in_place"] == {"ok": True, "value": True}, session["addr_in_place"]
    record = session["addr_in_place_0dim"]
    assert not record["ok"] and "2D tensor expected, got 0D tensor" in record["message"], record


def test_matmuls_with_out_dtype_on_emulated_cuda(session):
    assert session["out_dtype_matmuls"] == {"ok": True, "value": [True, True, True]}, session["out_dtype_matmuls"]
    record = session["out_dtype_refused"]
    assert not record["ok"] and "out_dtype must be" in record["message"], record


def test_device_tensor_times_a_conj_cpu_scalar_and_its_gradient():
    result = run_python(CONJ_SCALAR, check=False, **SETTINGS)
    assert result.returncode == 0, f"exit {result.returncode}\n{result.stderr[-3000:]}"
    assert result.stdout.strip().endswith("ok")


def test_sparse_results_are_refused_by_name_with_the_workaround(session):
    record = session["sparse"]
    assert not record["ok"] and record["error"] == "NotImplementedError", record
    for part in ("aten::_to_sparse", "xpu:0", "docs/emulation.md", "x.cpu().to_sparse()"):
        assert part in record["message"], (part, record["message"])


@pytest.mark.parametrize("layout", ["to_sparse", "to_sparse_csr", "to_sparse_csc"])
def test_sparse_tensors_are_refused_when_they_move_to_the_device(session, layout):
    """TorchCTS: a CSR tensor moved to the device, then every op on it failed ('SparseCsrXPU' backend)."""
    record = session[f"sparse_move_{layout}"]
    assert not record["ok"] and record["error"] == "NotImplementedError", record
    for part in ("aten::_to_copy", "cannot move to xpu:0", "strided tensors only", "x.to_dense().to('xpu')"):
        assert part in record["message"], (part, record["message"])


def test_a_cpu_kernel_refusing_a_dtype_keeps_its_own_error(session):
    """histc has a CPU kernel: it refuses int64 as the CPU does, not as an op without a CPU kernel."""
    record = session["histc_long"]
    assert not record["ok"] and record["error"] == "NotImplementedError", record
    assert record["message"].startswith('"histogram_cpu" not implemented for \'Long\''), record["message"]
    assert "has no CPU kernel" not in record["message"]


def test_torchcts_value_findings_match_the_cpu_bitwise(session):
    """logit's backward at -0.0, grid_sampler_2d/3d backward and matrix_exp in float16/bfloat16, histc
    counts: emulated xpu gives the CPU's bits (TorchCTS held them to other expectations)."""
    assert session["torchcts_values"] == {"ok": True, "value": {}}, session["torchcts_values"]


def test_a_conj_bit_a_cpu_kernel_sets_on_out_reaches_the_device_tensor(session):
    """Found by the scalar-type sweep's complex dtypes: lu_solve(left=False, out=) came back conjugated."""
    assert session["lu_solve_out_conj"] == {"ok": True, "value": True}, session["lu_solve_out_conj"]
