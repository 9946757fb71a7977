"""Apple GPUs an emulated mps device can answer as (TORCHPLUG_EMULATE_GPU=<model>): GPU cores as compute
units, SIMD groups of 32, and the unified memory of a common configuration."""

from torchplug.entrypoints import EmulatedShape

GIB = 1 << 30

M1_PRO = EmulatedShape(compute_units=16, warp_size=32, arch="apple-m1", model="m1-pro", name="Apple M1 Pro",
                       memory=16 * GIB)
M3_MAX = EmulatedShape(compute_units=40, warp_size=32, arch="apple-m3", model="m3-max", name="Apple M3 Max",
                       memory=48 * GIB)
OTHERS = (M3_MAX,)
