"""torchplug's layers, read from its source: every import, including those inside functions.

From the bottom: the root modules and the contract (`entrypoints`: Backend, BackendSpec, the
loader); the runtime parts (dispatcher, emulation, codegen, distributed, conformance, kernels);
the CLI (`cli`), which nothing imports; the plugins (`torchplug_<name>`), which the core never
imports. A cycle between top-level packages, or an import against the layers, fails here with
the importing file and line.
"""

import ast
import importlib
from pathlib import Path

import pytest
import torchplug
from conftest import REAL_PLUGINS

PACKAGE = Path(torchplug.__file__).parent  # the installed package: what users import
CONTRACT = "entrypoints"
CLI = "cli"
RUNTIME = ("dispatcher", "emulation", "codegen", "distributed", "conformance", "kernels", "binding")


def _module_name(path: Path, root: Path = PACKAGE) -> list[str]:
    parts = list(path.relative_to(root).with_suffix("").parts)
    return parts[:-1] if parts[-1] == "__init__" else parts


def _imports(source: str, package: list[str], top: str = "torchplug") -> list[tuple[str, int]]:
    """Every module `source` (a module of <top>.<package>) imports, absolute, with its line;
    `from x import y` also yields x.y, which is how a submodule y is imported."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found += [(alias.name, node.lineno) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = [top, *package[: len(package) - node.level + 1]]
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module or ""
            found.append((module, node.lineno))
            found += [(f"{module}.{alias.name}", node.lineno) for alias in node.names]
    return found


def _file_imports(path: Path, root: Path = PACKAGE) -> list[tuple[str, int]]:
    """`path`'s imports, with relative ones resolved inside the package at `root`."""
    name = _module_name(path, root)
    return _imports(path.read_text(), name if path.name == "__init__.py" else name[:-1], root.name)


def _unit(module: str) -> str | None:
    """The unit a torchplug module belongs to: its top-level package or root module ("__init__" for
    names defined in torchplug/__init__.py); None outside torchplug."""
    parts = module.split(".")
    if parts[0] != "torchplug" or len(parts) == 1:
        return None
    top = parts[1]
    return top if (PACKAGE / top).is_dir() or (PACKAGE / f"{top}.py").is_file() else "__init__"


def _graph() -> dict[tuple[str, str], list[str]]:
    """(importer unit, imported unit) -> where, for every import between two different units."""
    edges: dict[tuple[str, str], list[str]] = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        source = _unit(".".join(["torchplug", *_module_name(path)])) or "__init__"
        for module, line in _file_imports(path):
            target = _unit(module)
            if target is not None and target != source:
                edges.setdefault((source, target), []).append(f"{path.relative_to(PACKAGE)}:{line}")
    return edges


def _cycle(edges: dict[tuple[str, str], list[str]]) -> list[str]:
    """One cycle between units, as the list of units on it, or []."""
    successors: dict[str, set[str]] = {}
    for source, target in edges:
        successors.setdefault(source, set()).add(target)
    state: dict[str, str] = {}

    def visit(unit: str, path: list[str]) -> list[str]:
        state[unit] = "open"
        for nxt in sorted(successors.get(unit, ())):
            if state.get(nxt) == "open":
                return path[path.index(nxt):] + [nxt]
            if nxt not in state and (found := visit(nxt, path + [nxt])):
                return found
        state[unit] = "done"
        return []

    for unit in sorted(successors):
        if unit not in state and (found := visit(unit, [unit])):
            return found
    return []


def test_the_reader_sees_relative_imports_and_imports_inside_functions():
    source = "from .. import warn\nfrom ..entrypoints import backend\n\ndef f():\n    from .build import load\n"
    assert _imports(source, ["emulation"]) == [
        ("torchplug", 1), ("torchplug.warn", 1), ("torchplug.entrypoints", 2), ("torchplug.entrypoints.backend", 2),
        ("torchplug.emulation.build", 5), ("torchplug.emulation.build.load", 5)]
    assert _unit("torchplug.warn") == "__init__" and _unit("torchplug.emulation.build.load") == "emulation"
    assert ("cli", "dispatcher") in _graph()  # cli/build.py imports the dispatcher inside a function


