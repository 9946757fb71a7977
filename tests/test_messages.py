"""What a user reads when a setting is wrong: the message names the setting, the real cause and a fix that works."""

import re
import sys

import pytest

from conftest import REAL_PLUGINS, REPO, clean_env, cli_json, make_plugin, plugin_source, run_cli, run_process, run_python

USER_FACING = [*REPO.glob("*.md"), *REPO.glob("docs/**/*.md"),
               *(p for p in REPO.rglob("*.py") if not p.is_relative_to(REPO / "tests") and not any(part.startswith(".venv") for part in p.parts))]


def test_a_misspelt_emulate_name_warns_and_doctor_points_at_the_typo():
    result = run_cli("doctor", "xpu", TORCHPLUG_EMULATE="xpuu")
    assert "TORCHPLUG_EMULATE names 'xpuu'" in result.stderr and "did you mean 'xpu'?" in result.stderr
    assert result.returncode == 1
    assert "TORCHPLUG_EMULATE=xpuu names no installed plugin (did you mean 'xpu'?): set TORCHPLUG_EMULATE=xpu" \
        in result.stdout, result.stdout


def test_an_unreadable_emulate_memory_fix_names_the_variable_with_a_valid_example():
    listing = cli_json("list", TORCHPLUG_EMULATE="xpu", TORCHPLUG_EMULATE_MEMORY="1GBB")
    xpu = next(p for p in listing["plugins"] if p["name"] == "xpu")
    assert xpu["status"] == "failed" and "'1GBB'" in xpu["reason"]
    assert "TORCHPLUG_EMULATE_MEMORY=1GiB" in xpu["fix"] and "reinstall" not in xpu["fix"], xpu["fix"]


@pytest.mark.parametrize("settings, named, example", [
    ({"TORCHPLUG_EMULATE_INDUCTOR": "tritn"}, "TORCHPLUG_EMULATE_INDUCTOR='tritn' is not a compile mode",
     "TORCHPLUG_EMULATE_INDUCTOR=triton"),
    ({"TORCHPLUG_EMULATE": "xpu", "TORCHPLUG_EMULATE_FORCE": "maybe"}, "TORCHPLUG_EMULATE_FORCE names 'maybe'",
     "TORCHPLUG_EMULATE_FORCE=xpu"),
    ({"TORCHPLUG_EMULATE": "xpu", "TORCHPLUG_EMULATE_DEVICES": "xpu=2,foo=1"}, "TORCHPLUG_EMULATE_DEVICES names 'foo'",
     "TORCHPLUG_EMULATE_DEVICES=xpu=2"),
    ({"TORCHPLUG_EMULATE": "xpu", "TORCHPLUG_EMULATE_MEMORY": "xpuu=1G"}, "TORCHPLUG_EMULATE_MEMORY names 'xpuu'",
     "TORCHPLUG_EMULATE_MEMORY=xpu=1GiB"),
    ({"TORCHPLUG_EMULATE": "xpu", "TORCHPLUG_EMULATE_MEMORY": "0"}, "TORCHPLUG_EMULATE_MEMORY: '0' is no capacity",
     "TORCHPLUG_EMULATE_MEMORY=1GiB"),
    ({"TORCHPLUG_EMULATE": "xpu", "TORCHPLUG_EMULATE_GPU": "cudaa=h100"}, "TORCHPLUG_EMULATE_GPU names 'cudaa'",
     "TORCHPLUG_EMULATE_GPU=cuda=h100"),
    ({"TORCHPLUG_EMULATE": "xpu,cuda", "TORCHPLUG_EMULATE_GPU": "h10"}, "TORCHPLUG_EMULATE_GPU names model 'h10'",
     "TORCHPLUG_EMULATE_GPU=h100"),
    ({"TORCHPLUG_FALLBACK": "bogus"}, "TORCHPLUG_FALLBACK entry 'bogus': fallback policy 'bogus'",
     "TORCHPLUG_FALLBACK=warn,xpu=error"),
    ({"TORCHPLUG_FALLBACK": "warn,xpuu=error"}, "TORCHPLUG_FALLBACK names 'xpuu'", "TORCHPLUG_FALLBACK=warn,xpu=error"),
    ({"TORCHPLUG_FALLBACK_OPS": "aten::nonzero"}, "TORCHPLUG_FALLBACK_OPS entry 'aten::nonzero'",
     "TORCHPLUG_FALLBACK_OPS=aten::nonzero=allow"),
])
def test_a_bad_value_is_named_at_the_users_import_torch_line_with_a_valid_example(settings, named, example):
    result = run_python("import torch", **settings)
    warnings = [line for line in result.stderr.splitlines() if named in line]
    assert len(warnings) == 1, result.stderr
    assert warnings[0].startswith("<string>:1: TorchplugWarning: ") and f"{example}" in warnings[0], warnings[0]


