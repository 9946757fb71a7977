"""How emulation is switched on and configured: opt-in, one-time notice, native-wins, ROCm vs CUDA,
new PrivateUse1 devices, the issue's snippet. Each case needs its own process (settings are read
when ``import torch`` autoloads the plugins)."""

import pytest

from emulation_helpers import run_json, run_snippet
from torchplug.emulation.config import EmulationConfigError, from_environ, parse_size

ISSUE_SNIPPET = '''
import torch
x = torch.randn(4, 4, device="xpu"); y = torch.ones(4, 4, device="xpu:1")
print(torch.xpu.is_available(), torch.xpu.device_count(), torch.xpu.get_device_name())  # names say "emulated"
z = (x @ x).softmax(-1).to("xpu:1") + y          # ops, cross-index copy
m = torch.zeros(3, device="mps"); c = torch.arange(5, device="cuda")   # three accelerators in one process
print(z.cpu(), m.device, c.device, torch.xpu.memory_allocated())
'''

FAKE_BACKEND = '''
import torch
from torchplug.entrypoints import STANDARD_DTYPES, Backend, BackendSpec

def make_backend(name, device_type, key, native_reason):
    class Fake(Backend):
        spec = BackendSpec(name=name, device_type=device_type, dispatch_key=key, dtypes=STANDARD_DTYPES,
                           torch_range=">=2.13,<2.16")
        def native_unavailable_reason(self):
            return native_reason
    backend = Fake()
    backend.spec.validate(torch.__version__)
    backend.setup()  # what the loader does at autoload
    return backend
'''


def test_sizes_and_per_backend_settings():
    assert parse_size("512M") == parse_size("512MiB") == parse_size("512mb") == 512 << 20
    assert parse_size("1.5G") == 3 << 29 and parse_size("4096") == 4096
    config = from_environ({
        "TORCHPLUG_EMULATE": " XPU, mps ,xpu", "TORCHPLUG_EMULATE_DEVICES": "3,mps=1",
        "TORCHPLUG_EMULATE_MEMORY": "xpu=1G", "TORCHPLUG_EMULATE_FORCE": "mps",
    })
    assert config.names == ("xpu", "mps")
    assert (config.device_count("xpu"), config.device_count("mps"), config.device_count("cuda")) == (3, 1, 3)
    assert (config.capacity("xpu"), config.capacity("mps")) == (1 << 30, 0)
    assert config.forced("mps") and not config.forced("xpu")
    assert from_environ({}).names == () and from_environ({}).device_count("xpu") == 1
    assert from_environ({"TORCHPLUG_EMULATE_FORCE": "1"}).forced("anything")
    assert not from_environ({"TORCHPLUG_EMULATE_FORCE": "0"}).force


@pytest.mark.parametrize("variable,value,needle", [
    ("TORCHPLUG_EMULATE_DEVICES", "0", "between 1 and 64"),
    ("TORCHPLUG_EMULATE_DEVICES", "xpu=two", "'two'"),
    ("TORCHPLUG_EMULATE_MEMORY", "lots", "cannot read 'lots' as a size"),
    ("TORCHPLUG_EMULATE_MEMORY", "xpu=0", "'0' is no capacity"),  # unset means no limit; 0 is refused
])
def test_unreadable_settings_name_the_variable(variable, value, needle):
    with pytest.raises(EmulationConfigError, match=variable) as info:
        from_environ({variable: value})
    assert needle in str(info.value)


def test_the_issue_snippet():
    # The snippet uses xpu:1, so it needs two devices (the default is one; see docs/emulation.md).
    result = run_snippet(ISSUE_SNIPPET, TORCHPLUG_EMULATE="xpu,mps,cuda", TORCHPLUG_EMULATE_DEVICES="2")
    first, *rest = result.stdout.strip().splitlines()
    assert first.startswith("True 2 ") and "emulated" in first
    assert rest[-1].endswith("mps:0 cuda:0 512"), rest  # x's 64 bytes, in a GPU allocator's 512-byte block
    assert "EMULATED" in result.stderr


def test_one_device_by_default():
    result = run_snippet(ISSUE_SNIPPET, check=False, TORCHPLUG_EMULATE="xpu,mps,cuda")
    assert result.returncode != 0 and "invalid device ordinal: xpu:1" in result.stderr


