"""conformance.toml: a backend's expected failures and skips, shipped in the plugin's own package.

    [[xfail]]                      # run; a failure is `xfail`, a pass is `xpass`
    reason = "why, for a human"
    category = "value"             # dtype, value, error-message, unsupported, layout, crash or other
    issue = "https://github.com/org/repo/issues/12"   # optional: where the defect is tracked
    ops = ["nn.functional.*", "linalg.svd"]   # fnmatch patterns over op names
    dtypes = ["float16"]           # optional: every dtype when absent
    modes = ["out"]                # optional: every mode when absent
    tiers = ["full"]               # optional: every tier when absent
    runtime = ["emulated"]         # optional: "native" and/or "emulated" (the device's mode)

    [[skip]]                       # not run at all (for cases that crash or hang the device)
    ...

    native = ["aten::mm", "aten::addmm"]   # ops with a device kernel: a CPU fallback for them fails the case

The manifest is found through the backend's `torchplug.devices` entry point: the file
`conformance.toml` beside the module that entry point names, so a third-party plugin ships its own.
"""

import fnmatch
import importlib.metadata
import importlib.util
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..cases.case import Case, CaseResult
from .status import CRASHES, FAILING

FILENAME = "conformance.toml"
ACTIONS = ("xfail", "skip")
KEYS = ("ops", "dtypes", "modes", "tiers", "runtime")
# Why an entry exists, for triage and for the ecosystem's formats (export_pytorch.py).
CATEGORIES = ("dtype", "value", "error-message", "unsupported", "layout", "crash", "other")


class ManifestError(ValueError):
    pass


@dataclass(frozen=True)
class Entry:
    action: str
    reason: str
    ops: tuple[str, ...]
    dtypes: tuple[str, ...] = ()
    modes: tuple[str, ...] = ()
    tiers: tuple[str, ...] = ()
    runtime: tuple[str, ...] = ()
    category: str = "other"
    issue: str = ""  # a link to where the defect is tracked, if anywhere

    def matches(self, case: Case, tier: str, runtime: str) -> bool:
        return (any(fnmatch.fnmatchcase(case.op, pattern) for pattern in self.ops)
                and (not self.dtypes or case.dtype in self.dtypes)
                and (not self.modes or case.mode in self.modes)
                and (not self.tiers or tier in self.tiers)
                and (not self.runtime or runtime in self.runtime))

    def to_toml(self) -> str:
        lines = [f"[[{self.action}]]", f"reason = {json.dumps(self.reason)}", f"category = {json.dumps(self.category)}"]
        if self.issue:
            lines.append(f"issue = {json.dumps(self.issue)}")
        for key in KEYS:
            if values := getattr(self, key):
                lines.append(f"{key} = [{', '.join(json.dumps(v) for v in values)}]")
        return "\n".join(lines)


@dataclass
class Manifest:
    path: Path | None
    entries: list[Entry]
    runtime: str = "native"  # the device's mode in this run, for entries that name one
    native: tuple[str, ...] = ()  # ops that must never take the CPU fallback ("aten::mm")

    def entry_for(self, case: Case, tier: str, action: str) -> Entry | None:
        return next((e for e in self.entries if e.action == action and e.matches(case, tier, self.runtime)), None)

    def apply(self, result: CaseResult, tier: str) -> CaseResult:
        """Judge the case's fallback route; then xfail entries turn failures into `xfail` and passes into `xpass`."""
        from .fallback import judge

        result = judge(result, self.native)
        entry = self.entry_for(result.case, tier, "xfail")
        if entry is None:
            return result
        if result.status in FAILING:
            result.detail = f"[{result.status}] {result.detail}"
            result.status = "xfail"
        elif result.status == "pass":
            result.status = "xpass"
        result.manifest_reason = entry.reason
        return result


def _load_toml(path: Path) -> dict[str, Any]:
    try:
        import tomllib
    except ModuleNotFoundError:  # Python 3.10
        import tomli as tomllib
    try:
        return tomllib.loads(path.read_text())
    except tomllib.TOMLDecodeError as err:
        raise ManifestError(f"{path}: {err}") from err


def load(path: Path | None) -> Manifest:
    """The manifest at `path`; an empty one when there is no file."""
    if path is None or not path.is_file():
        return Manifest(path, [])
    data = _load_toml(path)
    if unknown := set(data) - {*ACTIONS, "native"}:
        raise ManifestError(f"{path}: unknown top-level keys {sorted(unknown)} (expected {', '.join(ACTIONS)}, native)")
    native = data.get("native", [])
    if not isinstance(native, list) or not all(isinstance(op, str) and "::" in op for op in native):
        raise ManifestError(f"{path}: native must be a list of qualified op names, e.g. [\"aten::mm\"]")
    entries = [_entry(path, action, i, raw) for action in ACTIONS for i, raw in enumerate(data.get(action, []))]
    return Manifest(path, entries, native=tuple(native))


