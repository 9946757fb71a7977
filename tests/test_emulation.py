"""The emulated runtime with xpu, mps and cuda in one process, two devices each.

One child process runs every check below (each named, each recording its value or its error),
so the runtime is loaded once; the tests assert on those records.
"""

import pytest

from emulation_helpers import CHECKS, error, run_json, value

SETTINGS = {
    "TORCHPLUG_EMULATE": "xpu,mps,cuda",
    "TORCHPLUG_EMULATE_DEVICES": "2",
    "TORCHPLUG_EMULATE_MEMORY": "64M",
}

SESSION = CHECKS + r'''
import io, threading, time
import torch
import torchplug.entrypoints as ep

MiB = 1 << 20

def names():
    return {t: [getattr(torch, t).is_available(), getattr(torch, t).device_count(), getattr(torch, t).get_device_name()]
            for t in ("xpu", "mps", "cuda")}
check("names", names)

def three_types():
    out = {}
    ref = torch.arange(12, dtype=torch.float32).view(3, 4)
    for t in ("xpu", "mps", "cuda"):
        x = ref.to(t)
        y = (x @ x.T).softmax(-1) * 2 - x.sum()
        out[t] = [str(y.device), torch.allclose(y.cpu(), (ref @ ref.T).softmax(-1) * 2 - ref.sum())]
    return out
check("three_types", three_types)
check("accelerator_default", lambda: str(torch.accelerator.current_accelerator()))

def status():
    return {n: ep.backend(n).status().mode for n in ("xpu", "mps", "cuda", "cpu")}
check("status", status)

def memory():
    before = torch.xpu.memory_allocated(1)
    torch.xpu.reset_peak_memory_stats(1)
    block = torch.empty(MiB, dtype=torch.uint8, device="xpu:1")
    during = torch.xpu.memory_allocated(1)
    peak = torch.xpu.max_memory_allocated(1)
    del block
    stats = torch.xpu.memory_stats(1)
    return [during - before, peak - before, torch.xpu.memory_allocated(1) - before,
            stats["allocation.all.current"] >= 0, "capacity" in stats, torch.xpu.mem_get_info(1)[1]]
check("memory", memory)

def oom():
    base = torch.xpu.memory_allocated(0)
    ooms = torch.xpu.memory_stats(0)["num_ooms"]
    try:
        torch.empty(100 * MiB, dtype=torch.uint8, device="xpu")
        raised = None
    except torch.OutOfMemoryError as err:
        raised = str(err)
    after = torch.xpu.memory_allocated(0)
    value = (torch.ones(8, device="xpu") * 3).sum().item()
    return [raised, after - base, value, torch.xpu.memory_stats(0)["num_ooms"] - ooms]
check("oom", oom)

def oom_in_kernel():
    a = torch.ones(5 * MiB, dtype=torch.float32, device="xpu")  # 20 MiB
    base = torch.xpu.memory_allocated(0)
    try:
        torch.cat([a, a, a])  # a 60 MiB result inside the CPU kernel: past the 64 MiB capacity
        raised = None
    except torch.OutOfMemoryError as err:
        raised = type(err).__name__
    after = torch.xpu.memory_allocated(0)
    del a
    return [raised, after - base, (torch.ones(4, device="xpu") + 1).sum().item()]
check("oom_in_kernel", oom_in_kernel)

def devices():
    torch.xpu.set_device(1)
    made = str(torch.empty(2, device="xpu").device)
    current = torch.xpu.current_device()
    with torch.xpu.device(0):
        inner = [torch.xpu.current_device(), str(torch.zeros(1, device="xpu").device)]
    restored = torch.xpu.current_device()
    torch.xpu.set_device(0)
    return [made, current, inner, restored]
check("devices", devices)
check("out_of_range_tensor", lambda: torch.empty(1, device="xpu:7"))
check("out_of_range_set_device", lambda: torch.xpu.set_device(7))
check("out_of_range_copy", lambda: torch.ones(2).to("cuda:5"))
check("out_of_range_module", lambda: torch.mps.memory_allocated(3))

def streams():
    s = torch.xpu.Stream(device=1)
    start, end = torch.xpu.Event(enable_timing=True), torch.xpu.Event(enable_timing=True)
    with torch.xpu.stream(s):
        inside = torch.xpu.current_stream(1) == s
        start.record(s)
        time.sleep(0.05)
        (torch.ones(64, 64, device="xpu:1") @ torch.ones(64, 64, device="xpu:1")).sum()
        end.record(s)
    end.synchronize()
    s.synchronize()
    torch.xpu.synchronize()
    generic = torch.Event(device="xpu:1", enable_timing=True)
    generic.record(s)
    return [inside, torch.xpu.current_stream(1) == s, s.query(), end.query(), start.elapsed_time(end),
            torch.xpu.default_stream(0).stream_id, generic.query(), isinstance(s, torch.Stream),
            isinstance(start, torch.Event)]
check("streams", streams)

def untimed():
    a, b = torch.cuda.Event(), torch.cuda.Event()
    a.record(); b.record()
    return a.elapsed_time(b)
check("event_without_timing", untimed)

def copies():
    ref = torch.arange(24, dtype=torch.float32).view(4, 6)
    x = ref.to("xpu")
    results = {
        "h2d": [str(x.device), torch.equal(x.cpu(), ref)],
        "d2d_index": torch.equal(x.to("xpu:1").cpu(), ref),
        "d2d_type": torch.equal(x.to("mps").to("cuda:1").cpu(), ref),
        "strided": torch.equal(x.t()[::2, 1:].to("xpu:1").cpu(), ref.t()[::2, 1:]),
        "strided_keeps": x.t().to("xpu:1").stride() == ref.t().stride(),
        "into_view": None,
        "dtype": [torch.equal(x.to(torch.int32).cpu(), ref.to(torch.int32)),
                  torch.equal(x.to("cuda", torch.float16).cpu(), ref.to(torch.float16)),
                  str(ref.to("mps", torch.int64).dtype)],
        "non_blocking": [torch.equal(ref.to("xpu", non_blocking=True).cpu(), ref),
                         torch.equal(x.to("cpu", non_blocking=True), ref),
                         torch.equal(x.to("cuda", non_blocking=True).to("cpu", non_blocking=True), ref)],
        "copy_": None,
    }
    target = torch.zeros(6, 4, device="xpu:1")
    target[::2].copy_(x.t()[::2])
    expected = torch.zeros(6, 4); expected[::2] = ref.t()[::2]
    results["into_view"] = torch.equal(target.cpu(), expected)
    host = torch.empty(4, 6, dtype=torch.float64)
    host.copy_(x)
    results["copy_"] = torch.equal(host, ref.double())
    return results
check("copies", copies)

def zero_copy():
    x = torch.zeros(4, 4, device="xpu")
    ptr = x.data_ptr()
    view = x.view(16)[2:10]
    view.fill_(5)  # writes through a view of a view
    x.add_(1)
    out = torch.empty(4, 4, device="xpu")
    out_ptr = out.data_ptr()
    torch.add(x, x, out=out)
    stats = torch.xpu.memory_stats(0)["allocation.all.allocated"]
    y = x + x
    allocations = torch.xpu.memory_stats(0)["allocation.all.allocated"] - stats
    return [view.data_ptr() == ptr + 8, x.data_ptr() == ptr, out.data_ptr() == out_ptr,
            x.cpu().flatten().tolist()[:3], allocations, str(y.device), view._base is x]
check("zero_copy", zero_copy)

def t_():
    x = torch.arange(6., device="xpu").view(2, 3)
    x.t_()
    e = torch.empty(0, device="xpu")
    e.resize_(5).fill_(2)
    return [list(x.shape), list(x.stride()), x.cpu().tolist(), e.cpu().tolist()]
check("metadata_in_place", t_)

x = torch.ones(3, 3, device="xpu")
check("mixed_cpu", lambda: x + torch.ones(3, 3))
check("mixed_index", lambda: x + torch.ones(3, 3, device="xpu:1"))
check("mixed_type", lambda: x @ torch.ones(3, 3, device="mps"))
check("mixed_out", lambda: torch.add(x, x, out=torch.empty(3, 3)))
check("cpu_scalar_ok", lambda: (x * torch.tensor(2.0)).sum().item())
check("cpu_indices_ok", lambda: x[torch.tensor([0, 2])].shape[0])

def autograd():
    out = {}
    # Alternating device types: each backward makes its device type torch's accelerator.
    for dev in ("xpu", "cuda:1", "xpu:1", "mps", "cuda"):
        ref = torch.randn(4, 4)
        w = ref.clone().to(dev).requires_grad_()
        loss = (w @ w).tanh().sum() + torch.nn.functional.dropout(w, 0.0).pow(2).mean()
        loss.backward()
        c = ref.clone().requires_grad_()
        ((c @ c).tanh().sum() + c.pow(2).mean()).backward()
        (g,) = torch.autograd.grad((w * 3).sum(), w)
        out[dev] = [str(w.grad.device), torch.allclose(w.grad.cpu(), c.grad, atol=1e-5),
                    torch.equal(g.cpu(), torch.full((4, 4), 3.0))]
    return out
check("autograd", autograd)

def module_training():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1)).to("mps")
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    data, target = torch.randn(32, 8, device="mps"), torch.randn(32, 1, device="mps")
    losses = []
    for _ in range(20):
        opt.zero_grad()
        loss = torch.nn.functional.mse_loss(model(data), target)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return [losses[-1] < losses[0], str(next(model.parameters()).device)]
check("module_training", module_training)

def gradient_kinds():
    x = torch.randn(2, 6, 5)
    def grads(device):
        t = x.to(device).requires_grad_()
        outputs = [torch.sgn(t).sum(),  # an efficient zero tensor as gradient
                   torch.nn.functional.group_norm(t, 3).sum(),  # a stride-0 gradient
                   torch.nn.functional.scaled_dot_product_attention(t, t, t, is_causal=True).pow(2).sum(),
                   torch.nn.functional.conv1d(t, torch.ones(4, 6, 3, device=device)).pow(2).sum()]
        return [torch.autograd.grad(o, t)[0].cpu() for o in outputs]
    return [torch.allclose(a, b, atol=1e-4) for a, b in zip(grads("cpu"), grads("xpu:1"))]
check("gradient_kinds", gradient_kinds)

def generators():
    g = torch.Generator(device="cuda:1").manual_seed(5)
    a = torch.randn(4, device="cuda:1", generator=g).cpu()
    b = torch.randn(4, generator=torch.Generator().manual_seed(5))
    x = torch.Generator(device="xpu")
    x.set_state(g.get_state())
    return [str(g.device), str(x.device), torch.equal(a, b),
            torch.equal(torch.rand(3, device="xpu", generator=x).cpu(), torch.rand(3, device="cuda:1", generator=g).cpu())]
check("generators", generators)

def mps_storage():  # FSDP2 frees and regrows storages; a CPU build refuses mps storages itself
    s = torch.UntypedStorage([1, 2, 3, 4], device="mps")
    s.resize_(2)
    kept = s.tolist()
    s.resize_(0)
    return [str(s.device), kept, s.nbytes()]
check("mps_storage", mps_storage)

def rng():
    torch.xpu.manual_seed(7); a = torch.randn(6, device="xpu").cpu()
    torch.rand(100)  # the CPU's generator is independent of the device's
    torch.xpu.manual_seed(7); b = torch.randn(6, device="xpu").cpu()
    torch.xpu.manual_seed(8); c = torch.randn(6, device="xpu").cpu()
    state = torch.xpu.get_rng_state()
    d = torch.rand(4, device="xpu").cpu()
    torch.xpu.set_rng_state(state)
    e = torch.rand(4, device="xpu").cpu()
    torch.xpu.manual_seed_all(3)
    f = [torch.randn(3, device=f"xpu:{i}").cpu() for i in (0, 1)]
    torch.cuda.manual_seed(4); g = torch.nn.functional.dropout(torch.ones(256, device="cuda"), 0.5).cpu()
    torch.cuda.manual_seed(4); h = torch.nn.functional.dropout(torch.ones(256, device="cuda"), 0.5).cpu()
    return [torch.equal(a, b), torch.equal(a, c), torch.equal(d, e), torch.equal(f[0], f[1]),
            torch.equal(g, h), torch.xpu.initial_seed(), state.dtype == torch.uint8]
check("rng", rng)

def save_load():
    x = torch.arange(12., device="xpu:1").view(3, 4)
    payload = {"x": x, "view": x.t()[1:], "mps": torch.ones(2, device="mps"), "cuda": torch.arange(3, device="cuda")}
    buf = io.BytesIO(); torch.save(payload, buf)
    def load(**kw):
        buf.seek(0)
        return torch.load(buf, **kw)
    same, on_cpu, moved = load(), load(map_location="cpu"), load(map_location="cuda:0")
    return {
        "same": [str(v.device) for v in same.values()],
        "values": torch.equal(same["view"].cpu(), x.cpu().t()[1:]),
        "shares": same["view"].untyped_storage().data_ptr() == same["x"].untyped_storage().data_ptr(),
        "cpu": [str(v.device) for v in on_cpu.values()],
        "moved": [str(v.device) for v in moved.values()],
        "moved_values": torch.equal(moved["x"].cpu(), x.cpu()),
    }
check("save_load", save_load)

def mps_float64():
    return torch.zeros(2, device="mps", dtype=torch.float64)
check("mps_float64_factory", mps_float64)
check("mps_float64_to", lambda: torch.ones(2, dtype=torch.float64).to("mps"))
check("mps_float64_cast", lambda: torch.ones(2, device="mps").double())
check("mps_complex128", lambda: torch.ones(2, device="mps", dtype=torch.complex128))
check("mps_ok_dtypes", lambda: [str(torch.ones(2, device="mps", dtype=d).dtype)
                                for d in (torch.float32, torch.float16, torch.int64, torch.bool)])
check("xpu_float64_ok", lambda: torch.ones(2, device="xpu", dtype=torch.float64).sum().item())
check("mps_float64_to_cpu_ok", lambda: str(torch.ones(2, device="mps").to("cpu", torch.float64).dtype))

def threads():
    base = torch.xpu.memory_allocated(0)
    shared = torch.arange(1000, dtype=torch.float32, device="xpu")
    errors, results = [], {}
    def work(k):
        try:
            total = 0.0
            for _ in range(300):
                a = torch.full((128,), float(k), device="xpu")
                total += (a * 2 + shared[:128]).sum().item()
            results[k] = total
        except BaseException as err:
            errors.append(repr(err))
    workers = [threading.Thread(target=work, args=(k,)) for k in range(4)]
    [w.start() for w in workers]; [w.join() for w in workers]
    expected = {k: 300 * (128 * 2 * k + sum(range(128))) for k in range(4)}
    del shared
    return [errors, results == expected, torch.xpu.memory_allocated(0) - base]
check("threads", threads)

def leaks():
    base = [torch.xpu.memory_allocated(0), torch.cuda.memory_allocated(0)]
    for _ in range(100_000):
        t = torch.empty(16, device="xpu")
    del t
    for _ in range(10_000):
        u = torch.ones(8, device="cuda") + 1
    del u
    return [torch.xpu.memory_allocated(0) - base[0], torch.cuda.memory_allocated(0) - base[1]]
check("leaks", leaks)

def backend_kernel():
    calls = []
    lib = torch.library.Library("aten", "IMPL")
    def neg(x):
        calls.append(x.device.type)
        return torch.full_like(x, 42.0)
    lib.impl("neg", neg, "XPU")
    value = torch.neg(torch.ones(2, device="xpu")).cpu().tolist()
    other = torch.neg(torch.ones(2, device="mps")).cpu().tolist()
    lib._destroy()
    return [value, calls, other]
check("backend_kernel", backend_kernel)

def misc():
    x = torch.tensor([[1.5, -2.0], [3.0, 4.0]], device="cuda")
    return [repr(x), x.tolist(), x.max().item(), torch.cuda.is_initialized(),
            x.nonzero().tolist(), torch.unique(x).tolist(),
            torch.nn.functional.conv2d(torch.ones(1, 1, 4, 4, device="xpu"),
                                       torch.ones(1, 1, 3, 3, device="xpu")).sum().item(),
            torch.nn.functional.scaled_dot_product_attention(*(torch.ones(1, 2, 3, 4, device="mps"),) * 3).sum().item()]
check("misc", misc)

print(json.dumps(RESULTS, default=str))
'''


