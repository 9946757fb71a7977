"""`torchplug tune cpu`: the skinny products' prefetch (distance and cache level) and weight streams
measured on this machine, recorded per CPU model and ISA path, and run by every later load; the precedence of the
environment, the record, the per-vendor table and the path's own distance. No timing is asserted: only that a measurement
happened, was recorded, and is what the next process runs."""

import json
from pathlib import Path

import pytest

from conftest import cli_json, run_cli, run_python

kernels = pytest.importorskip("torchplug_cpu.kernels")
tuning = pytest.importorskip("torchplug_cpu.tuning")
prefetch = pytest.importorskip("torchplug_cpu.prefetch")

STATE = """
    import json, torch
    from torchplug_cpu import kernels
    ext = kernels.load()
    print(json.dumps({"bytes": ext.gemv_prefetch_bytes(), "level": ext.gemv_prefetch_level(),
                      "streams": ext.gemv_streams(),
                      "own": ext.own_prefetch_bytes(), "isa": ext.current_isa(),
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
    """Unset and unmeasured: PREFETCH_BY_CPU's entry for this vendor and path, else the path's own
    distance into L1 on one stream; each environment variable overrides its part on every path; a
    bad value is refused naming the variable."""
    now = state(cache)
    table = prefetch.prefetch_by_cpu(now["vendor"], *prefetch.cpu_family_model(kernels.extension()), now["isa"])
    kb, level, streams = table[1] if table is not None else (now["own"] >> 10, "l1", 1)
    assert (now["bytes"], now["level"], now["streams"]) == (kb << 10, prefetch.PREFETCH_LEVELS[level], streams)
    assert f"{kb} KB ahead into {level.upper()} on {streams} weight stream" in now["status"]
    assert (f"PREFETCH_BY_CPU's {table[0].name} entry" if table is not None else f"the {now['isa']} path's own") \
        in now["status"]
    scalar = state(cache, TORCHPLUG_CPU_ISA="scalar")
    assert (scalar["bytes"], scalar["level"], scalar["streams"]) == (1 << 10, 1, 1)
    distance = state(cache, TORCHPLUG_CPU_PREFETCH_KB="3")
    assert (distance["bytes"], distance["level"], distance["streams"]) == (3 << 10, now["level"], now["streams"])
    assert state(cache, TORCHPLUG_CPU_STREAMS="2", TORCHPLUG_CPU_ISA="scalar")["streams"] == 2
    forced = state(cache, TORCHPLUG_CPU_PREFETCH_KB="0", TORCHPLUG_CPU_PREFETCH_LEVEL="L2", TORCHPLUG_CPU_ISA="scalar")
    assert (forced["bytes"], forced["level"]) == (0, 2)
    assert "(TORCHPLUG_CPU_PREFETCH_KB; TORCHPLUG_CPU_PREFETCH_LEVEL; the scalar path's own)" in forced["status"]
    bad = run_python(STATE, check=False, TORCHPLUG_CACHE=str(cache), TORCHPLUG_CPU_PREFETCH_KB="6k")
    assert bad.returncode != 0 and "TORCHPLUG_CPU_PREFETCH_KB='6k' is not a whole number of KB" in bad.stderr
    bad = run_python(STATE, check=False, TORCHPLUG_CACHE=str(cache), TORCHPLUG_CPU_PREFETCH_LEVEL="l3")
    assert bad.returncode != 0 and "TORCHPLUG_CPU_PREFETCH_LEVEL='l3' is not one of l1, l2" in bad.stderr
    bad = run_python(STATE, check=False, TORCHPLUG_CACHE=str(cache), TORCHPLUG_CPU_STREAMS="3")
    assert bad.returncode != 0 and "TORCHPLUG_CPU_STREAMS='3' is not one of 1, 2, 4" in bad.stderr


@pytest.mark.parametrize("cpu, isa, kind", [
    (("AuthenticAMD", 25, 0x11), "avx512", "Zen 4"),  # Genoa
    (("AuthenticAMD", 25, 0x61), "avx2", "Zen 4"),  # Raphael, on the avx2 path
    (("AuthenticAMD", 25, 0x01), "avx2", None),  # Zen 3 (Milan): unmeasured, the path's own
    (("AuthenticAMD", 26, 0x11), "avx512", None),  # Zen 5 (Turin)
    (("GenuineIntel", 6, 207), "avx512", "Intel"),
    (("GenuineIntel", 6, 207), "scalar", None),
    (("CentaurHauls", 6, 15), "avx2", None),
])
def test_the_table_is_keyed_by_cpu_model_and_path(cpu, isa, kind):
    """PREFETCH_BY_CPU tells CPU models of one vendor apart (Zen 3 and Zen 4 share AMD's family 25)."""
    entry = prefetch.prefetch_by_cpu(*cpu, isa)
    assert (entry[0].name if entry else None) == kind


def test_tune_measures_records_and_the_next_import_runs_the_record(cache):
    before = state(cache)
    result = cli_json("tune", "cpu", TORCHPLUG_CACHE=str(cache))["results"]
    assert [(r["backend"], r["setting"]) for r in result] == [("cpu", "prefetch")]
    records = json.loads((cache / tuning.TUNING_FILE).read_text())
    key = f"{before['cpu']} / {before['isa']}"
    assert list(records) == [key]
    record = records[key]
    chosen = (record["prefetch_level"], record["prefetch_kb"], record["streams"])
    in_force = (record["in_force_level"], record["in_force_kb"], record["in_force_streams"])
    assert result[0]["value"].startswith(f"{chosen[1]} KB into {chosen[0].upper()}, {chosen[2]} weight stream")
    assert in_force == ({1: "l1", 2: "l2"}[before["level"]], before["bytes"] >> 10, before["streams"])
    candidates = {(level, kb, streams) for level in tuning.LEVELS for kb in tuning.CANDIDATES_KB if kb or level == "l1"
                  for streams in tuning.STREAMS}
    assert set(record["gbps"]) == {tuning.label(c) for c in candidates | {in_force}}
    assert all(gbps > 0 for gbps in record["gbps"].values()) and record["megabytes"] >= tuning.MIN_BYTES >> 20
    by_candidate = {c: record["gbps"][tuning.label(c)] for c in candidates | {in_force}}
    assert chosen == tuning.choose(by_candidate, in_force)

    # A distance, level and stream count no default has prove that the next load reads the record.
    other_level = "l1" if before["level"] == 2 else "l2"
    other_streams = 2 if before["streams"] != 2 else 4
    record["prefetch_kb"], record["prefetch_level"], record["streams"] = 5, other_level, other_streams
    (cache / tuning.TUNING_FILE).write_text(json.dumps(records))
    after = state(cache)
    assert (after["bytes"], after["level"], after["streams"]) == (5 << 10, prefetch.PREFETCH_LEVELS[other_level],
                                                                  other_streams)
    assert "measured by `torchplug tune cpu`" in after["status"]
    assert state(cache, TORCHPLUG_CPU_PREFETCH_KB="3")["bytes"] == 3 << 10  # the environment still wins
    scalar = state(cache, TORCHPLUG_CPU_ISA="scalar")  # measured on another path: that path keeps its own
    assert (scalar["bytes"], scalar["level"]) == (scalar["own"], 1)

    # A record from before the streams were measured (no "streams"), another CPU model's record (a
    # cache baked elsewhere) and an unreadable file leave the defaults.
    older = {name: value for name, value in record.items() if name not in ("streams", "in_force_streams")}
    (cache / tuning.TUNING_FILE).write_text(json.dumps({key: older}))
    unmeasured = state(cache)
    assert (unmeasured["bytes"], unmeasured["streams"]) == (before["bytes"], before["streams"])
    (cache / tuning.TUNING_FILE).write_text(json.dumps({key.replace(before["cpu"], "OtherVendor family 1 model 2"):
                                                        record}))
    assert state(cache)["bytes"] == before["bytes"]
    (cache / tuning.TUNING_FILE).write_text("{not json")
    assert state(cache)["bytes"] == before["bytes"]


def test_choose_keeps_the_prefetch_in_force_unless_another_is_clearly_faster():
    l1_6, l1_12, l2_12 = ("l1", 6, 1), ("l1", 12, 1), ("l2", 12, 4)
    assert tuning.choose({l1_6: 10.0, l1_12: 10.2, l2_12: 9.0}, l1_6) == l1_6  # 2%: within noise
    assert tuning.choose({l1_6: 10.0, l1_12: 10.2, l2_12: 10.4}, l1_6) == l2_12
    assert tuning.choose({l1_6: 10.0, l1_12: 8.0}, l1_12) == l1_6
    assert tuning.choose({l1_6: 10.0, l2_12: 11.0}, l2_12) == l2_12


def test_tune_names_a_backend_that_measures_nothing_and_refuses_an_unknown_one(cache):
    quiet = cli_json("tune", "xpu", TORCHPLUG_CACHE=str(cache))["results"]
    assert quiet == [{"backend": "xpu", "setting": "-", "value": "-", "detail": "nothing to measure"}]
    unknown = run_cli("tune", "cpuu", TORCHPLUG_CACHE=str(cache))
    assert unknown.returncode == 2 and "cpuu" in unknown.stderr and "cpu" in unknown.stderr
    refused = run_cli("tune", "cpu", "--json", TORCHPLUG_CACHE=str(cache), TORCHPLUG_CPU_PREFETCH_LEVEL="l3")
    report = json.loads(refused.stdout)
    assert refused.returncode == 1 and not report["ok"] and "Traceback" not in refused.stderr
    assert report["results"][0]["value"] == "FAILED"
    assert "TORCHPLUG_CPU_PREFETCH_LEVEL='l3' is not one of l1, l2" in report["results"][0]["detail"]
    assert not (cache / tuning.TUNING_FILE).exists()  # nothing was measured or recorded


def test_every_prefetch_and_stream_setting_gives_the_same_bits():
    """A prefetch moves no data the sums read, and each column's sums run in the same order however
    many streams are read at once: every level, distance and stream count the tuner tries gives the
    default's results bit for bit, on fp16, int8 and int4 weights, on one row, two and three (which
    take fewer streams than asked where their sums fill the registers), with columns left over
    after the streams' equal parts."""
    import torch

    ext = kernels.load()
    before = kernels.gemv_prefetch()
    gen = torch.Generator().manual_seed(0)
    n, k = 272, 4096  # int4: 4 full blocks of 64 columns and a narrower one; 272 / 4 columns per stream
    w16 = torch.randn(n, k, generator=gen).half()
    w8, s8 = torch.randint(-128, 128, (n, k), dtype=torch.int8, generator=gen), torch.rand(n, generator=gen).half()
    w4 = torch.ops.aten._convert_weight_to_int4pack_for_cpu(torch.randint(0, 16, (n, k), dtype=torch.int32,
                                                                          generator=gen), 1)
    sz = torch.rand(k // 128, n, 2, generator=gen).half()

    def products():
        return [f(x) for x in (torch.randn(1, k, generator=torch.Generator().manual_seed(1)).half(),
                               torch.randn(2, k, generator=torch.Generator().manual_seed(3)).half(),
                               torch.randn(3, k, generator=torch.Generator().manual_seed(2)).half())
                for f in (lambda x: torch.nn.functional.linear(x, w16),
                          lambda x: torch.ops.aten._weight_int8pack_mm(x, w8, s8),
                          lambda x: torch.ops.aten._weight_int4pack_mm_for_cpu(x, w4, 128, sz))]

    isa = ext.current_isa()
    try:
        for path in [p for p in ext.supported_isas() if p != kernels.TEST_PATH]:
            kernels.select_isa(path)
            calls = ext.quant_mm_calls()
            reference = products()
            assert ext.quant_mm_calls() == calls + 6  # torchplug's kernels ran, not torch's
            for level in tuning.LEVELS:
                for kb in (0, 1, 24):
                    for streams in tuning.STREAMS:
                        kernels.apply_prefetch(kb, level, streams)
                        assert (ext.gemv_prefetch_level(), ext.gemv_streams()) == (prefetch.PREFETCH_LEVELS[level],
                                                                                   streams)
                        for got, want in zip(products(), reference):
                            assert torch.equal(got, want), (path, level, kb, streams)
        with pytest.raises(ValueError, match="prefetch level is 1 .L1. or 2 .L2., not 3"):
            ext.set_gemv_prefetch_level(3)
        with pytest.raises(ValueError, match="weight streams are 1, 2 or 4, not 3"):
            ext.set_gemv_streams(3)
    finally:
        kernels.select_isa(isa)
        kernels.apply_prefetch(before.kb, before.level, before.streams)
