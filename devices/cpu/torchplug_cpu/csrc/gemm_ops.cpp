// torchplug_cpu::mm / addmm / bmm / baddbmm, functional, out= and in-place: ops with aten's
// argument types whose CPU kernels run torchplug's fp16 GEMM, or oneDNN for float32.
// torchplug_cpu.kernels registers them through torchplug's dispatcher as the float16 kernels of
// the aten ops on the CPU key, and as the float32 ones where fp32 is routed to oneDNN
// (TORCHPLUG_CPU_FP32), so other dtypes never get here; linear and matmul reach these four ops.
// A call torch would handle differently (mixed dtypes, a wrong shape, an `out` of another dtype,
// an empty float32 product) goes to torch's own CPU kernel (at::cpu::*), which gives torch's
// result or torch's error.
#include <ATen/ops/addmm_cpu_dispatch.h>
#include <ATen/ops/baddbmm_cpu_dispatch.h>
#include <ATen/ops/bmm_cpu_dispatch.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/mm.h>
#include <ATen/ops/mm_cpu_dispatch.h>
#include <torch/library.h>

#include "api.h"

namespace torchplug_cpu {
namespace {

using at::Scalar;
using at::Tensor;

bool plain(const Tensor& t, at::ScalarType dtype) {
  return t.scalar_type() == dtype && t.layout() == at::kStrided && !t.is_neg() && !t.is_conj();
}

// A skinny F.linear product: m x k by a weight's transpose, with at most kSkinnyMaxRows rows and
// at least kSkinnyColumnsPerRow output columns per row. Where only oneDNN's AVX2 path exists (AMD
// CPUs without AVX-512), these are the float32 products it ran faster than MKL on Zen 3 (1.2-2.5x
// at 8-256 x 4096 x 4096); MKL won at 512 rows and more, and at 128 x 1024 x 1024.
constexpr int64_t kSkinnyMaxRows = 256;
constexpr int64_t kSkinnyColumnsPerRow = 16;

bool skinny_linear(const Tensor& self, const Tensor& mat2) {
  return by_weight(self, mat2) && self.size(0) <= kSkinnyMaxRows && self.size(0) * kSkinnyColumnsPerRow <= mat2.size(1);
}

// True when (self) @ (mat2) is a float16 or float32 product torch would accept: [b,] m x k @
// [b,] k x n. float32 needs no k or n zero (oneDNN refuses), and on the skinny route
// (fp32_route_skinny) a skinny F.linear product of 2 rows or more. A single row (decode's GEMV) is
// ours only by a weight's transpose on the full route: there oneDNN's linear ran 1.6-2.5x MKL's
// GEMV at 1 x 4096 x 4096 on a quiet Zen 5 (MKL's ran on one thread) and matched it with the
// other core busy; by any other layout oneDNN's matmul would reorder the weight on every call.
bool ours(const Tensor& self, const Tensor& mat2, int64_t dim) {
  const auto dtype = self.scalar_type();
  const bool rows = self.dim() == dim && self.size(-2) > 1;  // dim() first: size(-2) of a 1-D tensor throws
  const bool fp32 = dtype == at::kFloat && self.numel() && mat2.numel() &&
                    (fp32_route_skinny() ? rows && skinny_linear(self, mat2) : rows || by_weight(self, mat2));
  const bool fp16 = dtype == at::kHalf && self.dim() == dim && mat2.dim() == dim &&
                    !(fp16_route_onednn() && self.size(-2) > kOnednnFp16Rows && mat2.size(-1) > kOnednnFp16Rows);
  return (fp16 || fp32) && plain(self, dtype) && plain(mat2, dtype) && self.dim() == dim &&
         mat2.dim() == dim && self.size(-1) == mat2.size(-2) && (dim == 2 || self.size(0) == mat2.size(0));
}

// An output (or in-place self) we can write: oneDNN's float32 path wants it contiguous.
bool ours_out(const Tensor& out, const Tensor& self) {
  return plain(out, self.scalar_type()) && (self.scalar_type() == at::kHalf || out.is_contiguous());
}

std::vector<int64_t> result_shape(const Tensor& self, const Tensor& mat2) {
  if (self.dim() == 2) return {self.size(0), mat2.size(1)};
  return {self.size(0), self.size(1), mat2.size(2)};
}

Tensor as3d(const Tensor& t) { return t.dim() == 2 ? t.unsqueeze(0) : t; }

// out = alpha * self @ mat2 + beta * bias, all of one dtype and already checked.
void run(const Tensor& self, const Tensor& mat2, const Tensor& out, const Tensor& bias, const Scalar& beta,
         const Scalar& alpha) {
  const float b = bias.defined() ? beta.to<float>() : 0.f;
  const Tensor in = b != 0.f ? bias.expand(out.sizes()) : Tensor();
  if (self.scalar_type() == at::kHalf) return fp16_gemm(self, mat2, out, in, alpha.to<float>(), b);
  fp32_gemm(as3d(self), as3d(mat2), as3d(out), in.defined() ? as3d(in) : in, alpha.to<float>(), b);
}

bool ours_add(const Tensor& bias, const Tensor& self, const Tensor& mat2, int64_t dim) {
  return ours(self, mat2, dim) && plain(bias, self.scalar_type()) && expandable_to(bias.sizes(), result_shape(self, mat2));
}

// ---- the kernels: mm / bmm (Dim 2 / 3) and addmm / baddbmm, each with torch's CPU kernel for the
// calls that are not ours ------------------------------------------------------------------------

template <int64_t Dim, Tensor (*stock)(const Tensor&, const Tensor&)>
Tensor product(const Tensor& self, const Tensor& mat2) {
  if (!ours(self, mat2, Dim)) return stock(self, mat2);
  if (Dim == 2 && self.scalar_type() == at::kFloat)
    if (auto y = fp32_linear(self, mat2, Tensor(), 1.f, 0.f)) return *y;
  Tensor out = at::empty(result_shape(self, mat2), self.options());
  run(self, mat2, out, Tensor(), 0, 1);
  return out;
}

template <int64_t Dim, Tensor& (*stock)(const Tensor&, const Tensor&, Tensor&)>
Tensor& product_out(const Tensor& self, const Tensor& mat2, Tensor& out) {
  if (!ours(self, mat2, Dim) || !ours_out(out, self)) return stock(self, mat2, out);
  at::native::resize_output(out, result_shape(self, mat2));
  run(self, mat2, out, Tensor(), 0, 1);
  return out;
}

template <int64_t Dim, Tensor (*stock)(const Tensor&, const Tensor&, const Tensor&, const Scalar&, const Scalar&)>
Tensor add_product(const Tensor& bias, const Tensor& self, const Tensor& mat2, const Scalar& beta, const Scalar& alpha) {
  if (!ours_add(bias, self, mat2, Dim)) return stock(bias, self, mat2, beta, alpha);
  if (Dim == 2 && self.scalar_type() == at::kFloat)
    if (auto y = fp32_linear(self, mat2, bias, alpha.to<float>(), beta.to<float>())) return *y;
  Tensor out = at::empty(result_shape(self, mat2), self.options());
  run(self, mat2, out, bias, beta, alpha);
  return out;
}

template <int64_t Dim,
          Tensor& (*stock)(const Tensor&, const Tensor&, const Tensor&, const Scalar&, const Scalar&, Tensor&)>
Tensor& add_product_out(const Tensor& bias, const Tensor& self, const Tensor& mat2, const Scalar& beta,
                        const Scalar& alpha, Tensor& out) {
  if (!ours_add(bias, self, mat2, Dim) || !ours_out(out, self)) return stock(bias, self, mat2, beta, alpha, out);
  // resize_output would reallocate out when it is the wrong shape; keep bias readable if out is bias.
  const Tensor b = out.is_same(bias) && out.sizes() != at::IntArrayRef(result_shape(self, mat2)) ? bias.clone() : bias;
  at::native::resize_output(out, result_shape(self, mat2));
  run(self, mat2, out, b, beta, alpha);
  return out;
}

template <int64_t Dim, Tensor& (*stock)(Tensor&, const Tensor&, const Tensor&, const Scalar&, const Scalar&)>
Tensor& add_product_(Tensor& self, const Tensor& mat1, const Tensor& mat2, const Scalar& beta, const Scalar& alpha) {
  if (!ours_add(self, mat1, mat2, Dim) || !ours_out(self, mat1) ||
      self.sizes() != at::IntArrayRef(result_shape(mat1, mat2)))
    return stock(self, mat1, mat2, beta, alpha);
  run(mat1, mat2, self, self, beta, alpha);
  return self;
}

constexpr auto mm = product<2, &at::cpu::mm>;

// [self @ mat for mat in mats]: one call for the projections of a decode step that share their
// input (inductor.py groups them); anything but a group of fp16 skinny products runs mm each.
std::vector<Tensor> mm_group(const Tensor& self, at::TensorList mats) {
  bool group = plain(self, at::kHalf) && self.dim() == 2;
  for (const Tensor& mat : mats) group = group && ours(self, mat, 2);
  if (group)
    if (auto outs = fp16_gemm_group(self, mats)) return *outs;
  std::vector<Tensor> outs;
  for (const Tensor& mat : mats) outs.push_back(at::mm(self, mat));
  return outs;
}
constexpr auto mm_out = product_out<2, &at::cpu::mm_outf>;
constexpr auto bmm = product<3, &at::cpu::bmm>;
constexpr auto bmm_out = product_out<3, &at::cpu::bmm_outf>;
constexpr auto addmm = add_product<2, &at::cpu::addmm>;
constexpr auto addmm_out = add_product_out<2, &at::cpu::addmm_outf>;
constexpr auto addmm_ = add_product_<2, &at::cpu::addmm_>;
constexpr auto baddbmm = add_product<3, &at::cpu::baddbmm>;
constexpr auto baddbmm_out = add_product_out<3, &at::cpu::baddbmm_outf>;
constexpr auto baddbmm_ = add_product_<3, &at::cpu::baddbmm_>;

}  // namespace
}  // namespace torchplug_cpu