@pytest.fixture(scope="module")
def session():
    return run_json(SESSION, **SETTINGS)


def test_device_modules_name_the_emulation(session):
    for device_type, (available, count, name) in value(session, "names").items():
        assert available is True and count == 2, device_type
        assert "emulated" in name, name
    assert "AMD" not in value(session, "names")["cuda"][2]


def test_three_device_types_in_one_process(session):
    results = value(session, "three_types")
    assert results == {t: [f"{t}:0", True] for t in ("xpu", "mps", "cuda")}


def test_torchplug_list_reports_emulated(session):
    assert value(session, "status") == {"xpu": "emulated", "mps": "emulated", "cuda": "emulated", "cpu": "native"}


def test_memory_statistics(session):
    delta, peak, after, _, extra_key, total = value(session, "memory")
    assert delta == 1 << 20 and peak == 1 << 20 and after == 0
    assert total == 64 << 20 and not extra_key, "memory_stats() holds only the keys a GPU's allocator reports"


def test_out_of_memory_raises_and_the_process_keeps_working(session):
    message, leaked, result, ooms = value(session, "oom")
    assert message is not None, "allocating past TORCHPLUG_EMULATE_MEMORY did not raise"
    for part in ("xpu:0", "100.00 MiB", "64.00 MiB", "TORCHPLUG_EMULATE_MEMORY"):
        assert part in message, (part, message)
    assert leaked == 0 and result == 24.0 and ooms == 1


