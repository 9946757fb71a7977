// fp32 GEMMs on oneDNN: on AMD CPUs torch's fp32 GEMM (MKL) takes its AVX2 path, while oneDNN
// (also inside torch) uses AVX-512. kernels.py decides whether float32 mm/addmm/bmm/baddbmm are
// routed here (TORCHPLUG_CPU_FP32); gemm_ops.cpp sends them.
#include <ATen/core/Tensor.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/ops/add.h>
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
}  // namespace

namespace {

// a @ w.t() through oneDNN's linear (torch's mkldnn::_linear_pointwise): with the weight as it lies
// ([n, k], row-major) it multiplies without the per-call weight reorder mkldnn_matmul does, which
// made a 1 x 4096 x 4096 product 30x slower than MKL.
at::Tensor onednn_linear(const at::Tensor& a, const at::Tensor& w) {
  static const auto op =
      c10::Dispatcher::singleton()
          .findSchemaOrThrow("mkldnn::_linear_pointwise", "")
          .typed<at::Tensor(const at::Tensor&, const at::Tensor&, const std::optional<at::Tensor>&, c10::string_view,
                            c10::List<std::optional<at::Scalar>>, std::optional<c10::string_view>)>();
  return op.call(a, w, std::nullopt, "none", c10::List<std::optional<at::Scalar>>(), std::nullopt);
}

}  // namespace

void fp32_gemm(const at::Tensor& a, const at::Tensor& b, const at::Tensor& c, const at::Tensor& cin, float alpha,
               float beta) {
  fp32_onednn_calls.fetch_add(1, std::memory_order_relaxed);
  const at::Tensor b2 = b[0];
  if (a.size(0) == 1 && b2.stride(0) == 1 && b2.stride(1) == b2.size(0)) {  // mm / addmm by a weight's transpose
    at::Tensor y = onednn_linear(a[0], b2.t());
    if (alpha != 1.f) y.mul_(alpha);
    at::Tensor c2 = c[0];
    if (beta != 0.f)
      at::add_out(c2, y, cin[0], beta);
    else
      c2.copy_(y);
    return;
  }
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

}  // namespace torchplug_cpu
