"""Safe autoload through `import torch`, in real subprocesses with real entry-point metadata."""

import json

import pytest
import torch
from conftest import REAL_PLUGINS, cli_json, make_plugin, plugin_source, run_cli, run_python

REPORT = """
    import json, sys, torch
    from torchplug.entrypoints import records
    print(json.dumps({r.name: [r.status, r.reason, r.fix] for r in records()}))
"""


def report(path=None, **env) -> dict:
    return json.loads(run_python(REPORT, path=path, **env).stdout)


def test_import_torch_alone_loads_every_installed_plugin_without_heavy_imports():
    out = run_python("""
        import sys, torch
        heavy = [m for m in ("torch._dynamo", "torch._inductor", "torch.utils.cpp_extension") if m in sys.modules]
        from torchplug.entrypoints import loaded
        print(loaded(), heavy)
    """).stdout
    assert out.strip() == f"{REAL_PLUGINS} []"


@pytest.fixture
def broken_plugins(tmp_path):
    """One plugin per failure kind, plus one healthy plugin that must still load."""
    make_plugin(tmp_path, "good", plugin_source("good"))
    make_plugin(tmp_path, "badimport", 'raise ImportError("libnpu.so: undefined symbol: npuInit")\n')
    make_plugin(tmp_path, "badinit", plugin_source("badinit", """
    class Broken(FakeBackend):
        def setup(self):
            raise RuntimeError("driver handshake failed")
    backend = Broken()
    """))
    # Importing this one would leave a trace: it must be rejected from its metadata alone.
    make_plugin(tmp_path, "oldtorch", 'import os; os.environ["TP_FAKE_OLDTORCH_IMPORTED"] = "1"\n',
                requires=("torch>=3.0", "torchplug>=0.1"))
    make_plugin(tmp_path, "reenter", plugin_source("reenter", """
    torch._import_device_backends()          # re-enter torch's autoload while it is running
    import torchplug.entrypoints
    torchplug.entrypoints.autoload()         # and the torchplug loader directly
    backend = FakeBackend()
    """))
    make_plugin(tmp_path, "noattr", "x = 1\n")
    make_plugin(tmp_path, "notbackend", "backend = object()\n")
    make_plugin(tmp_path, "badspec", plugin_source("badspec", spec_extra=", api_version=99"))
    return tmp_path


def test_broken_plugins_never_break_import_torch(broken_plugins):
    result = report(path=broken_plugins)
    for name in REAL_PLUGINS + ["good", "reenter"]:
        assert result[name][0] == "loaded", (name, result[name])
    assert result["badimport"][0] == "failed"
    assert "ImportError: libnpu.so: undefined symbol: npuInit" in result["badimport"][1]
    assert result["badinit"][0] == "failed"
    assert "RuntimeError: driver handshake failed" in result["badinit"][1]
    assert result["oldtorch"][0] == "incompatible"
    assert result["oldtorch"][1] == (f"torch {torch.__version__} is installed, but tp-fake-oldtorch 0.1 supports "
                                     "torch>=3.0 (the range it is tested on)")
    assert result["oldtorch"][2] == "install a supported torch: pip install 'torch>=3.0'"
    assert "AttributeError" in result["noattr"][1]
    assert "not a torchplug Backend" in result["notbackend"][1]
    assert "api_version 99" in result["badspec"][1]
    assert all(result[name][2] for name in ("badimport", "badinit", "oldtorch")), "every failure has a fix"


def test_incompatible_plugin_is_not_imported(broken_plugins):
    out = run_python("""
        import os, torch, torchplug.entrypoints as ep
        ep.records()
        print(os.environ.get("TP_FAKE_OLDTORCH_IMPORTED", "no"))
    """, path=broken_plugins).stdout
    assert out.strip() == "no"


def test_torchplug_list_shows_each_failure_with_its_reason(broken_plugins):
    result = run_cli("list", "--verbose", path=broken_plugins)
    assert result.returncode == 0, result.stderr
    lines = {line.split()[0]: line for line in result.stdout.splitlines() if line.strip()}
    assert "failed" in lines["badimport"] and "undefined symbol: npuInit" in lines["badimport"]
    assert "failed" in lines["badinit"] and "driver handshake failed" in lines["badinit"]
    assert "incompatible" in lines["oldtorch"] and "supports torch>=3.0" in lines["oldtorch"]
    assert 'raise RuntimeError("driver handshake failed")' in result.stdout  # --verbose traceback
    plugins = {p["name"]: p for p in cli_json("list", path=broken_plugins)["plugins"]}
    assert plugins["good"]["mode"] == "native" and plugins["badimport"]["mode"] == "-"


def test_doctor_fails_when_a_plugin_is_broken(broken_plugins):
    result = cli_json("doctor", path=broken_plugins)
    verdicts = {r["name"]: r["result"] for r in result["results"]}
    assert verdicts["badimport"] == "FAIL" and verdicts["good"] == "PASS" and verdicts["cpu"] == "PASS"
    assert result["ok"] is False
    assert run_cli("doctor", path=broken_plugins).returncode == 1
    assert run_cli("doctor", "good", "cpu", path=broken_plugins).returncode == 0


def test_strict_mode_makes_import_torch_raise(broken_plugins):
    result = run_python("import torch", path=broken_plugins, check=False, TORCHPLUG_STRICT="1")
    assert result.returncode != 0
    assert "TORCHPLUG_STRICT=1 and these torchplug plugins failed to load: " in result.stderr
    assert "undefined symbol: npuInit" in result.stderr and "driver handshake failed" in result.stderr
    run_python("import torch", TORCHPLUG_STRICT="1")  # nothing broken: strict import works


