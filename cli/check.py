"""`torchplug check`: the conformance suite's command line (torchplug/conformance/ runs it)."""

import argparse
import json
import signal
import sys
from pathlib import Path
from typing import Any

from ..conformance.cases.tiers import DEFAULT_DTYPES, TIERS, WIDE_DTYPES, Selection, default_dtypes
from ..conformance.modes import mode_names
from ..conformance.report import failed
from ..entrypoints.loader import PluginError, installed
from ..entrypoints.torch_devices import XPU

# What `torchplug check` alone checks: the smoke tier of the xpu backend, emulated where there is no
# device (the documented default, docs/conformance.md).
DEFAULT_BACKEND = XPU.name
INTERRUPTED = 130  # the shell's code for a command stopped by SIGINT (128 + 2)


def add_parser(commands: Any) -> None:
    check = commands.add_parser(
        "check", help="conformance suite: op x dtype x mode against the CPU (default: smoke tier, emulated xpu)",
        description="Run PyTorch's OpInfo cases on a backend and compare every result with the CPU's.")
    check.add_argument("backend", nargs="?", help=f"backend name (default: {DEFAULT_BACKEND}); a device that is not "
                                                  "here is emulated in host memory")
    check.add_argument("--tier", choices=TIERS, default="smoke")
    modes = mode_names()
    check.add_argument("--modes", default=",".join(modes), help=f"comma-separated subset of {','.join(modes)}")
    check.add_argument("--dtypes", help=f"comma-separated dtype names (smoke: {','.join(DEFAULT_DTYPES)}; "
                                        f"standard and full: {','.join(WIDE_DTYPES)})")
    check.add_argument("--ops", help="regular expression: only ops whose name matches")
    check.add_argument("--op", help="exactly this op (as in a repro line)")
    check.add_argument("--dtype", help="exactly this dtype")
    check.add_argument("--mode", choices=modes, help="exactly this mode")
    check.add_argument("--sample", type=int, help="exactly this sample index")
    check.add_argument("--report", type=Path, metavar="DIR", help="write report.json/.md/.html and junit.xml here")
    check.add_argument("--json", action="store_true", help="print the JSON report on stdout")
    check.add_argument("--native", action="store_true",
                       help="only the real device: refuse, rather than emulate, a device that is not here")
    check.add_argument("--workers", type=int, default=2, help="worker processes (default 2)")
    check.add_argument("--timeout", type=float, default=60.0, help="seconds per case before it is a timeout "
                                                                   "(compile cases get 5x)")
    check.add_argument("--no-runtime-checks", action="store_true", help="only the op matrix")
    check.add_argument("--manifest", type=Path, help="use this conformance.toml instead of the backend's own")
    check.add_argument("--update-manifest", action="store_true",
                       help="write this run's failures into the manifest as xfails (review them)")
    check.add_argument("--coverage", action="store_true",
                       help="after the run, list the backend-relevant ATen overloads no case exercised, and why")
    check.add_argument("--export", nargs=2, metavar=("FORMAT", "DIR"),
                       help="write the manifest in another suite's format (pytorch: disabled_tests.json and "
                            "test_configs.py for PyTorch's own device-generic tests) and run nothing")
    check.add_argument("--compare", nargs=2, type=Path, metavar=("BEFORE", "AFTER"),
                       help="compare two report.json files: regressions, fixes, new crashes (runs nothing)")
    check.set_defaults(run=cmd_check)


def _selection(args: argparse.Namespace) -> Selection:
    modes = (args.mode,) if args.mode else tuple(m.strip() for m in args.modes.split(",") if m.strip())
    if unknown := [m for m in modes if m not in mode_names()]:
        raise SystemExit(f"torchplug check: unknown mode {unknown[0]!r}; choose from {', '.join(mode_names())}")
    if args.dtype or args.dtypes:
        dtypes = (args.dtype,) if args.dtype else tuple(d.strip() for d in args.dtypes.split(",") if d.strip())
    else:
        dtypes = default_dtypes(args.tier)
    import torch

    if unknown := [d for d in dtypes if not isinstance(getattr(torch, d, None), torch.dtype)]:
        raise SystemExit(f"torchplug check: {unknown[0]!r} is not a torch dtype name (e.g. float32, bfloat16)")
    return Selection(args.tier, modes, dtypes, args.ops, args.op, args.sample)


