"""The governed CPU fallback and the dispatcher on an emulated xpu device (fresh process per test)."""

import json
import textwrap

from conftest import run_python

EMULATED = {"TORCHPLUG_EMULATE": "xpu"}
PRELUDE = """
    import json, warnings, torch
    from torchplug import dispatcher
    warnings.simplefilter("ignore", category=Warning)   # the one-time emulation notice
    x = torch.tensor([0.0, 2.0, 0.0, 3.0], device="xpu")
"""


def scenario(code: str, check: bool = True, **env: str):
    return run_python(textwrap.dedent(PRELUDE) + textwrap.dedent(code), check=check, **{**EMULATED, **env})


def test_declared_ops_fall_back_to_the_cpu_and_are_counted():
    out = scenario("""
        dispatcher.enable_fallback("xpu", ops=["aten::nonzero"])
        dispatcher.set_fallback_policy("xpu", "allow")
        first, second = torch.nonzero(x), torch.nonzero(x * 2)
        print(json.dumps({"result": first.cpu().flatten().tolist(), "device": str(second.device),
                          "stats": dispatcher.fallback_stats(),
                          "route": dispatcher.coverage("xpu").routes["aten::nonzero"],
                          "other_route": dispatcher.coverage("xpu").routes["aten::add.Tensor"]}))
    """).stdout
    assert json.loads(out) == {"result": [1, 3], "device": "xpu:0", "stats": {"xpu": {"aten::nonzero": 2}},
                               "route": "fallback", "other_route": "native"}


def test_warn_policy_warns_once_per_op():
    out = scenario("""
        dispatcher.enable_fallback("xpu", ops=["aten::nonzero", "aten::abs"])
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            for _ in range(3):
                torch.nonzero(x), torch.abs(x)
        print(json.dumps(sorted(str(w.message).split(" has no kernel")[0] for w in caught)))
    """).stdout
    assert json.loads(out) == ["torchplug: aten::abs", "torchplug: aten::nonzero"]


def test_error_policy_names_op_device_dtypes_and_leaves_out_untouched():
    out = scenario("""
        dispatcher.enable_fallback("xpu", ops=["aten::add.out"])
        result = torch.full((4,), 7.0, device="xpu")
        try:
            torch.add(x, x, out=result)
        except NotImplementedError as err:
            print(err)
        print(result.cpu().tolist(), dispatcher.fallback_stats())
    """, TORCHPLUG_FALLBACK="allow,xpu=error").stdout.splitlines()
    assert "torchplug: aten::add.out has no kernel on xpu (dtypes: Float, Float, Float)" in out[0]
    assert "TORCHPLUG_FALLBACK_OPS=aten::add.out=allow" in out[0]
    assert out[-1] == "[7.0, 7.0, 7.0, 7.0] {}"


def test_per_op_environment_policy_overrides_the_backend_default():
    out = scenario("""
        dispatcher.enable_fallback("xpu", ops=["aten::nonzero", "aten::abs"])
        torch.abs(x)
        try:
            torch.nonzero(x)
        except NotImplementedError:
            print("nonzero refused")
        print(dispatcher.fallback_stats())
    """, TORCHPLUG_FALLBACK="allow", TORCHPLUG_FALLBACK_OPS="aten::nonzero=error").stdout.splitlines()
    assert out == ["nonzero refused", "{'xpu': {'aten::abs': 1}}"]


def test_in_place_and_out_semantics_survive_the_round_trip():
    out = scenario("""
        dispatcher.enable_fallback("xpu", ops=["aten::add_.Tensor", "aten::mul.out"])
        dispatcher.set_fallback_policy("xpu", "allow")
        pointer = x.data_ptr()
        x.add_(1)
        result = torch.empty(4, device="xpu")
        returned = torch.mul(x, 2, out=result)
        print(json.dumps([x.cpu().tolist(), x.data_ptr() == pointer, result.cpu().tolist(),
                          returned.data_ptr() == result.data_ptr(), dispatcher.fallback_stats()]))
    """).stdout
    assert json.loads(out) == [[1.0, 3.0, 1.0, 4.0], True, [2.0, 6.0, 2.0, 8.0], True,
                               {"xpu": {"aten::add_.Tensor": 1, "aten::mul.out": 1}}]


def test_view_ops_are_refused_rather_than_copied():
    result = scenario("""
        dispatcher.enable_fallback("xpu", ops=["aten::diagonal"])
        torch.ones(3, 3, device="xpu").diagonal()
    """, check=False, TORCHPLUG_FALLBACK="allow")
    assert result.returncode != 0
    assert "aten::diagonal" in result.stderr and "view" in result.stderr


def test_bad_policies_are_rejected():
    out = scenario("""
        for call in (lambda: dispatcher.set_fallback_policy("xpu", "sometimes"),
                     lambda: dispatcher.enable_fallback("xpu", ops=["aten::nonzerro"])):
            try:
                call()
            except ValueError as err:
                print(type(err).__name__, err)
    """).stdout.splitlines()
    assert "fallback policy 'sometimes' is not one of allow, warn, error" in out[0]
    assert "unknown op 'aten::nonzerro'" in out[1] and "'aten::nonzero'" in out[1]


def test_issue_snippet_on_emulated_xpu():
    out = scenario("""
        import torchplug
        from torchplug import dispatcher, ops

        @dispatcher.kernel("aten::gelu", backend="xpu", dtypes=(torch.float16, torch.float32))
        def my_gelu(x, approximate="none"):
            return torch.nn.functional.gelu(x.cpu(), approximate=approximate).to(x.device)

        print(dispatcher.coverage("xpu").summary())
        with dispatcher.trace() as t:
            y = ops.rms_norm(torch.randn(8, 64, device="xpu"), torch.ones(64, device="xpu"), eps=1e-6)
            torch.nn.functional.gelu(y)
        print(t.table())
        print(dispatcher.fallback_stats())
    """).stdout
    assert "kernel    aten::gelu: torch.float16, torch.float32" in out
    assert any(line.split()[:2] == ["torchplug::rms_norm", "xpu:0"] for line in out.splitlines())
    assert any(line.split()[:2] == ["aten::gelu", "xpu:0"] and "kernel" in line.split() for line in out.splitlines())
    assert out.splitlines()[-1] == "{}"


def test_kernel_on_emulated_device_replaces_the_emulated_runtime_for_its_dtypes():
    out = scenario("""
        @dispatcher.kernel("aten::neg", backend="xpu", dtypes=[torch.float16])
        def neg(x):
            return torch.zeros_like(x)

        print(torch.neg(x).cpu().tolist(), torch.neg(x.half()).cpu().tolist())
    """).stdout
    assert out.strip() == "[-0.0, -2.0, -0.0, -3.0] [0.0, 0.0, 0.0, 0.0]"
