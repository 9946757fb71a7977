"""CUDA graphs on emulated devices (emulation/graphs.py, graph_capture.py, graph_trees.py, csrc/graphs.cpp).

torch's own torch.cuda.graph, graph_pool_handle, make_graphed_callables and torch.compile's
reduce-overhead mode run on emulated cuda as on a GPU: capture records, replay runs the work again on
the same memory, and capture refuses what a GPU refuses, with CUDA's error codes. One child process
per session runs the named checks; the tests assert on their records.
"""

import pytest

from emulation_helpers import CHECKS, error, run_json, value

pytestmark = pytest.mark.filterwarnings("ignore")


CUDA_SESSION = CHECKS + r'''
import copy, threading
import torch
import torch.nn.functional as F

torch.manual_seed(0)

def mlp():
    return torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4)).cuda()

def warm_up(fn):
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        fn()
    torch.cuda.current_stream().wait_stream(side)

def capture_and_replay():
    model = mlp()
    static_in = torch.randn(5, 8, device="cuda")
    warm_up(lambda: model(static_in))
    g = torch.cuda.CUDAGraph()
    outside = torch.cuda.is_current_stream_capturing()
    with torch.cuda.graph(g):
        inside = torch.cuda.is_current_stream_capturing()
        static_out = model(static_in)
    ptr = static_out.data_ptr()
    rounds = []
    for _ in range(3):
        x = torch.randn(5, 8, device="cuda")
        static_in.copy_(x)
        g.replay()
        rounds.append([torch.equal(static_out, model(x)), static_out.data_ptr() == ptr])
    return {"type": type(g).__module__ + "." + type(g).__name__, "capturing": [outside, inside], "rounds": rounds}
check("capture_and_replay", capture_and_replay)

def shared_pools():
    a = torch.randn(256, device="cuda")
    g1, g2, g3 = torch.cuda.CUDAGraph(), torch.cuda.CUDAGraph(), torch.cuda.CUDAGraph()
    with torch.cuda.graph(g1):
        tmp = a * 2
        tmp_ptr = tmp.data_ptr()
        out1 = tmp + 1
        del tmp
    with torch.cuda.graph(g2, pool=g1.pool()):
        tmp2 = a * 3  # the same size as g1's freed intermediate: the shared pool hands its block out again
        out2 = tmp2 - out1
    with torch.cuda.graph(g3):  # a pool of its own
        tmp3 = a * 4
        out3 = tmp3 + 0
    a.copy_(torch.arange(256.0, device="cuda"))
    for g in (g1, g2, g3):
        g.replay()
    ref = torch.arange(256.0, device="cuda")
    handle = torch.cuda.graph_pool_handle()
    g4, g5 = torch.cuda.CUDAGraph(), torch.cuda.CUDAGraph()
    with torch.cuda.graph(g4, pool=handle):
        out4 = a + 1
    with torch.cuda.graph(g5, pool=handle):
        out5 = out4 * 2
    a.fill_(1.0)
    g4.replay(); g5.replay()
    return {"pools": [list(g1.pool()), list(g2.pool()), list(g3.pool()), list(handle), list(g4.pool()), list(g5.pool())],
            "reused": tmp2.data_ptr() == tmp_ptr, "separate": tmp3.data_ptr() != tmp_ptr,
            "values": [torch.equal(out1, ref * 2 + 1), torch.equal(out2, ref * 3 - (ref * 2 + 1)),
                       torch.equal(out3, ref * 4), torch.equal(out5, torch.full_like(out5, 4.0))]}
check("shared_pools", shared_pools)

def graphed_training():
    model = mlp()
    eager = copy.deepcopy(model)
    optimizers = [torch.optim.SGD(m.parameters(), lr=0.1) for m in (model, eager)]
    graphed = torch.cuda.make_graphed_callables(model, (torch.randn(6, 8, device="cuda", requires_grad=True),))
    steps = []
    for _ in range(4):
        x = torch.randn(6, 8, device="cuda")
        target = torch.randn(6, 4, device="cuda")
        grads = []
        for module, optimizer in zip((graphed, eager), optimizers):
            inp = x.clone().requires_grad_()
            optimizer.zero_grad(set_to_none=True)
            loss = F.mse_loss(module(inp), target)
            loss.backward()
            optimizer.step()
            grads.append(inp.grad)
        steps.append([torch.allclose(p, q, atol=1e-6) for p, q in zip(model.parameters(), eager.parameters())]
                     + [torch.allclose(*grads, atol=1e-6)])
    return steps
check("graphed_training", graphed_training)

def whole_step_capture():
    model = torch.nn.Linear(4, 2).cuda()
    optimizer = torch.optim.Adam(model.parameters(), lr=0.1, capturable=True)
    sx, sy = torch.randn(8, 4, device="cuda"), torch.randn(8, 2, device="cuda")
    def step():
        optimizer.zero_grad(set_to_none=True)
        F.mse_loss(model(sx), sy).backward()
        optimizer.step()
    warm_up(lambda: [step() for _ in range(3)])
    eager = copy.deepcopy(model)
    eager_optimizer = torch.optim.Adam(eager.parameters(), lr=0.1, capturable=True)
    eager_optimizer.load_state_dict(copy.deepcopy(optimizer.state_dict()))  # else they share state tensors
    before = model.weight.detach().clone()
    g = torch.cuda.CUDAGraph()
    optimizer.zero_grad(set_to_none=True)
    with torch.cuda.graph(g):
        static_loss = F.mse_loss(model(sx), sy)
        static_loss.backward()
        optimizer.step()
    unchanged = torch.equal(model.weight, before)  # a GPU capture runs nothing
    steps = []
    for _ in range(3):
        x, y = torch.randn(8, 4, device="cuda"), torch.randn(8, 2, device="cuda")
        sx.copy_(x); sy.copy_(y)
        g.replay()
        eager_optimizer.zero_grad(set_to_none=True)
        loss = F.mse_loss(eager(x), y)
        loss.backward()
        eager_optimizer.step()
        steps.append([torch.allclose(static_loss, loss), torch.allclose(model.weight, eager.weight, atol=1e-6)])
    return [unchanged, steps]
check("whole_step_capture", whole_step_capture)

def random_numbers():
    g = torch.cuda.CUDAGraph()
    ones = torch.ones(64, device="cuda")
    with torch.cuda.graph(g):
        r = torch.rand(64, device="cuda")
        kept = F.dropout(ones, 0.5)
    draws = []
    for _ in range(3):
        g.replay()
        draws.append((r.clone(), kept.clone()))
    torch.cuda.manual_seed(7); g.replay(); first = (r.clone(), kept.clone())
    torch.cuda.manual_seed(7); g.replay()  # the device's seed decides what a replay draws
    return [not torch.equal(draws[0][0], draws[1][0]), not torch.equal(draws[1][0], draws[2][0]),
            not torch.equal(draws[0][1], draws[1][1]), torch.equal(first[0], r), torch.equal(first[1], kept),
            sorted(set(kept.tolist())) == [0.0, 2.0]]
check("random_numbers", random_numbers)

x = torch.randn(4, 4, device="cuda")

def on_side_stream():
    with torch.cuda.stream(torch.cuda.Stream()):
        torch.empty(16, device="cuda")

def event_sync():
    event = torch.cuda.Event()
    event.record()
    event.synchronize()

REFUSED = {
    "synchronize": lambda: torch.cuda.synchronize(),
    "stream_synchronize": lambda: torch.cuda.current_stream().synchronize(),
    "event_synchronize": event_sync,
    "item": lambda: (x * 2).sum().item(),
    "cpu": lambda: (x + 1).cpu(),
    "print": lambda: print(x + 1),
    "nonzero": lambda: torch.nonzero(x > 0),
    "boolean_mask": lambda: x[x > 0],
    "tensor_on_device": lambda: torch.tensor([1.0, 2.0], device="cuda"),
    "copy_from_host": lambda: x.copy_(torch.ones(4, 4)),
    "empty_cache": lambda: torch.cuda.empty_cache(),
    "allocation_outside_the_pool": on_side_stream,
    "linalg_inv": lambda: torch.linalg.inv(x @ x.T + torch.eye(4, device="cuda")),
}

def refused(action):
    g = torch.cuda.CUDAGraph()
    try:
        with torch.cuda.graph(g):
            y = x * 3
            action()
    except BaseException as err:
        first = err.__context__
        torch.cuda.set_stream(torch.cuda.default_stream())  # torch.cuda.graph leaves the capture stream set
        return {"type": type(err).__name__, "code": getattr(err, "error_code", None), "message": str(err),
                "first_type": type(first).__name__, "first_code": getattr(first, "error_code", None),
                "first": str(first), "capturing_after": torch.cuda.is_current_stream_capturing()}
    return None

for name, action in REFUSED.items():
    check(f"refused_{name}", lambda action=action: refused(action))

def allowed():
    g = torch.cuda.CUDAGraph()
    pinned = torch.empty(4, 4).pin_memory()
    with torch.cuda.graph(g):
        y = x * 3
        pinned.copy_(y, non_blocking=True)
        fixed = torch.nonzero_static(x > 0, size=16)
    x.fill_(2.0)
    g.replay()
    return [pinned.tolist() == [[6.0] * 4] * 4, fixed.shape[0]]
check("allowed", allowed)

def second_device():
    with torch.cuda.device(1):
        x1 = torch.randn(8, device="cuda")
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g, stream=torch.cuda.Stream()):
            y1 = x1.sin()
        inside = torch.cuda.current_device()
    x1.fill_(0.5)
    g.replay()  # from device 0: the graph runs on its own device
    return [inside, str(y1.device), torch.allclose(y1, x1.sin()), torch.cuda.current_device()]
check("second_device", second_device)

def stream_device():
    side = torch.cuda.Stream(device=1)
    with torch.cuda.stream(side):  # as torch.cuda.set_stream: the stream's device becomes current
        inside = [torch.cuda.current_device(), torch.cuda.current_stream().stream_id == side.stream_id]
    return inside + [torch.cuda.current_device(), torch.cuda.current_stream(1).stream_id]
check("stream_device", stream_device)

def reseed():
    g = torch.cuda.CUDAGraph()
    seed = torch.cuda.initial_seed()
    with torch.cuda.graph(g):
        torch.cuda.manual_seed(seed)  # the same seed: allowed, a no-op
        try:
            torch.cuda.manual_seed(seed + 1)
            return None
        except RuntimeError as err:
            return str(err)
check("reseed", reseed)

def rng_state():
    with torch.cuda.graph(torch.cuda.CUDAGraph()):
        try:
            torch.cuda.get_rng_state()
            return None
        except RuntimeError as err:
            return str(err)
check("rng_state", rng_state)

def default_stream():
    g = torch.cuda.CUDAGraph()
    g.capture_begin()
check("default_stream", default_stream)

def capture_modes():
    found = {}
    for mode in ("global", "thread_local", "relaxed"):
        errors = []
        def other_thread():
            try:
                torch.empty(64, device="cuda")
            except Exception as err:
                errors.append(getattr(err, "error_code", type(err).__name__))
        g = torch.cuda.CUDAGraph()
        try:
            with torch.cuda.graph(g, capture_error_mode=mode):
                y = x + 1
                thread = threading.Thread(target=other_thread)
                thread.start(); thread.join()
            found[mode] = errors
        except Exception as err:
            torch.cuda.set_stream(torch.cuda.default_stream())
            found[mode] = errors + ["capture_end", getattr(err, "error_code", None)]
    try:
        torch.cuda.CUDAGraph().capture_begin(capture_error_mode="sometimes")
    except RuntimeError as err:
        found["unknown"] = str(err)
    return found
check("capture_modes", capture_modes)

def freed_input():
    inp = torch.randn(32, device="cuda")
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g, check_input_liveness=True):
        out = inp * 2
    del inp
    g.replay()
check("freed_input", freed_input)

def debug_helpers(tmp):
    g = torch.cuda.CUDAGraph(keep_graph=True)
    with torch.cuda.graph(g):
        y = torch.relu(x @ x)
        y.add_(1)
    g.instantiate()
    data = g.get_graph_data()
    g.debug_dump(tmp)
    try:
        g.raw_cuda_graph()
        raw = None
    except RuntimeError as err:
        raw = str(err)
    return {"nodes": [[n["node_type"], n["kernel_name"], n["dependencies"]] for n in data["nodes"]],
            "dot": open(tmp).read(), "raw": raw}
import tempfile, os
check("debug_helpers", lambda: debug_helpers(os.path.join(tempfile.mkdtemp(), "graph.dot")))
print(json.dumps(RESULTS, default=str))
'''