def cmd_compare(before_path: Path, after_path: Path) -> int:
    from ..conformance.report import load
    from ..conformance.report.compare import diff, render

    before, after = load(before_path), load(after_path)
    changes = diff(before, after)
    print(render(before, after, changes))
    return 1 if changes["regressions"] or changes["new_crashes"] else 0


def cmd_check(args: argparse.Namespace) -> int:
    if args.compare:
        return cmd_compare(*args.compare)
    backend = args.backend or DEFAULT_BACKEND
    from ..conformance.verdicts import manifest as manifests
    from ..conformance.running.device import worker_settings

    try:  # a device that cannot be used is reported before anything slow is imported or started
        installed(backend)
        manifest_path = args.manifest or manifests.locate(backend)
        if args.export:
            return cmd_export(backend, manifest_path, *args.export)
        env, emulated = worker_settings(backend, native_only=args.native)
    except PluginError as err:
        print(f"torchplug check: error: {err}", file=sys.stderr)
        return 2
    if emulated:
        print(emulated, file=sys.stderr)
    from ..conformance.running.check import run
    from ..conformance.report.console import render
    from ..conformance.report.schema import interruption
    from ..conformance.running.runner import CheckError

    try:
        manifest = manifests.load(manifest_path)
        report = run(backend, _selection(args), workers=args.workers, timeout_s=args.timeout, env=env,
                     runtime_checks=not args.no_runtime_checks, manifest=manifest)
    except (CheckError, manifests.ManifestError) as err:
        print(f"torchplug check: error: {err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("torchplug check: interrupted before any case ran; no report written", file=sys.stderr)
        return INTERRUPTED
    if report["interrupted"]:
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # the partial report is written in well under a second
    if args.update_manifest and not report["interrupted"]:  # a partial run would drop nothing, but add half
        if manifest_path is None:
            print(f"torchplug check: no manifest location for '{backend}' (give --manifest PATH)", file=sys.stderr)
            return 2
        manifest_path.write_text(manifests.updated(manifest, report))
        print(f"wrote {manifest_path}: review each reason before committing it", file=sys.stderr)
    written = []
    if args.report:
        from ..conformance.report import write_all

        written = write_all(report, args.report)
        if not report["interrupted"]:
            for path in written:
                print(f"wrote {path}", file=sys.stderr)
    if args.json:
        print(json.dumps(report, indent=1, allow_nan=False))
    else:
        print(render(report))
    if report["interrupted"]:
        print(f"torchplug check: interrupted {interruption(report)}; "
              + (f"partial report in {', '.join(map(str, written))}" if written else "no --report DIR, so no report")
              + ("; the manifest was not updated" if args.update_manifest else ""), file=sys.stderr)
        return INTERRUPTED
    if args.coverage:
        from ..conformance.report.coverage import coverage_listing

        print("\n" + coverage_listing(report))
    return 1 if failed(report) else 0


def cmd_export(backend_name: str, manifest_path: Path | None, fmt: str, out_dir: str) -> int:
    from ..conformance.verdicts import manifest as manifests

    if fmt != "pytorch":
        print(f"torchplug check: error: cannot export to {fmt!r}; the formats are: pytorch", file=sys.stderr)
        return 2
    from torchplug.entrypoints import backend as find_backend

    from ..conformance.report.export_pytorch import write
    from ..conformance.cases.opinfo import all_ops

    try:
        manifest = manifests.load(manifest_path)
    except manifests.ManifestError as err:
        print(f"torchplug check: error: {err}", file=sys.stderr)
        return 2
    backend = find_backend(backend_name)
    mode = backend.status().mode
    runtime = "emulated" if mode == "emulated" else "native"  # an unavailable device: its native expectations
    names = [name for name in all_ops() if not name.startswith("torchplug.")]  # PyTorch has no tests for ours
    done = write(manifest, backend_name, backend.spec.device_type, runtime, Path(out_dir), names)
    print(f"{backend_name} ({runtime}) manifest {manifest_path}: {len(done.expectations)} expectations "
          f"for PyTorch's tests")
    for line in done.not_exported:
        print(f"  not exported: {line}")
    for path in done.files:
        print(f"wrote {path}")
    return 0
