// The avx512emu kernels: the AVX-512 path's 16-lane code and tiling on AVX2 + FMA + F16C (see
// vec_avx512emu.h). Never chosen by default; TORCHPLUG_CPU_ISA=avx512emu (and the tests) select it.
#include <immintrin.h>
#include "isa.h"
#pragma GCC target("avx2,fma,f16c")
#define TP_ISA avx512emu
namespace torchplug_cpu::TP_ISA {
#include "vec_avx2.h"
#include "vec_avx512emu.h"
}
#include "isa_table.h"
TP_DEFINE_ISA_KERNELS(Avx512Emu, avx512emu_kernels)
