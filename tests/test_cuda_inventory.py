"""The torch.cuda surface on emulated cuda, walked live (emulation/cuda_inventory.py, docs/emulation-inventory.md).

A name a new torch release adds fails here until it is classified, and each verdict is checked by a
call: a raising name raises saying why, and a faithful or no-op function that takes no argument
runs. The walk runs in a fresh interpreter with TORCHPLUG_EMULATE=cuda, on every build.
"""

import pytest
import torch

from conftest import REPO
from emulation_helpers import run_json

WALK = """
import inspect, json, torch
from torchplug.emulation import cuda_inventory as inv

torch.zeros(1, device="cuda")
# Calls that would change what later calls see, or wait for input: their verdict is checked elsewhere.
NOT_CALLED = {"init", "seed", "seed_all", "empty_cache", "caching_allocator_disabled", "sdp_kernel"}
PROBES = {"cufft_plan_cache": lambda: torch.backends.cuda.cufft_plan_cache[0].max_size}

def where(module, name):
    return getattr(torch._C, name) if module == "torch._C" else getattr(__import__(module, fromlist=[name]), name)

def runs_without_arguments(found):
    try:
        signature = inspect.signature(found)
    except (TypeError, ValueError):
        return False
    return all(p.default is not p.empty or p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD)
               for p in signature.parameters.values())

checked = []
for module, name, verdict, note in inv.inventory():
    found = where(module, name)
    if verdict == inv.RAISES:
        call = PROBES.get(name, found)
        if isinstance(found, type) or callable(call):
            try:
                call()
                checked.append([module, name, verdict, "did not raise"])
            except Exception as err:
                checked.append([module, name, verdict, str(err)[:300]])
        continue
    if (inspect.isfunction(found) or inspect.ismethod(found)) and name not in NOT_CALLED and runs_without_arguments(found):
        try:
            found()
            checked.append([module, name, verdict, "ran"])
        except Exception as err:
            checked.append([module, name, verdict, f"{type(err).__name__}: {str(err)[:300]}"])
    else:
        checked.append([module, name, verdict, "unclassified" if verdict not in (inv.FAITHFUL, inv.NO_OP) else "listed"])
print(json.dumps(checked))
"""
# Refusals torch itself words well enough: the legacy typed tensors on a CPU wheel, the cuFFT plan cache.
TORCHS_OWN_WORDS = ("Torch not compiled with CUDA enabled", "Cannot access cuFFT plan cache")


@pytest.fixture(scope="module")
def walked():
    return run_json(WALK, TORCHPLUG_EMULATE="cuda")


def test_every_name_is_classified(walked):
    assert [row[:2] for row in walked if row[3] == "unclassified"] == []


def test_raising_names_say_why(walked):
    unclear = [row for row in walked if row[2] == "raises"
               and "emulated cuda device cannot do this" not in row[3] and not any(w in row[3] for w in TORCHS_OWN_WORDS)]
    assert unclear == []


def test_faithful_and_no_op_functions_run(walked):
    failed = [row for row in walked if row[2] in ("faithful", "no-op") and row[3] not in ("ran", "listed")]
    assert failed == []


def test_the_documented_inventory_is_this_torchs():
    if torch.__version__.split("+")[0] != "2.13.0":
        pytest.skip("docs/emulation-inventory.md is generated on the pinned torch 2.13.0")
    documented = (REPO / "docs" / "emulation-inventory.md").read_text()
    table = run_json("import json; from torchplug.emulation import cuda_inventory as inv; print(json.dumps(inv.markdown()))",
                     TORCHPLUG_EMULATE="cuda")
    assert table in documented, "regenerate: TORCHPLUG_EMULATE=cuda python -m torchplug.emulation.cuda_inventory"
