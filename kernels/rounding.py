"""Rounding float32 results to the output dtype the same way on hardware and under the interpreter.

GPUs round float32 -> bfloat16 to nearest-even. Triton's interpreter truncates instead, so a kernel
that relied on `.to(tl.bfloat16)` would give different bits on emulated devices than on real ones.
`to_dtype` rounds bfloat16 with integer arithmetic on the float32 bits, which both execute alike;
float16 and float32 conversions already round to nearest-even everywhere.
"""

import triton
import triton.language as tl


@triton.jit
def to_dtype(value, dtype: tl.constexpr):
    """`value` (float32) rounded to nearest-even in `dtype`."""
    if dtype == tl.bfloat16:
        bits = value.to(tl.uint32, bitcast=True)
        bits = bits + 0x7FFF + ((bits >> 16) & 1)  # carries into the upper half when rounding up
        upper = tl.where(value != value, 0x7FC0, bits >> 16)  # NaN stays a quiet NaN
        return upper.to(tl.uint16).to(tl.bfloat16, bitcast=True)
    else:
        return value.to(dtype)
