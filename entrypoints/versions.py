"""PEP 440 version ranges, checked without importing `packaging`.

The check runs inside every ``import torch`` (a plugin's torch range is read before the plugin is
imported), where importing `packaging.specifiers` alone costs 10-15 ms. Release numbers and the
final/pre/post phase are compared as PEP 440 orders them; local labels (``+cpu``) are ignored.
"""

import re
from importlib.metadata import PackageNotFoundError, requires

_VERSION = re.compile(
    r"^\s*v?(?:\d+!)?(?P<release>\d+(?:\.\d+)*)"
    r"(?P<pre>[-_.]?(?:a|b|c|rc|alpha|beta|pre|preview|dev)[-_.]?\d*)?"
    r"(?P<post>[-_.]?(?:post|rev|r)[-_.]?\d*)?"
    r"(?P<dev>[-_.]?dev[-_.]?\d*)?(?:\+[a-z0-9.]*)?\s*$",
    re.IGNORECASE,
)
# One Requires-Dist line: name, optional extras, specifier (optionally parenthesised), marker.
REQUIREMENT = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)\s*(?:\[[^\]]*\])?\s*\(?([^;)]*)\)?\s*(;.*)?$")
_CLAUSE = re.compile(r"^\s*(~=|===|==|!=|<=|>=|<|>)\s*(\S+?)\s*$")

Key = tuple[tuple[int, ...], int]  # (release, phase): phase -1 pre/dev, 0 final, 1 post


class InvalidRange(ValueError):
    """A version or a specifier that PEP 440 does not allow."""


def parse_version(text: str) -> Key:
    match = _VERSION.match(text)
    if not match:
        raise InvalidRange(f"{text!r} is not a PEP 440 version")
    release = tuple(int(part) for part in match["release"].split("."))
    phase = -1 if (match["pre"] or match["dev"]) else 1 if match["post"] else 0
    return release, phase


def _padded(a: tuple[int, ...], b: tuple[int, ...]) -> tuple[tuple[int, ...], tuple[int, ...]]:
    width = max(len(a), len(b))
    return a + (0,) * (width - len(a)), b + (0,) * (width - len(b))


def _clause_holds(op: str, target: str, version: Key) -> bool:
    if target.endswith(".*"):
        if op not in ("==", "!="):
            raise InvalidRange(f"a '.*' suffix is allowed only with == and !=, not in '{op}{target}'")
        prefix = parse_version(target[:-2])[0]
        return (version[0][: len(prefix)] == prefix) == (op == "==")
    (release, phase), (want, want_phase) = version, parse_version(target)
    release, want = _padded(release, want)
    key, want_key = (release, phase), (want, want_phase)
    if op in ("==", "==="):
        return key == want_key
    if op == "!=":
        return key != want_key
    if op == ">=":
        return key >= want_key
    if op == "<=":
        return key <= want_key
    # PEP 440: '<V' excludes pre-releases of V and '>V' excludes post-releases of V.
    if op == "<":
        return key < want_key and not (release == want and phase < 0 <= want_phase)
    if op == ">":
        return key > want_key and not (release == want and phase > 0 >= want_phase)
    # '~=X.Y.Z' means '>=X.Y.Z' and '==X.Y.*'
    stem = parse_version(target)[0]
    if len(stem) < 2:
        raise InvalidRange(f"'~={target}' needs at least two release numbers")
    prefix = ".".join(map(str, stem[:-1])) + ".*"
    return _clause_holds(">=", target, version) and _clause_holds("==", prefix, version)


def check_range(specifier: str) -> None:
    """Raise InvalidRange unless `specifier` (for example '>=2.13,<2.14') is well formed."""
    version_in_range("0", specifier)


def version_in_range(version: str, specifier: str) -> bool:
    """True when `version` satisfies every comma-separated clause of `specifier`."""
    key = parse_version(version)
    holds = True
    for clause in filter(str.strip, specifier.split(",")):
        match = _CLAUSE.match(clause)
        if not match:
            raise InvalidRange(f"{clause.strip()!r} in {specifier!r} is not a PEP 440 specifier")
        holds = _clause_holds(match[1], match[2], key) and holds
    return holds


def declared_torch_range(distribution: str) -> str:
    """The torch range `distribution` declares in its metadata (its pyproject's dependency on torch).

    A plugin's tested torch range is written once, in its pyproject.toml; pip enforces it at install
    and the loader before import, and the plugin's BackendSpec reads it back from here.
    """
    try:
        lines = requires(distribution) or []
    except PackageNotFoundError:
        raise InvalidRange(f"{distribution} is not installed, so its torch range cannot be read") from None
    for line in lines:
        match = REQUIREMENT.match(line)
        if match and match[1].lower() == "torch" and not (match[3] and "extra" in match[3]):
            check_range(match[2])
            return lower_bound_first(match[2])
    raise InvalidRange(f"{distribution} declares no torch range; add torch>=X,<Y to its dependencies")


def lower_bound_first(specifier: str) -> str:
    """`specifier` with its lower bounds first: metadata writes '<2.16,>=2.13' for '>=2.13,<2.16'."""
    clauses = [clause.strip() for clause in specifier.split(",") if clause.strip()]
    return ",".join(sorted(clauses, key=lambda clause: {">": 0, "<": 2}.get(clause[0], 1)))


def install_torch_command(specifier: str) -> str:
    """The pip command that installs a torch in `specifier`."""
    return f"pip install 'torch{specifier}'"