def test_a_bad_fallback_policy_still_stops_the_fallback_it_would_govern():
    result = run_python("""
        import torch, torchplug.dispatcher as d
        try:
            d.enable_fallback("xpu")
        except ValueError as err:
            print(err)
    """, TORCHPLUG_EMULATE="xpu", TORCHPLUG_FALLBACK="eror")
    assert "fallback policy 'eror' is not one of allow, warn, error; e.g. TORCHPLUG_FALLBACK=warn,xpu=error" \
        in result.stdout, result.stdout


def test_strict_mode_names_the_plugins_that_failed():
    result = run_python("import torch", check=False, TORCHPLUG_STRICT="1", TORCHPLUG_EMULATE="xpu",
                        TORCHPLUG_EMULATE_DEVICES="0")
    assert result.returncode != 0
    assert "TORCHPLUG_STRICT=1 and these torchplug plugins failed to load: xpu (torchplug-xpu)\n" in result.stderr


def test_strict_modes_last_line_names_a_failed_plugin_not_the_first_one_torch_called(tmp_path):
    make_plugin(tmp_path, "acme", plugin_source("acme"))  # healthy, and first on the path: torch calls it first
    result = run_python("import torch", path=tmp_path, check=False, TORCHPLUG_STRICT="1", TORCHPLUG_EMULATE="xpu",
                        TORCHPLUG_EMULATE_DEVICES="0")
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith("RuntimeError: Failed to load the backend extension: torchplug_xpu."), result.stderr
    assert "these torchplug plugins failed to load: xpu (torchplug-xpu)\n" in result.stderr


def test_install_hints_name_repository_folders_and_only_for_real_plugins():
    typo = run_cli("doctor", "xpuu")
    assert "did you mean 'xpu'?" in typo.stdout and "pip install" not in typo.stdout, typo.stdout
    from torchplug.entrypoints.loader import install_hint, repository_plugins

    # the installed copy reads the list from the devices/ folders' pyproject.toml files it ships
    assert list(repository_plugins()) == REAL_PLUGINS
    assert all(f"pip install ./ ./devices/{name}" in install_hint(name) for name in REAL_PLUGINS)
    assert install_hint("npu") == "install the plugin distribution that provides it"
    # No torchplug distribution is published: a hint to install one by name could fetch anyone's package.
    offenders = [str(p) for p in USER_FACING if re.search(r"pip install torchplug-", p.read_text())]
    assert not offenders


def test_doctor_with_nothing_checked_says_so_and_fails():
    result = run_cli("doctor", TORCHPLUG_DEVICES="xpuu")
    assert result.returncode == 1 and "nothing was checked" in result.stdout, result.stdout
    assert "all requested devices work" not in result.stdout


def test_warnings_point_at_the_users_line_not_torchplugs(tmp_path):
    script = tmp_path / "user_script.py"
    script.write_text('import torch\nx = torch.ones(1, device="xpu")\n')
    result = run_process([sys.executable, "-W", "always", script], cwd=tmp_path,
                         env=clean_env(TORCHPLUG_DEVICES="xpu,xpuu", TORCHPLUG_EMULATE="xpu"))
    assert f"{script}:1: TorchplugWarning: TORCHPLUG_DEVICES names 'xpuu'" in result.stderr, result.stderr
    assert f"{script}:2: EmulationNotice:" in result.stderr, result.stderr
    assert "torchplug" not in "".join(line for line in result.stderr.splitlines(True) if line.startswith("  "))


def test_no_internal_project_wording_reaches_users():
    internal = re.compile(r"the issue's snippet|target of issue|arrives with its own issue")
    assert not [str(p) for p in USER_FACING if internal.search(p.read_text())]


def test_the_readme_dispatcher_snippet_says_it_needs_an_emulated_xpu():
    readme = (REPO / "README.md").read_text()
    section = readme[readme.index("## The dispatcher"):readme.index("```python", readme.index("## The dispatcher"))]
    assert "TORCHPLUG_EMULATE=xpu" in section
