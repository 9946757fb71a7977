"""The README's two set-up commands stay true: pinned torch, a fresh venv each, and CI runs exactly the test command."""

import re

from conftest import REAL_PLUGINS, REPO, run_process


def readme_commands() -> list[str]:
    blocks = re.findall(r"```bash\n(.*?)```", (REPO / "README.md").read_text(), re.S)
    return [block.strip() for block in blocks[:2]]


def test_readme_opens_with_two_commands_that_install_into_venvs_of_their_own():
    main_job, tests = readme_commands()
    for command, venv in ((main_job, ".venv-main"), (tests, ".venv")):  # one after the other reuses nothing
        assert command.startswith(f"python -m venv {venv} && {venv}/bin/pip install torch==2.13.0 "), command
        # every plugin folder, and nothing else: the list's one source is devices/ (conftest.REAL_PLUGINS)
        assert sorted(re.findall(r"\./devices/(\w+)", command)) == REAL_PLUGINS, command
        assert set(re.findall(r"(\.venv[\w-]*)/", command)) == {venv}, command
    # The main job may run further checks after doctor, through the venv's own torchplug.
    assert re.fullmatch(r".* && \.venv-main/bin/torchplug doctor( && \.venv-main/bin/torchplug \w+[\w -]*)*", main_job), main_job
    # The test extra brings what the suite imports beyond torch (numpy, expecttest, triton, ...).
    assert " './[test]' " in tests and tests.endswith(" && .venv/bin/python -m pytest")


def test_ci_runs_exactly_the_readme_test_command_after_removing_any_old_venv():
    assert run_process([REPO / ".ci" / "run", "--print"]).stdout == readme_commands()[1]
    lines = [line for line in (REPO / ".ci" / "run").read_text().splitlines() if line and not line.startswith("#")]
    test_command = lines.index('bash -c "$command"')
    assert any(line.startswith("rm -rf .venv") for line in lines[:test_command])
    # then the README's main command in a fresh clone, and the compatibility tier
    assert [line.split("#")[0].strip() for line in lines[test_command + 1:]] == [".ci/main-job", "bash .ci/compat 2.14.1"]


def test_the_test_extra_declares_what_the_suite_imports():
    extra = re.findall(r'"([^"]+)"', re.search(r"^test = \[(.*?)\]", (REPO / "pyproject.toml").read_text(), re.M)[1])
    names = {re.split(r"[<>=!~ ]", requirement)[0] for requirement in extra}
    assert {"pytest", "numpy", "expecttest", "triton", "setuptools"} <= names
    assert "triton>=3.8,<=3.9.0" in extra  # 3.9.0 beside torch 2.13; 3.8.0, which torch 2.14's CUDA build pins


def test_the_readme_shows_check_timed_cold_and_warm():
    section = (REPO / "README.md").read_text().split("## Conformance (`torchplug check`)", 1)[1]
    rows = {row.split("|")[1].split(":")[0].strip(): row for row in re.findall(r"^\| (?:cold|warm).*$", section, re.M)}
    assert set(rows) == {"cold", "warm"}, rows  # a first run builds, so a warm figure alone misleads
    assert all(len(re.findall(r"\| [\d.]+ s", row)) == 2 for row in rows.values()), rows  # wall and CPU
