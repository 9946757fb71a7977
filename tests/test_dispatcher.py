"""The dispatcher's registry, routing, coverage and trace, on the CPU backend.

Registrations change torch's dispatch table for the whole process, so each test runs its
scenario in a fresh interpreter.
"""

import json
import textwrap

from conftest import run_cli, run_python

_FP16_GELU = """
    import json, torch, warnings
    import torch.nn.functional as F
    from torchplug import dispatcher
    calls = []

    @dispatcher.kernel("aten::gelu", backend="cpu", dtypes=(torch.float16,))
    def my_gelu(x, approximate="none"):
        calls.append(str(x.dtype))
        return F.gelu(x.float(), approximate=approximate).half() + 1   # +1 marks the kernel's result
"""


def with_fp16_gelu(code: str) -> str:
    """`code` run after registering an fp16-only gelu kernel on the CPU backend."""
    return textwrap.dedent(_FP16_GELU) + textwrap.dedent(code)


def test_kernel_serves_its_dtypes_and_leaves_the_others_native():
    out = run_python(with_fp16_gelu("""
        x = torch.randn(64)
        stock = torch.ops.aten.gelu.default(x)
        half = F.gelu(x.half())
        print(json.dumps({"calls": calls, "fp32_unchanged": torch.equal(F.gelu(x), stock),
                          "fp16_from_kernel": torch.allclose(half.float(), F.gelu(x) + 1, atol=1e-2),
                          "bf16_native": torch.equal(F.gelu(x.bfloat16()), F.gelu(x.bfloat16().float()).bfloat16())}))
    """)).stdout
    assert json.loads(out) == {"calls": ["torch.float16"], "fp32_unchanged": True, "fp16_from_kernel": True,
                               "bf16_native": True}


def test_cpp_kernel_from_an_extension_op_is_called_for_its_dtypes():
    # aten::sub.Tensor is a C++ kernel with add.Tensor's argument types: routing int16 adds to it
    # must subtract, and must leave int32 adds alone.
    out = run_python("""
        import torch
        from torchplug import dispatcher
        dispatcher.register("aten::add.Tensor", "cpu", torch.ops.aten.sub.Tensor, dtypes=[torch.int16])
        print((torch.tensor([5], dtype=torch.int16) + 3).item(), (torch.tensor([5], dtype=torch.int32) + 3).item())
    """).stdout
    assert out.split() == ["2", "8"]


def test_highest_priority_wins_and_ties_warn_naming_both_plugins(tmp_path):
    (tmp_path / "plugin_a.py").write_text("def neg(x):\n    return x * 0 + 1\n")
    (tmp_path / "plugin_b.py").write_text("def neg(x):\n    return x * 0 + 2\n")
    result = run_python("""
        import torch, warnings, plugin_a, plugin_b
        from torchplug import dispatcher
        x = torch.tensor([3.0])
        dispatcher.register("aten::neg", "cpu", plugin_b.neg, priority=0)
        dispatcher.register("aten::neg", "cpu", plugin_a.neg, priority=0)   # tie: plugin_a sorts first
        print(torch.neg(x).item())
        dispatcher.register("aten::neg", "cpu", plugin_b.neg, priority=5)
        print(torch.neg(x).item())
    """, path=tmp_path)
    assert result.stdout.split() == ["1.0", "2.0"]
    assert "plugin_b and plugin_a both register aten::neg on cpu at priority 0; plugin_a wins" in result.stderr


def test_a_kernel_registered_after_an_unregister_gets_a_fresh_private_op():
    # Each Python kernel becomes a private op; numbering them by the live registrations reused a
    # name after an unregister, and torch refused to define it twice.
    out = run_python("""
        import torch
        from torchplug import dispatcher
        x = torch.tensor([1.0])
        first = dispatcher.register("aten::neg", "cpu", lambda x: x * 0 + 1)
        second = dispatcher.register("aten::neg", "cpu", lambda x: x * 0 + 2, priority=1)
        dispatcher.unregister(first)
        third = dispatcher.register("aten::neg", "cpu", lambda x: x * 0 + 3, priority=2)
        print(torch.neg(x).item())
        dispatcher.unregister(third)
        print(torch.neg(x).item())
        dispatcher.unregister(second)
        print(torch.neg(x).item())
    """).stdout
    assert out.split() == ["3.0", "2.0", "-1.0"]


