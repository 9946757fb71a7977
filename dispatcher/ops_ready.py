"""Kernels for torchplug's own ops wait until the ops exist (ops.py announces them when it is imported).

Defining the ops costs ~10 ms, so a backend registering kernels for them at autoload waits instead
of importing them inside ``import torch``. Neither the registry nor ops.py is imported here: the
waiting callbacks register through the registry themselves.
"""

import threading
from collections.abc import Callable
from typing import Any

_lock = threading.Lock()
_defined = False
_waiting: list[Callable[[], Any]] = []


def when_torchplug_ops_defined(register_kernels: Callable[[], Any]) -> None:
    """Call `register_kernels` once torchplug's own ops exist: now, or when torchplug.ops is imported.

    Callbacks run outside this lock (they take the registry's lock through `register`).
    """
    with _lock:
        if not _defined:
            _waiting.append(register_kernels)
            return
    register_kernels()


def announce_defined() -> None:
    """Called by ops.py once its ops are defined: run the callbacks that waited for them."""
    global _defined
    with _lock:
        _defined = True
        waiting = _waiting[:]
        _waiting.clear()
    for register_kernels in waiting:
        register_kernels()
