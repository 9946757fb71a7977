"""`torchplug tune`: measure the settings backends' kernels take from this machine, and record them.

A backend measures what it cannot know from the ISA alone (torchplug-cpu: how far ahead decode's
products prefetch their weights) and records the result in torchplug's cache, where every later
``import torch`` on the same CPU model finds it. Run it once per machine kind, on a quiet machine,
with the thread count you will run on; it builds the backend's extensions first if needed.
"""

import argparse
import json
from dataclasses import asdict

from ..table import format_table


def cmd_tune(args: argparse.Namespace) -> int:
    from ..entrypoints import loaded, loaded_backend

    names = args.backends or list(loaded())
    results, failed = [], False
    for name in names:
        backend = loaded_backend(name)  # PluginError (not installed, or did not load) with the fix
        try:
            tuned = backend.tune()
        except Exception as err:  # e.g. a setting the environment gives that the backend refuses: say which
            failed = True
            results.append({"backend": name, "setting": "-", "value": "FAILED", "detail": f"{type(err).__name__}: {err}"})
            continue
        results.extend({"backend": name, **asdict(setting)} for setting in tuned)
        if not tuned:
            results.append({"backend": name, "setting": "-", "value": "-", "detail": "nothing to measure"})
    if args.json:
        print(json.dumps({"results": results, "ok": not failed}, indent=2))
    else:
        print(format_table(("BACKEND", "SETTING", "VALUE", "DETAIL"),
                           [(r["backend"], r["setting"], r["value"], r["detail"]) for r in results]))
    return 1 if failed else 0


def add_parser(commands: argparse._SubParsersAction) -> None:
    tune = commands.add_parser(
        "tune", help="measure and record the settings a backend's kernels take from this machine",
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    tune.add_argument("backends", nargs="*", metavar="BACKEND", help="only these backends (default: every loaded one)")
    tune.add_argument("--json", action="store_true", help="machine-readable results")
    tune.set_defaults(run=cmd_tune)
