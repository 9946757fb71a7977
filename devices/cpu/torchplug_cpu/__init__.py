"""torchplug-cpu: the CPU backend, on torch's own CPU runtime, with torchplug's fp16 kernels."""

import contextlib
import dataclasses
from collections.abc import Callable, Iterator
from types import ModuleType

import torch

from torchplug import warn
from torchplug.entrypoints import (STANDARD_DTYPES, Backend, BackendSpec, DeviceStatus, TunedSetting,
                                   declared_torch_range)

BUILD_HINT = "build them once with: torchplug build cpu"


class CpuBackend(Backend):
    spec = BackendSpec(
        name="cpu", device_type="cpu", dispatch_key="CPU", dtypes=STANDARD_DTYPES,
        torch_range=declared_torch_range("torchplug-cpu"),
    )

    def __init__(self) -> None:
        super().__init__()
        self.kernel_problem = ""  # why torchplug's kernels are not registered, if they are not

    def native_unavailable_reason(self) -> str | None:
        return None  # every torch build has a CPU

    def setup(self) -> None:
        """Register the cached kernels; never compile here (this runs inside ``import torch``)."""
        super().setup()
        from . import kernels

        not_built = False
        try:
            if kernels.load(build=False) is None:
                self.kernel_problem = "fp16 GEMM and LLM-op kernels not built yet, so torch's own run; " + BUILD_HINT
                not_built = True
        except Exception as err:  # e.g. a TORCHPLUG_CPU_ISA this CPU cannot run: the device still works
            self.kernel_problem = f"kernels not registered: {str(err).removeprefix('torchplug-cpu: ')}"
        if self.kernel_problem:
            from torchplug.cli.build import about_to_build  # argparse & co: only on this path
            from torchplug.extension import first_notice

            if about_to_build(backend=self.spec.name):  # `torchplug build` / `doctor` is about to fix it
                return
            if not_built and not first_notice(self.kernel_problem):
                return  # it holds until the user builds, and `torchplug list` shows it: said once per cache
            warn(f"torchplug-cpu: {self.kernel_problem}" + (" (said once per cache)" if not_built else ""))

    def status(self) -> DeviceStatus:
        from . import kernels

        if kernels.loaded():
            detail = (f"fp16 GEMM and LLM-op kernels active ({kernels.current_isa()}); {kernels.fp16_status()}; "
                      f"{kernels.fp32_status()}")
        else:
            detail = self.kernel_problem or "torchplug kernels unloaded"
        return dataclasses.replace(super().status(), reason=detail)

    def cpp_extensions(self) -> list[tuple[str, Callable[[], ModuleType]]]:
        from . import kernels

        return [("torchplug_cpu_ext", kernels.extension),
                *([(kernels.TEST_PATH_EXTENSION, kernels.test_path)] if kernels.test_path_selected() else [])]

    def tune(self) -> list[TunedSetting]:
        """Measure the skinny products' prefetch and weight streams on the active ISA path (tuning.py) and record it."""
        from . import kernels, tuning

        ext = kernels.load()
        in_force = kernels.gemv_prefetch(measured=False)
        found = tuning.measure(ext, (in_force.level, in_force.kb, in_force.streams), kernels.apply_prefetch)
        where = tuning.record(found)
        kernels.select_isa(ext.current_isa())  # the new record runs from now on in this process too
        speeds = ", ".join(f"{candidate} {gbps:.1f}" for candidate, gbps in found.gbps.items())
        detail = (f"GB/s of fp16 weights ({speeds}; medians of {tuning.ROUNDS} rounds over {found.megabytes} MB "
                  f"on {found.threads} threads, {found.isa} path); before: {in_force.kb} KB into "
                  f"{in_force.level.upper()} x{in_force.streams} ({in_force.source}); another replaces it only "
                  f"{tuning.MARGIN - 1:.0%} faster; recorded for {found.cpu} in {where}")
        if any(name in in_force.source for name in (kernels.PREFETCH_ENV, kernels.PREFETCH_LEVEL_ENV, kernels.STREAMS_ENV)):
            detail += "; the environment variables set still decide while they are"
        return [TunedSetting("prefetch", f"{found.prefetch_kb} KB into {found.prefetch_level.upper()}, "
                                         f"{found.streams} weight stream{'s' if found.streams > 1 else ''}", detail)]

    @contextlib.contextmanager
    def reference_context(self) -> Iterator[None]:
        """torch's own CPU kernels: this backend's registrations are withdrawn while the block runs."""
        from . import kernels

        active = kernels.loaded()
        if active:
            kernels.unload()
        try:
            yield
        finally:
            if active:
                kernels.load(build=False)

    def kernel_summary(self) -> str | None:
        from . import kernels

        return f"torchplug-cpu {kernels.current_isa()}" if kernels.loaded() else None

    def smoke_test(self) -> str:
        """Build and register the kernels if needed, then check an fp16 product against float64 (a
        few rows: the products torchplug's GEMM runs on every CPU)."""
        from . import kernels

        checked = super().smoke_test()
        kernels.load()
        self.kernel_problem = ""
        gen = torch.Generator().manual_seed(0)
        a, b = torch.randn(4, 129, generator=gen).half(), torch.randn(67, 129, generator=gen).half()
        calls = kernels.extension().fp16_gemm_calls()
        got = (a @ b.t()).double()
        if kernels.extension().fp16_gemm_calls() == calls:
            raise AssertionError("a float16 product on the CPU did not reach torchplug's fp16 GEMM")
        error = float((got - a.double() @ b.double().t()).abs().max())
        if error > 0.1:
            raise AssertionError(f"torchplug fp16 GEMM is off by {error} on a 4x129 @ 129x67 product")
        return f"{checked}; fp16 GEMM ({kernels.current_isa()}) max error {error:.1e}"


backend = CpuBackend()
