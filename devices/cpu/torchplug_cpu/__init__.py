"""torchplug-cpu: the CPU backend, on torch's own CPU runtime."""

from torchplug.entrypoints import STANDARD_DTYPES, Backend, BackendSpec


class CpuBackend(Backend):
    spec = BackendSpec(
        name="cpu", device_type="cpu", dispatch_key="CPU", dtypes=STANDARD_DTYPES, torch_range=">=2.13,<2.14"
    )

    def native_unavailable_reason(self) -> str | None:
        return None  # every torch build has a CPU


backend = CpuBackend()
