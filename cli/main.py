"""The `torchplug` command: `list` plugins, `doctor` runs a real op on each device, `coverage` shows op
routes, `check` runs the conformance suite (cli/check.py), `build` compiles the C++ extensions (cli/build.py),
`tune` measures the settings backends take from the machine (cli/tune.py)."""

import argparse
import difflib
import json
import os
import sys
import time
import warnings
from collections.abc import Sequence
from dataclasses import dataclass

from ..table import format_table

ENV_VARS = ("TORCH_DEVICE_BACKEND_AUTOLOAD",)  # shown with every TORCHPLUG_* variable that is set


@dataclass
class Row:
    name: str
    distribution: str
    version: str
    mode: str  # native | emulated | unavailable, or "-" when the plugin did not load
    status: str  # the load status: loaded | failed | incompatible | skipped | pending
    reason: str
    codegen: str  # the torch.compile target, e.g. "inductor: host-cpp (emulated)"
    collectives: str  # the torch.distributed backend for the device, e.g. "nccl"
    fix: str  # for a plugin that did not load, or a device that is unavailable: what to do
    traceback: str
    load_ms: float


def plugin_rows() -> list[Row]:
    import torch  # noqa: F401  -- importing torch runs the autoload being reported on

    from ..distributed import collective_backend
    from ..entrypoints import records

    rows = []
    for record in records():
        mode, reason, codegen, collectives, fix = "-", record.reason, "-", "-", record.fix
        if record.backend is not None:
            status = record.backend.status()
            mode, reason, fix = status.mode, status.reason, fix or status.fix
            codegen = codegen_status(record.backend)
            collectives = collective_backend(record.backend.spec.device_type, mode)
        rows.append(Row(record.name, record.distribution, record.version, mode, record.status,
                        reason, codegen, collectives, fix, record.traceback, round(record.load_ms, 3)))
    return rows


def codegen_status(backend) -> str:
    """The `torchplug list` line for a backend's torch.compile target."""
    target = backend.codegen()
    if target is not None:
        return target.status()
    if backend.status().mode == "unavailable":
        return "inductor: none — the device is unavailable"
    return "inductor: none — the backend declares no compile target"


def _environment() -> dict[str, str]:
    import torch

    from .. import __version__

    settings = {name: value for name, value in sorted(os.environ.items())
                if name in ENV_VARS or name.startswith("TORCHPLUG_")}
    return {"torch": torch.__version__, "torchplug": __version__, "python": sys.version.split()[0], **settings}


def cmd_list(args: argparse.Namespace) -> int:
    rows = plugin_rows()
    if args.json:
        print(json.dumps({"environment": _environment(), "plugins": [vars(r) for r in rows]}, indent=2))
        return 0
    print(" ".join(f"{k}={v}" for k, v in _environment().items()))
    if not rows:
        print("no torchplug plugins installed (from a torchplug checkout: pip install ./ ./devices/<name>)")
        return 0
    print(format_table(("NAME", "DISTRIBUTION", "VERSION", "MODE", "STATUS", "CODEGEN", "COLLECTIVES", "REASON"),
                 [(r.name, r.distribution, r.version, r.mode, r.status, r.codegen, r.collectives, r.reason)
                  for r in rows]))
    for row in rows:
        if row.fix and row.status != "loaded":
            print(f"\n{row.name}: fix: {row.fix}")
        if args.verbose and row.traceback:
            print(row.traceback.rstrip())
    return 0


def _doctor_check(row: Row) -> tuple[str, str]:
    """PASS/FAIL/SKIP and the detail for one plugin."""
    from ..entrypoints import backend

    if row.status in ("failed", "incompatible", "pending"):
        return "FAIL", f"plugin {row.status}: {row.reason}" + (f"; fix: {row.fix}" if row.fix else "")
    if row.status == "skipped":
        return "SKIP", row.reason
    if row.mode == "unavailable":
        return "SKIP", row.reason
    from .. import extension

    compiled_before, start = len(extension.builds), time.perf_counter()
    try:
        checked = backend(row.name).smoke_test()
        target = backend(row.name).codegen()
        if row.mode == "emulated" and target is not None and target.runs_kernels:
            from ..codegen.canary import canary

            checked += f"; {canary(backend(row.name).device())}"  # the compile patches still fit this torch
    except Exception as err:
        return "FAIL", f"{type(err).__name__}: {err}"
    # A first check may compile an extension: report that apart from the op's own time.
    built = extension.builds[compiled_before:]
    build_s = sum(b.seconds for b in built)
    timing = f"{(time.perf_counter() - start - build_s) * 1e3:.1f} ms"
    if built:
        timing += f"; built {', '.join(b.name for b in built)} first: {build_s:.0f} s"
    return "PASS", f"{checked} ({timing})"