COMPILE_SESSION = CHECKS + r'''
import copy, sys
import torch
import torch.nn.functional as F

torch.manual_seed(0)

def train(trees):
    torch._inductor.config.triton.cudagraph_trees = trees
    torch._dynamo.reset()
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.GELU(), torch.nn.Linear(16, 4)).cuda()
    eager = copy.deepcopy(model)
    optimizers = [torch.optim.SGD(m.parameters(), lr=0.05) for m in (model, eager)]
    compiled = torch.compile(model, mode="reduce-overhead")
    same = []
    for _ in range(4):
        x, y = torch.randn(6, 8, device="cuda"), torch.randn(6, 4, device="cuda")
        losses = []
        for module, optimizer in zip((compiled, eager), optimizers):
            optimizer.zero_grad()
            loss = F.mse_loss(module(x), y)
            loss.backward()
            optimizer.step()
            losses.append(loss.item())
        same.append(abs(losses[0] - losses[1]) < 1e-6
                    and all(torch.allclose(p, q, atol=1e-6) for p, q in zip(model.parameters(), eager.parameters())))
    return same

def inference(trees):
    torch._inductor.config.triton.cudagraph_trees = trees
    torch._dynamo.reset()
    model = torch.nn.Linear(8, 4).cuda()
    compiled = torch.compile(lambda t: model(t).relu(), mode="reduce-overhead")
    with torch.no_grad():
        outs = [compiled(torch.randn(2, 8, device="cuda")) for _ in range(4)]
        try:
            return {"same_storage": len({o.data_ptr() for o in outs[1:]}) == 1}
        except RuntimeError as err:
            return {"overwritten": str(err)}

def manual_capture():
    torch._dynamo.reset()
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.GELU(), torch.nn.Linear(16, 4)).cuda()
    compiled = torch.compile(model)
    x = torch.randn(3, 8, device="cuda")
    with torch.no_grad():
        compiled(x)  # compiling saves and restores the CUDA RNG state, which a capture refuses: compile first
        g = torch.cuda.CUDAGraph(keep_graph=True)
        with torch.cuda.graph(g):
            y = compiled(x)
        g.instantiate()
        x.copy_(torch.randn(3, 8, device="cuda"))
        g.replay()
        kernels = [n["kernel_name"] for n in g.get_graph_data()["nodes"]]
        return [torch.allclose(y, model(x), atol=1e-6), kernels]

for trees in (True, False):
    check(f"train_trees={trees}", lambda trees=trees: train(trees))
    check(f"inference_trees={trees}", lambda trees=trees: inference(trees))
check("manual_capture", manual_capture)
print(json.dumps(RESULTS, default=str))
'''

