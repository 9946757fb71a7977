"""What a new user meets first: one test per finding of the first-run review (issue #21), in its order."""

import importlib.util
import subprocess
import sys
import textwrap

import pytest

from conftest import NPU_ROUND_TRIP, NPU_ROUND_TRIP_PRINTS, REPO, clean_env, run_process, run_python
from test_readme import readme_commands

# 1. The README's main command ends in `torchplug check`, which imports torch's OpInfo database.


def test_the_core_installs_what_its_main_command_imports():
    dependencies = run_python("""
        import re
        from importlib.metadata import requires
        print(sorted(re.split(r"[<>=!~ ;]", r)[0] for r in requires("torchplug") if "extra ==" not in r))
    """).stdout
    for module in ("numpy", "expecttest"):  # torch.testing._internal.common_methods_invocations needs both
        assert f"'{module}'" in dependencies, dependencies


def test_ci_runs_the_readme_main_command_verbatim_in_a_fresh_clone():
    ci = (REPO / ".ci" / "run").read_text()
    assert ".ci/main-job" in ci
    extracted = run_process([REPO / ".ci" / "main-job", "--print"]).stdout
    assert extracted == readme_commands()[0]


# 2. Cold builds: one unity translation unit per extension, built once when processes start together.

def _extension_module():
    spec = importlib.util.spec_from_file_location("torchplug_extension_under_test", REPO / "extension.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_sources_compile_as_one_unity_unit_except_the_separate_ones(tmp_path):
    sources = [tmp_path / name for name in ("a.cpp", "b.cpp", "isa_avx2.cpp")]
    compiled = _extension_module()._unity_sources(tmp_path, sources, separate=("isa_avx2.cpp",))
    assert compiled == [str(tmp_path / "unity.cpp"), str(tmp_path / "isa_avx2.cpp")]
    lines = (tmp_path / "unity.cpp").read_text().splitlines()
    assert [line for line in lines if not line.startswith(("#pragma", "//"))] == [
        f'#include "{tmp_path / n}"' for n in ("a.cpp", "b.cpp")]
    assert lines[0].startswith('#pragma GCC optimize("O1"')  # glue, beside kernels that keep -O3


TINY = """
import sys
from pathlib import Path
from torchplug.extension import load_extension
folder = Path(sys.argv[1])
print(load_extension("torchplug_tiny_test", [folder / "a.cpp", folder / "b.cpp"]).answer())
"""


def test_processes_starting_together_build_an_extension_once(tmp_path):
    (tmp_path / "a.cpp").write_text("int forty() { return 40; }\n")
    (tmp_path / "b.cpp").write_text(textwrap.dedent("""
        #include <pybind11/pybind11.h>
        int forty();
        PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def("answer", [] { return forty() + 2; }); }
    """))
    env = clean_env(TORCHPLUG_CACHE=str(tmp_path / "cache"))
    procs = [subprocess.Popen([sys.executable, "-c", TINY, str(tmp_path)], env=env, cwd="/", text=True,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE) for _ in range(2)]
    results = [(*p.communicate(timeout=600), p.returncode) for p in procs]
    assert [(out.strip(), code) for out, _, code in results] == [("42", 0), ("42", 0)], results
    stderr = "".join(err for _, err, _ in results)
    assert stderr.count("compiling the C++ extension 'torchplug_tiny_test'") == 1, stderr


# 3. A bad emulation variable used to turn emulation off silently.

@pytest.mark.parametrize("variable, value, example", [
    ("TORCHPLUG_EMULATE_MEMORY", "lots", "TORCHPLUG_EMULATE_MEMORY=1GiB"),
    ("TORCHPLUG_EMULATE_DEVICES", "0", "TORCHPLUG_EMULATE_DEVICES=2"),
])
def test_a_bad_emulation_variable_warns_at_the_users_line_and_the_device_says_why(variable, value, example):
    result = run_python("""
        import torch
        try:
            torch.ones(1, device="xpu")
        except RuntimeError as err:
            print(err)
    """, TORCHPLUG_EMULATE="xpu", **{variable: value})
    warning = next(line for line in result.stderr.splitlines() if variable in line)
    assert warning.startswith("<string>:2: TorchplugWarning") and example in warning, result.stderr
    assert result.stdout.startswith("torchplug cannot emulate 'xpu'") and variable in result.stdout, result.stdout


# 4. A script that forgets TORCHPLUG_EMULATE.

@pytest.mark.parametrize("device, hint", [("xpu", "TORCHPLUG_EMULATE=xpu"), ("cuda", "TORCHPLUG_EMULATE=cuda")])
def test_without_emulation_torchs_error_says_how_to_emulate_the_device(device, hint):
    result = run_python(f"""
        import torch
        try:
            torch.ones(1, device="{device}")
        except AssertionError as err:
            print(err)
    """)
    assert result.stdout.startswith("Torch not compiled with") and hint in result.stdout, result.stdout


# 5. `torchplug check`'s summary must agree with its exit code.

def test_a_failed_runtime_check_is_shown_in_full_and_not_called_a_clean_run():
    from torchplug.conformance.report import failed
    from torchplug.conformance.report.console import render

    detail = "TypeError: " + "a long reason that a terminal would cut " * 5 + "ends here"
    report = {
        "backend": {"name": "acme", "device": "acme", "mode": "emulated"}, "versions": {"torch": "2.13.0"},
        "selection": {"tier": "smoke", "dtypes": ["float32"]}, "wall_s": 1.0, "summary": {},
        "unsupported_modes": {}, "cases": [],
        "runtime_checks": [{"name": "save_load_map_location", "status": "fail", "detail": detail}],
    }
    text = render(report)
    assert failed(report) and "no failures" not in text
    assert f"runtime check save_load_map_location fail: {detail}" in text


# 6. The README's plugin snippet, and what torch needs from every device.

def _readme_block(language: str, first_line: str) -> str:
    import re

    blocks = re.findall(rf"```{language}\n(.*?)```", (REPO / "README.md").read_text(), re.S)
    return next(b for b in blocks if b.startswith(first_line)).split("\n", 1)[1]


def test_the_readme_plugin_is_the_example_plugin_and_installs_and_runs_from_a_temporary_folder(tmp_path):
    pyproject = _readme_block("toml", "# pyproject.toml")
    module = _readme_block("python", "# torchplug_example/__init__.py")
    example = REPO / "docs" / "example-plugin"
    assert pyproject == (example / "pyproject.toml").read_text()
    assert module == (example / "torchplug_example" / "__init__.py").read_text()
    source = tmp_path / "plugin"
    (source / "torchplug_example").mkdir(parents=True)
    (source / "pyproject.toml").write_text(pyproject)
    (source / "torchplug_example" / "__init__.py").write_text(module)
    run_process([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-index", "--no-build-isolation",
                 "--target", tmp_path / "site", source], env=clean_env(), cwd=tmp_path)
    printed = run_python(NPU_ROUND_TRIP, path=tmp_path / "site", TORCHPLUG_EMULATE="npu")
    assert printed.stdout.split() == NPU_ROUND_TRIP_PRINTS, printed.stdout + printed.stderr


def test_the_readme_accounts_for_every_file_of_the_example_plugin():
    import re

    readme = (REPO / "README.md").read_text()
    intro = readme.split("## Writing a plugin", 1)[1].split("```", 1)[0]
    shown = re.findall(r"```\w+\n# ([\w./]+)\n", readme)
    folder = REPO / "docs" / "example-plugin"
    files = sorted(str(p.relative_to(folder)) for p in folder.rglob("*") if p.is_file() and "__pycache__" not in p.parts)
    for name in files:
        assert name in shown or f"`{name}`" in intro, f"docs/example-plugin/{name} is neither shown nor named"
    counts = {"one": 1, "two": 2, "three": 3, "four": 4}
    said = re.search(r"the (\w+) files below, verbatim", intro)
    assert said and counts[said[1]] == len([name for name in files if name in shown]), intro


def test_a_spec_without_bool_or_uint8_is_warned_about_when_it_registers():
    result = run_python("""
        import warnings, torch
        from torchplug import TorchplugWarning
        from torchplug.entrypoints import BackendSpec
        spec = BackendSpec(name="tiny", device_type="tiny", dispatch_key="PrivateUse1",
                           dtypes=frozenset({torch.float32, torch.float16}), torch_range=">=2.0")
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            spec.validate(torch.__version__.split("+")[0])
        print([str(w.message) for w in caught if w.category is TorchplugWarning])
    """)
    assert "torch.bool and torch.uint8" in result.stdout and "'tiny'" in result.stdout, result.stdout


# 7. The pytest plugin on a device that is not there.

def test_the_pytest_plugin_gives_a_one_line_usage_error(tmp_path):
    result = run_process([sys.executable, "-m", "pytest", "--torchplug-backend=xpu", "-q", "-p", "no:cacheprovider"],
                         check=False, cwd=tmp_path, env=clean_env())
    assert result.returncode == 4 and "INTERNALERROR" not in result.stdout + result.stderr
    error = [line for line in result.stderr.splitlines() if line.startswith("ERROR:")]
    assert len(error) == 1 and "TORCHPLUG_EMULATE=xpu" in error[0], result.stderr


# 8. An unknown plugin name is reported before the suite starts anything.

def test_check_reports_an_unknown_plugin_before_starting_the_suite():
    result = run_python("""
        import sys
        from torchplug.cli import main
        code = main(["check", "nosuchdevice"])
        print(code, "torchplug.conformance.running.runner" in sys.modules, "torch.testing._internal.opinfo.core" in sys.modules)
    """)
    assert result.stdout.split() == ["2", "False", "False"], result.stdout
    assert "no torchplug plugin named 'nosuchdevice'" in result.stderr


# 9. Warnings point at the user's line: emulated types set up together give one notice, at the line
# that first used one of them (tests/test_emulation_setup.py checks it on xpu and mps). The "inference
# only" warning of torch.compile on emulated cuda is gone with the limit it reported (issue #18).

# 10. Smaller points.

def test_compare_warns_when_the_reports_are_for_different_backends():
    from torchplug.conformance.report.compare import diff, render

    def report(name: str) -> dict:
        return {"backend": {"name": name}, "created": "today", "selection": {"tier": "smoke"}, "summary": {},
                "unsupported_modes": {}, "cases": []}
    before, after = report("xpu"), report("mps")
    assert "different backends (xpu and mps)" in render(before, after, diff(before, after))


def test_report_md_gives_every_status_its_own_symbol_and_explains_blank_cells():
    from torchplug.conformance.report.markdown import SYMBOLS, render

    report = {
        "backend": {"name": "xpu", "device": "xpu", "mode": "emulated", "reference": "cpu", "codegen": "-", "isa": "-"},
        "versions": {"torch": "2.13.0", "torchplug": "0.1.0"}, "selection": {"tier": "smoke"}, "wall_s": 1.0,
        "created": "today", "summary": {"eager": {"counts": {"pass": 1}, "pass_rate": 1.0, "judged": 1}},
        "unsupported_modes": {}, "runtime_checks": [],
        "cases": [{"op": "add", "dtype": "float32", "mode": "eager", "status": "pass"}],
    }
    legend = next(line for line in render(report).splitlines() if line.startswith("Each cell"))
    assert len(set(SYMBOLS.values())) == len(SYMBOLS) and "a blank:" in legend