def cmd_doctor(args: argparse.Namespace) -> int:
    """Check every plugin, or the named ones; exit 1 if any asked-for device fails."""
    from ..entrypoints import PluginError, backend

    rows = {row.name: row for row in plugin_rows()}
    asked = args.devices or list(rows)
    results = []
    for name in asked:
        row = rows.get(name)
        if row is None:
            try:
                backend(name)  # raises the not-installed error with its did-you-mean hint
            except PluginError as err:
                results.append({"name": name, "mode": "-", "result": "FAIL", "detail": str(err)})
            continue
        verdict, detail = _doctor_check(row)
        if args.devices and verdict == "SKIP":  # a device asked for by name must work
            verdict = "FAIL"
            if row.mode == "unavailable":
                detail += f"; {row.fix or _emulation_hint(name, rows)}"
        results.append({"name": name, "mode": row.mode, "result": verdict, "detail": detail})
    failed = any(r["result"] == "FAIL" for r in results)
    checked = any(r["result"] != "SKIP" for r in results)
    if failed:
        summary = "some devices FAILED (see DETAIL)"
    elif checked:
        summary = "all requested devices work"
    else:
        summary = "nothing was checked: " + ("no plugin is installed" if not results else
                                              "every device was skipped (see DETAIL)")
    # Devices asked for (by name or TORCHPLUG_DEVICES) of which none ran is a failure, not a pass.
    ok = not failed and (checked or not (args.devices or os.environ.get("TORCHPLUG_DEVICES")))
    if args.json:
        print(json.dumps({"environment": _environment(), "results": results, "checked": checked, "ok": ok},
                         indent=2))
    else:
        print(" ".join(f"{k}={v}" for k, v in _environment().items()))
        print(format_table(("DEVICE", "MODE", "RESULT", "DETAIL"),
                     [(r["name"], r["mode"], r["result"], r["detail"]) for r in results]))
        print(f"\n{summary}")
    return 0 if ok else 1


def _emulation_hint(name: str, installed: Sequence[str]) -> str:
    """How to get `name` without its hardware, noticing a misspelling of it in TORCHPLUG_EMULATE."""
    from ..emulation.config import requested_names

    unknown = [listed for listed in requested_names() if listed not in installed]
    if difflib.get_close_matches(name, unknown, n=1):
        return (f"TORCHPLUG_EMULATE={','.join(requested_names())} names no installed plugin "
                f"(did you mean {name!r}?): set TORCHPLUG_EMULATE={name}")
    return f"without the hardware, emulate it: TORCHPLUG_EMULATE={name}"


def cmd_coverage(args: argparse.Namespace) -> int:
    """For every ATen and torchplug op, the route that serves it on a backend."""
    from ..dispatcher import coverage
    from ..dispatcher.routes import ROUTES

    if unknown := sorted(set(args.route) - set(ROUTES)):
        print(f"torchplug coverage: error: unknown route {', '.join(unknown)}; choose from {', '.join(ROUTES)}",
              file=sys.stderr)
        return 2
    report = coverage(args.backend)
    if args.json:
        print(report.to_json())
    elif args.compare:
        print(report.compare(coverage(args.compare), args.route, args.match, args.differing))
    elif args.ops or args.route or args.match:
        print(report.listing(args.route, args.match))
    else:
        print(report.summary())
        print(f"\nper op: torchplug coverage {args.backend} --ops [--route ROUTE] [--match PATTERN]")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="torchplug", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    listing = commands.add_parser("list", help="every discovered plugin: mode, status and reason")
    listing.add_argument("--json", action="store_true", help="machine-readable output")
    listing.add_argument("-v", "--verbose", action="store_true", help="show failure tracebacks")
    listing.set_defaults(run=cmd_list)
    doctor = commands.add_parser("doctor", help="run a tiny real op on each usable device")
    doctor.add_argument("devices", nargs="*", help="only these backends; each must pass (default: all)")
    doctor.add_argument("--json", action="store_true", help="machine-readable output")
    doctor.set_defaults(run=cmd_doctor)
    cover = commands.add_parser("coverage", help="op -> route (kernel/native/composite/fallback/missing)")
    cover.add_argument("backend", help="a loaded backend, e.g. cpu or xpu")
    cover.add_argument("--json", action="store_true", help="every op with its route, as JSON")
    cover.add_argument("--ops", action="store_true", help="one line per op with its route, not just counts")
    cover.add_argument("--route", action="append", default=[],
                       help="only ops served by this route: kernel, native, composite, fallback or missing "
                            "(repeatable); implies --ops")
    cover.add_argument("--match", metavar="PATTERN",
                       help="only ops whose name matches: a glob (aten::*pool*) or a substring (softmax); implies --ops")
    cover.add_argument("--compare", metavar="OTHER", help="each op's route on BACKEND and on OTHER side by side")
    cover.add_argument("--differing", action="store_true", help="with --compare: only ops whose routes differ")
    cover.set_defaults(run=cmd_coverage)
    from .build import add_parser as add_build
    from .check import add_parser as add_check
    from .tune import add_parser as add_tune

    add_build(commands)
    add_check(commands)
    add_tune(commands)
    args = parser.parse_args(argv)
    from ..entrypoints import PluginError

    # The user's "line" is the command they typed: warnings name their category, not torchplug's source.
    warnings.formatwarning = lambda message, category, *_, **__: f"{category.__name__}: {message}\n"

    try:
        return args.run(args)
    except PluginError as err:  # an explicitly named plugin that cannot be used
        print(f"torchplug: error: {err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:  # Ctrl-C: one line, not a traceback, and the shell's code for SIGINT
        print(f"torchplug {args.command}: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # the reader left (`| head`): stop quietly, as other CLI tools do
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # so the flush at exit cannot fail
        return 0

