"""The device-runtime contract's kit (torchplug.entrypoints.device_runtime_kit) on every runtime torchplug has:
the example device's runtime.c (memory the host cannot read), emulation's host-memory tables, and broken
copies of runtime.c that the kit must reject naming the entry at fault (issue #31)."""

import json

import pytest
from conftest import REPO, run_process, run_python

EXAMPLE_RUNTIME = REPO / "docs" / "example-device" / "torchplug_example_device" / "runtime.c"


def _build(tmp_path, source: str):
    from torchplug.entrypoints.device_runtime import include_dir, load_runtime

    path = tmp_path / "runtime.c"
    path.write_text(source)
    library = tmp_path / "libruntime.so"
    run_process(["gcc", "-shared", "-fPIC", "-O1", f"-I{include_dir()}", path, "-o", library])
    return load_runtime(f"kit-{tmp_path.name}", library)


_REFUSAL = ('  if (!valid_device(device)) return fail(TORCHPLUG_ERROR_INVALID_DEVICE, "invalid device ordinal %d (%d devices)", '
            'device, DEVICE_COUNT);')


def _example_with(old: str, new: str) -> str:
    source = EXAMPLE_RUNTIME.read_text()
    assert source.count(old) == 1, f"runtime.c no longer contains {old!r} once: update the broken copy"
    return source.replace(old, new)


def test_the_example_device_runtime_meets_the_contract(tmp_path):
    from torchplug.entrypoints.device_runtime_kit import CHECKS, assert_conforms

    findings = assert_conforms(_build(tmp_path, EXAMPLE_RUNTIME.read_text()))
    assert [f.check for f in findings] == list(CHECKS) and all(f.passed for f in findings)
    assert "the kernel ran once" in findings[-1].detail  # the example offers launch_host


@pytest.mark.parametrize("old, new, entry", [
    # a copy that drops the last byte
    ("memmove(destination, source, nbytes);", "memmove(destination, source, nbytes - 1);", "memcpy"),
    # failures that do not say why
    ("vsnprintf(error, sizeof(error), format, args);", "(void)format;", "last_error"),
    # a refused device index that still becomes the current device
    (_REFUSAL + "\n  current = device;", "  current = device;\n" + _REFUSAL, "set_device"),
    # one error text for every thread
    ("static __thread char error[512]", "static char error[512]", "last_error"),
], ids=["memcpy drops a byte", "empty last_error", "set_device keeps a refused index", "last_error not per thread"])
def test_the_kit_rejects_a_broken_runtime_naming_the_entry(tmp_path, old, new, entry):
    from torchplug.entrypoints.device_runtime_kit import ContractViolation, assert_conforms

    with pytest.raises(ContractViolation, match=rf"(?m)^  {entry} \(") as raised:
        assert_conforms(_build(tmp_path, _example_with(old, new)))
    assert "torchplug example device runtime 0.1" in str(raised.value)


_EMULATED = """
    import ctypes, json, torch
    from torchplug.emulation.runtime import host_runtime
    from torchplug.entrypoints.device_runtime import DeviceProperties, MemcpyKind, Status
    from torchplug.entrypoints.device_runtime_kit import assert_conforms

    torch.empty(1, device="{device}")  # the first use configures the emulated runtime
    runtime = host_runtime("{device}")
    table = runtime.table.contents
    out = {{"name": runtime.name, "findings": [[f.check, f.passed, f.detail] for f in assert_conforms(runtime)]}}
"""


@pytest.mark.parametrize("device", ["cuda", "xpu"])
def test_emulations_host_runtime_meets_the_contract_and_reports_what_torch_reports(device):
    out = json.loads(run_python(_EMULATED.format(device=device) + """
    props = DeviceProperties()
    assert table.get_device_properties(1, ctypes.byref(props)) == Status.SUCCESS
    theirs = getattr(torch, "{device}").get_device_properties(1)
    out["properties"] = [[props.name.decode(), theirs.name], [props.total_memory, theirs.total_memory],
                         [props.multi_processor_count, theirs.multi_processor_count], [props.warp_size, theirs.warp_size]]
    # torch's current device and new streams are the table's: the guard calls it, it keeps no copy
    assert table.set_device(1) == Status.SUCCESS
    out["current"] = [getattr(torch, "{device}").current_device(), torch.empty(1, device="{device}").device.index]
    created = ctypes.c_void_p()
    assert table.stream_create(ctypes.byref(created), 0) == Status.SUCCESS
    out["streams"] = [created.value, getattr(torch, "{device}").Stream().stream_id]
    print(json.dumps(out))
    """.format(device=device), TORCHPLUG_EMULATE=device, TORCHPLUG_EMULATE_DEVICES="2").stdout.splitlines()[-1])
    assert out["name"] == f"torchplug emulation (host memory) as {device}"
    assert all(passed for _, passed, _ in out["findings"]), out["findings"]
    assert "2 device(s)" in out["findings"][0][2]
    for ours, torchs in out["properties"]:
        assert ours == torchs
    assert out["current"] == [1, 1]
    assert out["streams"][1] == out["streams"][0] + 1


def test_emulations_table_is_the_memory_torch_allocates_and_counts():
    # Memory from the table is charged as torch's tensors are, OOM is torch's message, and a memset through the
    # table lands in a tensor's storage: the table is emulation's implementation, not a copy beside it.
    out = json.loads(run_python(_EMULATED.format(device="cuda") + """
    base, blocks = torch.cuda.memory_allocated(), torch.cuda.memory_stats()["allocation.all.current"]
    pointer = ctypes.c_void_p()
    assert table.malloc(0, 1 << 20, ctypes.byref(pointer)) == Status.SUCCESS
    out["charged"] = torch.cuda.memory_allocated() - base
    out["blocks"] = torch.cuda.memory_stats()["allocation.all.current"] - blocks
    assert table.free(0, pointer) == Status.SUCCESS
    out["after_free"] = torch.cuda.memory_allocated() - base
    out["oom_status"] = table.malloc(0, 1 << 40, ctypes.byref(pointer))
    out["oom_error"] = table.last_error().decode()
    try:
        torch.empty(1 << 40, dtype=torch.uint8, device="cuda")
    except torch.OutOfMemoryError as err:
        out["torch_oom"] = str(err)
    out["num_ooms"] = torch.cuda.memory_stats()["num_ooms"]
    x = torch.zeros(16, dtype=torch.uint8, device="cuda")
    assert table.memset(ctypes.c_void_p(x.data_ptr()), 7, 16) == Status.SUCCESS
    out["memset"] = x.tolist()
    print(json.dumps(out))
    """, TORCHPLUG_EMULATE="cuda", TORCHPLUG_EMULATE_MEMORY="64MiB").stdout.splitlines()[-1])
    assert all(passed for _, passed, _ in out["findings"]), out["findings"]
    assert out["charged"] == 1 << 20 and out["after_free"] == 0 and out["blocks"] == 1
    assert out["oom_status"] == 2  # TORCHPLUG_ERROR_OUT_OF_MEMORY
    assert out["oom_error"].startswith("torchplug emulated cuda:0 is out of memory: tried to allocate 1.00 TiB with 0.00 B already allocated")
    assert out["torch_oom"].split(" with ")[0] == out["oom_error"].split(" with ")[0]
    assert out["num_ooms"] == 2
    assert out["memset"] == [7] * 16