def test_off_unless_asked_for():
    found = run_json('''
        import json, sys, torch
        import torchplug.entrypoints as ep
        try:
            torch.empty(1, device="xpu"); error = None
        except Exception as err:
            error = str(err)
        # Only the emulation part's module, the settings' reader (standard library only) and the hint
        # (it adds the "emulate it" hint to torch's error) are imported.
        heavy = [m for m in sys.modules if m in ("torch.utils.cpp_extension", "torchplug_emulation")
                 or m.startswith("torchplug.emulation.") and m not in ("torchplug.emulation.part",
                                                                         "torchplug.emulation.config",
                                                                         "torchplug.emulation.hint")]
        print(json.dumps([torch.xpu.is_available(), error, heavy, ep.loaded_backend("xpu").status().mode]))
    ''')
    available, error, heavy, mode = found
    assert available is False and "not compiled" in error
    assert heavy == [] and mode == "unavailable"


def test_import_stays_light_and_the_notice_comes_once_at_first_use():
    # A cached build may be loaded at import (about 2 ms, see hooks.py), but nothing is compiled
    # and no device type is configured before first use.
    result = run_snippet('''
        import sys, torch
        from torchplug.emulation import runtime
        heavy = [m for m in ("torch.utils.cpp_extension",) if m in sys.modules]
        heavy += [t for t in ("xpu", "mps") if runtime.is_configured(t)]
        print("after import:", heavy, flush=True)
        a = torch.ones(2, device="xpu"); b = torch.ones(2, device="mps") * 2; c = a + 1
        print("used", flush=True)
    ''', TORCHPLUG_EMULATE="xpu,mps")
    assert "after import: []" in result.stdout
    # One notice for both types (set up together), at the line that first used one of them.
    notices = [line for line in result.stderr.splitlines() if "EMULATED" in line]
    assert len(notices) == 1, result.stderr
    assert notices[0].startswith("<string>:7: EmulationNotice") and "'xpu'" in notices[0] and "'mps'" in notices[0]


@pytest.mark.parametrize("first", ['torch.zeros(3, device="mps") + 1', 'torch.ones(3).to("mps") * 1',
                                   'torch.tensor([0.0, 0.0, 0.0], device="mps") + 1'])
def test_mps_first_use_loads_the_runtime(first):
    # MPS has no lazy-init hook: a factory reaches the Python stub fallback first, while .to("mps")
    # and torch.tensor(..., device="mps") ask torch's device guard before any op runs.
    found = run_json(f'''
import json, torch
m = {first}
v = torch.arange(4.0, device="mps").view(2, 2).t().contiguous()
print(json.dumps([str(m.device), m.cpu().tolist(), v.cpu().tolist(), torch.mps.device_count()]))
''', TORCHPLUG_EMULATE="mps")
    assert found == ["mps:0", [1.0, 1.0, 1.0], [[0.0, 2.0], [1.0, 3.0]], 1]


@pytest.mark.slow
def test_first_build_in_an_empty_cache(tmp_path):
    # The one process that compiles the runtime: MPS's guard is not there yet at autoload.
    found = run_json('''
        import json, time, torch
        start = time.perf_counter()
        x = torch.ones(3).to("mps")
        built = time.perf_counter() - start
        y = torch.ones(3, device="mps", requires_grad=True); (y * 2).sum().backward()
        print(json.dumps([str(x.device), y.grad.cpu().tolist(), built]))
    ''', TORCHPLUG_EMULATE="mps", TORCHPLUG_CACHE=str(tmp_path))
    device, grad, seconds = found
    assert device == "mps:0" and grad == [2.0, 2.0, 2.0]
    assert seconds < 180, f"the first build took {seconds:.0f} s (target: 60 s on 2 idle cores)"


def test_cuda_and_rocm_cannot_both_be_emulated():
    found = run_json('''
        import json, torch
        import torchplug.entrypoints as ep
        try:
            torch.empty(1, device="cuda"); error = None
        except RuntimeError as err:
            error = str(err)
        statuses = [ep.loaded_backend(n).status() for n in ("cuda", "rocm")]
        print(json.dumps([error, [s.mode for s in statuses], [s.reason for s in statuses]]))
    ''', TORCHPLUG_EMULATE="cuda,rocm")
    error, modes, reasons = found
    assert error is not None and "both 'cuda' and 'rocm'" in error and "list only one" in error
    assert modes == ["unavailable", "unavailable"]
    assert all("both 'cuda' and 'rocm'" in r for r in reasons)