def test_explicit_request_raises_recorded_reason_and_fix(broken_plugins):
    out = run_python("""
        import torch, torchplug
        for name in ("badimport", "oldtorch", "xpu", "xpuu"):
            try:
                torchplug.backend(name)
            except torchplug.PluginError as err:
                print(name, "|", err)
        print("good", "|", type(torchplug.backend("good")).__name__)
    """, path=broken_plugins).stdout
    lines = dict(line.split(" | ", 1) for line in out.splitlines())
    assert "undefined symbol: npuInit" in lines["badimport"] and "Fix: reinstall" in lines["badimport"]
    assert "supports torch>=3.0" in lines["oldtorch"] and "Fix: install a supported torch: pip install" in lines["oldtorch"]
    assert "built without XPU" in lines["xpu"] and "TORCHPLUG_EMULATE=xpu" in lines["xpu"]
    assert "did you mean 'xpu'?" in lines["xpuu"]
    assert lines["good"] == "FakeBackend"


def test_torchplug_devices_selects_plugins():
    result = report(TORCHPLUG_DEVICES="cpu,xpu")
    assert [n for n, r in result.items() if r[0] == "loaded"] == ["cpu", "xpu"]
    assert result["cuda"][0] == "skipped" and "TORCHPLUG_DEVICES=cpu,xpu" in result["cuda"][1]
    assert "add 'cuda' to TORCHPLUG_DEVICES" in result["cuda"][2]


def test_torchplug_disable_skips_plugins_and_explains_on_request():
    out = run_python("""
        import torch, torchplug
        try:
            torchplug.backend("cuda")
        except torchplug.PluginError as err:
            print(err)
        print(torchplug.entrypoints.loaded())
    """, TORCHPLUG_DISABLE="cuda").stdout
    assert "listed in TORCHPLUG_DISABLE=cuda" in out and "remove 'cuda' from TORCHPLUG_DISABLE" in out
    assert out.splitlines()[-1] == str([p for p in REAL_PLUGINS if p != "cuda"])


@pytest.mark.parametrize("var", ["TORCHPLUG_DEVICES", "TORCHPLUG_DISABLE"])
def test_unknown_names_warn_with_did_you_mean(var):
    result = run_python("import torch, torchplug.entrypoints as ep; ep.records()", **{var: "cpu,rocmm"})
    assert f"{var} names 'rocmm'" in result.stderr and "did you mean 'rocm'?" in result.stderr


def test_torch_autoload_switch_is_respected_and_explicit_load_still_works():
    out = run_python("""
        import torch, torchplug.entrypoints as ep
        print(ep.loaded(), ep.records()[0].reason)
        ep.load("cpu")
        print(ep.loaded())
    """, TORCH_DEVICE_BACKEND_AUTOLOAD="0").stdout.splitlines()
    assert out == ["[] skipped: TORCH_DEVICE_BACKEND_AUTOLOAD=0", "['cpu']"]


@pytest.mark.parametrize("first_import", ["torchplug_cpu", "torchplug.entrypoints", "torchplug_xpu"])
def test_importing_torchplug_before_torch_is_safe(first_import):
    out = run_python(f"import {first_import}; import torchplug.entrypoints as ep; print(ep.loaded())").stdout
    assert out.strip() == str(REAL_PLUGINS)


def test_doctor_fails_a_named_device_without_hardware_and_says_how_to_emulate_it():
    result = run_cli("doctor", "xpu")
    assert result.returncode == 1
    assert "built without XPU; without the hardware, emulate it: TORCHPLUG_EMULATE=xpu" in result.stdout
    assert run_cli("doctor", "xpu", TORCHPLUG_EMULATE="xpu").returncode == 0


_TOP_LEVEL_IMPORT = """
    import os, torch
    from torchplug import Backend, BackendSpec   # the names the README shows, from the package itself

    class TopLevel(Backend):
        spec = BackendSpec(name="toplevel", device_type="cpu", dispatch_key="CPU", torch_range=">=2.13,<2.16",
                           dtypes=frozenset({torch.float32, torch.bool, torch.uint8}))

        def native_unavailable_reason(self):
            return None

    backend = TopLevel()
"""


@pytest.mark.parametrize("command", [
    ("list",), ("doctor", "toplevel"), ("coverage", "toplevel"), ("build", "dispatcher"),
    ("check", "toplevel", "--op", "neg", "--dtype", "float32", "--mode", "eager", "--no-runtime-checks"),
])
def test_a_plugin_importing_backend_from_torchplug_loads_under_every_cli_command(tmp_path, command):
    # The CLI imports torchplug before torch, so torch's autoload imports the plugin while
    # torchplug/__init__.py is still running: its lazy names must resolve by then.
    make_plugin(tmp_path, "toplevel", _TOP_LEVEL_IMPORT)
    result = run_cli(*command, path=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "partially initialized" not in result.stdout + result.stderr
    if command == ("list",):
        assert [p["status"] for p in cli_json("list", path=tmp_path)["plugins"] if p["name"] == "toplevel"] == ["loaded"]


@pytest.mark.parametrize("first", ["import torch", "import torchplug", "import torchplug.entrypoints"])
def test_a_plugin_importing_backend_from_torchplug_loads_whatever_is_imported_first(tmp_path, first):
    make_plugin(tmp_path, "toplevel", _TOP_LEVEL_IMPORT)
    out = run_python(f"""
        {first}
        import torch
        from torchplug.entrypoints import records
        print([(r.status, r.reason) for r in records() if r.name == "toplevel"])
    """, path=tmp_path).stdout
    assert out.strip() == "[('loaded', '')]"
