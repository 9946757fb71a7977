"""The `torchplug` command (console script `torchplug.cli:main`).

The top layer of torchplug: it imports the runtime parts and the contract, and nothing in
torchplug imports it (tests/test_layers.py holds that).
"""

from .main import main

__all__ = ["main"]
