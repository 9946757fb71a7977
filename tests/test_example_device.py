"""docs/example-device: a device with its own C runtime, whose memory the host cannot read, pip-installed
into a fresh venv and driven as a user would (issue #31).

Every check runs in a real subprocess of that venv: torch autoloads the plugin, torchplug binds its
runtime (torchplug.binding) on first device use, and the runtime keeps device pages PROT_NONE except
inside its own copies and launches.
"""

import ctypes
import re
import signal
import subprocess
import sys

import pytest
from conftest import REPO, clean_env, run_process, run_python, venv_with

EXAMPLE = REPO / "docs" / "example-device"


@pytest.fixture(scope="module")
def venv(tmp_path_factory):
    root = tmp_path_factory.mktemp("example_device")
    return venv_with(root, [".", "docs/example-device"]), root / "src"


def test_installs_autoloads_and_answers_with_torch_cuda_names(venv):
    bin_dir, _ = venv
    out = run_python("""
        import io, torch
        x = torch.randn(8, device="exdev")
        assert x.device == torch.device("exdev", 0), x.device
        assert torch.equal((x * 2).cpu(), x.cpu() * 2)
        m = torch.exdev
        print(m.is_available(), m.device_count(), m.current_device(), m.get_device_name())
        m.set_device(1); y = torch.ones(3, device="exdev"); m.set_device(0)
        print(y.device, m.memory_allocated(1) > 0, m.max_memory_allocated(0) >= 32)
        s = m.Stream(); start, end = m.Event(enable_timing=True), m.Event(enable_timing=True)
        with m.stream(s):
            start.record(); z = x + 1; end.record()
        end.synchronize(); m.synchronize()
        print(m.current_stream().stream_id, start.elapsed_time(end) >= 0, s.query())
        buf = io.BytesIO(); torch.save({"x": x, "tail": x[2:]}, buf); buf.seek(0)
        back = torch.load(buf, map_location="exdev")
        shared = back["tail"].untyped_storage().data_ptr() == back["x"].untyped_storage().data_ptr()
        print(back["x"].device, torch.equal(back["x"].cpu(), x.cpu()), back["tail"].device, shared)
        m.manual_seed(3); a = torch.rand(4, device="exdev").cpu(); m.manual_seed(3)
        print(torch.equal(a, torch.rand(4, device="exdev").cpu()))
    """, python=str(bin_dir / "python")).stdout.split("\n")
    assert out[0] == "True 2 0 torchplug example device 0 (protected host pages)", out
    assert out[1:5] == ["exdev:1 True True", "0 True True", "exdev:0 True exdev:0 True", "True"], out


def test_reading_device_memory_from_the_host_faults_while_cpu_copies_it(venv):
    bin_dir, _ = venv
    code = """
        import ctypes, torch
        x = torch.arange(4, dtype=torch.float32, device="exdev")
        print(x.cpu().tolist(), flush=True)
        ctypes.string_at(x.data_ptr(), 4)
        print("the host read device memory")
    """
    result = run_python(code, python=str(bin_dir / "python"), check=False)
    assert result.returncode == -signal.SIGSEGV, (result.returncode, result.stdout, result.stderr)
    assert result.stdout == "[0.0, 1.0, 2.0, 3.0]\n", result.stdout


@pytest.mark.parametrize("amp", [None, "bf16", "fp16"])
def test_trains_to_the_cpu_weights(venv, amp):
    bin_dir, source = venv
    lines = {}
    for device in ("cpu", "exdev"):
        command = [bin_dir / "python", source / "examples" / "train.py", "--device", device]
        printed = run_process([*command, *(["--amp", amp] if amp else [])], env=clean_env(), cwd="/").stdout
        lines[device] = re.search(r"loss=\S+ checksum=\S+", printed)[0]
    assert lines["exdev"] == lines["cpu"], lines


