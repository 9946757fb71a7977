"""The loader's PEP 440 range check, against the cases the installed torch can present."""

import tomllib
from pathlib import Path

import pytest
import torch

import torchplug
from torchplug.entrypoints import loaded_backend
from torchplug.entrypoints.versions import (InvalidRange, check_range, declared_torch_range, lower_bound_first,
                                            version_in_range)

DEVICES = Path(__file__).resolve().parents[1] / "devices"


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


@pytest.mark.parametrize("name", ["cpu", "cuda", "mps", "rocm", "xpu"])
def test_each_plugin_declares_its_torch_range_once_in_its_pyproject(name):
    dependencies = tomllib.loads((DEVICES / name / "pyproject.toml").read_text())["project"]["dependencies"]
    (declared,) = [d.removeprefix("torch") for d in dependencies if d.startswith("torch") and d[5] in "<>=!~"]
    # what pip enforced at install is what the loader and the BackendSpec check
    assert declared_torch_range(f"torchplug-{name}") == declared
    assert loaded_backend(name).spec.torch_range == declared
    assert version_in_range(torch.__version__, declared)
    assert version_in_range(torch.__version__, torchplug.TORCH_RANGE)


def test_a_distribution_without_a_torch_range_is_named():
    with pytest.raises(InvalidRange, match="torchplug declares no torch range; add torch>=X,<Y"):
        declared_torch_range("torchplug")  # the core leaves torch out of its dependencies on purpose
    with pytest.raises(InvalidRange, match="torchplug-nosuch is not installed"):
        declared_torch_range("torchplug-nosuch")


def test_metadata_order_is_read_lower_bound_first():
    assert lower_bound_first("<2.16,!=2.12.*,>=2.11") == ">=2.11,!=2.12.*,<2.16"