XPU_SESSION = CHECKS + r'''
import copy
import torch

def replay():
    x = torch.randn(4, 4, device="xpu")
    g = torch.xpu.XPUGraph()
    with torch.xpu.graph(g):
        capturing = torch.xpu.is_current_stream_capturing()
        y = (x @ x).relu()
    x.copy_(torch.randn(4, 4, device="xpu"))
    g.replay()
    return [type(g).__name__, capturing, torch.equal(y, (x @ x).relu()), list(g.pool()) != [0, 0]]
check("replay", replay)

def graphed():
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4)).to("xpu")
    eager = copy.deepcopy(model)
    graphed = torch.xpu.make_graphed_callables(model, (torch.randn(3, 8, device="xpu", requires_grad=True),))
    x = torch.randn(3, 8, device="xpu")
    graphed(x).sum().backward()
    eager(x).sum().backward()
    return all(torch.allclose(p.grad, q.grad) for p, q in zip(model.parameters(), eager.parameters()))
check("graphed", graphed)

def item():
    x = torch.randn(4, device="xpu")
    try:
        with torch.xpu.graph(torch.xpu.XPUGraph()):
            x.sum().item()
    except Exception as err:
        return [type(err).__name__, err.error_code, type(err.__context__).__name__, str(err.__context__)]
check("item", item)
def cuda_untouched():  # cuda is not emulated here: torch's own class, bound to the CUDA runtime
    try:
        torch.cuda.CUDAGraph()
        made = None
    except Exception as err:
        made = str(err)
    return [issubclass(torch.cuda.CUDAGraph, torch._C._CUDAGraph), made]
check("cuda_untouched", cuda_untouched)
print(json.dumps(RESULTS, default=str))
'''


