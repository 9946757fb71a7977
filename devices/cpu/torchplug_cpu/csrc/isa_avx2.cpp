// The AVX2 + FMA + F16C kernels. Only this file is compiled for those instructions (the pragma
// below, instead of -mavx2 for the whole extension), and all it defines lives in namespace
// torchplug_cpu::avx2; isa_select.cpp calls it only on CPUs that have them.
#include <immintrin.h>
#include "isa.h"
#pragma GCC target("avx2,fma,f16c")
#define TP_ISA avx2
namespace torchplug_cpu::TP_ISA {
#include "vec_avx2.h"
}
#include "isa_table.h"
TP_DEFINE_ISA_KERNELS(Avx2, avx2_kernels)

namespace torchplug_cpu {
namespace TP_ISA {
#include "quant_int8_activations.h"
#include "quant_int16_activations.h"
#include "quant_avx2_dots.h"
}  // namespace TP_ISA

const IsaKernels::QuantTasks* avx2_int4_gemv_int8_dots() {
  return TP_ISA::int8_activation_kernels<TP_ISA::QuantAvx2Dots<TP_ISA::Avx2>>();
}

const IsaKernels::QuantTasks* avx2_int8_gemv_int16_dots() {
  return TP_ISA::int16_activation_kernels<TP_ISA::Int8Avx2<TP_ISA::Avx2>>();
}
}  // namespace torchplug_cpu