def _entry(path: Path, action: str, index: int, raw: dict[str, Any]) -> Entry:
    """One [[xfail]]/[[skip]] table, validated; errors name the file, the entry and its ops."""
    where = f"{path}: [[{action}]] entry {index + 1}" + (f" (ops {raw['ops']})" if raw.get("ops") else "")
    if not raw.get("reason") or not raw.get("ops"):
        raise ManifestError(f"{where} needs a reason and ops")
    if unknown := set(raw) - {"reason", "category", "issue", *KEYS}:
        raise ManifestError(f"{where} has unknown keys {sorted(unknown)}")
    category = raw.get("category")
    if category not in CATEGORIES:
        got = "has no category" if category is None else f"has category {category!r}"
        raise ManifestError(f"{where} {got}: give one of {', '.join(CATEGORIES)}")
    issue = raw.get("issue", "")
    if not isinstance(issue, str) or (issue and not issue.startswith(("https://", "http://"))):
        raise ManifestError(f"{where} has issue {issue!r}: give a link (https://...) or leave it out")
    for key in KEYS:
        if not isinstance(raw.get(key, []), list) or not all(isinstance(v, str) for v in raw.get(key, [])):
            raise ManifestError(f"{where}: {key} must be a list of strings")
    return Entry(action, raw["reason"], *(tuple(raw.get(k, ())) for k in KEYS), category=category, issue=issue)


def locate(backend: str) -> Path | None:
    """`conformance.toml` beside the module the backend's entry point names (the file may not exist yet)."""
    for entry_point in importlib.metadata.entry_points(group="torchplug.devices"):
        if entry_point.name != backend:
            continue
        top = entry_point.value.split(":")[0].split(".")[0]
        spec = importlib.util.find_spec(top)
        if spec is None:
            return None
        if spec.submodule_search_locations:
            return Path(list(spec.submodule_search_locations)[0]) / FILENAME
        return Path(spec.origin).parent / FILENAME if spec.origin else None
    return None


def updated(manifest: Manifest, report: dict[str, Any]) -> str:
    """The manifest rewritten for this run: entries that no longer fail are dropped, new failures added.

    An xfail entry is dropped only when it matched cases in this run and every one of them passed
    (xpass); entries this run did not exercise (other tiers, dtypes) stay. New failures become one
    xfail entry per (mode, cause), for the author to review and reword.
    """
    from ..report.groups import failure_groups

    tier, runtime = report["selection"]["tier"], report["backend"]["mode"]
    cases = report["cases"]
    kept = []
    for entry in manifest.entries:
        matched = [c for c in cases
                   if entry.matches(Case(c["op"], c["dtype"], c["mode"], c["sample"]), tier, runtime)]
        if entry.action == "xfail" and matched and all(c["status"] == "xpass" for c in matched):
            continue
        kept.append(entry)
    selected_dtypes = set(report["selection"]["dtypes"])
    for group in failure_groups(cases, FAILING):
        reason = f"{group.status}: {group.cause}" if group.status != "fail" else group.cause
        by_dtypes: dict[frozenset[str], list[str]] = {}  # ops failing on the same dtypes share an entry
        for op in group.ops:
            failing = frozenset(c["dtype"] for c in group.cases if c["op"] == op)
            by_dtypes.setdefault(failing, []).append(op)
        for failing, ops in sorted(by_dtypes.items(), key=lambda kv: sorted(kv[0])):
            dtypes = () if failing == selected_dtypes else tuple(sorted(failing))
            kept.append(Entry("xfail", reason, tuple(ops), dtypes, (group.mode,), runtime=(runtime,),
                              category=guess_category(group.status, group.mode, group.cause)))
    header = (f"# torchplug check manifest for '{report['backend']['name']}' ({FILENAME}): expected failures and skips.\n"
              f"# Written by --update-manifest on the {tier} tier; review every reason. Format: torchplug/conformance/verdicts/manifest.py\n")
    native = f"native = [{', '.join(json.dumps(op) for op in manifest.native)}]\n\n" if manifest.native else ""
    return header + native + "\n\n".join(entry.to_toml() for entry in kept) + "\n"


def guess_category(status: str, mode: str, cause: str) -> str:
    """A first category for an entry --update-manifest writes (the author reviews it)."""
    if status in CRASHES:
        return "crash"
    if "does not support torch." in cause or "dtype" in cause.split(":")[0]:
        return "dtype"
    from ..modes import all_modes

    if category := next((m.category for m in all_modes() if m.name == mode), ""):  # errors: error-message, ...
        return category
    if " differ" in cause or "float64 arbitration" in cause:
        return "value"
    if "NotImplementedError" in cause or "not implemented" in cause:
        return "unsupported"
    return "other"