def test_out_of_memory_inside_a_kernel_releases_what_it_took(session):
    raised, leaked, result = value(session, "oom_in_kernel")
    assert raised == "OutOfMemoryError" and leaked == 0 and result == 8.0


def test_device_index_guard_and_current_device(session):
    made, current, inner, restored = value(session, "devices")
    assert made == "xpu:1" and current == 1
    assert inner == [0, "xpu:0"] and restored == 1


@pytest.mark.parametrize(
    "name", ["out_of_range_tensor", "out_of_range_set_device", "out_of_range_copy", "out_of_range_module"]
)
def test_out_of_range_device_index(session, name):
    kind, message = error(session, name)
    assert kind == "RuntimeError" and "invalid device ordinal" in message, message
    assert "TORCHPLUG_EMULATE_DEVICES" in message


def test_streams_and_events(session):
    inside, after, idle, done, elapsed, default_id, generic, is_stream, is_event = value(session, "streams")
    assert inside and not after, "the stream context must make the stream current and restore it"
    assert idle and done and generic and is_stream and is_event
    assert elapsed >= 40.0, f"elapsed_time {elapsed} ms does not cover a 50 ms sleep"
    assert default_id == 0


def test_elapsed_time_needs_timing_events(session):
    kind, message = error(session, "event_without_timing")
    assert "enable_timing" in message, (kind, message)


