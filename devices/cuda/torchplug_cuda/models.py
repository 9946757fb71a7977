"""NVIDIA GPUs an emulated cuda device can answer as (TORCHPLUG_EMULATE_GPU=<model>).

The figures are each product's own, as torch.cuda.get_device_properties reports them on the
hardware: compute capability, SMs, memory, L2 cache, shared memory a block can opt into, and
threads per SM. The architecture lists are those of the CUDA 13 torch wheels (sm_75 onwards),
and of the CUDA 12.6 wheels for the V100, which CUDA 13 no longer builds for.
"""

from torchplug.entrypoints import EmulatedShape

MIB = 1 << 20
CUDA_13_ARCHES = ("sm_75", "sm_80", "sm_86", "sm_90", "sm_100", "sm_120")
CUDA_12_6_ARCHES = ("sm_50", "sm_60", "sm_70", "sm_75", "sm_80", "sm_86", "sm_90")


def _nvidia(model: str, name: str, capability: tuple[int, int], sms: int, memory_mib: int, l2_mib: int,
            optin_kib: int, threads_per_sm: int = 2048, arches: tuple[str, ...] = CUDA_13_ARCHES) -> EmulatedShape:
    major, minor = capability
    return EmulatedShape(
        compute_units=sms, warp_size=32, arch=f"sm_{major}{minor}", max_threads_per_compute_unit=threads_per_sm,
        arch_list=arches, model=model, name=name, capability=capability, memory=memory_mib * MIB,
        l2_cache_bytes=l2_mib * MIB, shared_memory_per_block_optin=optin_kib * 1024,
    )


A100 = _nvidia("a100", "NVIDIA A100-SXM4-80GB", (8, 0), 108, 81920, 40, 163)
# memory: torch's total_memory (the driver's totalGlobalMem), a little below nvidia-smi's figure (H100:
# 81089 MiB on the recorded H100 against nvidia-smi's 81559; T4: 15109 against 15360)
H100 = _nvidia("h100", "NVIDIA H100 80GB HBM3", (9, 0), 132, 81089, 50, 227)
B200 = _nvidia("b200", "NVIDIA B200", (10, 0), 148, 183359, 126, 227)
L4 = _nvidia("l4", "NVIDIA L4", (8, 9), 58, 23034, 48, 99, threads_per_sm=1536)
T4 = _nvidia("t4", "Tesla T4", (7, 5), 40, 15109, 4, 64, threads_per_sm=1024)
V100 = _nvidia("v100", "Tesla V100-SXM2-32GB", (7, 0), 80, 32768, 6, 96, arches=CUDA_12_6_ARCHES)
OTHERS = (H100, B200, L4, T4, V100)
