// mm / addmm / bmm / baddbmm, functional, out= and in-place, registered for aten on the CPU key.
// Each kernel splits on dtype in C++: float16 goes to torchplug's GEMM, everything else (and any
// call torch would reject) goes straight to torch's own CPU kernel (at::cpu::*), so other dtypes
// keep torch's speed, results and error messages. linear and matmul reach these four ops.
//
// The registration is an object, not a static TORCH_LIBRARY_IMPL, so it can be installed when
// torchplug-cpu is loaded and removed again (torch's kernels come back when it is destroyed).
#include <ATen/ExpandUtils.h>
#include <ATen/native/Resize.h>
#include <ATen/ops/addmm_cpu_dispatch.h>
#include <ATen/ops/baddbmm_cpu_dispatch.h>
#include <ATen/ops/bmm_cpu_dispatch.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/mm_cpu_dispatch.h>
#include <torch/library.h>

#include <memory>
#include <mutex>

#include "api.h"

namespace torchplug_cpu {
namespace {

using at::Scalar;
using at::Tensor;

bool plain_half(const Tensor& t) {
  return t.scalar_type() == at::kHalf && t.layout() == at::kStrided && !t.is_neg() && !t.is_conj();
}

// True when (self) @ (mat2) is a float16 product torch would accept: [b,] m x k @ [b,] k x n.
bool ours(const Tensor& self, const Tensor& mat2, int64_t dim) {
  return plain_half(self) && plain_half(mat2) && self.dim() == dim && mat2.dim() == dim &&
         self.size(-1) == mat2.size(-2) && (dim == 2 || self.size(0) == mat2.size(0));
}

std::vector<int64_t> result_shape(const Tensor& self, const Tensor& mat2) {
  if (self.dim() == 2) return {self.size(0), mat2.size(1)};
  return {self.size(0), self.size(1), mat2.size(2)};
}

Tensor as3d(const Tensor& t) { return t.dim() == 2 ? t.unsqueeze(0) : t; }

// out = alpha * self @ mat2 + beta * bias, all float16 and already checked.
void run(const Tensor& self, const Tensor& mat2, const Tensor& out, const Tensor& bias, const Scalar& beta,
         const Scalar& alpha) {
  const Tensor out3 = as3d(out);
  const float b = bias.defined() ? beta.to<float>() : 0.f;
  const Tensor bias3 = b != 0.f ? as3d(bias.expand(out.sizes())) : Tensor();
  fp16_gemm(as3d(self), as3d(mat2), out3, bias3, alpha.to<float>(), b);
}

bool ours_add(const Tensor& bias, const Tensor& self, const Tensor& mat2, int64_t dim) {
  return ours(self, mat2, dim) && plain_half(bias) && at::is_expandable_to(bias.sizes(), result_shape(self, mat2));
}

// ---- the kernels, in schema order: functional, out=, in-place --------------------------------

Tensor mm(const Tensor& self, const Tensor& mat2) {
  if (!ours(self, mat2, 2)) return at::cpu::mm(self, mat2);
  Tensor out = at::empty(result_shape(self, mat2), self.options());
  run(self, mat2, out, Tensor(), 0, 1);
  return out;
}

Tensor& mm_out(const Tensor& self, const Tensor& mat2, Tensor& out) {
  if (!ours(self, mat2, 2) || !plain_half(out)) return at::cpu::mm_outf(self, mat2, out);
  at::native::resize_output(out, result_shape(self, mat2));
  run(self, mat2, out, Tensor(), 0, 1);
  return out;
}

Tensor bmm(const Tensor& self, const Tensor& mat2) {
  if (!ours(self, mat2, 3)) return at::cpu::bmm(self, mat2);
  Tensor out = at::empty(result_shape(self, mat2), self.options());
  run(self, mat2, out, Tensor(), 0, 1);
  return out;
}

Tensor& bmm_out(const Tensor& self, const Tensor& mat2, Tensor& out) {
  if (!ours(self, mat2, 3) || !plain_half(out)) return at::cpu::bmm_outf(self, mat2, out);
  at::native::resize_output(out, result_shape(self, mat2));
  run(self, mat2, out, Tensor(), 0, 1);
  return out;
}

Tensor addmm(const Tensor& bias, const Tensor& self, const Tensor& mat2, const Scalar& beta, const Scalar& alpha) {
  if (!ours_add(bias, self, mat2, 2)) return at::cpu::addmm(bias, self, mat2, beta, alpha);
  Tensor out = at::empty(result_shape(self, mat2), self.options());
  run(self, mat2, out, bias, beta, alpha);
  return out;
}

Tensor& addmm_out(const Tensor& bias, const Tensor& self, const Tensor& mat2, const Scalar& beta, const Scalar& alpha,
                  Tensor& out) {
  if (!ours_add(bias, self, mat2, 2) || !plain_half(out)) return at::cpu::addmm_outf(bias, self, mat2, beta, alpha, out);
  // resize_output would reallocate out when it is the wrong shape; keep bias readable if out is bias.
  const Tensor b = out.is_same(bias) && out.sizes() != at::IntArrayRef(result_shape(self, mat2)) ? bias.clone() : bias;
  at::native::resize_output(out, result_shape(self, mat2));
  run(self, mat2, out, b, beta, alpha);
  return out;
}

Tensor& addmm_(Tensor& self_, const Tensor& mat1, const Tensor& mat2, const Scalar& beta, const Scalar& alpha) {
  if (!ours_add(self_, mat1, mat2, 2) || self_.sizes() != at::IntArrayRef(result_shape(mat1, mat2)))
    return at::cpu::addmm_(self_, mat1, mat2, beta, alpha);
  run(mat1, mat2, self_, self_, beta, alpha);
  return self_;
}

Tensor baddbmm(const Tensor& bias, const Tensor& self, const Tensor& mat2, const Scalar& beta, const Scalar& alpha) {
  if (!ours_add(bias, self, mat2, 3)) return at::cpu::baddbmm(bias, self, mat2, beta, alpha);
  Tensor out = at::empty(result_shape(self, mat2), self.options());
  run(self, mat2, out, bias, beta, alpha);
  return out;
}

Tensor& baddbmm_out(const Tensor& bias, const Tensor& self, const Tensor& mat2, const Scalar& beta,
                    const Scalar& alpha, Tensor& out) {
  if (!ours_add(bias, self, mat2, 3) || !plain_half(out))
    return at::cpu::baddbmm_outf(bias, self, mat2, beta, alpha, out);
  const Tensor b = out.is_same(bias) && out.sizes() != at::IntArrayRef(result_shape(self, mat2)) ? bias.clone() : bias;
  at::native::resize_output(out, result_shape(self, mat2));
  run(self, mat2, out, b, beta, alpha);
  return out;
}

Tensor& baddbmm_(Tensor& self_, const Tensor& b1, const Tensor& b2, const Scalar& beta, const Scalar& alpha) {
  if (!ours_add(self_, b1, b2, 3) || self_.sizes() != at::IntArrayRef(result_shape(b1, b2)))
    return at::cpu::baddbmm_(self_, b1, b2, beta, alpha);
  run(b1, b2, self_, self_, beta, alpha);
  return self_;
}

// ---- installation ----------------------------------------------------------------------------

// torch warns when a kernel replaces another for the same op and key. Here that is the whole
// point, so that one warning is dropped while installing; any other warning passes through.
class DropOverrideWarning : public c10::WarningHandler {
 public:
  explicit DropOverrideWarning(c10::WarningHandler* next) : next_(next) {}
  void process(const c10::Warning& warning) override {
    if (warning.msg().find("Overriding a previously registered kernel") == std::string::npos) next_->process(warning);
  }