@pytest.fixture(scope="module")
def cuda_session():
    return run_json(CUDA_SESSION, TORCHPLUG_EMULATE="cuda", TORCHPLUG_EMULATE_DEVICES="2")


def test_capture_and_replay_of_an_mlp_forward_follows_new_input_contents(cuda_session):
    result = value(cuda_session, "capture_and_replay")
    assert result["type"] == "torch.cuda.graphs.CUDAGraph"
    assert result["capturing"] == [False, True]
    assert result["rounds"] == [[True, True]] * 3  # eager's values, in the output tensor the capture returned


def test_graph_pools_shared_between_graphs_reuse_freed_memory(cuda_session):
    result = value(cuda_session, "shared_pools")
    pools = result["pools"]
    assert pools[0] == pools[1] and pools[0] != pools[2]  # g2 shares g1's pool, g3 has its own
    assert pools[0][0] > 0 and pools[0][1] == 0 and pools[3][0] == 0 and pools[3][1] > 0  # torch's two id kinds
    assert pools[4] == pools[5] == pools[3]
    assert result["reused"] and result["separate"]
    assert result["values"] == [True] * 4


def test_make_graphed_callables_trains_like_eager(cuda_session):
    assert value(cuda_session, "graphed_training") == [[True] * 5] * 4


