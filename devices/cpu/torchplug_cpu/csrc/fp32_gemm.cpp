// fp32 GEMMs on oneDNN: on AMD CPUs torch's fp32 GEMM (MKL) takes its AVX2 path, while oneDNN
// (also inside torch) uses AVX-512; without AVX-512, oneDNN's AVX2 linear still beats MKL on
// skinny products. kernels.py decides whether float32 mm/addmm/bmm/baddbmm are
// routed here (TORCHPLUG_CPU_FP32); gemm_ops.cpp sends them.
#include <ATen/core/Tensor.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <cpuid.h>

#include <atomic>
#include <cstring>

#include "api.h"

namespace at::native {
// Exported by libtorch_cpu (ATen/native/mkldnn/Matmul.h, not shipped in the wheel's headers):
// result = beta * result + alpha * mat1 @ mat2 for 2-D or 3-D float / bf16 / fp16 operands.
TORCH_API void mkldnn_matmul(const Tensor& mat1, const Tensor& mat2, const Tensor& result, float beta, float alpha);
}  // namespace at::native

namespace torchplug_cpu {
namespace {
std::atomic<uint64_t> fp32_onednn_calls{0};
std::atomic<bool> skinny_route{false};
}  // namespace

bool fp32_route_skinny() { return skinny_route.load(std::memory_order_relaxed); }
void set_fp32_route_skinny(bool skinny) { skinny_route.store(skinny, std::memory_order_relaxed); }

namespace {

// a @ w.t() (+ bias) through oneDNN's linear (torch's mkldnn::_linear_pointwise): with the weight
// as it lies ([n, k], row-major) it multiplies without the per-call weight reorder mkldnn_matmul
// does, which made a 1 x 4096 x 4096 product 30x slower than MKL.
at::Tensor onednn_linear(const at::Tensor& a, const at::Tensor& w, const std::optional<at::Tensor>& bias) {
  static const auto op =
      c10::Dispatcher::singleton()
          .findSchemaOrThrow("mkldnn::_linear_pointwise", "")
          .typed<at::Tensor(const at::Tensor&, const at::Tensor&, const std::optional<at::Tensor>&, c10::string_view,
                            c10::List<std::optional<at::Scalar>>, std::optional<c10::string_view>)>();
  return op.call(a, w, bias, "none", c10::List<std::optional<at::Scalar>>(), std::nullopt);
}

}  // namespace

bool by_weight(const at::Tensor& a, const at::Tensor& b) {
  return a.dim() == 2 && b.stride(0) == 1 && b.stride(1) == b.size(0);
}

std::optional<at::Tensor> fp32_linear(const at::Tensor& a, const at::Tensor& b, const at::Tensor& bias, float alpha,
                                      float beta) {
  if (!by_weight(a, b)) return std::nullopt;
  fp32_onednn_calls.fetch_add(1, std::memory_order_relaxed);
  // oneDNN adds a bias row itself; any other bias (a matrix, a scale) is added afterwards.
  const bool fused = beta == 1.f && alpha == 1.f && bias.defined() && bias.dim() == 1 && bias.size(0) == b.size(1) &&
                     bias.is_contiguous();
  at::Tensor y = onednn_linear(a, b.t(), fused ? std::optional<at::Tensor>(bias) : std::nullopt);
  if (alpha != 1.f) y.mul_(alpha);
  if (beta != 0.f && !fused) y.add_(bias, beta);
  return y;
}

void fp32_gemm(const at::Tensor& a, const at::Tensor& b, const at::Tensor& c, const at::Tensor& cin, float alpha,
               float beta) {
  if (a.size(0) == 1) {
    if (auto y = fp32_linear(a[0], b[0], beta != 0.f ? cin[0] : at::Tensor(), alpha, beta)) {
      c[0].copy_(*y);
      return;
    }
  }
  fp32_onednn_calls.fetch_add(1, std::memory_order_relaxed);
  if (beta != 0.f) c.copy_(cin);  // oneDNN's sum post-op adds beta * c (a self-copy when cin is c)
  at::native::mkldnn_matmul(a, b, c, beta, alpha);
}

uint64_t fp32_gemm_calls() { return fp32_onednn_calls.load(std::memory_order_relaxed); }

std::string cpu_vendor() {
  unsigned eax, ebx, ecx, edx;
  if (!__get_cpuid(0, &eax, &ebx, &ecx, &edx)) return "";
  char vendor[13] = {};
  std::memcpy(vendor, &ebx, 4);
  std::memcpy(vendor + 4, &edx, 4);
  std::memcpy(vendor + 8, &ecx, 4);
  return vendor;
}

std::string cpu_model() {
  unsigned eax, ebx, ecx, edx;
  if (!__get_cpuid(1, &eax, &ebx, &ecx, &edx)) return "";
  const unsigned base_family = (eax >> 8) & 0xf, base_model = (eax >> 4) & 0xf;
  // CPUID's display rule: the extended fields count only for family 15 (AMD) and 6 or 15 (Intel).
  const unsigned family = base_family == 15 ? base_family + ((eax >> 20) & 0xff) : base_family;
  const unsigned model = base_family == 6 || base_family == 15 ? base_model | ((eax >> 12) & 0xf0) : base_model;
  std::string name = "family " + std::to_string(family) + " model " + std::to_string(model);
  unsigned brand[12] = {};
  if (__get_cpuid(0x80000000, &eax, &ebx, &ecx, &edx) && eax >= 0x80000004) {
    for (unsigned leaf = 0; leaf < 3; ++leaf)
      __get_cpuid(0x80000002 + leaf, &brand[4 * leaf], &brand[4 * leaf + 1], &brand[4 * leaf + 2], &brand[4 * leaf + 3]);
    std::string text(reinterpret_cast<const char*>(brand), sizeof(brand));
    text = text.substr(0, text.find('\0'));
    const auto first = text.find_first_not_of(' '), last = text.find_last_not_of(' ');
    if (first != std::string::npos) name += ": " + text.substr(first, last - first + 1);
  }
  return name;
}

}  // namespace torchplug_cpu
