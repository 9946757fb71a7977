// torchplug_cpu::argmax / argmax.out: aten's ops of those names, registered by
// torchplug_cpu.kernels as their fp32 / bf16 / fp16 CPU kernels. Greedy decoding takes the argmax
// of each row of logits ([batch, vocab]), where torch's reduction runs about 1 element per ns in
// fp32 and 4x slower in fp16. A reduction over the last dim of a contiguous tensor (or over all of
// it, dim=None) runs the row kernel (llm_kernels.h, argmax); everything else, errors included,
// goes to torch's own CPU kernel.
#include <ATen/MemoryOverlap.h>
#include <ATen/Parallel.h>
#include <ATen/ops/argmax_cpu_dispatch.h>
#include <ATen/ops/empty.h>
#include <torch/library.h>

#include <atomic>

#include "api.h"

namespace torchplug_cpu {
namespace {

using at::Tensor;

std::atomic<uint64_t> g_argmax_calls{0};

// A call as rows of n contiguous elements, each reduced to one index, and the result's shape.
struct RowView {
  int64_t rows, n;
  std::vector<int64_t> shape;
};

// nullopt where torch's kernel runs: other dtypes and layouts, other dims, and empty tensors (its errors).
std::optional<RowView> rows_of(const Tensor& self, std::optional<int64_t> dim, bool keepdim) {
  if (!kernel_dtype(self.scalar_type()) || self.numel() == 0 || !self.is_contiguous()) return std::nullopt;
  std::vector<int64_t> shape = self.sizes().vec();
  if (!dim) {  // over all elements: keepdim keeps every dim, as 1
    std::fill(shape.begin(), shape.end(), 1);
    return RowView{1, self.numel(), keepdim ? shape : std::vector<int64_t>{}};
  }
  if (self.dim() == 0 || (*dim != -1 && *dim != self.dim() - 1)) return std::nullopt;
  const int64_t n = shape.back();
  if (keepdim) shape.back() = 1;
  else shape.pop_back();
  return RowView{self.numel() / n, n, std::move(shape)};
}

void argmax_rows(const Tensor& self, const RowView& r, const Tensor& out) {
  g_argmax_calls.fetch_add(1, std::memory_order_relaxed);
  const auto kernel = active_kernels().argmax[*kernel_dtype(self.scalar_type())];
  const char* x = static_cast<const char*>(self.const_data_ptr());
  int64_t* o = out.data_ptr<int64_t>();
  const int64_t row_bytes = r.n * self.element_size();
  // About 32K elements per task before another thread is worth waking (one decode row is one task).
  at::parallel_for(0, r.rows, std::max<int64_t>(1, 32768 / r.n), [&](int64_t begin, int64_t end) {
    kernel(x + begin * row_bytes, r.n, end - begin, r.n, o + begin);
  });
}

Tensor argmax(const Tensor& self, std::optional<int64_t> dim, bool keepdim) {
  const auto r = rows_of(self, dim, keepdim);
  if (!r) return at::cpu::argmax(self, dim, keepdim);
  Tensor out = at::empty(r->shape, self.options().dtype(at::kLong));
  argmax_rows(self, *r, out);
  return out;
}

Tensor& argmax_out(const Tensor& self, std::optional<int64_t> dim, bool keepdim, Tensor& out) {
  const auto r = rows_of(self, dim, keepdim);
  // torch's checks for out= (dtype, overlap with self) and its resize rules stay torch's.
  if (!r || out.scalar_type() != at::kLong || at::get_overlap_status(self, out) != at::MemOverlapStatus::No)
    return at::cpu::argmax_out(out, self, dim, keepdim);
  at::native::resize_output(out, r->shape);
  if (!out.is_contiguous()) return at::cpu::argmax_out(out, self, dim, keepdim);
  argmax_rows(self, *r, out);
  return out;
}

}  // namespace

uint64_t argmax_calls() { return g_argmax_calls.load(std::memory_order_relaxed); }

}  // namespace torchplug_cpu

TORCH_LIBRARY_FRAGMENT(torchplug_cpu, m) {
  m.def("argmax(Tensor self, int? dim=None, bool keepdim=False) -> Tensor");
  m.def("argmax.out(Tensor self, int? dim=None, bool keepdim=False, *, Tensor(a!) out) -> Tensor(a!)");
}

TORCH_LIBRARY_IMPL(torchplug_cpu, CPU, m) {
  m.impl("argmax", TORCH_FN(torchplug_cpu::argmax));
  m.impl("argmax.out", TORCH_FN(torchplug_cpu::argmax_out));
}
