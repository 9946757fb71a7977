"""Extension points: how torchplug's runtime parts serve every loaded backend, in the manner of pluggy.

The contract (`Backend`) imports none of the parts. Each part that acts on backends declares a
`RuntimePart` subclass in its distribution's ``torchplug.extensions`` entry-point group (torchplug's
own pyproject.toml declares emulation, collectives, codegen and the dispatcher; another
distribution may add its own) and implements some of the declared points, `HOOKS`, by defining a
method of the point's name. Each point says how its results combine: the first result that is not
None (later implementations are not called), or every result. A part orders itself against others
by name (`before`, `after`). Everything is checked when the parts load, once per process, so a
misspelt point, a signature that does not fit, an unknown name to order by or a cycle is named at
``import torch`` (the part is then off, with a warning that says how to fix it), not when the
point is first called.
"""

import difflib
import heapq
import inspect
import threading
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from importlib.metadata import EntryPoint, entry_points
from typing import Any, ClassVar, Literal

from .. import warn

GROUP = "torchplug.extensions"


@dataclass(frozen=True)
class HookSpec:
    """One extension point: its name, the arguments it is called with, and how results combine."""

    name: str
    parameters: tuple[str, ...]
    result: Literal["first", "all"]  # first: the first result that is not None; all: every result, in order
    doc: str


HOOKS: dict[str, HookSpec] = {spec.name: spec for spec in (
    HookSpec("setup", ("backend",), "all", "at autoload, once per backend (inside import torch: stay cheap)"),
    HookSpec("check_environment", ("plugins",), "all",
             "once per process, when discovery is done: warn about this part's settings that cannot be read or "
             "name no installed plugin (`plugins`); never raise"),
    HookSpec("status", ("backend",), "first", "the backend's DeviceStatus when this part provides its device"),
    HookSpec("device_mode", ("backend",), "first",
             "'emulated' when this part provides the backend's device in place of torch's own runtime, cheaply and "
             "without starting it; else None"),
    HookSpec("device_memory", ("backend",), "first",
             "'host' when this part provides the backend's device in memory the host may read and write in place, "
             "'own' when only the device's runtime reaches its memory (its copies, its launches), cheaply and without "
             "starting it; else None (torch's own runtime drives the device)"),
    HookSpec("ready", ("backend",), "all",
             "before kernels are installed at the backend's dispatch key: start the runtime that registers its own "
             "kernels there first"),
    HookSpec("codegen", ("backend",), "first", "the backend's torch.compile target when this part chooses it"),
    HookSpec("device_module", ("backend",), "first",
             "the object behind torch.<device> (torch.cuda's names) when this part provides the backend's device; "
             "else None. torch.compile's host-memory targets build Dynamo's device interface over it"),
    HookSpec("host_launcher", ("backend",), "first",
             "a HostLauncher (entrypoints/compile_target.py) when this part runs host code on the backend's device "
             "memory: torch.compile then runs Inductor's C++ kernels there through it; else None"),
    HookSpec("triton_interpreter", ("backend",), "first",
             "how Triton kernels run on the backend's device when they run under Triton's interpreter there (an "
             "object with unavailable_reason(), requested(), enable() and install_libdevice()); else None"),
)}


class ExtensionError(TypeError):
    """A runtime part whose declaration does not fit the extension points; the message names it and the fix."""


class RuntimePart:
    """The hooks one runtime part implements for every loaded backend: methods named after points in `HOOKS`.

    `before` and `after` name other parts (their entry-point names) this one runs before or after,
    at every point. Helper methods start with "_": any other public method must be a point.
    """

    name: str = ""  # its entry-point name, set when it loads
    before: ClassVar[tuple[str, ...]] = ()
    after: ClassVar[tuple[str, ...]] = ()
    order: ClassVar[int | None] = None  # deprecated: declare before/after instead (breaks ties when set)


BackendExtension = RuntimePart  # the name before the extension points were declared (deprecated alias)
_OWN = frozenset(vars(RuntimePart))


def implemented(part: RuntimePart) -> list[str]:
    """The points `part` implements; ExtensionError for a public method that is no point or does not fit one."""
    found = []
    for klass in type(part).__mro__:
        if klass is RuntimePart or klass is object:
            break
        for attr, value in vars(klass).items():
            if attr.startswith("_") or attr in _OWN or attr in found or not callable(value):
                continue
            spec = HOOKS.get(attr)
            if spec is None:
                close = difflib.get_close_matches(attr, HOOKS, n=1)
                hint = f" (did you mean {close[0]!r}?)" if close else ""
                raise ExtensionError(
                    f"defines {attr}(), which is no extension point{hint}. "
                    f"Points: {', '.join(HOOKS)}. Fix: rename it to the point it implements, or start a helper's "
                    "name with '_'")
            params = tuple(inspect.signature(getattr(part, attr)).parameters)
            if params != spec.parameters:
                raise ExtensionError(
                    f"implements {attr}({', '.join(params)}), but the extension point is {attr}(self, "
                    f"{', '.join(spec.parameters)}). Fix: take exactly those arguments")
            found.append(attr)
    for field in ("before", "after"):
        names = getattr(part, field)
        if isinstance(names, str) or not all(isinstance(n, str) for n in names):
            raise ExtensionError(f"{field} must be a tuple of part names (entry-point names), got {names!r}")
    return found


