"""Emulated cuda on the torch that `pip install torch` gives: a CUDA build on a machine without a GPU.

There, torch's own CUDA kernels, hooks, device guard and torch._C._cuda_* bindings own 'cuda';
with TORCHPLUG_EMULATE=cuda they give way to the emulator's on first use, so the same CUDA code
runs as on the CPU wheel. Without it, the build stays exactly as torch made it. Each run is a
fresh interpreter (emulation is set up inside `import torch`); the tests run on both builds.
"""

import sys
import textwrap

import pytest
import torch

from conftest import run_process, clean_env
from emulation_helpers import run_json

CUDA_BUILD = bool(torch.version.cuda or torch.version.hip)

STOCK = """
import json, torch
from torchplug.emulation import runtime
answers = {
    "available": torch.cuda.is_available(),
    "count_binding": getattr(torch._C, "_cuda_getDeviceCount", None).__class__.__name__,
    "is_available_module": torch.cuda.is_available.__module__,
    "hooks": runtime.cuda_hooks_state(),
    "add_kernel": [line for line in torch._C._dispatch_dump("aten::add.Tensor").splitlines() if line.startswith("CUDA:")],
}
print(json.dumps(answers))
"""


def test_without_emulation_torch_cuda_is_left_as_torch_made_it():
    answers = run_json(STOCK)
    assert answers["available"] is False and answers["hooks"] == "torch"
    assert answers["is_available_module"] == "torch.cuda"  # torch's own function, not torchplug's
    if CUDA_BUILD:  # the build's own binding (a builtin) and its own CUDA kernel, from torch's build tree
        assert answers["count_binding"] == "builtin_function_or_method"
        assert len(answers["add_kernel"]) == 1 and "RegisterCUDA" in answers["add_kernel"][0]
    else:
        assert answers["count_binding"] == "NoneType" and answers["add_kernel"] == []


USER_SCRIPT = """
import torch
x = torch.zeros(1, device="cuda")  # the user's line
"""


def test_asking_for_cuda_without_it_gets_torchs_error_with_the_emulation_hint_at_the_users_line(tmp_path):
    script = tmp_path / "user_script.py"
    script.write_text(USER_SCRIPT)
    result = run_process([sys.executable, script], check=False, env=clean_env(), cwd=tmp_path)
    assert result.returncode == 1
    last = result.stderr.strip().splitlines()[-1]
    torch_error = "Found no NVIDIA driver" if torch.version.cuda else "Torch not compiled with CUDA enabled"
    assert torch_error in last, result.stderr
    assert "torchplug can emulate 'cuda' in host memory: set TORCHPLUG_EMULATE=cuda" in last
    assert f'File "{script}", line 3' in result.stderr  # the traceback names the user's line


EMULATED = """
import json, torch
from torchplug.emulation import runtime
x = torch.arange(6.0, device="cuda").reshape(2, 3)
y = torch.nn.functional.softmax(x @ x.T, -1).sum(0)
print(json.dumps({
    "value": y.cpu().tolist(), "device": str(y.device), "hooks": runtime.cuda_hooks_state(),
    "nonzero_kernel": [line for line in torch._C._dispatch_dump("aten::nonzero").splitlines() if line.startswith("CUDA:")],
    "driver_reaching_bindings": [name for name in ("_cuda_getDevice", "_cuda_getDeviceCount", "_cuda_setStream",
                                                   "_cuda_memoryStats", "_cuda_init")
                                 if type(getattr(torch._C, name)).__name__ == "builtin_function_or_method"],
}))
"""


def test_emulated_cuda_takes_over_every_kernel_and_binding_of_the_build():
    answers = run_json(EMULATED, TORCHPLUG_EMULATE="cuda")
    expected = torch.nn.functional.softmax((t := torch.arange(6.0).reshape(2, 3)) @ t.T, -1).sum(0).tolist()
    assert answers["value"] == pytest.approx(expected) and answers["device"] == "cuda:0"
    assert answers["hooks"] == "emulated"
    assert answers["driver_reaching_bindings"] == []  # every one of them answers from the emulated runtime
    if CUDA_BUILD:  # the build's kernel for nonzero is replaced by the emulator's host path
        assert len(answers["nonzero_kernel"]) == 1 and "native_kernels.cpp" in answers["nonzero_kernel"][0]
    else:  # the CPU wheel has no CUDA kernel for nonzero: the emulator's fallback serves it
        assert answers["nonzero_kernel"] == []


# A library with a CPU and a CUDA kernel for its op, loaded after emulated cuda was set up: its CUDA
# kernel would reach the absent driver (here: it raises), so the emulator must serve the op with the CPU kernel.
LATE_LIBRARY = r"""
#include <ATen/core/Tensor.h>
#include <c10/util/Exception.h>
#include <torch/library.h>

at::Tensor twice_cpu(const at::Tensor& x) { return x.mul(2); }
at::Tensor twice_cuda(const at::Tensor& x) { TORCH_CHECK(false, "the library's CUDA kernel ran"); }

TORCH_LIBRARY(tp_late, m) { m.def("twice(Tensor x) -> Tensor"); }
TORCH_LIBRARY_IMPL(tp_late, CPU, m) { m.impl("twice", twice_cpu); }
TORCH_LIBRARY_IMPL(tp_late, CUDA, m) { m.impl("twice", twice_cuda); }
"""


@pytest.mark.skipif(not CUDA_BUILD, reason="a CPU wheel has no CUDA kernels to take over; libraries built for it "
                                            "register none either")
def test_a_library_loaded_after_the_first_device_use_has_its_cuda_kernels_taken_over(tmp_path):
    (tmp_path / "late.cpp").write_text(LATE_LIBRARY)
    code = textwrap.dedent(f"""
        import json, torch
        from torch.utils import cpp_extension
        x = torch.ones(3, device="cuda")  # emulated cuda is set up here
        cpp_extension.load(name="tp_late", sources=[{str(tmp_path / "late.cpp")!r}], build_directory={str(tmp_path)!r},
                           is_python_module=False, extra_cflags=["-O0"])
        y = torch.ops.tp_late.twice(x)
        print(json.dumps([y.cpu().tolist(), str(y.device)]))
    """)
    assert run_json(code, TORCHPLUG_EMULATE="cuda") == [[2.0, 2.0, 2.0], "cuda:0"]
