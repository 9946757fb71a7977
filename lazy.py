"""Package names that load on first access (PEP 562), for packages imported inside ``import torch``."""

from collections.abc import Callable
from importlib import import_module
from typing import Any


def lazy_exports(package: str, exports: dict[str, tuple[str, ...]]
                 ) -> tuple[list[str], dict[str, str], Callable[[str], Any]]:
    """`__all__`, the name -> submodule map and the module `__getattr__` for `package`, whose
    `exports` maps each submodule to the names it defines. A name must not equal a submodule's:
    importing that submodule would set the package attribute to the module."""
    module_of = {name: module for module, names in exports.items() for name in names}

    def __getattr__(name: str) -> Any:
        if name in module_of:
            return getattr(import_module(f"{package}.{module_of[name]}"), name)
        raise AttributeError(f"module {package!r} has no attribute {name!r}")

    return sorted(module_of), module_of, __getattr__
