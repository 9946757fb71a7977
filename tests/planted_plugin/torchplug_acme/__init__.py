"""acme: a new device on torch's PrivateUse1 key, for testing `torchplug check` itself.

With ACME_DEFECTS=1 it registers kernels that give the right values but the wrong semantics
(defects.py), the kind real backends ship. Without it, acme is the emulated runtime and nothing
else, so the conformance suite must pass it.
"""

import os

from torchplug.entrypoints import STANDARD_DTYPES, Backend, BackendSpec


class AcmeBackend(Backend):
    spec = BackendSpec(name="acme", device_type="acme", dispatch_key="PrivateUse1", dtypes=STANDARD_DTYPES,
                       torch_range=">=2.13,<2.16")

    def native_unavailable_reason(self) -> str | None:
        return "acme is a test device: run it emulated (TORCHPLUG_EMULATE=acme)"

    def codegen(self) -> None:
        return None  # no Inductor target: the defects are eager ones, and compiling costs seconds per case

    def setup(self) -> None:
        super().setup()
        if os.environ.get("ACME_DEFECTS") == "1":
            from . import defects

            defects.plant(self.spec.name)


backend = AcmeBackend()
