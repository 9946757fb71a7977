// Builds one ISA's IsaKernels table from its vocabulary. An isa_<name>.cpp file defines TP_ISA
// (the namespace its code lives in, so no symbol is shared between ISAs), sets its
// `#pragma GCC target`, includes its vec_<name>.h and then this file, and calls
// TP_DEFINE_ISA_KERNELS. The table is a constant: building it runs no code, so a table whose
// instructions the CPU lacks can exist; isa_select.cpp decides which one is used.
#pragma once

#define TP_STRINGIFY_(x) #x
#define TP_STRINGIFY(x) TP_STRINGIFY_(x)

namespace torchplug_cpu::TP_ISA {
#include "gemm_kernel.h"
#include "gemv_kernel.h"
#include "llm_kernels.h"
#include "quant_kernel.h"

template <class I>
constexpr IsaKernels kernels_for(const char* name) {
  using R = Rows<I>;
  using Q = Quant<I>;
  return IsaKernels{
      name,
      I::gemm,
      &Gemm<I>::tasks,
      &Gemv<I>::tasks,
      Gemv<I>::kPrefetchLines * 64,
      {{&R::template rms_norm<float, float>, &R::template rms_norm<float, float>},
       {&R::template rms_norm<bf16_t, bf16_t>, &R::template rms_norm<bf16_t, float>},
       {&R::template rms_norm<fp16_t, fp16_t>, &R::template rms_norm<fp16_t, float>}},
      {{&R::template fused_add_rms_norm<float, float>, &R::template fused_add_rms_norm<float, float>},
       {&R::template fused_add_rms_norm<bf16_t, bf16_t>, &R::template fused_add_rms_norm<bf16_t, float>},
       {&R::template fused_add_rms_norm<fp16_t, fp16_t>, &R::template fused_add_rms_norm<fp16_t, float>}},
      {&R::template silu_and_mul<float>, &R::template silu_and_mul<bf16_t>, &R::template silu_and_mul<fp16_t>},
      {{&R::template rotary<float, float>, &R::template rotary<float, float>},
       {&R::template rotary<bf16_t, bf16_t>, &R::template rotary<bf16_t, float>},
       {&R::template rotary<fp16_t, fp16_t>, &R::template rotary<fp16_t, float>}},
      &R::template attend<fp16_t>,
      &R::template attend_rows<fp16_t>,
      {&R::template argmax<float>, &R::template argmax<bf16_t>, &R::template argmax<fp16_t>},
      {&Q::template int8_gemv<float>, &Q::template int8_gemv<bf16_t>, &Q::template int8_gemv<fp16_t>},
      {&Q::template int8_gemm<float>, &Q::template int8_gemm<bf16_t>, &Q::template int8_gemm<fp16_t>},
      {&Q::template int4_gemv<float>, &Q::template int4_gemv<bf16_t>, &Q::template int4_gemv<fp16_t>},
      {&Q::template int4_gemm<float>, &Q::template int4_gemm<bf16_t>, &Q::template int4_gemm<fp16_t>},
  };
}
}  // namespace torchplug_cpu::TP_ISA

// Defines torchplug_cpu::<accessor>() returning the constant table of vocabulary `Traits`.
#define TP_DEFINE_ISA_KERNELS(Traits, accessor)                                                        \
  namespace torchplug_cpu {                                                                            \
  namespace TP_ISA {                                                                                   \
  constexpr IsaKernels kKernels = kernels_for<Traits>(TP_STRINGIFY(TP_ISA));                            \
  }                                                                                                    \
  const IsaKernels& accessor() { return TP_ISA::kKernels; }                                           \
  }