def test_registration_errors_name_op_backend_and_fix():
    out = run_python("""
        import torch
        from torchplug import dispatcher
        cases = [
            lambda: dispatcher.register("aten::gleu", "cpu", lambda x: x),
            lambda: dispatcher.register("gelu", "cpu", lambda x: x),
            lambda: dispatcher.register("aten::gelu", "cpu", lambda x, y, z: x),
            lambda: dispatcher.register("aten::gelu", "mps", lambda x, approximate: x, dtypes=[torch.float64]),
            lambda: dispatcher.register("aten::gelu", "npu", lambda x, approximate: x),
            lambda: dispatcher.register("aten::gelu", "cpu", torch.ops.aten.mm.default),
            lambda: dispatcher.register("aten::gelu", "cpu", torch.ops.aten.gelu.default),
        ]
        for case in cases:
            try:
                case()
                print("NO ERROR")
            except Exception as err:
                print(type(err).__name__, "|", err)
    """).stdout.splitlines()
    assert out[0].startswith("RegistrationError | unknown op 'aten::gleu'") and "'aten::gelu'" in out[0]
    assert "must be qualified with its namespace, e.g. 'aten::gelu'" in out[1]
    assert "does not fit aten::gelu(Tensor self, *, str approximate=\"none\")" in out[2]
    assert "mps does not support torch.float64" in out[3]
    assert out[4].startswith("PluginError | no torchplug plugin named 'npu'")
    assert "C++ kernel op aten::mm(Tensor self, Tensor mat2) -> Tensor does not take the arguments" in out[5]
    assert "aten::gelu cannot be registered as its own kernel" in out[6]


def test_torchplug_ops_take_backend_kernels():
    out = run_python("""
        import torch
        from torchplug import dispatcher, ops

        @dispatcher.kernel("torchplug::silu_and_mul", backend="cpu", dtypes=[torch.bfloat16])
        def fast(x):
            return torch.zeros(*x.shape[:-1], x.shape[-1] // 2, dtype=x.dtype)

        x = torch.randn(2, 8)
        print(ops.silu_and_mul(x.bfloat16()).abs().sum().item() == 0, ops.silu_and_mul(x).abs().sum().item() > 0)
    """).stdout
    assert out.split() == ["True", "True"]


def test_coverage_reports_every_op_with_its_route():
    out = run_python(with_fp16_gelu("""
        report = dispatcher.coverage("cpu")
        data = json.loads(report.to_json())
        print(json.dumps({"gelu": data["routes"]["aten::gelu"], "mm": data["routes"]["aten::mm"],
                          "linear": data["routes"]["aten::linear"], "rms": data["routes"]["torchplug::rms_norm"],
                          "kernel_dtypes": data["kernel_dtypes"], "counts": data["counts"], "n": len(data["routes"])}))
        print(report.summary())
    """), TORCHPLUG_CPU_FP32="stock").stdout  # else AMD CPUs with AVX-512 route float32 mm too
    data = json.loads(out.splitlines()[0])
    # mm and rms_norm: the kernels torchplug-cpu registers itself (mm for float16 only)
    assert (data["gelu"], data["mm"], data["linear"], data["rms"]) == ("kernel", "kernel", "composite", "kernel")
    assert data["kernel_dtypes"]["aten::gelu"] == ["torch.float16"]
    assert data["kernel_dtypes"]["aten::mm"] == ["torch.float16"]
    assert data["n"] > 3000 and sum(data["counts"].values()) == data["n"]
    assert "kernel    aten::gelu: torch.float16" in out


def test_coverage_cli():
    result = run_cli("coverage", "xpu", "--json", TORCHPLUG_EMULATE="xpu")
    data = json.loads(result.stdout)
    assert data["dispatch_key"] == "XPU" and data["counts"]["missing"] > 0  # CUDA-only ops: no CPU kernel
    assert run_cli("coverage", "xpuu").returncode == 2


def test_trace_records_ops_routes_and_factories():
    out = run_python(with_fp16_gelu("""
        from torchplug import ops
        with dispatcher.trace() as t:
            x = torch.randn(8, 64)
            y = ops.rms_norm(x, torch.ones(64), eps=1e-6)
            F.gelu(y.half())
        print(json.dumps([[e.op, e.device, e.route, list(e.dtypes), e.served_by] for e in t.events]))
        print(t.table())
        print(torch._C._len_torch_dispatch_stack())   # nothing left installed after the block
    """)).stdout.splitlines()
    events = json.loads(out[0])
    ops_seen = [e[0] for e in events]
    assert ops_seen[:2] == ["aten::randn", "aten::ones"]
    assert ["torchplug::rms_norm", "cpu", "kernel", ["float32", "float32"], "torchplug_cpu kernel"] in events
    assert ["aten::gelu", "cpu", "kernel", ["float16"], "__main__ kernel"] in events  # the snippet's own
    assert out[1].split() == ["op", "device", "dtypes", "shapes", "route", "served", "by", "time", "(us)"]
    assert out[-1] == "0"


def test_lazy_package_names_are_what_their_modules_define_even_after_every_submodule_is_imported():
    # Importing a submodule sets an attribute of that name on its package: an exported name equal to
    # a submodule's would then turn into the module.
    out = run_python("""
        import importlib, json, pkgutil, types, torch
        wrong = []
        for package in ("dispatcher", "emulation", "distributed"):
            module = importlib.import_module(f"torchplug.{package}")
            for info in pkgutil.iter_modules(module.__path__):
                importlib.import_module(f"torchplug.{package}.{info.name}")
            for name in module.__all__:
                value = getattr(module, name)
                home = importlib.import_module(f"torchplug.{package}.{module._MODULE_OF[name]}")
                if isinstance(value, types.ModuleType) or value is not getattr(home, name):
                    wrong.append(f"{package}.{name}")
        print(json.dumps(wrong))
    """).stdout
    assert json.loads(out) == []
