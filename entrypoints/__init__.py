"""The plugin contract (Backend, BackendSpec, CodegenTarget, the extension points HOOKS and RuntimePart) and the plugin
loader: discovery, safe autoload, compatibility checks and the load report.

The bottom layer of torchplug: it imports no other torchplug package (tests/test_layers.py).
"""

from .. import TorchplugWarning
from .backend import Backend, TunedSetting, torch_build_lacks
from .compile_target import CodegenTarget, HostLauncher
from .device_runtime import DeviceRuntimeError, RuntimeBackend
from .device_status import DeviceMemory, DeviceMode, DeviceStatus, Mode
from .extensions import HOOKS, BackendExtension, ExtensionError, HookSpec, RuntimePart
from .profile import DeviceProfile, EmulatedShape, LaunchConfig, TritonArch
from .loader import PluginError, PluginRecord, autoload, backend, discover, load, loaded, loaded_backend, records
from .spec import STANDARD_DTYPES, BackendSpec, SpecError
from .versions import declared_torch_range

__all__ = [
    "HOOKS", "STANDARD_DTYPES", "Backend", "BackendExtension", "BackendSpec", "CodegenTarget", "DeviceMemory",
    "DeviceMode", "DeviceProfile", "DeviceRuntimeError", "DeviceStatus", "EmulatedShape", "ExtensionError", "HookSpec",
    "HostLauncher", "LaunchConfig", "Mode", "PluginError", "PluginRecord", "RuntimeBackend", "RuntimePart",
    "SpecError", "TorchplugWarning", "TritonArch", "TunedSetting", "autoload", "backend", "declared_torch_range",
    "discover", "load", "loaded", "loaded_backend", "records", "torch_build_lacks",
]
