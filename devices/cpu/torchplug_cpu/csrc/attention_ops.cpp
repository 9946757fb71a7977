// torchplug_cpu::_scaled_dot_product_flash_attention_for_cpu: aten's op of that name (what
// F.scaled_dot_product_attention runs on the CPU), registered by torchplug_cpu.kernels as its
// float16 kernel. A few query rows (decode: one token, or a short speculative run) against a
// key / value cache go to a plain per-head loop (llm_kernels.h, attend) that skips the keys the
// mask sets to -inf: a decode step over a static cache with a padding mask reads only the filled
// slots, and none of the flash kernel's blocking and buffers is paid for one row. More rows, or
// is_causal (prefill), go to attend_rows, whose scores are a GEMM micro-kernel over K converted
// once per head: torch's flash kernel runs fp16 at a third of its fp32 speed. Everything else
// (dropout, very long keys, other layouts) goes to torch's own CPU kernel.
#include <ATen/Parallel.h>
#include <ATen/ops/_scaled_dot_product_flash_attention_for_cpu_cpu_dispatch.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/empty_like.h>
#include <ATen/ops/where.h>
#include <torch/library.h>

#include <cmath>
#include <memory>

#include "api.h"

namespace torchplug_cpu {
namespace {

using at::Tensor;

// Query rows at most this many take the per-row loop; more take attend_rows.
constexpr int64_t kMaxQueryRows = 16;
// attend_rows holds all of a head's keys in fp32: longer ones go to the flash kernel's tiles.
constexpr int64_t kMaxKeys = 8192;

bool plain(const Tensor& t) { return t.layout() == at::kStrided && !t.is_neg() && !t.is_conj(); }

// A contiguous fp16 mask in fp32, converted here: a decode step's is a few hundred values, and
// Tensor::to's dispatch would cost more than the conversion. (SDPA takes a float mask only in
// the query's dtype or fp32.)
Tensor widened(const Tensor& mask) {
  Tensor out = at::empty(mask.sizes(), mask.options().dtype(at::kFloat));
  const at::Half* src = mask.const_data_ptr<at::Half>();
  float* dst = out.data_ptr<float>();
  for (int64_t i = 0, n = mask.numel(); i < n; ++i) dst[i] = static_cast<float>(src[i]);
  return out;
}

// The mask as fp32 additive values viewed as [B, H, L, S], contiguous along S; undefined when
// the call is not ours.
std::optional<Tensor> float_mask(const Tensor& mask, int64_t b, int64_t h, int64_t l, int64_t s) {
  if (!plain(mask) || mask.dim() > 4 || !expandable_to(mask.sizes(), {b, h, l, s})) return std::nullopt;
  const auto dtype = mask.scalar_type();
  Tensor m;
  if (dtype == at::kBool) m = at::where(mask, 0.f, -INFINITY);
  else if (dtype == at::kHalf && mask.is_contiguous()) m = widened(mask);
  else if (dtype == at::kFloat || dtype == at::kHalf) m = mask.to(at::kFloat);
  else return std::nullopt;
  m = m.expand({b, h, l, s});
  if (m.stride(3) != 1) m = m.contiguous();
  return m;
}

std::tuple<Tensor, Tensor> flash_attention(const Tensor& q, const Tensor& k, const Tensor& v, double dropout_p,
                                           bool is_causal, const std::optional<Tensor>& attn_mask,
                                           std::optional<double> scale) {
  auto stock = [&] { return at::cpu::_scaled_dot_product_flash_attention_for_cpu(q, k, v, dropout_p, is_causal, attn_mask, scale); };
  if (q.scalar_type() != at::kHalf || k.scalar_type() != at::kHalf || v.scalar_type() != at::kHalf || q.dim() != 4 ||
      k.dim() != 4 || v.dim() != 4 || !plain(q) || !plain(k) || !plain(v) || dropout_p != 0.0)
    return stock();
  const int64_t B = q.size(0), H = q.size(1), L = q.size(2), D = q.size(3), Hk = k.size(1), S = k.size(2);
  const bool rows = is_causal || L > kMaxQueryRows;
  const bool with_mask = attn_mask.has_value() && attn_mask->defined();
  if ((rows && (S > kMaxKeys || (is_causal && with_mask))) || L == 0 || S == 0 || D == 0 || Hk == 0 ||
      H % Hk != 0 || k.size(0) != B ||
      v.size(0) != B || v.size(1) != Hk || v.size(2) != S || k.size(3) != D || v.size(3) != D ||
      q.stride(3) != 1 || k.stride(3) != 1 || v.stride(3) != 1)
    return stock();
  std::optional<Tensor> mask;
  if (with_mask) {
    mask = float_mask(*attn_mask, B, H, L, S);
    if (!mask) return stock();
  }
  // torch's layouts: out like q; logsumexp [B, H, L] stored as [B, L, H].
  Tensor out = at::empty_like(q);
  Tensor lse = at::empty({B, L, H}, q.options().dtype(at::kFloat)).transpose(1, 2);
  const float sc = scale.has_value() ? static_cast<float>(*scale) : 1.f / std::sqrt(static_cast<float>(D));
  const IsaKernels& isa = active_kernels();
  const int64_t group = H / Hk, size = q.element_size();
  const int64_t scratch_floats = rows ? attend_rows_scratch(isa.gemm, S, D) : S + 2 * ((D + 15) / 16 * 16);
  const char* qp = static_cast<const char*>(q.const_data_ptr());
  const char* kp = static_cast<const char*>(k.const_data_ptr());
  const char* vp = static_cast<const char*>(v.const_data_ptr());
  char* op = static_cast<char*>(out.data_ptr());
  float* lp = lse.data_ptr<float>();
  const float* mp = mask ? mask->const_data_ptr<float>() : nullptr;
  // About 64K multiply-adds per task before another thread is worth waking.
  const int64_t grain = std::max<int64_t>(1, 65536 / std::max<int64_t>(1, L * S * D));
  at::parallel_for(0, B * H, grain, [&](int64_t begin, int64_t end) {
    std::unique_ptr<float[]> scratch(new float[scratch_floats]);
    for (int64_t t = begin; t < end; ++t) {
      const int64_t b = t / H, h = t % H, hk = h / group;
      const char* qh = qp + (b * q.stride(0) + h * q.stride(1)) * size;
      const char* kh = kp + (b * k.stride(0) + hk * k.stride(1)) * size;
      const char* vh = vp + (b * v.stride(0) + hk * v.stride(1)) * size;
      const float* mh = mp ? mp + b * mask->stride(0) + h * mask->stride(1) : nullptr;
      const int64_t m_ls = mask ? mask->stride(2) : 0;
      char* oh = op + (b * out.stride(0) + h * out.stride(1)) * size;
      float* lh = lp + b * lse.stride(0) + h * lse.stride(1);
      if (rows)
        isa.attend_rows_fp16(qh, q.stride(2), kh, k.stride(2), vh, v.stride(2), mh, m_ls, is_causal, L, S, D, sc, oh,
                             out.stride(2), lh, lse.stride(2), scratch.get());
      else
        isa.attend_fp16(qh, q.stride(2), kh, k.stride(2), vh, v.stride(2), mh, m_ls, L, S, D, sc, oh, out.stride(2), lh,
                        lse.stride(2), scratch.get());
    }
  });
  return {out, lse};
}

}  // namespace
}  // namespace torchplug_cpu

TORCH_LIBRARY_FRAGMENT(torchplug_cpu, m) {
  m.def("_scaled_dot_product_flash_attention_for_cpu(Tensor query, Tensor key, Tensor value, float dropout_p=0., "
        "bool is_causal=False, *, Tensor? attn_mask=None, float? scale=None) -> (Tensor output, Tensor logsumexp)");
}

TORCH_LIBRARY_IMPL(torchplug_cpu, CPU, m) {
  m.impl("_scaled_dot_product_flash_attention_for_cpu", TORCH_FN(torchplug_cpu::flash_attention));
}