def test_passes_the_smoke_tier_with_its_fallback_staging_through_copies(venv):
    bin_dir, _ = venv
    result = run_process([bin_dir / "torchplug", "check", "exdev", "--tier", "smoke"], check=False,
                         env=clean_env(), cwd="/", timeout=900)
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]
    assert "no failures, crashes or timeouts" in result.stdout
    # Ops without a kernel of the device's own ran through the governed fallback; none of them illegally.
    assert re.search(r"illegal-fallback 0\.0% \(0\)", result.stdout), result.stdout
    assert re.search(r"pass-fallback [1-9]", result.stdout), result.stdout
    # The contract kit ran on the device's own runtime table, in the worker that drives it.
    assert re.search(r"device_runtime_contract\s+pass\s+torchplug example device runtime 0\.1", result.stdout), result.stdout


def test_the_fallback_is_governed_and_counted(venv):
    bin_dir, _ = venv
    result = run_python("""
        import torch, torchplug.dispatcher as d
        x = torch.randn(8, device="exdev")
        x.sin().cpu()
        print(d.fallback_stats()["exdev"]["aten::sin.out"])  # sin is structured: its out= form runs
        d.set_fallback_policy("exdev", "error", ops=["aten::cos.out"])
        try:
            x.cos()
        except NotImplementedError as err:
            print("refused", "aten::cos.out has no kernel on exdev" in str(err))
    """, python=str(bin_dir / "python"))
    assert result.stdout.split("\n")[:2] == ["1", "refused True"], result.stdout


def test_losses_whose_composite_resizes_a_scalar_out_run_whole_without_torchs_warning(venv):
    # torch's mse_loss / smooth_l1_loss composites pass their out= variant a 0-dim result, which the
    # CPU kernel resizes through the elementwise shape with a deprecation warning on every call.
    bin_dir, _ = venv
    result = run_python("""
        import warnings, torch, torch.nn.functional as F, torchplug.dispatcher as d
        x, y = torch.randn(8, 4), torch.randn(8, 4)
        for loss, kw in ((F.mse_loss, {}), (F.smooth_l1_loss, {"beta": 0.5})):
            for reduction in ("mean", "sum", "none"):
                on_device, on_cpu = x.to("exdev").requires_grad_(), x.clone().requires_grad_()
                with warnings.catch_warnings():
                    warnings.simplefilter("error")
                    out = loss(on_device, y.to("exdev"), reduction=reduction, **kw)
                    out.sum().backward()
                ref = loss(on_cpu, y, reduction=reduction, **kw)
                ref.sum().backward()
                grads_equal = torch.equal(on_device.grad.cpu(), on_cpu.grad)
                print(loss.__name__, reduction, torch.equal(out.cpu(), ref), grads_equal)
        stats = d.fallback_stats()["exdev"]
        print(stats["aten::mse_loss"], stats["aten::smooth_l1_loss"], "aten::mse_loss.out" in stats)
    """, python=str(bin_dir / "python"))
    lines = result.stdout.split("\n")
    assert lines[:6] == [f"{loss} {reduction} True True" for loss in ("mse_loss", "smooth_l1_loss")
                         for reduction in ("mean", "sum", "none")], result.stdout + result.stderr
    assert lines[6] == "3 3 False", result.stdout  # counted by the governed fallback, whole

def _runtime_library(tmp_path, body: str):
    """A runtime library compiled from `body`, which defines torchplug_device_runtime_v1 over the header."""
    from torchplug.entrypoints.device_runtime import include_dir

    source = tmp_path / "runtime.c"
    source.write_text("#include <torchplug/device_runtime.h>\n" + body)
    library = tmp_path / "libruntime.so"
    run_process(["gcc", "-shared", "-fPIC", f"-I{include_dir()}", source, "-o", library])
    return library


def test_a_runtime_of_another_abi_version_is_refused_naming_the_plugin_and_both_versions(tmp_path):
    from torchplug.entrypoints.device_runtime import DeviceRuntimeError, load_runtime

    library = _runtime_library(tmp_path, """
        static torchplug_device_runtime table = {.abi_version = 7, .struct_size = sizeof(torchplug_device_runtime)};
        const torchplug_device_runtime* torchplug_device_runtime_v1(void) { return &table; }
    """)
    with pytest.raises(DeviceRuntimeError, match=r"plugin 'acme'.*ABI version 7, but this torchplug binds version 1"):
        load_runtime("acme", library)


