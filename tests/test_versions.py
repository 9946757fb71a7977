"""The loader's PEP 440 range check, against the cases the installed torch can present."""

import pytest

from torchplug.entrypoints.versions import InvalidRange, check_range, version_in_range


@pytest.mark.parametrize("version, specifier, expected", [
    ("2.13.0+cpu", ">=2.13,<2.14", True),
    ("2.13.5", ">=2.13,<2.14", True),
    ("2.14.0", ">=2.13,<2.14", False),
    ("2.12.9", ">=2.13,<2.14", False),
    ("2.14.0.dev20260101+cpu", "<2.14", False),   # '<V' excludes pre-releases of V
    ("2.14.0.dev20260101+cpu", "<2.15", True),
    ("2.13.0rc2", ">=2.13", False),               # a pre-release sorts before its final
    ("2.13.0.post1", ">2.13.0", False),           # '>V' excludes post-releases of V
    ("2.13.1", ">2.13.0", True),
    ("2.13.0", "==2.13", True),                   # release numbers are zero-padded
    ("2.13.4", "==2.13.*", True),
    ("2.14.0", "!=2.13.*", True),
    ("2.13.9", "~=2.13.0", True),
    ("2.14.0", "~=2.13.0", False),
    ("2.13.0", "", True),
    ("3.0", ">=3.0", True),
])
def test_version_in_range(version, specifier, expected):
    assert version_in_range(version, specifier) is expected


@pytest.mark.parametrize("specifier", [">=two", "=>2.13", ">=2.13.*", "~=2", "2.13"])
def test_malformed_ranges_are_rejected(specifier):
    with pytest.raises(InvalidRange):
        check_range(specifier)