 private:
  c10::WarningHandler* next_;
};

std::mutex g_mutex;
std::unique_ptr<torch::Library> g_library;

}  // namespace

void install_aten_overrides() {
  std::lock_guard<std::mutex> lock(g_mutex);
  if (g_library) return;
  DropOverrideWarning filter(c10::WarningUtils::get_warning_handler());
  c10::WarningUtils::WarningHandlerGuard guard(&filter);
  auto lib = std::make_unique<torch::Library>(torch::Library::IMPL, "aten", c10::DispatchKey::CPU, __FILE__, __LINE__);
  lib->impl("mm", TORCH_FN(mm));
  lib->impl("mm.out", TORCH_FN(mm_out));
  lib->impl("bmm", TORCH_FN(bmm));
  lib->impl("bmm.out", TORCH_FN(bmm_out));
  lib->impl("addmm", TORCH_FN(addmm));
  lib->impl("addmm.out", TORCH_FN(addmm_out));
  lib->impl("addmm_", TORCH_FN(addmm_));
  lib->impl("baddbmm", TORCH_FN(baddbmm));
  lib->impl("baddbmm.out", TORCH_FN(baddbmm_out));
  lib->impl("baddbmm_", TORCH_FN(baddbmm_));
  g_library = std::move(lib);
}

void uninstall_aten_overrides() {
  std::lock_guard<std::mutex> lock(g_mutex);
  g_library.reset();
}

bool aten_overrides_installed() {
  std::lock_guard<std::mutex> lock(g_mutex);
  return g_library != nullptr;
}

}  // namespace torchplug_cpu
