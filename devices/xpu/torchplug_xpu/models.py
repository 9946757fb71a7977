"""Intel GPUs an emulated xpu device can answer as (TORCHPLUG_EMULATE_GPU=<model>): Xe-cores as compute
units, sub-groups of 32, and the device memory torch.xpu reports (one tile of a Max 1550)."""

from torchplug.entrypoints import EmulatedShape

GIB = 1 << 30

MAX_1550 = EmulatedShape(compute_units=64, warp_size=32, arch="pvc", model="max1550",
                         name="Intel(R) Data Center GPU Max 1550", memory=64 * GIB, l2_cache_bytes=204 << 20)
ARC_A770 = EmulatedShape(compute_units=32, warp_size=32, arch="dg2", model="arc-a770",
                         name="Intel(R) Arc(TM) A770 Graphics", memory=16 * GIB, l2_cache_bytes=16 << 20)
OTHERS = (ARC_A770,)
