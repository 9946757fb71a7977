"""A conformance mode is one module with one `Mode` record: the suite finds, orders and plans it from that alone."""

import importlib
import json
import sys
import textwrap

import pytest
import torch
from conftest import clean_env, run_process

from torchplug.conformance import modes
from torchplug.conformance.modes import Mode, all_modes, mode, mode_names

TWICE = '''
"""Test mode: the op run twice on the device gives the same result."""

from ..verdicts.compare import compare, outputs
from .record import Mode
from .sides import host, on_device, on_target, sample_args


def twice(entry, sample, target):
    args, kwargs = sample_args(sample)

    def run():
        dev_args, dev_kwargs = on_device(entry, args, kwargs, target)
        return host(entry.op(*dev_args, **dev_kwargs))
    return compare(outputs(on_target(run)), outputs(on_target(run)))


MODE = Mode("twice", twice, follows="meta", holds_to="values", samples={"smoke": 1, "standard": 2},
            tier_ops={"smoke": ("abs",)})
'''


@pytest.fixture
def extra_mode_module(tmp_path):
    """A module written beside the suite's own modes (a second folder of the modes package)."""
    def add(source: str, name: str = "twice") -> None:
        (tmp_path / f"{name}.py").write_text(textwrap.dedent(source))
    modes.__path__.append(str(tmp_path))
    all_modes.cache_clear()
    yield add
    modes.__path__.remove(str(tmp_path))
    for name in [n for n in sys.modules if n.startswith("torchplug.conformance.modes.") and
                 str(tmp_path) in (getattr(sys.modules[n], "__file__", "") or "")]:
        del sys.modules[name]
    all_modes.cache_clear()


def test_the_modes_keep_their_order():
    assert mode_names() == ("eager", "autograd", "out", "noncontiguous", "compile", "edge", "scalar_types", "alias",
                            "layout", "errors", "meta")
    assert mode("compile").slow and mode("compile").needs_compile and mode("errors").inputs is not None
    with pytest.raises(KeyError, match="no conformance mode 'bogus'; the modes are: eager, autograd"):
        mode("bogus")


def test_one_module_adds_a_mode_that_is_placed_planned_and_run(extra_mode_module):
    from torchplug.conformance.cases.opinfo import find
    from torchplug.conformance.cases.plan import make_plan
    from torchplug.conformance.cases.tiers import Selection
    from torchplug.conformance.modes import inputs_for
    from torchplug.conformance.target import Target

    extra_mode_module(TWICE)
    names = mode_names()
    assert names[-2:] == ("meta", "twice")

    plan = make_plan(Selection("smoke", ("twice",), ("float32",), ops="^(abs|neg)$"), {"float32"}, None)
    assert [(g.op, g.modes, g.limit) for g in plan.groups] == [("abs", {"twice": None}, {"twice": 1})]
    standard = make_plan(Selection("standard", ("twice",), ("float32",), ops="^(abs|neg)$"), {"float32"}, None)
    assert sorted((g.op, g.limit["twice"]) for g in standard.groups) == [("abs", 2), ("neg", 2)]

    entry = find("abs")
    sample = inputs_for(entry, torch.float32, {"twice": [0]})["twice"][0]
    assert mode("twice").run(entry, sample, Target("cpu", torch.device("cpu"))).ok


@pytest.mark.parametrize("record, said", [
    ('MODE = Mode("twice", twice, follows="nothing", holds_to="values", samples={})',
     "conformance mode 'twice' follows 'nothing', which is no mode"),
    ('MODE = Mode("twice", twice, follows="eager", holds_to="values", samples={})',
     "conformance modes 'autograd' and 'twice' both come after 'eager': give one of them follows='autograd'"),
    ('MODE = Mode("twice", twice, follows=None, holds_to="values", samples={})',
     "conformance modes 'eager' and 'twice' both come first"),
], ids=["unknown", "taken", "two-first"])
def test_a_mode_in_no_place_or_a_taken_one_is_refused_with_both_names(extra_mode_module, record, said):
    extra_mode_module("from .record import Mode\n\n\ndef twice(entry, sample, target):\n    pass\n\n\n" + record + "\n")
    with pytest.raises(ImportError, match=said.replace("(", r"\(")):
        all_modes()


def test_modes_in_a_cycle_are_refused():
    from torchplug.conformance.modes import _ordered

    records = {name: Mode(name, lambda *a: None, follows=after, holds_to="values", samples={})
               for name, after in (("a", None), ("b", "c"), ("c", "b"))}
    with pytest.raises(ImportError, match="conformance modes b, c do not follow from the first mode"):
        _ordered(records)


def test_the_old_module_paths_still_import_with_a_deprecation_warning():
    from torchplug.conformance.verdicts import compare

    sys.modules.pop("torchplug.conformance.compare", None)
    with pytest.warns(DeprecationWarning, match="torchplug.conformance.compare moved to "
                                                "torchplug.conformance.verdicts.compare"):
        old = importlib.import_module("torchplug.conformance.compare")
    assert old is compare and compare.__spec__.name == "torchplug.conformance.verdicts.compare"
    with pytest.raises(ModuleNotFoundError):
        importlib.import_module("torchplug.conformance.no_such_module")


def test_the_old_worker_command_still_runs_the_worker():
    """`python -m torchplug.conformance.worker` was the worker's command before the split."""
    done = run_process([sys.executable, "-m", "torchplug.conformance.worker", "no-such-backend"], input="",
                       env=clean_env())
    message = json.loads(done.stdout.splitlines()[0])
    assert "no-such-backend" in message["fatal"], done.stdout + done.stderr
