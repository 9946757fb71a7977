"""`torchplug check BACKEND --export pytorch DIR`: a manifest as PyTorch's device-generic test configuration.

A vendor runs PyTorch's own OpInfo tests (test/test_ops.py, ...) with the expectations its
manifest states. Two files, in the formats torch's test runner reads:

  disabled_tests.json  the skip entries, as torch.testing._internal.common_utils reads them
                       (--import-disabled-tests FILE, or DISABLED_TESTS_FILE=FILE):
                       {"test_out_linalg_lu_solve_xpu_complex64 (__main__.TestCommon)": [issue link, []]};
                       a name without the device and dtype matches every dtype
  test_configs.py      the device type's test base (PrivateUse1TestBase, XPUTestBase, ...) configured with
                       set_test_configs(op_overrides=..., op_allowlist=...): xfail entries as
                       unittest.expectedFailure, skip entries as unittest.skip, per test and dtype.
                       Load it with TORCH_TEST_DEVICES=DIR/test_configs.py, or import it and call apply()

Each mode maps to the PyTorch test that checks the same thing; modes without a counterpart (alias,
layout, edge, scalar_types) are listed as not exported.
"""

import fnmatch
import json
from dataclasses import dataclass
from pathlib import Path

from ...entrypoints.torch_devices import dispatch_key_of
from ..verdicts.manifest import Entry, Manifest
from .pytorch_template import TEST_CONFIGS


def pytorch_tests() -> dict[str, tuple[str, str]]:
    """mode -> (generic test class, test) in PyTorch's test suite, as each mode's record says (modes/)."""
    from ..modes import all_modes

    return {m.name: m.pytorch_test for m in all_modes() if m.pytorch_test is not None}


@dataclass(frozen=True)
class Expectation:
    """One (entry, op, PyTorch test) an export writes."""

    action: str
    op: str
    test_class: str
    test: str
    dtypes: tuple[str, ...]
    reason: str
    category: str
    issue: str

    def disabled_names(self, device_type: str) -> list[str]:
        """Keys of the disabled-tests JSON: the test without suffixes (every dtype), or one per dtype."""
        base = f"{self.test}_{self.op.replace('.', '_')}"
        names = [base] if not self.dtypes else [f"{base}_{device_type}_{dtype}" for dtype in self.dtypes]
        return [f"{name} (__main__.{self.test_class})" for name in names]


@dataclass
class Export:
    expectations: list[Expectation]
    not_exported: list[str]  # "entry N (modes ...): why"
    files: list[Path]


def expectations(manifest: Manifest, op_names: list[str], runtime: str) -> tuple[list[Expectation], list[str]]:
    """The manifest's entries that apply to `runtime`, one per (op, mode) PyTorch has a test for."""
    found, skipped, tests = [], [], pytorch_tests()
    for number, entry in enumerate(manifest.entries, 1):
        if entry.runtime and runtime not in entry.runtime:
            continue
        modes = entry.modes or tuple(tests)
        if unmapped := [m for m in modes if m not in tests]:
            skipped.append(f"[[{entry.action}]] entry {number} ({entry.reason[:60]}...): modes {', '.join(unmapped)} "
                           "have no PyTorch counterpart")
        ops = sorted({name for name in op_names for pattern in entry.ops if fnmatch.fnmatchcase(name, pattern)})
        for op in ops:
            for mode in modes:
                if mode in tests:
                    found.append(_expectation(entry, op, *tests[mode]))
    return found, skipped


def _expectation(entry: Entry, op: str, test_class: str, test: str) -> Expectation:
    return Expectation(entry.action, op, test_class, test, entry.dtypes, entry.reason, entry.category, entry.issue)


def skipped_outright(manifest: Manifest, op_names: list[str], runtime: str) -> set[str]:
    """Ops a skip entry covers in every mode, dtype and tier: left out of PyTorch's op_allowlist."""
    return {name for e in manifest.entries if e.action == "skip" and not (e.modes or e.dtypes or e.tiers)
            and (not e.runtime or runtime in e.runtime) for name in op_names
            if any(fnmatch.fnmatchcase(name, p) for p in e.ops)}


def disabled_tests(found: list[Expectation], device_type: str, source: str) -> dict[str, list]:
    """torch's disabled-tests format, {"test (__main__.Class)": [issue link, platforms ([]: all)]}, for the
    skip entries: a disabled test does not run. xfail entries run (test_configs.py marks them expected
    failures), so a fix shows as an unexpected success."""
    return {name: [e.issue or f"{source}: [{e.category}] {e.reason}", []]
            for e in found if e.action == "skip" for name in e.disabled_names(device_type)}


def write(manifest: Manifest, backend: str, device_type: str, runtime: str, out_dir: Path,
          op_names: list[str]) -> Export:
    """Write disabled_tests.json and test_configs.py for `backend`'s manifest into `out_dir`."""
    found, not_exported = expectations(manifest, op_names, runtime)
    out_dir.mkdir(parents=True, exist_ok=True)
    source = f"torchplug {backend} manifest {manifest.path}"
    disabled = out_dir / "disabled_tests.json"
    disabled.write_text(json.dumps(disabled_tests(found, device_type, source), indent=1, sort_keys=True) + "\n")
    rows = [[e.action, e.op, e.test_class, e.test, list(e.dtypes), f"[{e.category}] {e.reason}"] for e in found]
    configs = out_dir / "test_configs.py"
    skipped = skipped_outright(manifest, op_names, runtime)
    allowlist = json.dumps(sorted(set(op_names) - skipped), indent=1) if skipped else "None"
    configs.write_text(TEST_CONFIGS.format(
        backend=backend, runtime=runtime, manifest=manifest.path, device_type=json.dumps(device_type),
        # torch's device-generic bases are named by dispatch key: CUDATestBase, ..., PrivateUse1TestBase
        test_base=json.dumps(f"{dispatch_key_of(device_type)}TestBase"),
        expectations="[\n" + "".join(f" {json.dumps(row)},\n" for row in rows) + "]", allowlist=allowlist))
    return Export(found, not_exported, [disabled, configs])