def test_a_captured_optimizer_step_takes_effect_only_when_replayed(cuda_session):
    unchanged, steps = value(cuda_session, "whole_step_capture")
    assert unchanged is True
    assert steps == [[True, True]] * 3


def test_random_ops_in_a_graph_draw_new_numbers_on_each_replay(cuda_session):
    assert value(cuda_session, "random_numbers") == [True] * 6


@pytest.mark.parametrize("name, says", [
    ("synchronize", "torch.cuda.synchronize()"),
    ("stream_synchronize", "synchronizing stream"),
    ("event_synchronize", "an event recorded while its stream was capturing"),
    ("item", "aten::_local_scalar_dense reads a device value on the host"),
    ("cpu", "aten::_to_copy copies between host memory and the device (cuda:0 -> cpu)"),
    ("print", "aten::_local_scalar_dense"),
    ("nonzero", "aten::nonzero returns a tensor whose size depends on the data"),
    ("boolean_mask", "aten::index with a boolean mask"),
    ("tensor_on_device", "torch.tensor(data, device=...)"),
    ("copy_from_host", "aten::copy_ copies between host memory and the device (cpu -> cuda:0)"),
    ("empty_cache", "torch.cuda.empty_cache()"),
    ("allocation_outside_the_pool", "would not come from the graph's private pool"),
    ("linalg_inv", "aten::_linalg_check_errors"),
])
def test_capture_refuses_what_a_gpu_refuses_with_cudas_errors(cuda_session, name, says):
    result = value(cuda_session, f"refused_{name}")
    assert result is not None, f"{name} was not refused"
    assert result["first_type"] == "AcceleratorError"
    code = 907 if name == "event_synchronize" else 900
    text = ("operation not permitted on an event last recorded in a capturing stream" if code == 907
            else "operation not permitted when stream is capturing")
    assert result["first_code"] == code and result["first"].startswith(f"CUDA error: {text}")
    assert "torchplug's emulated cuda device" in result["first"] and says in result["first"]
    # The refusal invalidated the capture; torch.cuda.graph's capture_end then fails as on a GPU.
    assert result["type"] == "AcceleratorError" and result["code"] == 901
    assert result["message"].startswith("CUDA error: operation failed due to a previous error during capture")
    assert says in result["message"]
    assert result["capturing_after"] is False


def test_pinned_non_blocking_copies_and_fixed_size_ops_are_captured(cuda_session):
    assert value(cuda_session, "allowed") == [True, 16]


def test_a_graph_captured_on_a_second_device_replays_there(cuda_session):
    assert value(cuda_session, "second_device") == [1, "cuda:1", True, 0]
    # What torch.cuda.graph relies on when its capture stream lives on another device than the current one.
    assert value(cuda_session, "stream_device") == [1, True, 0, 0]


def test_reseeding_the_device_generator_during_capture_is_refused(cuda_session):
    message = value(cuda_session, "reseed")
    assert message is not None and message.startswith(
        "CUDAGeneratorImpl::set_current_seed can be called during stream capture only if new seed is the same")