def ordered(parts: Sequence[RuntimePart]) -> tuple[list[RuntimePart], dict[str, str]]:
    """`parts` in an order that keeps every before/after (ties: the deprecated `order`, then the name), and
    the parts left out, by name, with why: a name to order by that no part has, or a cycle."""
    by_name = {part.name: part for part in parts}
    left_out: dict[str, str] = {}
    runs_after: dict[str, set[str]] = {name: set() for name in by_name}  # name -> the parts it waits for
    for part in parts:
        for other, first, then in [*((o, part.name, o) for o in part.before), *((o, o, part.name) for o in part.after)]:
            if other in by_name:
                runs_after[then].add(first)
                continue
            close = difflib.get_close_matches(other, by_name, n=1)
            left_out[part.name] = (
                f"it orders itself against {other!r}, but no loaded extension is named so"
                f"{f' (did you mean {close[0]!r}?)' if close else ''}. Loaded: {', '.join(sorted(by_name))}. "
                f"Fix: name a loaded extension in before/after, or drop {other!r}")
    key = {name: (100 if part.order is None else part.order, name) for name, part in by_name.items()}
    waiting = {name: set(firsts) for name, firsts in runs_after.items()}
    ready = [key[name] for name, firsts in waiting.items() if not firsts]
    heapq.heapify(ready)
    result = []
    while ready:
        _, name = heapq.heappop(ready)
        result.append(by_name[name])
        for other, firsts in waiting.items():
            if name in firsts:
                firsts.discard(name)
                if not firsts:
                    heapq.heappush(ready, key[other])
    stuck = sorted(name for name, firsts in waiting.items() if firsts)
    for name in stuck:
        left_out.setdefault(name, f"the before/after declarations of {', '.join(stuck)} form a cycle. Fix: drop "
                                  "one of those declarations")
    return [part for part in result if part.name not in left_out], left_out


_lock = threading.Lock()
_declared: list[EntryPoint] | None = None
_loaded: list[RuntimePart] | None = None
_implemented: dict[str, list[str]] = {}  # part name -> the points it implements
_by_hook: dict[str, list[RuntimePart]] = {}  # point -> the parts that implement it, in order


def declare(points: Iterable[EntryPoint]) -> None:
    """The GROUP entry points found by the loader's one scan of the installed distributions."""
    global _declared
    with _lock:
        if _declared is None:
            _declared = list(points)


def _off(point: EntryPoint, why: str) -> None:
    warn(f"torchplug: extension {point.name!r} ({point.value}) is off: {why}")


def _load(name: str, point: EntryPoint) -> RuntimePart | None:
    """The part `point` declares, named and checked; None, with a warning, when it cannot serve."""
    try:
        part = point.load()()
        if not isinstance(part, RuntimePart):
            raise ExtensionError(f"{point.value} is not a torchplug RuntimePart")
        part.name = name
        _implemented[name] = implemented(part)
    except ExtensionError as err:
        _off(point, str(err))
        return None
    except Exception as err:  # never break `import torch`
        _off(point, f"it failed to load: {type(err).__name__}: {err}. Fix: reinstall the distribution that declares it")
        return None
    if part.order is not None:
        warn(f"torchplug: extension {name!r} ({point.value}) sets the deprecated `order`; declare `before`/`after` "
             "(names of other extensions) instead", DeprecationWarning)
    return part


def extensions() -> list[RuntimePart]:
    """The declared parts, loaded and checked once, in order. One that fails is off, with a warning."""
    global _loaded
    with _lock:
        if _loaded is None:
            points: dict[str, EntryPoint] = {}
            for point in _declared if _declared is not None else entry_points(group=GROUP):
                if point.name in points:  # parts are ordered by name: a name is one part
                    _off(point, f"{points[point.name].value} is declared under the name {point.name!r} too. Fix: "
                                "give one of them another name, or uninstall one")
                else:
                    points[point.name] = point
            found = [part for name, point in sorted(points.items()) if (part := _load(name, point)) is not None]
            _loaded, left_out = ordered(found)
            for name, why in left_out.items():
                _off(points[name], why)
            for part in _loaded:
                for hook in _implemented[part.name]:
                    _by_hook.setdefault(hook, []).append(part)
        return _loaded


def implementing(hook: str) -> list[RuntimePart]:
    """The loaded parts that implement extension point `hook`, in order."""
    extensions()
    return list(_by_hook.get(hook, ()))


def call(hook: str, *args: Any) -> Any:
    """Run extension point `hook` over the parts that implement it, in order, combining as its spec says."""
    spec = HOOKS[hook]
    results = []
    for part in implementing(hook):
        result = getattr(part, hook)(*args)
        if spec.result == "first" and result is not None:
            return result
        results.append(result)
    return None if spec.result == "first" else results

