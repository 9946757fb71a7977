"""Runtime checks beside the op matrix: memory, OOM, streams, RNG, serialization, copies, threads."""

import io
import threading
import time
from collections.abc import Callable
from typing import Any

import torch

from ..target import Target


class NotApplicable(Exception):
    """The check has nothing to check on this backend (the reason says why)."""


def _module(target: Target) -> Any:
    return getattr(torch, target.device.type)


def memory_returns_to_baseline(target: Target) -> str:
    module = _module(target)
    if not hasattr(module, "memory_allocated"):
        raise NotApplicable(f"torch.{target.device.type} has no memory_allocated()")
    def work() -> tuple[torch.Tensor, ...]:
        x = torch.randn(256, 256, device=target.device)
        return x, (x @ x).softmax(-1).sum(0)

    work()  # the first matmul allocates the BLAS library's workspace, which stays (cuBLAS: 32 MiB)
    module.synchronize()
    baseline = module.memory_allocated()
    alive = work()
    during = module.memory_allocated()
    del alive
    module.synchronize()
    after = module.memory_allocated()
    assert during > baseline, f"memory_allocated() did not grow while tensors lived ({baseline} -> {during})"
    assert after == baseline, f"memory_allocated() is {after} after freeing everything, baseline {baseline}"
    return f"baseline {baseline} B, {during} B while alive, back to {after} B"


def oom_is_recoverable(target: Target) -> str:
    module = _module(target)
    if not hasattr(module, "mem_get_info"):
        raise NotApplicable(f"torch.{target.device.type} has no mem_get_info(): no capacity to exceed")
    capacity = module.mem_get_info(target.device)[1]
    baseline = module.memory_allocated()
    try:
        torch.empty(capacity + 1, dtype=torch.uint8, device=target.device)
    except torch.OutOfMemoryError:
        pass
    else:
        raise AssertionError(f"allocating {capacity + 1} B on a {capacity} B device did not raise OutOfMemoryError")
    assert module.memory_allocated() == baseline, "the failed allocation left memory charged"
    assert float(torch.ones(16, device=target.device).sum()) == 16.0, "the device does not work after the OOM"
    return f"OutOfMemoryError past {capacity} B, nothing left charged, the device still works"


def streams_and_events(target: Target) -> str:
    module = _module(target)
    if target.device.type == "cpu":
        raise NotApplicable("CPU work is synchronous: torch.cpu has no timing events")
    if not hasattr(module, "Stream"):
        raise NotApplicable(f"torch.{target.device.type} has no Stream")
    stream = module.Stream()
    start, end = module.Event(enable_timing=True), module.Event(enable_timing=True)
    with module.stream(stream):
        start.record()
        x = torch.arange(1024, dtype=torch.float32, device=target.device) * 2
        end.record()
    end.synchronize()
    stream.synchronize()
    assert end.query(), "an event recorded and synchronized does not report complete"
    assert start.elapsed_time(end) >= 0, "elapsed_time() is negative"
    assert float(x.sum()) == 1023 * 1024, "work issued on a side stream gave a wrong result"
    return "side stream, recorded events, elapsed_time"


def manual_seed_reproduces(target: Target) -> str:
    draws = []
    for _ in range(2):
        torch.manual_seed(1234)
        draws.append(torch.cat([torch.randn(64, device=target.device), torch.rand(64, device=target.device)]).cpu())
    assert torch.equal(*draws), "torch.manual_seed(1234) twice gave different random numbers"
    torch.manual_seed(4321)
    assert not torch.equal(draws[0], torch.randn(128, device=target.device).cpu()), "another seed repeats them"
    return "randn/rand repeat under the same seed and differ under another"


def save_load_map_location(target: Target) -> str:
    x = torch.randn(8, 8, device=target.device)
    buffer = io.BytesIO()
    torch.save({"x": x}, buffer)
    for location in ("cpu", str(target.device)):
        buffer.seek(0)
        loaded = torch.load(buffer, map_location=location)["x"]
        assert loaded.device.type == torch.device(location).type, f"map_location={location!r} gave {loaded.device}"
        assert torch.equal(loaded.cpu(), x.cpu()), f"values changed through save/load(map_location={location!r})"
    return "torch.save, torch.load to cpu and to the device"