def test_no_cycle_between_top_level_packages():
    edges = _graph()
    cycle = _cycle(edges)
    where = {f"{a} -> {b}": edges[(a, b)][:3] for a, b in zip(cycle, cycle[1:])}
    assert cycle == [], f"import cycle {' -> '.join(cycle)}: {where}"


def test_the_contract_imports_no_runtime_part_and_nothing_imports_the_cli():
    edges = _graph()
    upward = {edge: where for edge, where in edges.items()
              if (edge[0] in (CONTRACT, "__init__") and edge[1] in (*RUNTIME, CLI)) or (edge[1] == CLI)}
    assert upward == {}


def test_the_core_never_imports_a_plugin():
    plugins = [f"{path.relative_to(PACKAGE)}:{line} imports {module}" for path in sorted(PACKAGE.rglob("*.py"))
               for module, line in _file_imports(path) if module.startswith("torchplug_")]
    assert plugins == [], "the core asks a plugin's Backend instead of importing the plugin"


def _module_cycles(root: Path = PACKAGE) -> list[list[str]]:
    """Groups of the package's modules that import each other, directly or through others (Tarjan's SCCs)."""
    files = {".".join([root.name, *_module_name(p, root)]): p for p in root.rglob("*.py")}
    edges: dict[str, set[str]] = {}
    for name, path in files.items():
        for module, _ in _file_imports(path, root):
            while module and module not in files:  # `from pkg.mod import name` names pkg.mod
                module = module.rpartition(".")[0]
            if module and module != name and not name.startswith(module + "."):  # a package's own __init__
                edges.setdefault(name, set()).add(module)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    groups = []

    def visit(module: str) -> None:
        index[module] = low[module] = len(index)
        stack.append(module)
        for other in edges.get(module, ()):
            if other not in index:
                visit(other)
                low[module] = min(low[module], low[other])
            elif other in stack:
                low[module] = min(low[module], index[other])
        if low[module] == index[module]:
            group = []
            while not group or group[-1] != module:
                group.append(stack.pop())
            if len(group) > 1:
                groups.append(sorted(group))

    for module in sorted(files):
        if module not in index:
            visit(module)
    return sorted(groups)


@pytest.mark.parametrize("package", ["torchplug", *(f"torchplug_{name}" for name in REAL_PLUGINS)])
def test_no_cycle_between_modules(package):
    assert _module_cycles(Path(importlib.import_module(package).__file__).parent) == []


# Modules outside emulation that still reach into it, each for a reason: conformance starts the emulated
# runtime it checks. Everything else asks the extension points (entrypoints/extensions.py).
EMULATION_GLUE = ("conformance/",)


def test_no_runtime_part_imports_emulation_it_asks_the_extension_points():
    reaching = [f"{path.relative_to(PACKAGE)}:{line} imports {module}" for path in sorted(PACKAGE.rglob("*.py"))
                if _unit(".".join(["torchplug", *_module_name(path)])) in RUNTIME
                and _unit(".".join(["torchplug", *_module_name(path)])) != "emulation"
                and not str(path.relative_to(PACKAGE)).startswith(EMULATION_GLUE)
                for module, line in _file_imports(path) if _unit(module) == "emulation"]
    assert reaching == [], "ask the extension points (device_mode, ready, triton_interpreter) instead"




def test_the_emulation_setting_has_one_reader():
    """Only emulation/config.py names TORCHPLUG_EMULATE as a lone string (an environment key): the rest ask it."""
    readers = sorted(str(path.relative_to(PACKAGE)) for path in PACKAGE.rglob("*.py")
                     if any(isinstance(node, ast.Constant) and node.value == "TORCHPLUG_EMULATE"
                            for node in ast.walk(ast.parse(path.read_text()))))
    assert readers == ["emulation/config.py"], \
        "ask emulation/config.py (or, outside emulation, the extension points) instead of reading TORCHPLUG_EMULATE"
