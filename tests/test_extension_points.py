"""The extension points (torchplug.entrypoints.extensions): declared hooks, results combined as declared,
parts ordered by name and checked when they load, from real ``torchplug.extensions`` entry points."""

import json
import textwrap
from pathlib import Path

import pytest
from torchplug.entrypoints import HOOKS, BackendExtension, ExtensionError, RuntimePart
from torchplug.entrypoints.extensions import implemented, ordered

from conftest import run_python


def _part(name: str, **declared) -> RuntimePart:
    part = type(name.capitalize(), (RuntimePart,), declared)()
    part.name = name
    return part


def test_every_point_declares_its_arguments_and_how_results_combine():
    assert {name: (spec.parameters, spec.result) for name, spec in HOOKS.items()} == {
        "setup": (("backend",), "all"), "check_environment": (("plugins",), "all"),
        "status": (("backend",), "first"), "device_mode": (("backend",), "first"),
        "device_memory": (("backend",), "first"), "ready": (("backend",), "all"),
        "codegen": (("backend",), "first"), "device_module": (("backend",), "first"),
        "host_launcher": (("backend",), "first"), "triton_interpreter": (("backend",), "first")}
    assert BackendExtension is RuntimePart  # the old public name stays, deprecated


def test_a_part_implements_only_declared_points_with_their_arguments():
    assert implemented(_part("fine", status=lambda self, backend: None, _helper=lambda self: 1)) == ["status"]
    with pytest.raises(ExtensionError, match=r"defines stauts\(\), which is no extension point \(did you mean "
                                             r"'status'\?\).*start a helper's name with '_'"):
        implemented(_part("typo", stauts=lambda self, backend: None))
    with pytest.raises(ExtensionError, match=r"implements setup\(backend, extra\), but the extension point is "
                                             r"setup\(self, backend\)"):
        implemented(_part("wide", setup=lambda self, backend, extra: None))
    with pytest.raises(ExtensionError, match="after must be a tuple of part names"):
        implemented(_part("bare", after="emulation"))


def test_parts_run_in_the_order_they_declare_by_name_whatever_their_names():
    parts = [_part("zeta", before=("alpha",)), _part("alpha"), _part("mid", after=("alpha",), before=("omega",)),
             _part("omega")]
    runs, left_out = ordered(parts)
    assert [p.name for p in runs] == ["zeta", "alpha", "mid", "omega"] and left_out == {}


def test_an_unknown_name_to_order_by_or_a_cycle_leaves_those_parts_out_with_the_fix():
    runs, left_out = ordered([_part("emulation"), _part("late", after=("emulatoin",)),
                              _part("a", after=("b",)), _part("b", after=("a",))])
    assert [p.name for p in runs] == ["emulation"]
    assert "orders itself against 'emulatoin'" in left_out["late"] and "did you mean 'emulation'" in left_out["late"]
    assert "a, b form a cycle" in left_out["a"] and "drop one of those declarations" in left_out["b"]


def _make_extension(root: Path, name: str, source: str) -> None:
    """A distribution that declares only a ``torchplug.extensions`` entry point, as another package would."""
    module = f"tp_ext_{name}"
    (root / f"{module}.py").write_text(textwrap.dedent(source))
    dist = root / f"{module}-0.1.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {module}\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text(f"[torchplug.extensions]\n{name} = {module}:Part\n")


def test_installed_extensions_are_ordered_checked_and_switched_off_with_the_reason_at_import_torch(tmp_path):
    _make_extension(tmp_path, "audit", """
        import os
        from torchplug.entrypoints import RuntimePart

        class Part(RuntimePart):
            after = ("emulation",)
            before = ("codegen",)

            def setup(self, backend):
                os.environ["TP_AUDITED"] = os.environ.get("TP_AUDITED", "") + backend.spec.name + ","
    """)
    _make_extension(tmp_path, "typo", """
        from torchplug.entrypoints import RuntimePart

        class Part(RuntimePart):
            def stauts(self, backend):
                return None
    """)
    for name, other in (("ping", "pong"), ("pong", "ping")):
        _make_extension(tmp_path, name, f"""
            from torchplug.entrypoints import RuntimePart

            class Part(RuntimePart):
                after = ({other!r},)
        """)
    result = run_python("""
        import json, os, torch
        from torchplug.entrypoints import extensions, loaded
        print(json.dumps([[p.name for p in extensions.extensions()], os.environ.get("TP_AUDITED", ""), loaded()]))
    """, path=tmp_path)
    names, audited, plugins = json.loads(result.stdout)
    assert names.index("emulation") < names.index("audit") < names.index("codegen"), names
    assert not {"typo", "ping", "pong"} & set(names)
    assert audited == "".join(f"{name}," for name in plugins)  # its setup ran for every loaded backend
    assert "extension 'typo' (tp_ext_typo:Part) is off: defines stauts(), which is no extension point (did you " \
           "mean 'status'?)" in result.stderr, result.stderr
    assert "extension 'ping' (tp_ext_ping:Part) is off: the before/after declarations of ping, pong form a cycle" \
        in result.stderr, result.stderr
