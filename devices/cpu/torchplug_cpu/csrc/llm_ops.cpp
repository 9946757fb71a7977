// The four portable LLM ops as torchplug_cpu:: ops with the schemas of torchplug.ops, so the
// dispatcher can route torchplug::<op> on CPU to them for fp32, bf16 and fp16 (float64 keeps the
// plain-torch reference). Here: argument checks (ValueError, in torchplug.ops' words), 2-D row
// views, and torch's thread pool over rows. The arithmetic is in llm_kernels.h, per ISA. Also
// aten's _fused_rms_norm (F.rms_norm on the CPU) on the same row kernel.
#include <ATen/Parallel.h>
#include <ATen/core/LegacyTypeDispatch.h>
#include <ATen/core/grad_mode.h>
#include <ATen/ops/_fused_rms_norm.h>
#include <ATen/ops/_fused_rms_norm_compositeimplicitautograd_dispatch.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/empty_like.h>
#include <c10/util/Exception.h>
#include <torch/library.h>

#include <atomic>
#include <limits>

#include "api.h"

namespace torchplug_cpu {
namespace {

int dtype_index(const char* op, const at::Tensor& t, const char* name) {
  const auto d = kernel_dtype(t.scalar_type());
  TORCH_CHECK_VALUE(d, "torchplug::", op, ": ", name, " must be float32, bfloat16 or float16, got ", t.scalar_type());
  return *d;
}

// Weight / cos / sin: the activation's dtype (aux 0) or float32 (aux 1); anything else becomes float32.
std::pair<at::Tensor, int> aux_operand(const at::Tensor& t, const at::Tensor& like) {
  if (t.scalar_type() == like.scalar_type()) return {t.contiguous(), 0};
  return {t.to(at::kFloat).contiguous(), 1};
}

// Rows of about 16K elements per task: enough work to be worth a thread.
int64_t row_grain(int64_t row_elements) { return std::max<int64_t>(1, 16384 / std::max<int64_t>(1, row_elements)); }

void check_norm(const char* op, const at::Tensor& x, const at::Tensor& weight) {
  TORCH_CHECK_VALUE(x.dim() >= 1 && weight.dim() == 1 && weight.size(0) == x.size(-1), "torchplug::", op,
                    ": weight must have shape (", x.dim() ? x.size(-1) : -1, ",) to match x ", x.sizes(), ", got ",
                    weight.sizes());
}


// out (new, contiguous) = rms_norm of the rows of `hidden` elements of contiguous x, times weight
// unless it is undefined; rstd, unless null, gets each row's 1 / rms.
void rms_norm_rows(const at::Tensor& x, const at::Tensor& out, int64_t hidden, const at::Tensor& weight, float eps,
                   float* rstd) {
  const int d = dtype_index("rms_norm", x, "x");
  const int64_t rows = hidden ? x.numel() / hidden : 0;
  const auto [w, aux] = weight.defined() ? aux_operand(weight, x) : std::pair<at::Tensor, int>{};
  const auto kernel = active_kernels().rms_norm[d][aux];
  const void* wp = w.defined() ? w.const_data_ptr() : nullptr;
  const char* xp = static_cast<const char*>(x.const_data_ptr());
  char* op = static_cast<char*>(out.data_ptr());
  const int64_t row_bytes = hidden * x.element_size();
  at::parallel_for(0, rows, row_grain(hidden), [&](int64_t begin, int64_t end) {
    kernel(xp + begin * row_bytes, hidden, op + begin * row_bytes, hidden, wp, rstd ? rstd + begin : nullptr,
           end - begin, hidden, eps);
  });
}

at::Tensor rms_norm(const at::Tensor& x, const at::Tensor& weight, double eps) {
  check_norm("rms_norm", x, weight);
  at::Tensor out = at::empty(x.sizes(), x.options());
  rms_norm_rows(x.contiguous(), out, x.size(-1), weight, static_cast<float>(eps), nullptr);
  // The op promises x's layout where x is dense, as empty_like gives (its fake kernel, the Triton kernels).
  if (!x.is_contiguous() && x.is_non_overlapping_and_dense()) return at::empty_like(x).copy_(out);
  return out;
}

void fused_add_rms_norm_(const at::Tensor& x, const at::Tensor& residual, const at::Tensor& weight, double eps) {
  check_norm("fused_add_rms_norm_", x, weight);
  TORCH_CHECK_VALUE(x.sizes() == residual.sizes(), "torchplug::fused_add_rms_norm_: x ", x.sizes(), " and residual ",
                    residual.sizes(), " must have the same shape");
  TORCH_CHECK_VALUE(x.scalar_type() == residual.scalar_type(), "torchplug::fused_add_rms_norm_: x (",
                    x.scalar_type(), ") and residual (", residual.scalar_type(), ") must have the same dtype");
  if (!x.is_contiguous() || !residual.is_contiguous()) {  // work on contiguous copies, then write back
    at::Tensor xc = x.contiguous(), rc = residual.contiguous();
    fused_add_rms_norm_(xc, rc, weight, eps);
    x.copy_(xc);
    residual.copy_(rc);
    return;
  }
  const int d = dtype_index("fused_add_rms_norm_", x, "x");
  const int64_t hidden = x.size(-1), rows = hidden ? x.numel() / hidden : 0;
  const auto [w, aux] = aux_operand(weight, x);
  const auto kernel = active_kernels().fused_add_rms_norm[d][aux];
  char* xp = static_cast<char*>(x.data_ptr());
  char* rp = static_cast<char*>(residual.data_ptr());
  const int64_t row_bytes = hidden * x.element_size();
  at::parallel_for(0, rows, row_grain(hidden), [&](int64_t begin, int64_t end) {
    kernel(xp + begin * row_bytes, hidden, rp + begin * row_bytes, hidden, w.const_data_ptr(), end - begin, hidden,
           static_cast<float>(eps));
  });
}

at::Tensor silu_and_mul(const at::Tensor& x) {
  TORCH_CHECK_VALUE(x.dim() >= 1 && x.size(-1) % 2 == 0, "torchplug::silu_and_mul: the last dimension of x ",
                    x.sizes(), " must be even: it holds [gate, up] halves");
  const int dt = dtype_index("silu_and_mul", x, "x");
  const at::Tensor xc = x.contiguous();
  std::vector<int64_t> shape = x.sizes().vec();
  const int64_t d = shape.back() / 2;
  shape.back() = d;
  at::Tensor out = at::empty(shape, x.options());
  const int64_t rows = d ? out.numel() / d : 0;
  const auto kernel = active_kernels().silu_and_mul[dt];
  const char* xp = static_cast<const char*>(xc.const_data_ptr());
  char* op = static_cast<char*>(out.data_ptr());
  const int64_t size = x.element_size();
  at::parallel_for(0, rows, row_grain(2 * d), [&](int64_t begin, int64_t end) {
    kernel(xp + begin * 2 * d * size, 2 * d, op + begin * d * size, d, end - begin, d);
  });
  return out;
}

std::tuple<at::Tensor, at::Tensor> rotary_embedding(const at::Tensor& q, const at::Tensor& k, const at::Tensor& cos,
                                                     const at::Tensor& sin) {
  TORCH_CHECK_VALUE(q.dim() == 3 && k.dim() == 3 && q.size(-1) % 2 == 0, "torchplug::rotary_embedding: q ", q.sizes(),
                    " and k ", k.sizes(), " must be [tokens, heads, head_dim] with an even head_dim");
  const int64_t tokens = q.size(0), head_dim = q.size(2);
  TORCH_CHECK_VALUE(k.size(0) == tokens && k.size(2) == head_dim, "torchplug::rotary_embedding: k ", k.sizes(),
                    " must match q ", q.sizes(), " in tokens and head_dim");
  TORCH_CHECK_VALUE(cos.dim() == 2 && cos.sizes() == sin.sizes() && cos.size(0) == tokens && cos.size(1) == head_dim / 2,
                    "torchplug::rotary_embedding: cos ", cos.sizes(), " and sin ", sin.sizes(),
                    " must be [tokens, head_dim // 2] = (", tokens, ", ", head_dim / 2, ")");
  TORCH_CHECK_VALUE(q.scalar_type() == k.scalar_type(), "torchplug::rotary_embedding: q (", q.scalar_type(),
                    ") and k (", k.scalar_type(), ") must have the same dtype");
  const int d = dtype_index("rotary_embedding", q, "q");
  const auto [c, aux] = aux_operand(cos, q);
  const at::Tensor s = aux_operand(sin, q).first;
  const auto kernel = active_kernels().rotary[d][aux];
  const int64_t size = q.element_size(), cs_size = c.element_size();
  auto rotate = [&](const at::Tensor& x) {
    // Any token / head strides (e.g. q sliced out of a fused qkv projection); head_dim contiguous.
    const at::Tensor src = x.stride(2) == 1 ? x : x.contiguous();
    at::Tensor dst = at::empty(x.sizes(), x.options());
    const char* sp = static_cast<const char*>(src.const_data_ptr());
    char* dp = static_cast<char*>(dst.data_ptr());
    const int64_t heads = x.size(1);
    at::parallel_for(0, tokens, row_grain(heads * head_dim), [&](int64_t begin, int64_t end) {
      kernel(sp + begin * src.stride(0) * size, src.stride(0), src.stride(1), dp + begin * dst.stride(0) * size,
             dst.stride(0), dst.stride(1), static_cast<const char*>(c.const_data_ptr()) + begin * head_dim / 2 * cs_size,
             static_cast<const char*>(s.const_data_ptr()) + begin * head_dim / 2 * cs_size, head_dim / 2, end - begin,
             heads, head_dim);
    });
    return dst;
  };
  return {rotate(q), rotate(k)};
}

std::tuple<at::Tensor, at::Tensor> fused_add_rms_norm(const at::Tensor& x, const at::Tensor& residual,
                                                       const at::Tensor& weight, double eps) {
  at::Tensor out = x.clone(), summed = residual.clone();
  fused_add_rms_norm_(out, summed, weight, eps);
  return {out, summed};
}

std::atomic<uint64_t> g_fused_rms_norm_calls{0};

// aten::_fused_rms_norm on the CPU key, where torch's kernel is a composite of about ten ops (to,
// pow, mean, add, rsqrt, mul, ...). Ours takes a contiguous fp32 / bf16 / fp16 input normalised over
// its trailing `normalized_shape`, with a weight of that shape (fp32, bf16 or fp16) or none, and
// returns what the composite does: the output in the input's dtype, and rstd in float32 (the math
// type) shaped like the input with the normalised dims 1. Anything else runs the composite.
std::tuple<at::Tensor, at::Tensor> fused_rms_norm(const at::Tensor& input, at::IntArrayRef normalized_shape,
                                                  const std::optional<at::Tensor>& weight, std::optional<double> eps) {
  auto ours = [](const at::Tensor& t) { return t.device().is_cpu() && kernel_dtype(t.scalar_type()); };
  const at::Tensor w = weight.value_or(at::Tensor());
  const int64_t k = normalized_shape.size(), dim = input.dim();
  if (k == 0 || k > dim || input.numel() == 0 || !ours(input) || !input.is_contiguous() ||
      input.sizes().slice(dim - k) != normalized_shape || (w.defined() && (!ours(w) || w.sizes() != normalized_shape)))
    return at::compositeimplicitautograd::_fused_rms_norm(input, normalized_shape, weight, eps);
  g_fused_rms_norm_calls.fetch_add(1, std::memory_order_relaxed);
  std::vector<int64_t> rstd_shape = input.sizes().vec();
  std::fill(rstd_shape.end() - k, rstd_shape.end(), 1);
  at::Tensor out = at::empty(input.sizes(), input.options());
  at::Tensor rstd = at::empty(rstd_shape, input.options().dtype(at::kFloat));
  // eps defaults to that of the math type, float32, as in torch.
  rms_norm_rows(input, out, c10::multiply_integers(normalized_shape), w,
                eps ? static_cast<float>(*eps) : std::numeric_limits<float>::epsilon(), rstd.data_ptr<float>());
  return {out, rstd};
}

// Whether autograd has work on t: a gradient to record, or a tangent to carry (forward AD; level
// 0 is the one torch's generated autograd kernels check, torch.func's included).
bool differentiated(const std::optional<at::Tensor>& t) {
  return t && t->defined() && ((at::GradMode::is_enabled() && t->requires_grad()) || t->_fw_grad(0).defined());
}

// aten::_fused_rms_norm on AutogradCPU (torchplug_cpu.kernels routes it here with the CPU key).
// torch differentiates its CPU composite through the ops it runs: aten has no CPU
// _fused_rms_norm_backward, and a CPU kernel alone would switch AutogradCPU to the op's own
// derivative, which calls it. So: the composite where autograd has work, and otherwise the CPU
// key, below autograd, where the dispatcher's dtype split picks the kernel above or torch's.
std::tuple<at::Tensor, at::Tensor> fused_rms_norm_autograd(const at::Tensor& input, at::IntArrayRef normalized_shape,
                                                           const std::optional<at::Tensor>& weight,
                                                           std::optional<double> eps) {
  if (differentiated(input) || differentiated(weight))
    return at::compositeimplicitautograd::_fused_rms_norm(input, normalized_shape, weight, eps);
  at::AutoDispatchBelowADInplaceOrView below;
  return at::_fused_rms_norm(input, normalized_shape, weight, eps);
}

}  // namespace

uint64_t fused_rms_norm_calls() { return g_fused_rms_norm_calls.load(std::memory_order_relaxed); }

}  // namespace torchplug_cpu