def test_copies(session):
    results = value(session, "copies")
    assert results["h2d"] == ["xpu:0", True]
    for key in ("d2d_index", "d2d_type", "strided", "strided_keeps", "into_view", "copy_"):
        assert results[key] is True, key
    assert results["dtype"] == [True, True, "torch.int64"]
    assert results["non_blocking"] == [True, True, True]


def test_ops_run_in_place_on_device_memory_without_copies(session):
    view_aliases, same_ptr, out_reused, values, allocations, device, is_view = value(session, "zero_copy")
    assert view_aliases and same_ptr and out_reused and is_view
    assert values == [1.0, 1.0, 6.0]
    assert allocations == 1, f"x + x made {allocations} allocations; only its result should allocate"
    assert device == "xpu:0"


def test_in_place_metadata_changes_reach_the_device_tensor(session):
    shape, stride, values, resized = value(session, "metadata_in_place")
    assert shape == [3, 2] and stride == [1, 3] and values == [[0, 3], [1, 4], [2, 5]]
    assert resized == [2.0] * 5


@pytest.mark.parametrize("name,found", [("mixed_cpu", "cpu"), ("mixed_index", "xpu:1"), ("mixed_type", "mps:0"),
                                        ("mixed_out", "cpu")])
def test_mixing_devices_raises_like_torch(session, name, found):
    kind, message = error(session, name)
    assert kind == "RuntimeError" and "Expected all tensors to be on the same device" in message, message
    assert found in message and "xpu:0" in message