def test_reading_the_generator_state_during_capture_is_refused(cuda_session):
    message = value(cuda_session, "rng_state")
    assert message is not None and message.startswith(
        "Cannot call CUDAGeneratorImpl::current_seed during CUDA graph capture. If you need this call to be captured")


def test_capture_on_the_default_stream_is_refused(cuda_session):
    kind, message = error(cuda_session, "default_stream")
    assert kind == "RuntimeError"
    assert message == ("CUDA graphs must be captured on a non-default stream. (However, after capture, it's ok "
                       "to replay them on the default stream.)")


def test_capture_error_modes_govern_other_threads_allocations(cuda_session):
    found = value(cuda_session, "capture_modes")
    assert found["global"] == [900, "capture_end", 901]  # another thread's cudaMalloc breaks a global capture
    assert found["thread_local"] == [] and found["relaxed"] == []
    assert found["unknown"] == "Unknown capture error mode. Expected `global`, `thread_local`, or `relaxed`, got sometimes"


def test_replay_refuses_to_read_an_input_freed_after_capture(cuda_session):
    kind, message = error(cuda_session, "freed_input")
    assert kind == "RuntimeError"
    assert message.startswith("CUDA graph replay detected 1 dead tensor(s).")
    assert "First used in the capture (Python):" in message and "in freed_input" in message
    assert "would read freed memory" in message


def test_debug_helpers_describe_the_recorded_work(cuda_session):
    result = value(cuda_session, "debug_helpers")
    assert result["nodes"] == [["kernel", "aten.mm.default", []], ["kernel", "aten.relu.default", [0]],
                               ["kernel", "aten.add_.Tensor", [1]]]
    assert result["dot"].startswith('digraph "CUDAGraph"') and "n0 -> n1;" in result["dot"]
    assert "records ATen ops and host kernels" in result["raw"]


def test_reduce_overhead_compile_replays_cuda_graphs_with_and_without_trees():
    results = run_json(COMPILE_SESSION, TORCHPLUG_EMULATE="cuda")
    for trees in (True, False):
        assert value(results, f"train_trees={trees}") == [True] * 4, trees
    with_trees, static = value(results, "inference_trees=True"), value(results, "inference_trees=False")
    # As on a GPU: trees hand out outputs that the next replay overwrites and then refuse access to
    # them; without trees every call returns the same static output tensors.
    assert with_trees["overwritten"].startswith("Error: accessing tensor output of CUDAGraphs that has been overwritten")
    assert static == {"same_storage": True}
    # torch.compile'd code captured in a torch.cuda.graph records its compiled kernels, not eager ops.
    same, kernels = value(results, "manual_capture")
    assert same is True
    assert kernels == ["aten.addmm.out", "cpp_fused_gelu_0", "aten.addmm.out"]


ROCM_SESSION = CHECKS + r'''
import torch

def rocm():
    x = torch.randn(4, device="cuda")
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        y = x * 2
    x.fill_(1.0)
    g.replay()
    try:
        with torch.cuda.graph(torch.cuda.CUDAGraph()):
            y.sum().item()
    except torch.AcceleratorError as err:
        return [y.tolist(), err.error_code, str(err.__context__)]
check("rocm", rocm)
print(json.dumps(RESULTS, default=str))
'''


def test_the_rocm_backend_reports_hip_errors():
    replayed, code, first = value(run_json(ROCM_SESSION, TORCHPLUG_EMULATE="rocm"), "rocm")
    assert replayed == [2.0] * 4 and code == 901
    assert first.startswith("HIP error: operation not permitted when stream is capturing\nSearch for "
                            "`hipErrorStreamCaptureUnsupported'")
    assert "torchplug's emulated cuda (backend 'rocm') device" in first


def test_xpu_graphs_on_emulated_xpu_and_cuda_left_alone():
    results = run_json(XPU_SESSION, TORCHPLUG_EMULATE="xpu")
    assert value(results, "replay") == ["XPUGraph", True, True, True]
    assert value(results, "graphed") is True
    kind, code, first, message = value(results, "item")
    assert (kind, code, first) == ("AcceleratorError", 901, "AcceleratorError")
    assert message.startswith("XPU graph capture error: operation not permitted when stream is capturing")
    torch_class, made = value(results, "cuda_untouched")
    assert torch_class is True
    import torch

    if not (torch.version.cuda or torch.version.hip):
        assert made == "Tried to instantiate dummy base class CUDAGraph"