// Same argument types as aten's, so the dispatcher accepts them as kernels of the aten ops.
TORCH_LIBRARY_FRAGMENT(torchplug_cpu, m) {
  m.def("mm(Tensor self, Tensor mat2) -> Tensor");
  m.def("mm_group(Tensor self, Tensor[] mats) -> Tensor[]");
  m.def("mm.out(Tensor self, Tensor mat2, *, Tensor(a!) out) -> Tensor(a!)");
  m.def("bmm(Tensor self, Tensor mat2) -> Tensor");
  m.def("bmm.out(Tensor self, Tensor mat2, *, Tensor(a!) out) -> Tensor(a!)");
  m.def("addmm(Tensor self, Tensor mat1, Tensor mat2, *, Scalar beta=1, Scalar alpha=1) -> Tensor");
  m.def("addmm.out(Tensor self, Tensor mat1, Tensor mat2, *, Scalar beta=1, Scalar alpha=1, Tensor(a!) out) -> Tensor(a!)");
  m.def("addmm_(Tensor(a!) self, Tensor mat1, Tensor mat2, *, Scalar beta=1, Scalar alpha=1) -> Tensor(a!)");
  m.def("baddbmm(Tensor self, Tensor batch1, Tensor batch2, *, Scalar beta=1, Scalar alpha=1) -> Tensor");
  m.def("baddbmm.out(Tensor self, Tensor batch1, Tensor batch2, *, Scalar beta=1, Scalar alpha=1, Tensor(a!) out) -> Tensor(a!)");
  m.def("baddbmm_(Tensor(a!) self, Tensor batch1, Tensor batch2, *, Scalar beta=1, Scalar alpha=1) -> Tensor(a!)");
}

TORCH_LIBRARY_IMPL(torchplug_cpu, CPU, m) {
  namespace tc = torchplug_cpu;
  m.impl("mm", TORCH_FN(tc::mm));
  m.impl("mm_group", TORCH_FN(tc::mm_group));
  m.impl("mm.out", TORCH_FN(tc::mm_out));
  m.impl("bmm", TORCH_FN(tc::bmm));
  m.impl("bmm.out", TORCH_FN(tc::bmm_out));
  m.impl("addmm", TORCH_FN(tc::addmm));
  m.impl("addmm.out", TORCH_FN(tc::addmm_out));
  m.impl("addmm_", TORCH_FN(tc::addmm_));
  m.impl("baddbmm", TORCH_FN(tc::baddbmm));
  m.impl("baddbmm.out", TORCH_FN(tc::baddbmm_out));
  m.impl("baddbmm_", TORCH_FN(tc::baddbmm_));
}
