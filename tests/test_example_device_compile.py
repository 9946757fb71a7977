"""torch.compile on docs/example-device (issue #31): Inductor's C++ kernels run on the device's memory,
inside its runtime's launch_host window, and train to the CPU's compiled weights.

The device's pages are PROT_NONE outside the runtime's copies and launches, so a generated kernel run
anywhere else would die with SIGSEGV: each check below that gets a right answer has run the kernel
inside the window. Every check runs in a subprocess of a fresh venv with the example pip-installed.
"""

import re

import pytest
from conftest import REPO, clean_env, make_plugin, run_process, run_python, venv_with

EXAMPLE = REPO / "docs" / "example-device"


@pytest.fixture(scope="module")
def venv(tmp_path_factory):
    root = tmp_path_factory.mktemp("example_device_compile")
    return venv_with(root, [".", "docs/example-device"]), root / "src"


@pytest.mark.parametrize("amp", [None, "bf16"])
def test_compiled_training_reaches_the_cpus_compiled_weights(venv, amp):
    bin_dir, source = venv
    found = {}
    for device in ("cpu", "exdev"):
        command = [bin_dir / "python", source / "examples" / "train.py", "--device", device, "--compile"]
        printed = run_process([*command, *(["--amp", amp] if amp else [])], env=clean_env(), cwd="/",
                              timeout=900).stdout
        found[device] = re.search(r"loss=(\S+) checksum=(\S+)", printed).groups()
    if amp is None:  # the same generated kernels and the same CPU kernels behind the extern ops: exactly
        assert found["exdev"] == found["cpu"], found
        return
    # Under autocast the devices follow different policies: exdev takes torch's GPU lists (sum runs in float32),
    # the CPU its own. Eager backward runs outside autocast, but AOTAutograd traces the compiled backward under
    # it, so the bias gradients' sums differ by a bf16 rounding.
    for mine, cpus in zip(found["exdev"], found["cpu"]):
        assert float(mine) == pytest.approx(float(cpus), rel=1e-3), found


def test_compiled_kernels_run_inside_the_runtimes_launch_window_on_the_tensors_device(venv):
    bin_dir, _ = venv
    out = run_python("""
        import torch, torchplug.entrypoints as e
        from torch._inductor.utils import run_and_get_code
        m = torch.exdev
        close = lambda a, b: torch.allclose(a, b, atol=1e-5)  # Inductor's vectorized sin is not ATen's, to the ulp
        x = torch.linspace(-4, 4, 64, device="exdev")
        before = m.host_launches(0)
        y, code = run_and_get_code(torch.compile(lambda a: (a.sin() + 1) * 2), x)
        # One fused C++ kernel, launched once through the runtime (eager would run sin, add and mul
        # through the CPU fallback, with no launch at all).
        print(m.host_launches(0) - before, close(y.cpu(), (x.cpu().sin() + 1) * 2), y.device)
        print("torchplug.binding.launcher import launch_host_kernel" in code[0], "cpp_fused" in code[0])
        x1 = torch.linspace(-4, 4, 8, device="exdev:1")
        before = [m.host_launches(0), m.host_launches(1)]
        r = torch.compile(lambda a: a.cos() * 2)(x1)
        print([m.host_launches(0) - before[0], m.host_launches(1) - before[1]], r.device,
              close(r.cpu(), x1.cpu().cos() * 2))
        # Inductor's cache key: never a graph generated for an emulated device's launcher
        target = e.loaded_backend("exdev").codegen()
        print(target.status(), "torchplug.binding.launcher" in target.uuid())
    """, python=str(bin_dir / "python"), timeout=900)
    assert out.stdout.split("\n")[:4] == ["1 True exdev:0", "True True", "[0, 1] exdev:1 True",
                                          "inductor: host-cpp (launch_host) True"], out.stdout


def test_a_compiled_in_place_update_writes_the_device_memory(venv):
    bin_dir, _ = venv
    out = run_python("""
        import torch

        def step(a, b):
            a.add_(1)
            b.mul_(a)
            return a.sum()

        a, b = torch.linspace(-2, 2, 16, device="exdev"), torch.linspace(3, 5, 16, device="exdev")
        a0, b0 = a.cpu(), b.cpu()
        total = torch.compile(step)(a, b)
        print(torch.equal(a.cpu(), a0 + 1), torch.equal(b.cpu(), b0 * (a0 + 1)),
              torch.allclose(total.cpu(), (a0 + 1).sum(), atol=1e-5))
    """, python=str(bin_dir / "python"), timeout=900)
    assert out.stdout.split("\n")[0] == "True True True", out.stdout