def test_cpu_scalars_and_cpu_indices_are_accepted(session):
    assert value(session, "cpu_scalar_ok") == 18.0
    assert value(session, "cpu_indices_ok") == 2


def test_autograd_on_xpu_cuda_and_mps(session):
    for device, (grad_device, matches, grad_api) in value(session, "autograd").items():
        assert grad_device == (device if ":" in device else f"{device}:0")
        assert matches and grad_api, device


def test_torch_accelerator_is_the_first_listed_type_until_a_backward_picks_another(session):
    assert value(session, "accelerator_default") == "xpu"


def test_training_a_module(session):
    assert value(session, "module_training") == [True, "mps:0"]


def test_gradients_of_every_kind(session):
    assert value(session, "gradient_kinds") == [True, True, True, True]


def test_untyped_storages_are_created_and_resized_on_emulated_mps(session):
    assert value(session, "mps_storage") == ["mps:0", [1, 2], 0]


def test_generators_of_emulated_devices_sample_like_the_cpu_generator_with_the_same_state(session):
    assert value(session, "generators") == ["cuda:1", "xpu:0", True, True]


def test_rng(session):
    same, differs, state_restores, seed_all, dropout_same, initial, byte_state = value(session, "rng")
    assert same and not differs and state_restores and seed_all and dropout_same and byte_state
    assert initial == 3


