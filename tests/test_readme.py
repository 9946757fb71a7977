"""The README's two set-up commands stay true: pinned torch, and CI runs exactly the test command."""

import re

from conftest import REPO


def readme_commands() -> list[str]:
    blocks = re.findall(r"```bash\n(.*?)```", (REPO / "README.md").read_text(), re.S)
    return [block.strip() for block in blocks[:2]]


def test_readme_opens_with_two_pinned_commands():
    main_job, tests = readme_commands()
    assert all("torch==2.13.0" in command for command in (main_job, tests))
    assert main_job.endswith("torchplug doctor")
    assert tests.endswith("python -m pytest")


def test_ci_runs_exactly_the_readme_test_command():
    ci_lines = [line for line in (REPO / ".ci" / "run").read_text().splitlines()
                if line and not line.startswith(("#", "set ", "cd "))]
    assert ci_lines == [readme_commands()[1]]
