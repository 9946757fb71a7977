"""KernelBackend: a Backend whose eager kernels are one `BackendKernels` (Triton or Metal)."""

from ..entrypoints import Backend, DeviceStatus

from .registration import BackendKernels


class KernelBackend(Backend):
    """Registers `kernels` at autoload (once torchplug's ops exist) and says in its status whether they serve."""

    kernels: BackendKernels

    def setup(self) -> None:
        super().setup()
        self.kernels.register_when_ops_defined(self)

    def status(self) -> DeviceStatus:
        return self.kernels.annotate(super().status())  # says whether the kernels serve, and why not
