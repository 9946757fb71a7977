"""Run Python in a fresh interpreter with emulation settings (they are read at ``import torch``).

The child keeps TORCHPLUG_CACHE, so the runtime is compiled once per cache and reused, and
drops every other TORCHPLUG_* variable, so each test states the settings it relies on.
"""

import json
import os
import subprocess
import sys
import textwrap
from typing import Any

_DROP = ("TORCHPLUG_", "TORCH_DEVICE_BACKEND_AUTOLOAD")


def emulation_env(**settings: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(_DROP) or k == "TORCHPLUG_CACHE"}
    env.update(settings)
    return env


def run_snippet(code: str, *, check: bool = True, timeout: int = 600, **settings: str) -> subprocess.CompletedProcess:
    """Run `code` (dedented) with the given TORCHPLUG_* settings; raise with its output if it fails."""
    result = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)], env=emulation_env(**settings), cwd="/",
        capture_output=True, text=True, timeout=timeout,
    )
    if check and result.returncode != 0:
        raise AssertionError(f"snippet failed ({result.returncode}):\n{result.stdout}\n{result.stderr}")
    return result


def run_json(code: str, **settings: str) -> Any:
    """Run `code`, which prints one JSON document as its last line of output, and parse it."""
    lines = run_snippet(code, **settings).stdout.strip().splitlines()
    return json.loads(lines[-1])


# Prepended to snippets that collect many named checks in one process: check(name, fn) records
# fn's result, or the type and message of what it raised, and the snippet prints RESULTS last.
CHECKS = """
import json, traceback
RESULTS = {}
def check(name, fn):
    try:
        RESULTS[name] = {"ok": True, "value": fn()}
    except BaseException as err:
        RESULTS[name] = {"ok": False, "error": type(err).__name__, "message": str(err),
                         "trace": traceback.format_exc(limit=-4)}
"""
