// torch.autocast on the bound device: torch's own GPU policy lists (ATen/autocast_mode.h keeps them
// for any backend to reuse), registered for AutocastPrivateUse1; every other op passes through.
#include "binding.h"

#include <ATen/autocast_mode.h>
#include <torch/library.h>

namespace torchplug::binding {

namespace {
using at::Tensor;
using c10::IntArrayRef;
using c10::Scalar;
using c10::ScalarType;
}  // namespace

void register_autocast() {
  static torch::Library passthrough(torch::Library::IMPL, "_", c10::DispatchKey::AutocastPrivateUse1, __FILE__, __LINE__);
  passthrough.fallback(torch::CppFunction::makeFallthrough());
  static torch::Library policy(torch::Library::IMPL, "aten", c10::DispatchKey::AutocastPrivateUse1, __FILE__, __LINE__);
  auto& m = policy;
#define LOWER(...) KERNEL_PRIVATEUSEONE(__VA_ARGS__, lower_precision_fp)
#define FP32(...) KERNEL_PRIVATEUSEONE(__VA_ARGS__, fp32)
#define FP32_DTYPE(...) KERNEL_PRIVATEUSEONE(__VA_ARGS__, fp32_set_opt_dtype)
#define PROMOTE(...) KERNEL_PRIVATEUSEONE(__VA_ARGS__, promote)
  AT_FORALL_LOWER_PRECISION_FP(LOWER)
  AT_FORALL_FP32(FP32)
  AT_FORALL_FP32_SET_OPT_DTYPE(FP32_DTYPE)
  AT_FORALL_PROMOTE(PROMOTE)
#undef LOWER
#undef FP32
#undef FP32_DTYPE
#undef PROMOTE
}

}  // namespace torchplug::binding
