// int4 decode rows with int8 activations, int8 products and int4 prefill with int16 activations on
// AVX512-VNNI (quant_int8_activations.h, quant_int16_activations.h, quant_vnni.h): AVX-512F plus BW
// (byte and word vectors), VBMI (vpermt2b) and VNNI (vpdpbusd, vpdpwssd). Only this file is compiled
// for those; quant_ops.cpp calls it only on CPUs that have them (isa_select.cpp) while the avx512
// path is active.
#include <immintrin.h>
#include "isa.h"
#pragma GCC target("avx512f,avx512bw,avx512vbmi,avx512vnni,avx2,fma,f16c")
#define TP_ISA avx512vnni
namespace torchplug_cpu::TP_ISA {
#include "vec_avx512.h"
#include "gemm_kernel.h"
#include "gemv_kernel.h"
#include "llm_kernels.h"
#include "quant_kernel.h"
#include "quant_int8_activations.h"
#include "quant_int16_activations.h"
#include "quant_vnni.h"
}  // namespace torchplug_cpu::TP_ISA

namespace torchplug_cpu {
const IsaKernels::QuantTasks* avx512vnni_int4_gemv_int8_dots() {
  return TP_ISA::int8_activation_kernels<TP_ISA::QuantVnni<TP_ISA::Avx512>>();
}

const IsaKernels::QuantTasks* avx512vnni_int8_gemv_int16_dots() {
  return TP_ISA::int16_activation_kernels<TP_ISA::Int8Vnni<TP_ISA::Avx512>>();
}

const IsaKernels::QuantTasks* avx512vnni_int4_prefill_int16() { return TP_ISA::int4_prefill_kernels<TP_ISA::Avx512>(); }
}  // namespace torchplug_cpu