TORCH_LIBRARY_FRAGMENT(torchplug_cpu, m) {
  m.def("rms_norm(Tensor x, Tensor weight, float eps) -> Tensor");
  m.def("fused_add_rms_norm_(Tensor(a!) x, Tensor(b!) residual, Tensor weight, float eps) -> ()");
  m.def("fused_add_rms_norm(Tensor x, Tensor residual, Tensor weight, float eps) -> (Tensor, Tensor)");
  m.def("silu_and_mul(Tensor x) -> Tensor");
  m.def("rotary_embedding(Tensor q, Tensor k, Tensor cos, Tensor sin) -> (Tensor, Tensor)");
  m.def("_fused_rms_norm(Tensor input, int[] normalized_shape, Tensor? weight, float? eps) -> (Tensor, Tensor)");
}

TORCH_LIBRARY_IMPL(torchplug_cpu, CPU, m) {
  namespace tc = torchplug_cpu;
  m.impl("rms_norm", TORCH_FN(tc::rms_norm));
  m.impl("fused_add_rms_norm_", TORCH_FN(tc::fused_add_rms_norm_));
  m.impl("fused_add_rms_norm", TORCH_FN(tc::fused_add_rms_norm));
  m.impl("silu_and_mul", TORCH_FN(tc::silu_and_mul));
  m.impl("rotary_embedding", TORCH_FN(tc::rotary_embedding));
  m.impl("_fused_rms_norm", TORCH_FN(tc::fused_rms_norm));
}

TORCH_LIBRARY_IMPL(torchplug_cpu, AutogradCPU, m) {
  m.impl("_fused_rms_norm", TORCH_FN(torchplug_cpu::fused_rms_norm_autograd));
}
