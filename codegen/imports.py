"""Run code right after a module is first imported, without importing it ourselves.

torchplug installs its torch.compile targets and passes when Inductor is first imported:
importing Inductor costs over a second, so it never happens inside ``import torch``.
"""

import importlib.abc
import importlib.util
import sys
import threading
import warnings
from collections.abc import Callable
from types import ModuleType
from typing import Any

from .. import TorchplugWarning

_lock = threading.Lock()


def after_import(name: str, callback: Callable[[ModuleType], None], what: str) -> None:
    """Call `callback(module)` once module `name` is imported: now if it already is, else right after.

    `what` names the work in the warning issued if the callback fails; a failure never breaks
    the import of the module itself.
    """
    with _lock:
        module = sys.modules.get(name)
        if module is None:
            sys.meta_path.insert(0, _AfterImport(name, callback, what))
            return
    _call(callback, module, what)


def _call(callback: Callable[[ModuleType], None], module: ModuleType, what: str) -> None:
    try:
        callback(module)
    except Exception as err:
        warnings.warn(f"torchplug: {what} could not be installed ({type(err).__name__}: {err})",
                      TorchplugWarning, stacklevel=3)


class _AfterImport(importlib.abc.MetaPathFinder):
    """Calls `callback(module)` once, right after the module `name` is first imported."""

    def __init__(self, name: str, callback: Callable[[ModuleType], None], what: str) -> None:
        self.name, self.callback, self.what = name, callback, what

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> Any:
        if fullname != self.name:
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(fullname)
        if spec is not None and spec.loader is not None:
            spec.loader = _ThenCall(spec.loader, self)
        return spec


class _ThenCall(importlib.abc.Loader):
    """A module loader that runs a callback after the module executes; all else is the original's."""

    def __init__(self, inner: Any, hook: _AfterImport) -> None:
        self.inner, self.hook = inner, hook

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def create_module(self, spec: Any) -> Any:
        return self.inner.create_module(spec)

    def exec_module(self, module: ModuleType) -> None:
        self.inner.exec_module(module)
        _call(self.hook.callback, module, self.hook.what)