def test_a_table_with_missing_entries_or_no_entry_point_is_refused_with_what_is_missing(tmp_path):
    from torchplug.entrypoints.device_runtime import DeviceRuntimeError, load_runtime

    short = _runtime_library(tmp_path, """
        static torchplug_device_runtime table = {.abi_version = TORCHPLUG_DEVICE_RUNTIME_ABI_VERSION,
                                                 .struct_size = sizeof(torchplug_device_runtime)};
        const torchplug_device_runtime* torchplug_device_runtime_v1(void) { return &table; }
    """)
    with pytest.raises(DeviceRuntimeError, match=r"plugin 'acme'.*leaves required entries NULL: last_error, device_count"):
        load_runtime("acme", short)
    other = tmp_path / "other"
    other.mkdir()
    bare = _runtime_library(other, "int unrelated(void) { return 0; }\n")
    with pytest.raises(DeviceRuntimeError, match=r"plugin 'acme'.*does not export torchplug_device_runtime_v1"):
        load_runtime("acme", bare)


def test_the_python_mirror_matches_the_c_table_layout(tmp_path):
    from torchplug.entrypoints.device_runtime import ENTRIES, RuntimeTable

    fields = ", ".join(f'offsetof(torchplug_device_runtime, {name})' for name, _ in ENTRIES)
    library = _runtime_library(tmp_path, f"""
        #include <stddef.h>
        size_t table_size(void) {{ return sizeof(torchplug_device_runtime); }}
        size_t offsets[] = {{{fields}}};
    """)
    loaded = ctypes.CDLL(str(library))
    loaded.table_size.restype = ctypes.c_size_t
    assert loaded.table_size() == ctypes.sizeof(RuntimeTable)
    offsets = (ctypes.c_size_t * len(ENTRIES)).in_dll(loaded, "offsets")
    assert list(offsets) == [getattr(RuntimeTable, name).offset for name, _ in ENTRIES]


def test_the_readme_backend_is_the_example_device():
    readme = (REPO / "README.md").read_text()
    blocks = re.findall(r"```python\n(.*?)```", readme.split("## Writing a backend", 1)[1].split("\n## ", 1)[0], re.S)
    module = next(b for b in blocks if b.startswith("# torchplug_example_device/__init__.py"))
    assert module.split("\n", 1)[1] == (EXAMPLE / "torchplug_example_device" / "__init__.py").read_text()


def test_import_torch_builds_nothing_for_the_example_device(venv, tmp_path):
    bin_dir, _ = venv
    # A fresh cache: autoload must neither compile the runtime nor the binding.
    result = run_python("""
        import torch, torchplug.entrypoints as e
        print(e.loaded())
    """, python=str(bin_dir / "python"), XDG_CACHE_HOME=str(tmp_path), TORCHPLUG_CACHE=str(tmp_path / "tp"))
    assert "exdev" in result.stdout
    built = [p for p in tmp_path.rglob("*") if p.suffix == ".so" or p.name in ("torchplug_binding", "torchplug-example-device")]
    assert built == []


def test_copies_are_queued_on_torchs_current_stream_and_non_blocking_ones_return_at_once(venv):
    # The example runtime runs a queued copy only when its stream must have finished it (runtime.c):
    # a copy that were not ordered on torch's current stream, or waited for when it must not, shows.
    bin_dir, _ = venv
    out = run_python("""
        import torch
        m = torch.exdev
        host = torch.arange(1 << 16, dtype=torch.float32).pin_memory()
        print(host.is_pinned(), torch.ones(2).is_pinned())
        side = m.Stream()
        with m.stream(side):
            queued = host.to("exdev", non_blocking=True)
            print(torch.equal(queued.cpu(), host))  # ordered after the queued copy on the same stream
        doubled = host.to("exdev", non_blocking=True) * 2  # the CPU fallback stages after the copy
        result = torch.zeros(1 << 16).pin_memory()
        result.copy_(doubled, non_blocking=True)
        print(bool(result.sum() == 0), m.current_stream().query())  # still queued: the host must wait for it
        m.current_stream().synchronize()
        print(torch.equal(result, host * 2), m.current_stream().query())
        with m.stream(side):
            result.zero_()
            result.copy_(doubled, non_blocking=True)
        side.synchronize()  # waits for the side stream alone, where the copy was queued
        print(torch.equal(result, host * 2))
        print(torch.equal(host.to("exdev:1").cpu(), host), m.current_device())  # device 1's streams, from device 0
    """, python=str(bin_dir / "python")).stdout.splitlines()
    assert out == ["True False", "True", "True False", "True True", "True", "True 0"], out