def test_rocm_emulates_torchs_cuda_device_type():
    found = run_json('''
        import json, torch
        import torchplug.entrypoints as ep
        x = torch.ones(2, device="cuda") * 3
        print(json.dumps([str(x.device), torch.cuda.get_device_name(), ep.loaded_backend("rocm").status().mode,
                          ep.loaded_backend("cuda").status().mode, torch.version.hip]))
    ''', TORCHPLUG_EMULATE="rocm")
    device, name, rocm_mode, cuda_mode, hip = found
    assert device == "cuda:0" and "emulated AMD Instinct MI300X" in name
    assert rocm_mode == "emulated" and cuda_mode == "unavailable"
    assert hip is None  # emulation does not pretend torch is a ROCm build


def test_native_wins_where_hardware_is_found_unless_forced():
    code = FAKE_BACKEND + '''
import json
backend = make_backend("fakexpu", "xpu", "XPU", None)  # its probe says real hardware is present
print(json.dumps([backend.status().mode, torch.xpu.is_available()]))
'''
    assert run_json(code, TORCHPLUG_EMULATE="fakexpu") == ["native", False]
    assert run_json(code, TORCHPLUG_EMULATE="fakexpu", TORCHPLUG_EMULATE_FORCE="1") == ["emulated", True]


def test_a_new_device_takes_privateuse1():
    found = run_json(FAKE_BACKEND + '''
import io, json
backend = make_backend("npu", "npu", "PrivateUse1", "no npu hardware here")
x = torch.arange(6.0, device="npu:1").view(2, 3)
w = torch.ones(3, device="npu:1", requires_grad=True)
(x @ w).sum().backward()
buf = io.BytesIO(); torch.save(x, buf); buf.seek(0)
loaded = torch.load(buf)
try:
    x + torch.ones(2, 3, device="npu:0"); mixed = None
except RuntimeError as err:
    mixed = str(err)
print(json.dumps([backend.status().mode, str(x.device), torch.npu.device_count(), torch.npu.get_device_name(1),
                  w.grad.cpu().tolist(), str(loaded.device), x.is_npu, mixed is not None and "same device" in mixed,
                  torch.npu.memory_allocated(1) > 0]))
''', TORCHPLUG_EMULATE="npu", TORCHPLUG_EMULATE_DEVICES="2")
    mode, device, count, name, grad, loaded, is_npu, mixed, allocated = found
    assert mode == "emulated" and device == "npu:1" and count == 2 and "emulated" in name
    assert grad == [3.0, 5.0, 7.0] and loaded == "npu:1" and is_npu and mixed and allocated


def test_cpu_backward_before_the_first_device_use():
    # torch's autograd engine sizes its device threads and picks its accelerator on its first
    # backward, so the runtime loads then, even for a CPU-only backward.
    found = run_json('''
        import json, torch
        c = torch.ones(3, requires_grad=True); (c * 2).sum().backward()
        x = torch.ones(3, device="xpu", requires_grad=True); (x * x).sum().backward()
        print(json.dumps([c.grad.tolist(), x.grad.cpu().tolist()]))
    ''', TORCHPLUG_EMULATE="xpu")
    assert found == [[2.0, 2.0, 2.0], [2.0, 2.0, 2.0]]


def test_a_script_that_ends_right_after_backward_exits_cleanly():
    # autograd's device threads may still hold the last graph when the interpreter shuts down.
    result = run_snippet('''
        import torch
        x = torch.randn(8, device="xpu:1", requires_grad=True)
        (g,) = torch.autograd.grad(torch.sin(x).sum(), x)
        y = torch.randn(8, device="mps", requires_grad=True)
        (y * y).sum().backward()
        print("done")
    ''', check=False, TORCHPLUG_EMULATE="xpu,mps", TORCHPLUG_EMULATE_DEVICES="2")
    assert result.returncode == 0 and result.stdout.strip() == "done", result.stderr[-2000:]
    assert "terminate called" not in result.stderr


