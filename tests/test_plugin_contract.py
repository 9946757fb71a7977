"""The plugin contract's promises, tried as a new plugin's author would: a real entry-point plugin whose
`setup()` registers a kernel through torchplug.dispatcher, as the README allows, in a fresh process."""

import json

from conftest import make_plugin, run_python

# A new device type (PrivateUse1) whose setup() registers its relu; `native` says whether its hardware is here.
ACC = """
import torch
import torchplug.dispatcher
from torchplug.entrypoints import Backend, BackendSpec

class Acc(Backend):
    spec = BackendSpec(name="acc", device_type="acc", dispatch_key="PrivateUse1", torch_range=">=2.13,<2.16",
                       dtypes=frozenset({torch.float32, torch.bool, torch.uint8}))

    def native_unavailable_reason(self):
        return None if {native} else "no acc card is plugged in"

    def setup(self):
        super().setup()
        torchplug.dispatcher.register("aten::relu", "acc", lambda x: x.clamp(min=0), dtypes=[torch.float32])

backend = Acc()
"""
REPORT = """
    import json, sys, torch
    import torchplug.dispatcher as d
    from torchplug.entrypoints import loaded_backend, records
    record = next(r for r in records() if r.name == "acc")
    built = "torchplug_dispatch" in sys.modules
    mode = loaded_backend("acc").status().mode if record.status == "loaded" else None
    print(json.dumps([record.status, record.reason, record.fix, mode, [r.op for r in d.registrations("acc")], built]))
"""


def test_registering_a_kernel_in_setup_compiles_nothing_inside_import_torch(tmp_path):
    make_plugin(tmp_path, "acc", ACC.replace("{native}", "True"))
    cache = tmp_path / "cache"  # an empty build cache: anything compiled or loaded would come from here
    result = run_python(REPORT, path=tmp_path, TORCHPLUG_CACHE=str(cache))
    status, reason, _, mode, ops, built = json.loads(result.stdout)
    assert (status, mode, ops) == ("loaded", "native", ["aten::relu"]), (reason, result.stderr)
    assert not built, "import torch loaded the dispatcher's C++ half"
    assert not list(cache.rglob("torchplug_dispatch*")), "import torch compiled the dispatcher's C++ half"


def test_a_plugin_without_its_hardware_loads_unavailable_with_its_kernels_waiting(tmp_path):
    make_plugin(tmp_path, "acc", ACC.replace("{native}", "False"))
    result = run_python(REPORT, path=tmp_path)
    status, reason, fix, mode, ops, _ = json.loads(result.stdout)
    assert (status, reason, mode, ops) == ("loaded", "", "unavailable", ["aten::relu"]), (reason, fix, result.stderr)
    listed = run_python("""
        from torchplug.entrypoints import PluginError, backend
        try:
            backend("acc")
        except PluginError as err:
            print(err)
    """, path=tmp_path).stdout
    assert "'acc' is unavailable: no acc card is plugged in" in listed, listed


def test_a_setup_that_fails_is_named_as_such_without_the_advice_to_reinstall(tmp_path):
    make_plugin(tmp_path, "acc", ACC.replace("{native}", "True").replace(
        "super().setup()", "raise RuntimeError('acc driver handshake timed out')"))
    status, reason, fix, *_ = json.loads(run_python(REPORT, path=tmp_path).stdout)
    assert status == "failed" and reason == "its setup() raised RuntimeError: acc driver handshake timed out"
    assert "setup() must succeed on any machine" in fix and "TORCHPLUG_DISABLE=acc" in fix and "reinstall" not in fix


def test_registered_kernels_install_when_the_device_is_first_used():
    result = run_python("""
        import json, torch
        import torchplug.dispatcher as d
        calls = []
        sevens = lambda x: calls.append(x.dtype) or torch.full_like(x, 7.0)
        d.register("aten::relu", "xpu", sevens, dtypes=[torch.float32])
        x = torch.tensor([-1.0, 2.0], device="xpu")
        served = [torch.relu(x).tolist(), torch.relu(x.double()).tolist(), torch.relu(x).tolist()]
        print(json.dumps([served, len(calls)]))
    """, TORCHPLUG_EMULATE="xpu")
    served, calls = json.loads(result.stdout)
    assert served == [[7.0, 7.0], [0.0, 2.0], [7.0, 7.0]] and calls == 2  # float64 keeps torch's kernel


def test_a_kernel_that_cannot_install_names_the_missing_fallback_and_the_fix(tmp_path):
    make_plugin(tmp_path, "acc", ACC.replace("{native}", "True"))
    result = run_python("""
        from torchplug.dispatcher import RegistrationError, enable_fallback, registry
        try:
            registry.start("acc")  # what the device's first use does
        except RegistrationError as err:
            print(err)
        enable_fallback("acc")
        registry.start("acc")
        print("installed:", registry.winner("aten::relu", "acc", __import__("torch").float32).op)
    """, path=tmp_path)
    assert "torch has no kernel of its own for aten::relu at PrivateUse1, nor a fallback for that key" in result.stdout
    assert "enable_fallback('acc')" in result.stdout and "installed: aten::relu" in result.stdout, result.stdout
