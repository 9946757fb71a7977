"""AMD Instinct GPUs an emulated rocm device can answer as (TORCHPLUG_EMULATE_GPU=<model>).

As torch reports them on a ROCm build: gcnArchName with its target features, the gfx version as
the capability, compute units, wavefronts of 64, memory per GCD, 64 KiB of LDS per workgroup.
The architecture list is that of the ROCm 6 torch wheels.
"""

from torchplug.entrypoints import EmulatedShape

MIB = 1 << 20
ROCM_ARCHES = ("gfx900", "gfx906", "gfx908", "gfx90a", "gfx942", "gfx1030", "gfx1100", "gfx1101", "gfx1200", "gfx1201")


def _instinct(model: str, name: str, arch: str, capability: tuple[int, int], cus: int, memory_mib: int,
              l2_mib: int) -> EmulatedShape:
    return EmulatedShape(
        compute_units=cus, warp_size=64, arch=arch, arch_list=ROCM_ARCHES, model=model, name=name,
        capability=capability, memory=memory_mib * MIB, l2_cache_bytes=l2_mib * MIB,
        shared_memory_per_block=64 * 1024, shared_memory_per_block_optin=64 * 1024,
    )


MI300X = _instinct("mi300x", "AMD Instinct MI300X", "gfx942:sramecc+:xnack-", (9, 4), 304, 196592, 4)
MI250X = _instinct("mi250x", "AMD Instinct MI250X", "gfx90a:sramecc+:xnack-", (9, 0), 110, 65520, 8)
OTHERS = (MI250X,)
