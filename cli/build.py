"""`torchplug build`: compile torchplug's C++ extensions now, instead of on first use.

Each target is built (or found in the cache) in turn; while the compiler runs, torchplug.extension
prints a progress line. Use it to pre-bake a container image, or before timing anything.
"""

import argparse
import json
import os
import sys
import time
from collections.abc import Callable, Sequence
from types import ModuleType

from ..table import format_table


def _dispatcher() -> ModuleType:
    from ..dispatcher import native

    return native.extension()


def _emulation() -> ModuleType:
    from ..emulation import build

    return build.load()


def _distributed() -> ModuleType:
    from ..distributed import build

    return build.load()


# the core's targets, in build order: target -> (extension name, build-or-load function)
CORE_TARGETS: dict[str, tuple[str, Callable[[], ModuleType]]] = {
    "dispatcher": ("torchplug_dispatch", _dispatcher),
    "emulation": ("torchplug_emulation", _emulation),
    "distributed": ("torchplug_distributed", _distributed),
}


def _targets() -> dict[str, list[tuple[str, Callable[[], ModuleType]]]]:
    """Every target: the core's, then each loaded backend that compiles C++ (`Backend.cpp_extensions`).
    A backend's kernels register through the dispatcher's C++ half, so its target builds that first."""
    from ..entrypoints import loaded, loaded_backend

    targets = {name: [extension] for name, extension in CORE_TARGETS.items()}
    for name in loaded():
        if own := loaded_backend(name).cpp_extensions():
            targets.setdefault(name, [CORE_TARGETS["dispatcher"], *own])
    return targets


def about_to_build(argv: Sequence[str] = sys.argv, backend: str | None = None) -> bool:
    """True in `torchplug build`, and in a `torchplug doctor` or `tune` that checks `backend` (any, when None):
    they build what is missing, so a "not built yet" warning at their own ``import torch`` would be wrong by the end."""
    if os.path.basename(argv[0]) != "torchplug" or len(argv) < 2:
        return False
    devices = [arg for arg in argv[2:] if not arg.startswith("-")]
    return argv[1] == "build" or (argv[1] in ("doctor", "tune") and (not devices or backend is None or backend in devices))


def cmd_build(args: argparse.Namespace) -> int:
    from .. import extension
    from ..entrypoints import discover, loaded_backend

    targets = _targets()
    unknown = [target for target in args.targets if target not in targets]
    if unknown:
        if unknown[0] in discover():
            loaded_backend(unknown[0])  # an installed plugin that did not load: PluginError, with the fix
        print(f"torchplug build: unknown target {unknown[0]!r}; choose from {', '.join(targets)} or --all "
              "(a backend's target exists when its plugin is installed and loaded: torchplug list)", file=sys.stderr)
        return 2
    chosen = list(targets) if args.all or not args.targets else args.targets
    results, done = [], set()
    for target in chosen:
        for name, build in targets[target]:
            if name in done:
                continue
            done.add(name)
            compiled_before, start = len(extension.builds), time.perf_counter()
            build()
            compiled = len(extension.builds) > compiled_before
            results.append({"target": target, "extension": name, "result": "built" if compiled else "cached",
                            "seconds": round(time.perf_counter() - start, 2)})
    if args.json:
        print(json.dumps({"cache": str(extension.cache_dir()), "results": results}, indent=2))
    else:
        print(format_table(("TARGET", "EXTENSION", "RESULT", "SECONDS"),
                           [(r["target"], r["extension"], r["result"], f"{r['seconds']:.1f}") for r in results]))
        print(f"\ncache: {extension.cache_dir()}")
    return 0


def add_parser(commands: argparse._SubParsersAction) -> None:
    build = commands.add_parser(
        "build", help="compile torchplug's C++ extensions now (they otherwise build on first use)",
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    build.add_argument("targets", nargs="*", metavar="TARGET",
                       help=f"what to build: {', '.join(CORE_TARGETS)}, or an installed backend that compiles C++ "
                            "(cpu) (default, or --all: every one)")
    build.add_argument("--all", action="store_true", help="build every target (the default)")
    build.add_argument("--json", action="store_true", help="machine-readable results")
    build.set_defaults(run=cmd_build)