def copies_across_devices_and_dtypes(target: Target) -> str:
    source = torch.randn(33, 17) * 100
    checked = 0
    dtypes = [d for d in (torch.float32, torch.float16, torch.bfloat16, torch.int64, torch.int32, torch.bool,
                          torch.float64) if d in target.dtypes]  # what the backend supports
    conversions = [d for d in (torch.float32, torch.float64, torch.int64) if d in target.dtypes]
    for dtype in dtypes:
        host = source.to(dtype)
        on_device = host.to(target.device)
        assert torch.equal(on_device.cpu(), host), f"cpu -> {target.device} -> cpu changed {dtype} values"
        for other in conversions:
            assert torch.equal(on_device.to(other).cpu(), host.to(other)), f"{dtype} -> {other} on the device"
            checked += 1
        strided = on_device.t()[::2]
        assert torch.equal(strided.contiguous().cpu(), host.t()[::2]), f"strided {dtype} copy"
    pinned_like = source.to(target.device, non_blocking=True)
    _module(target).synchronize()
    assert torch.equal(pinned_like.cpu(), source), "non_blocking copy"
    return f"{checked} dtype conversions, strided and non_blocking copies"


def mixed_device_error(target: Target) -> str:
    if target.device.type == "cpu":
        raise NotApplicable("the CPU is the only device of this backend")
    x, y = torch.ones(4, device=target.device), torch.ones(4)
    try:
        x + y
    except RuntimeError as err:
        assert "device" in str(err), f"the error does not mention devices: {err}"
        return f"raises: {str(err).splitlines()[0][:120]}"
    raise AssertionError(f"adding a {target.device} tensor and a 4-element CPU tensor did not raise")


def threads_on_one_device(target: Target) -> str:
    errors: list[str] = []
    a = torch.randn(64, 64)
    expected = a @ a

    def work() -> None:
        try:
            for _ in range(10):
                x = a.to(target.device)
                got = (x @ x).cpu()
                if not torch.allclose(got, expected, rtol=1e-4, atol=1e-4):
                    errors.append("a thread's matmul differs from the CPU's")
        except Exception as err:
            errors.append(f"{type(err).__name__}: {err}")

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors[0]
    return "4 threads x 10 matmuls"


def device_runtime_contract(target: Target) -> str:
    """The device-runtime contract kit (entrypoints/device_runtime_kit.py) on the table the device runs on:
    its plugin's own runtime library, or emulation's host-memory runtime."""
    from ...emulation.runtime import emulated_devices, host_runtime
    from ...entrypoints import backend as find_backend
    from ...entrypoints.device_runtime import RuntimeBackend
    from ...entrypoints.device_runtime_kit import assert_conforms

    backend = find_backend(target.backend)
    if target.device.type in emulated_devices():
        runtime = host_runtime(target.device.type)
    elif isinstance(backend, RuntimeBackend):
        runtime = backend.runtime()
    else:
        raise NotApplicable(f"{target.device.type} runs on torch's own runtime, not a device-runtime table")
    findings = assert_conforms(runtime)
    return f"{runtime.name}: {len(findings)} contract checks"


CHECKS: dict[str, Callable[[Target], str]] = {
    "device_runtime_contract": device_runtime_contract,
    "memory_returns_to_baseline": memory_returns_to_baseline,
    "oom_is_recoverable": oom_is_recoverable,
    "streams_and_events": streams_and_events,
    "manual_seed_reproduces": manual_seed_reproduces,
    "save_load_map_location": save_load_map_location,
    "copies_across_devices_and_dtypes": copies_across_devices_and_dtypes,
    "mixed_device_error": mixed_device_error,
    "threads_on_one_device": threads_on_one_device,
}


def run_check(name: str, target: Target) -> dict[str, Any]:
    start = time.perf_counter()
    try:
        status, detail = "pass", CHECKS[name](target)
    except NotApplicable as why:
        status, detail = "unsupported", str(why)
    except Exception as err:
        status, detail = "fail", f"{type(err).__name__}: {str(err).splitlines()[0][:300] if str(err) else ''}"
    return {"name": name, "status": status, "detail": detail, "time_s": round(time.perf_counter() - start, 4)}
