"""Plugin discovery, safe autoload, compatibility checks, the load report and the CLI."""

from .. import TorchplugWarning
from .backend import Backend, DeviceStatus, torch_build_lacks
from .loader import PluginError, PluginRecord, autoload, backend, discover, load, loaded, loaded_backend, records
from .spec import STANDARD_DTYPES, BackendSpec, SpecError
from .versions import declared_torch_range

__all__ = [
    "STANDARD_DTYPES", "Backend", "BackendSpec", "DeviceStatus", "PluginError", "PluginRecord", "SpecError",
    "TorchplugWarning", "autoload", "declared_torch_range", "torch_build_lacks", "backend", "discover", "load",
    "loaded", "loaded_backend",
    "records",
]