def test_the_launch_window_reraises_refuses_to_nest_and_lets_other_threads_launch(venv):
    bin_dir, _ = venv
    out = run_python("""
        import threading, torch
        from torchplug.binding.launcher import launch_host_kernel
        x = torch.ones(4, device="exdev")

        def fails(t):
            raise ValueError("raised inside the window")

        try:
            launch_host_kernel(fails, "fails", None, x)
        except ValueError as err:
            print("ValueError", err)
        try:
            launch_host_kernel(lambda t: launch_host_kernel(lambda u: None, "inner", None, t), "outer", None, x)
        except RuntimeError as err:
            print("do not nest" in str(err))
        # Two threads run compiled code at once, freeing device tensors (which takes the runtime's lock)
        # while the other may be in the window.
        f = torch.compile(lambda a: a * 2 + 1)
        f(x)
        results = []
        def work():
            results.append(all(torch.equal(f(x).cpu(), torch.full((4,), 3.0)) for _ in range(50)))
        threads = [threading.Thread(target=work) for _ in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        print(results, torch.equal((x + 1).cpu(), torch.full((4,), 2.0)))
    """, python=str(bin_dir / "python"), timeout=600)
    assert out.stdout.split("\n")[:3] == ["ValueError raised inside the window", "True", "[True, True] True"], \
        out.stdout


def test_a_runtime_without_launch_host_refuses_torch_compile_naming_the_device_and_the_entry(tmp_path):
    # The example's own runtime, its table copied with launch_host left out, behind a plugin of its own.
    from torchplug.entrypoints.device_runtime import include_dir

    (tmp_path / "runtime.c").write_text(f"""
        #define torchplug_device_runtime_v1 example_device_runtime
        #include "{EXAMPLE / 'torchplug_example_device' / 'runtime.c'}"
        #undef torchplug_device_runtime_v1
        static torchplug_device_runtime without_launch;
        const torchplug_device_runtime* torchplug_device_runtime_v1(void) {{
          without_launch = *example_device_runtime();
          without_launch.name = "no-launch runtime";
          without_launch.launch_host = NULL;
          return &without_launch;
        }}
    """)
    library = tmp_path / "libnolaunch.so"
    run_process(["gcc", "-shared", "-fPIC", f"-I{include_dir()}", tmp_path / "runtime.c", "-o", library])
    make_plugin(tmp_path, "nolaunch", f"""
        from pathlib import Path
        import torch
        from torchplug.entrypoints import BackendSpec, RuntimeBackend

        class NoLaunch(RuntimeBackend):
            spec = BackendSpec(name="nolaunch", device_type="nolaunch", dispatch_key="PrivateUse1",
                               dtypes=frozenset({{torch.float32, torch.float64, torch.int64, torch.bool}}),
                               torch_range=">=2.11")
            fallback_policy = "allow"

            def runtime_library(self):
                return Path({str(library)!r})

        backend = NoLaunch()
    """)
    result = run_python("""
        import torch, torchplug.entrypoints as e
        x = torch.tensor([1.0, 2.0]).to("nolaunch")
        print((x * 2).cpu().tolist())  # eager works: the CPU fallback stages through copies
        print(e.loaded_backend("nolaunch").codegen().status())
        try:
            torch.compile(lambda a: a * 2)(x)
        except Exception as err:
            print(type(err).__name__, " ".join(str(err).split()))
    """, path=tmp_path)
    lines = result.stdout.split("\n")
    assert lines[0] == "[2.0, 4.0]", result.stdout + result.stderr
    assert lines[1].startswith("inductor: none — plugin 'nolaunch': its device runtime 'no-launch runtime' has no "
                               "launch_host entry"), lines[1]
    assert "torch.compile cannot generate code for the 'nolaunch' device" in lines[2], lines[2]
    assert "no launch_host entry" in lines[2] and "implement launch_host" in lines[2], lines[2]