def test_asking_torch_for_its_accelerator_first_keeps_autograd_working():
    found = run_json('''
        import json, torch
        first = [torch.backends.mps.is_available(), str(torch.accelerator.current_accelerator())]
        x = torch.ones(3, device="mps", requires_grad=True); (x * 3).sum().backward()
        print(json.dumps([first, x.grad.cpu().tolist()]))
    ''', TORCHPLUG_EMULATE="mps")
    assert found == [[True, "mps"], [3.0, 3.0, 3.0]]


def test_per_backend_devices_and_capacity():
    found = run_json('''
        import json, torch
        try:
            torch.empty(2 << 20, dtype=torch.uint8, device="xpu:2"); xpu = None
        except torch.OutOfMemoryError as err:
            xpu = str(err)
        big = torch.empty(2 << 20, dtype=torch.uint8, device="mps")  # mps has no capacity set
        print(json.dumps([torch.xpu.device_count(), torch.mps.device_count(), xpu, big.numel()]))
    ''', TORCHPLUG_EMULATE="xpu,mps", TORCHPLUG_EMULATE_DEVICES="xpu=3,mps=1", TORCHPLUG_EMULATE_MEMORY="xpu=1M")
    xpu_count, mps_count, message, size = found
    assert (xpu_count, mps_count, size) == (3, 1, 2 << 20)
    assert message is not None and "xpu:2" in message and "1.00 MiB" in message


def test_unreadable_setting_fails_the_plugin_not_import_torch():
    found = run_json('''
        import json, torch
        import torchplug.entrypoints as ep
        records = {r.name: r for r in ep.records()}
        print(json.dumps([records["xpu"].status, records["xpu"].reason, records["cpu"].status]))
    ''', TORCHPLUG_EMULATE="xpu", TORCHPLUG_EMULATE_MEMORY="lots")
    assert found[0] == "failed" and "TORCHPLUG_EMULATE_MEMORY" in found[1]
    assert found[2] == "loaded"  # plugins that were not asked for are untouched


def test_cuda_is_emulated_on_cpu_wheels_and_on_cuda_builds_without_a_gpu():
    found = run_json('''
        import json, torch
        import torchplug.entrypoints as ep
        status = ep.loaded_backend("cuda").status()
        print(json.dumps([torch.version.cuda, status.mode, status.reason]))
    ''', TORCHPLUG_EMULATE="cuda")
    cuda_build, mode, reason = found
    assert mode == "emulated", reason
    if cuda_build is None:  # the CPU wheel: torch's CUDA hooks are a stub that torchplug's replace
        assert "this torch has no CUDA runtime" in reason
    else:  # torch's own CUDA kernels, hooks, guard and bindings give way, and the reason says why
        assert "this CUDA build sees no GPU" in reason and "torch's CUDA kernels" in reason, reason


def test_the_renamed_emulation_names_keep_deprecated_aliases():
    """attach/attachment/attached became request.emulate_if_requested, EmulatedDevices and emulated_devices()."""
    from conftest import run_python

    out = run_python('''
        import warnings
        warnings.simplefilter("always")
        import torch
        from torchplug.emulation import request, emulated
        from torchplug.emulation.emulated import EmulatedDevices, emulated_devices
        with warnings.catch_warnings(record=True) as caught:
            import torchplug.emulation as emulation
            from torchplug.emulation import attach, attachment
            old = (emulation.Attachment, emulation.attached, attach.attach, attachment.Attachment, attachment.attached)
        new = (EmulatedDevices, emulated_devices, request.emulate_if_requested, EmulatedDevices, emulated_devices)
        print(old == new, sorted(str(w.message).split(" is ")[0] for w in caught if w.category is DeprecationWarning))
        print(sorted(emulated_devices()), emulated_devices()["xpu"].backend, torch.ones(1, device="xpu").device)
    ''', TORCHPLUG_EMULATE="xpu").stdout.splitlines()
    assert out[0] == ("True ['torchplug.emulation.Attachment', 'torchplug.emulation.attach', "
                      "'torchplug.emulation.attached', 'torchplug.emulation.attachment']"), out
    assert out[1] == "['xpu'] xpu xpu:0", out
