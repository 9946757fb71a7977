// What the ISA-neutral files offer each other and module.cpp (which binds it to Python).
#pragma once
#include <ATen/core/Tensor.h>

#include <optional>
#include <string>
#include <vector>

#include "isa.h"

// Two of torch's functions without their headers (ATen/native/Resize.h, ATen/ExpandUtils.h), which
// pull in every op's declaration: a third of this extension's cold build time.
namespace at::native {
// Exported by libtorch_cpu: resizes `output` to `shape`, warning if it held elements of another shape.
TORCH_API bool resize_output(const Tensor& output, IntArrayRef shape);
}  // namespace at::native

namespace torchplug_cpu {

// at::is_expandable_to: whether a tensor of `shape` broadcasts to `desired`.
inline bool expandable_to(c10::IntArrayRef shape, c10::IntArrayRef desired) {
  if (shape.size() > desired.size()) return false;
  for (size_t i = 1; i <= shape.size(); ++i) {
    const int64_t size = shape[shape.size() - i];
    if (size != 1 && size != desired[desired.size() - i]) return false;
  }
  return true;
}

// The kernel tables' index of a dtype; nullopt for the dtypes they have no kernels for.
inline std::optional<Dtype> kernel_dtype(at::ScalarType dtype) {
  switch (dtype) {
    case at::kFloat: return kF32;
    case at::kBFloat16: return kBF16;
    case at::kHalf: return kF16;
    default: return std::nullopt;
  }
}

// isa_select.cpp: which kernel table runs. Default: the best this CPU supports.
const IsaKernels& active_kernels();
std::vector<std::string> known_isas();      // best first
std::vector<std::string> supported_isas();  // the subset this CPU (and OS) can run
void set_isa(const std::string& name);      // throws with the fix on an unknown / unsupported ISA
std::string current_isa();
// The avx512emu test path's kernel table, from its own extension (avx512emu_module.cpp), which
// kernels.py builds and loads the first time that path is selected.
void register_test_path(uintptr_t table);
// int4 decode rows with int8 activations (quant_int8_activations.h): whether the active ISA path
// has them on this CPU (avx512 with AVX512-VNNI and VBMI, or avx2), the setting (on unless
// kernels.py's TORCHPLUG_CPU_INT4_ACTIVATIONS=float), whether they run now (both), and then their
// kernels per dtype (isa.h; null when they do not run).
bool int4_int8_dots_supported();
void set_int4_int8_dots(bool on);
bool int4_int8_dots();
const IsaKernels::QuantTasks* int4_int8_kernels();
// int4 prefill with int16 activations (quant_vnni.h): its kernels per dtype where they run now (the
// avx512 path of an AVX512-VNNI CPU, under the same setting), else null; and whether they do.
const IsaKernels::QuantTasks* int4_prefill_kernels();
bool int4_int16_prefill();
// The same for int8 decode rows with int16 activations (quant_int16_activations.h; the setting:
// TORCHPLUG_CPU_INT8_ACTIVATIONS).
bool int8_int16_dots_supported();
void set_int8_int16_dots(bool on);
bool int8_int16_dots();
const IsaKernels::QuantTasks* int8_int16_kernels();
// The skinny products' prefetch distance in bytes (isa.h's gemv_prefetch_bytes); negative: the path's own.
void set_gemv_prefetch_bytes(int64_t bytes);
// The active path's own distance, which runs while none is set.
int64_t own_prefetch_bytes();
// The cache level the skinny products' prefetches fill (isa.h's gemv_prefetch_level): 1 or 2.
void set_gemv_prefetch_level(int level);
// How many weight streams a skinny product's task reads at once (isa.h's gemv_streams): 1, 2 or 4.
void set_gemv_streams(int streams);

// gemm.cpp: c = alpha * a @ b + beta * cin for fp16 [batch, m, k] x [batch, k, n] -> [batch, m, n]
// views with any strides (or all three 2-D: a batch of one). cin (may be c itself, may broadcast)
// is read only when beta != 0.
void fp16_gemm(const at::Tensor& a, const at::Tensor& b, const at::Tensor& c, const at::Tensor& cin, float alpha,
               float beta);
uint64_t fp16_gemm_calls();  // how many products reached fp16_gemm(_group): lets tests see the routing
// Where torch's oneDNN has an fp16 matmul (AVX512-FP16 or AMX-FP16: set by kernels.py), it runs
// fp16 products faster than fp16_gemm once both sides of C exceed kOnednnFp16Rows (an Intel Xeon
// with AVX512-FP16, one core: 1.2-1.5x from 12 rows up; level at 8, 0.7x at 4, 0.67x at 1): those
// products go to torch's kernel.
constexpr int64_t kOnednnFp16Rows = 8;
bool fp16_route_onednn();
void set_fp16_route_onednn(bool onednn);
// This thread's scratch buffer of at least `bytes` (kept between calls; the GEMMs' and quant_ops').
float* thread_scratch(int64_t bytes);
// [a @ b for b in bs] for fp16 a [m, k] with a few rows and each b [k, n_i] contiguous along k (a
// weight's transpose), in one parallel region that cuts the b's as one concatenation of their
// columns; nullopt when the shapes are not such a group.
std::optional<std::vector<at::Tensor>> fp16_gemm_group(const at::Tensor& a, at::TensorList bs);

// fp32_gemm.cpp: the same contract in float32, on oneDNN (c contiguous; b, cin as above).
void fp32_gemm(const at::Tensor& a, const at::Tensor& b, const at::Tensor& c, const at::Tensor& cin, float alpha,
               float beta);
// A 2-D a by a weight's transpose b (what F.linear makes): oneDNN's linear takes b as it lies.
bool by_weight(const at::Tensor& a, const at::Tensor& b);
// The by_weight case, returning oneDNN's own result (no copy into a c); nullopt for other
// layouts. bias as in addmm (read only when beta != 0).
std::optional<at::Tensor> fp32_linear(const at::Tensor& a, const at::Tensor& b, const at::Tensor& bias, float alpha,
                                      float beta);
uint64_t fp32_gemm_calls();
// Whether only skinny F.linear products are routed to oneDNN (gemm_ops.cpp), not every float32
// GEMM: set by kernels.py where oneDNN has only its AVX2 path.
bool fp32_route_skinny();
void set_fp32_route_skinny(bool skinny);
std::string cpu_vendor();  // CPUID's vendor string, e.g. "AuthenticAMD", "GenuineIntel"
// CPUID's display family and model, then the brand string: "family 25 model 17: AMD EPYC 9R14 ...".
std::string cpu_model();

// Calls that reached the kernels of aten's argmax (argmax_ops.cpp) and _fused_rms_norm (llm_ops.cpp).
uint64_t argmax_calls();
uint64_t fused_rms_norm_calls();
// Calls that reached torchplug's _weight_int8pack_mm / _weight_int4pack_mm_for_cpu (quant_ops.cpp).
uint64_t quant_mm_calls();

}  // namespace torchplug_cpu
