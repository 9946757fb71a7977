"""The conformance suite: op x dtype x mode matrix for a backend, held to the CPU (docs/conformance.md).

  cases/     what a run is made of: ops and samples (opinfo, aten_db), the case record, tiers, the plan
  modes/     the ways a case runs an op; one module per mode, each with its `Mode` record (modes/record.py)
  verdicts/  what a result means: value comparison, statuses, the manifest, fallback legality
  running/   how a run happens: the engine, worker processes, runtime checks, progress
  report/    the JSON report and the views derived from it, and the export to PyTorch's tests
  target.py  the device under test and its CPU reference
The `torchplug check` command is torchplug/cli/check.py; the pytest plugin is pytest_plugin.py.
"""

import importlib
import importlib.abc
import importlib.machinery
import sys
import warnings
from types import CodeType, ModuleType

# Deprecated: the modules' paths before the split by role (torchplug.conformance.<old> -> <new>).
MOVED = {
    "aten_db": "cases.aten_db", "opinfo": "cases.opinfo", "plan": "cases.plan", "tiers": "cases.tiers",
    "alias": "modes.alias", "edge_values": "modes.edge", "errors": "modes.errors", "layout": "modes.layout",
    "meta": "modes.meta", "scalar_types": "modes.scalar_types", "sides": "modes.sides",
    "compare": "verdicts.compare", "fallback": "verdicts.fallback", "manifest": "verdicts.manifest",
    "status": "verdicts.status",
    "check": "running.check", "device": "running.device", "exercised": "running.exercised",
    "progress": "running.progress", "runner": "running.runner", "runtime_checks": "running.runtime_checks",
    "worker": "running.worker",
    "export_pytorch": "report.export_pytorch", "pytorch_template": "report.pytorch_template",
}


class _MovedModules(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Imports an old path as the module at its new one (the same module object), with a DeprecationWarning."""

    def find_spec(self, fullname: str, path: object = None,
                  target: object = None) -> importlib.machinery.ModuleSpec | None:
        package, _, name = fullname.rpartition(".")
        if package != __name__ or name not in MOVED:
            return None
        return importlib.machinery.ModuleSpec(fullname, self)

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType:
        new = _new_path(spec.name)
        warnings.warn(f"{spec.name} moved to {new}; the old path will be removed", DeprecationWarning, stacklevel=2)
        module = importlib.import_module(new)
        spec.loader_state = module.__spec__  # the import system sets the alias spec on the module: restored below
        return module

    def exec_module(self, module: ModuleType) -> None:
        """The module ran when it was imported at its new path: only its own spec is put back."""
        module.__spec__ = module.__spec__.loader_state

    def get_code(self, fullname: str) -> CodeType:
        """`python -m <old path>` (the worker's command before the split) runs the module at its new path."""
        return compile(f"import runpy\nrunpy.run_module({_new_path(fullname)!r}, run_name='__main__', alter_sys=True)",
                       fullname, "exec")


def _new_path(old: str) -> str:
    return f"{__name__}.{MOVED[old.rpartition('.')[2]]}"


sys.meta_path.append(_MovedModules())