def test_save_and_load_round_trip(session):
    results = value(session, "save_load")
    assert results["same"] == ["xpu:1", "xpu:1", "mps:0", "cuda:0"]
    assert results["values"] and results["shares"] and results["moved_values"]
    assert results["cpu"] == ["cpu"] * 4 and results["moved"] == ["cuda:0"] * 4


@pytest.mark.parametrize("name,dtype", [("mps_float64_factory", "float64"), ("mps_float64_to", "float64"),
                                        ("mps_float64_cast", "float64"), ("mps_complex128", "complex128")])
def test_emulated_mps_refuses_64_bit_floats(session, name, dtype):
    kind, message = error(session, name)
    assert kind == "TypeError", message
    for part in ("aten::", "'mps'", f"torch.{dtype}", "Fix:"):
        assert part in message, (part, message)


def test_dtype_limits_are_per_backend(session):
    assert value(session, "mps_ok_dtypes") == ["torch.float32", "torch.float16", "torch.int64", "torch.bool"]
    assert value(session, "xpu_float64_ok") == 2.0
    assert value(session, "mps_float64_to_cpu_ok") == "torch.float64"


def test_threads_share_a_device(session):
    errors, correct, leaked = value(session, "threads")
    assert errors == [] and correct and leaked == 0


def test_no_leaks_after_100k_tensors(session):
    assert value(session, "leaks") == [0, 0]


def test_backend_kernels_replace_the_fallback(session):
    xpu_values, calls, mps_values = value(session, "backend_kernel")
    assert xpu_values == [42.0, 42.0] and calls == ["xpu"]
    assert mps_values == [-1.0, -1.0]


def test_everyday_ops(session):
    text, listed, maximum, initialized, nonzero, unique, conv, attention = value(session, "misc")
    assert "device='cuda:0'" in text and listed == [[1.5, -2.0], [3.0, 4.0]] and maximum == 4.0
    assert initialized is True
    assert nonzero == [[0, 0], [0, 1], [1, 0], [1, 1]] and unique == [-2.0, 1.5, 3.0, 4.0]
    assert conv == 36.0 and attention == 24.0
