"""Emulated cuda against what real GPUs answered (devices/cuda/torchplug_cuda/fidelity_records/).

`.ci/gpu` records a real GPU's answers to the probes of torchplug_cuda.fidelity; here the same
probes run on emulated cuda as that model (TORCHPLUG_EMULATE_GPU) and every difference fails,
unless the record lists it among its known differences with the reason.
"""

import json
import sys
from pathlib import Path

import pytest

from conftest import REPO, clean_env, run_process

RECORDS = sorted((REPO / "devices" / "cuda" / "torchplug_cuda" / "fidelity_records").glob("*.json"))
ANSWERED_BY_EVERY_BUILD = ("identity", "test_helpers", "memory_stat_keys", "private_bindings", "result_layouts")


def _emulated_record(tmp_path: Path, model: str) -> dict:
    out = tmp_path / f"{model}.json"
    run_process([sys.executable, "-m", "torchplug_cuda.fidelity", "record", out],
                env=clean_env(TORCHPLUG_EMULATE="cuda", TORCHPLUG_EMULATE_GPU=model), cwd=tmp_path)
    return json.loads(out.read_text())


def test_the_probes_run_on_emulated_cuda(tmp_path):
    """What .ci/gpu runs on a GPU must run here too, or the records could not be compared."""
    answers = _emulated_record(tmp_path, "h100")["answers"]
    failed = {name: answers[name] for name in ANSWERED_BY_EVERY_BUILD if not answers[name]["ok"]}
    assert not failed
    assert answers["identity"]["value"]["capability"] == [9, 0]


@pytest.mark.parametrize("record", RECORDS, ids=[r.stem for r in RECORDS])
def test_emulated_cuda_answers_as_the_recorded_gpu(tmp_path, record):
    from torchplug_cuda.fidelity import differences

    recorded = json.loads(record.read_text())
    model = record.stem.split("-torch")[0]
    assert differences(recorded, _emulated_record(tmp_path, model)) == {}
