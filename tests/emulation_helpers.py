"""Run Python in a fresh interpreter with emulation settings (they are read at ``import torch``).

The child keeps TORCHPLUG_CACHE, so the runtime is compiled once per cache and reused, and
drops every other TORCHPLUG_* variable, so each test states the settings it relies on
(conftest.run_python).
"""

import json
from typing import Any

from conftest import run_python as run_snippet


def run_json(code: str, **settings: str) -> Any:
    """Run `code`, which prints one JSON document as its last line of output, and parse it."""
    lines = run_snippet(code, **settings).stdout.strip().splitlines()
    return json.loads(lines[-1])


def value(results: dict, name: str) -> Any:
    """What the check `name` (see CHECKS) returned; fails the test with its traceback if it raised."""
    record = results[name]
    assert record["ok"], f"{name} raised {record['error']}: {record['message']}\n{record['trace']}"
    return record["value"]


def error(results: dict, name: str) -> tuple[str, str]:
    """The type and message of what the check `name` raised; fails the test if it returned."""
    record = results[name]
    assert not record["ok"], f"{name} should have raised, returned {record['value']!r}"
    return record["error"], record["message"]


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
