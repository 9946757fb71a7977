// The AVX-512F kernels (plus AVX2/FMA/F16C, which every AVX-512 CPU has). Only this file is
// compiled for those instructions, and all it defines lives in namespace torchplug_cpu::avx512;
// isa_select.cpp calls it only on CPUs that have them.
#include <immintrin.h>
#include "isa.h"
#pragma GCC target("avx512f,avx2,fma,f16c")
#define TP_ISA avx512
namespace torchplug_cpu::TP_ISA {
#include "vec_avx512.h"
}
#include "isa_table.h"
TP_DEFINE_ISA_KERNELS(Avx512, avx512_kernels)
