"""`torchplug tune cpu`: the skinny products' prefetch distance measured on this machine, recorded per
CPU model and ISA path, and run by every later load; the precedence of the environment, the record,
the per-vendor table and the path's own distance. No timing is asserted: only that a measurement
happened, was recorded, and is what the next process runs."""

import json
from pathlib import Path

import pytest

from conftest import cli_json, run_cli, run_python

kernels = pytest.importorskip("torchplug_cpu.kernels")
tuning = pytest.importorskip("torchplug_cpu.tuning")

STATE = """
    import json, torch
    from torchplug_cpu import kernels
    ext = kernels.load()
    print(json.dumps({"bytes": ext.gemv_prefetch_bytes(), "own": ext.own_prefetch_bytes(), "isa": ext.current_isa(),
                      "vendor": ext.cpu_vendor(), "cpu": ext.cpu_vendor() + " " + ext.cpu_model(),
                      "status": kernels.fp16_status()}))
"""


@pytest.fixture
def cache(tmp_path: Path) -> Path:
    """A cache root of its own (so its tuning file starts empty) that reuses the built extensions."""
    from torchplug.extension import cache_dir

    cache_dir().mkdir(parents=True, exist_ok=True)
    (tmp_path / cache_dir().name).symlink_to(cache_dir(), target_is_directory=True)
    return tmp_path


def state(cache: Path, **env: str) -> dict:
    return json.loads(run_python(STATE, TORCHPLUG_CACHE=str(cache), **env).stdout)


def test_without_a_measurement_the_vendor_table_or_the_path_decides(cache):
    """Unset and unmeasured: PREFETCH_BY_CPU's entry for this vendor and path, else the path's own; the
    environment wins on every path; a bad value is refused naming the variable."""
    now = state(cache)
    table = kernels.PREFETCH_BY_CPU.get((now["vendor"], now["isa"]))
    assert now["bytes"] == (now["own"] if table is None else table << 10)
    assert ("PREFETCH_BY_CPU" if table is not None else f"the {now['isa']} path's own") in now["status"]
    assert state(cache, TORCHPLUG_CPU_ISA="scalar")["own"] == 1 << 10
    assert state(cache, TORCHPLUG_CPU_PREFETCH_KB="3")["bytes"] == 3 << 10
    forced = state(cache, TORCHPLUG_CPU_PREFETCH_KB="0", TORCHPLUG_CPU_ISA="scalar")
    assert forced["bytes"] == 0 and "TORCHPLUG_CPU_PREFETCH_KB" in forced["status"]
    bad = run_python(STATE, check=False, TORCHPLUG_CACHE=str(cache), TORCHPLUG_CPU_PREFETCH_KB="6k")
    assert bad.returncode != 0 and "TORCHPLUG_CPU_PREFETCH_KB='6k' is not a whole number of KB" in bad.stderr


def test_tune_measures_records_and_the_next_import_runs_the_record(cache):
    before = state(cache)
    result = cli_json("tune", "cpu", TORCHPLUG_CACHE=str(cache))["results"]
    assert [(r["backend"], r["setting"]) for r in result] == [("cpu", "prefetch distance")]
    records = json.loads((cache / tuning.TUNING_FILE).read_text())
    key = f"{before['cpu']} / {before['isa']}"
    assert list(records) == [key]
    record = records[key]
    assert result[0]["value"] == f"{record['prefetch_kb']} KB" and record["in_force_kb"] == before["bytes"] >> 10
    assert sorted(map(int, record["gbps"])) == sorted({*tuning.CANDIDATES_KB, record["in_force_kb"]})
    assert all(gbps > 0 for gbps in record["gbps"].values()) and record["megabytes"] >= tuning.MIN_BYTES >> 20
    assert record["prefetch_kb"] == tuning.choose({int(kb): v for kb, v in record["gbps"].items()},
                                                  record["in_force_kb"])

    # A distance no default has proves that the next load reads the record.
    record["prefetch_kb"] = 5
    (cache / tuning.TUNING_FILE).write_text(json.dumps(records))
    after = state(cache)
    assert after["bytes"] == 5 << 10 and "measured by `torchplug tune cpu`" in after["status"]
    assert state(cache, TORCHPLUG_CPU_PREFETCH_KB="3")["bytes"] == 3 << 10  # the environment still wins
    scalar = state(cache, TORCHPLUG_CPU_ISA="scalar")  # measured on another path: that path keeps its own
    assert scalar["bytes"] == scalar["own"]

    # Another CPU model's record (a cache baked elsewhere) and an unreadable file leave the defaults.
    (cache / tuning.TUNING_FILE).write_text(json.dumps({key.replace(before["cpu"], "OtherVendor family 1 model 2"):
                                                        record}))
    assert state(cache)["bytes"] == before["bytes"]
    (cache / tuning.TUNING_FILE).write_text("{not json")
    assert state(cache)["bytes"] == before["bytes"]


def test_choose_keeps_the_distance_in_force_unless_another_is_clearly_faster():
    assert tuning.choose({0: 9.0, 6: 10.0, 12: 10.2}, 6) == 6  # 2%: within noise
    assert tuning.choose({0: 9.0, 6: 10.0, 12: 10.4}, 6) == 12
    assert tuning.choose({0: 9.0, 6: 10.0, 12: 8.0}, 12) == 6
    assert tuning.choose({1: 11.0, 6: 10.0}, 1) == 1


def test_tune_names_a_backend_that_measures_nothing_and_refuses_an_unknown_one(cache):
    quiet = cli_json("tune", "xpu", TORCHPLUG_CACHE=str(cache))["results"]
    assert quiet == [{"backend": "xpu", "setting": "-", "value": "-", "detail": "nothing to measure"}]
    unknown = run_cli("tune", "cpuu", TORCHPLUG_CACHE=str(cache))
    assert unknown.returncode == 2 and "cpuu" in unknown.stderr and "cpu" in unknown.stderr