def test_a_dtype_the_plugin_does_not_declare_is_refused_naming_the_device_and_what_it_declares(venv):
    bin_dir, _ = venv
    out = run_python("""
        import torch
        x = torch.ones(3, device="exdev")
        for make in (lambda: torch.zeros(3, dtype=torch.complex128, device="exdev"), lambda: x.to(torch.float8_e4m3fn),
                     lambda: torch.ones(2, dtype=torch.uint16).to("exdev")):
            try:
                make()
                print("made")
            except TypeError as err:
                print(err)
        print(x.to(torch.float64).dtype, torch.exdev.memory_allocated())
    """, python=str(bin_dir / "python")).stdout.splitlines()
    for line, dtype in zip(out, ("torch.complex128", "torch.float8_e4m3fn", "torch.uint16")):
        assert line.startswith(f"torchplug: the 'exdev' device does not support {dtype} (its plugin declares "
                               "torch.bfloat16, torch.bool, torch.complex64, torch.float16, "), line
        assert "Fix: convert the tensor to a declared dtype" in line, line
    assert out[3] == "torch.float64 12", out  # nothing was allocated for the refused tensors


def test_each_device_draws_from_its_own_generator_apart_from_the_cpus(venv):
    bin_dir, _ = venv
    out = run_python("""
        import torch
        torch.manual_seed(5)  # before the device's first use: queued, as torch.cuda queues it
        first = torch.rand(4, device="exdev").cpu()
        torch.manual_seed(5)
        torch.rand(100)  # CPU draws leave the device's generator where it was
        print(torch.equal(first, torch.rand(4, device="exdev").cpu()))
        m = torch.exdev
        state, cpu_state = m.get_rng_state(), torch.get_rng_state()
        m.manual_seed(9)
        print(torch.equal(cpu_state, torch.get_rng_state()), m.initial_seed())  # the CPU's is untouched
        a = torch.randn(3, device="exdev").cpu()
        m.set_rng_state(state)
        again = torch.rand(4, device="exdev").cpu()
        m.set_rng_state(state)
        print(torch.equal(torch.rand(4, device="exdev").cpu(), again), torch.equal(m.get_rng_state(), state) is False)
        m.set_device(1); m.manual_seed(9); b = torch.randn(3, device="exdev:1").cpu(); m.set_device(0)
        print(torch.equal(a, b), torch.empty(3, device="exdev").bernoulli_(0.5).device)
    """, python=str(bin_dir / "python")).stdout.splitlines()
    assert out == ["True", "True 9", "True True", "True exdev:0"], out


def test_pinning_before_the_devices_first_use_binds_it_so_a_cpu_dataloader_keeps_working(venv):
    # DataLoader(pin_memory=True) pins for torch.accelerator's device, which the installed plugin is.
    bin_dir, _ = venv
    out = run_python("""
        import torch
        from torch.utils.data import DataLoader, TensorDataset
        print(torch.accelerator.current_accelerator(), torch.exdev.is_initialized())
        loader = DataLoader(TensorDataset(torch.randn(8, 3)), batch_size=4, pin_memory=True)
        print([batch.is_pinned() for (batch,) in loader], torch.exdev.is_initialized())
        print(torch.empty(2, pin_memory=True).is_pinned())
    """, python=str(bin_dir / "python")).stdout.splitlines()
    assert out == ["exdev False", "[True, True] True", "True"], out
