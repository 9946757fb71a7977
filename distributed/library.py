"""The collective library an emulated device stands in for, as torch's Python API reports it.

On a real GPU, `dist.is_nccl_available()` is True and `torch.cuda.nccl.version()` names the NCCL
that torch loaded (RCCL's version on ROCm); XCCL answers `dist.is_xccl_available()`. Code asks
before choosing a path: DDP's bf16 compression hook wants NCCL 2.10+, HF accelerate picks
"xccl" only where it is available. A torch build without the library answers False and raises,
so emulated cuda and xpu would take paths no GPU machine takes.

While the device type is emulated on such a build, torchplug answers as the library would, with
the version its profile declares (labelled emulated in docs/distributed.md):

* `is_<name>_available()` is True. torch itself then names `ProcessGroupNCCL` /
  `ProcessGroupXCCL` (e.g. `isinstance(backend, ProcessGroupNCCL)` in torch.distributed), so
  they become stand-in classes that no backend is an instance of: user code may still build
  their `Options`, which the emulated group accepts and ignores.
* `torch.cuda.nccl.version()` returns the profile's version, and a group made with "nccl" and no
  timeout gets NCCL's default timeout (10 minutes) instead of torch's warning.
* `torch.cuda.nccl.is_available(tensors)` stays False: torch.cuda.nccl's single-process
  collectives (DataParallel's) are not emulated, so torch takes its own other path.

A build that has the library keeps torch's own answers (its NCCL is real, and the emulated route
serves the device anyway, groups.py); nothing changes where the device is not emulated.
"""

import threading
from datetime import timedelta
from types import SimpleNamespace

import torch
import torch.distributed as dist
from torch.distributed import distributed_c10d as c10d

NCCL_DEFAULT_TIMEOUT = timedelta(minutes=10)  # torch's kProcessGroupNCCLDefaultTimeout
FOLLOWED = ("nccl", "xccl")  # the libraries whose rules and identity are emulated (RCCL is torch's "nccl")
_lock = threading.Lock()
_versions: dict[str, tuple[int, ...]] = {}  # library name -> the version reported for it


class _Options:
    """Options of a library's process group: accepted by init_process_group(pg_options=...), ignored
    by the emulated group (it has no streams, communicators or NCCL configuration)."""

    def __init__(self, is_high_priority_stream: bool = False) -> None:
        self.is_high_priority_stream = is_high_priority_stream
        self.config = SimpleNamespace()  # NCCL's ncclConfig_t fields, e.g. config.cga_cluster_size = 4
        self.global_ranks_in_group: list[int] = []
        self.group_name = ""


def _stand_in(library: str) -> type:
    """A class named as torch's ProcessGroup<LIBRARY> for a build without it: nothing is an instance."""

    def refuse(self, *args: object, **kwargs: object) -> None:
        raise RuntimeError(
            f"torchplug: ProcessGroup{library.upper()} cannot be made directly while the device is emulated: "
            f"the library is emulated on torch's gloo. Use dist.init_process_group({library!r}) or "
            f"dist.new_group(backend={library!r}), which give an emulated {library.upper()} group."
        )

    return type(f"ProcessGroup{library.upper()}", (), {
        "__init__": refuse, "__module__": c10d.__name__, "Options": _Options,
        "__doc__": f"Stands in for torch's ProcessGroup{library.upper()}, which this torch build lacks "
                   "(torchplug: the device is emulated).",
    })


def emulated_version(library: str) -> tuple[int, ...] | None:
    """The version reported for `library` while this process emulates it (None otherwise, or unversioned)."""
    return _versions.get(library) or None


def advertise(library: str | None, version: tuple[int, ...] | None) -> None:
    """Make torch.distributed report `library` ("nccl", "xccl") as available, at `version`. Idempotent.

    Only on a torch build without the library: a real one keeps torch's own answers."""
    if library not in FOLLOWED:
        return
    flag = f"_{library.upper()}_AVAILABLE"
    with _lock:
        if library in _versions or getattr(c10d, flag, True):
            return  # done already, or torch has the real library
        _versions[library] = tuple(version or ())
        setattr(c10d, flag, True)
        name = f"ProcessGroup{library.upper()}"
        stand_in = _stand_in(library)
        for module in (c10d, dist):
            if not hasattr(module, name):
                setattr(module, name, stand_in)
        if library == "nccl":
            if not hasattr(torch._C, "_nccl_version"):
                torch.cuda.nccl.version = _nccl_version
            # init_process_group("nccl") without a timeout: NCCL's default (ProcessGroupNCCL.hpp), not a
            # warning that NCCL is not compiled.
            for module in (c10d, torch.distributed.constants):
                if getattr(module, "default_pg_nccl_timeout", 0) is None:
                    module.default_pg_nccl_timeout = NCCL_DEFAULT_TIMEOUT


def _nccl_version() -> tuple[int, ...]:
    """torch.cuda.nccl.version() on emulated cuda: the emulated NCCL's (RCCL's on rocm) version."""
    version = _versions.get("nccl")
    if not version:
        raise RuntimeError("torchplug: the emulated device's profile declares no NCCL version")
    return version
