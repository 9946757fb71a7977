// scaled_dot_product_attention on emulated cuda, as a CUDA build runs it: the same backend choice,
// and the fused kernels only CUDA builds have, computed with the math path.
//
// On a GPU, torch asks select_sdp_backend which kernel takes the inputs (the user's sdpa_kernel
// choice, then each kernel's constraints, in torch's priority order), and refuses with "No available
// kernel" when none does. The flash and memory-efficient kernels
// (_flash_attention_forward/backward, _efficient_attention_forward/backward and their
// _scaled_dot_product_* wrappers) have no CPU kernel. Here the choice follows the constraints CUDA's
// sdp_utils.cpp sets for the emulated GPU (sm80: flash takes fp16/bf16 up to head dim 256 without a
// mask; memory-efficient takes fp16/bf16/fp32 whose head dims are aligned), the fused kernels take
// their own layouts and refuse what CUDA's refuse, and compute softmax(q k^T * scale + bias) v in
// float32 with its log-sum-exp, as CUDA's accumulate. Dropout keeps the mask a generator seeded by
// the returned philox seed draws, so the backward redraws the same mask. cuDNN attention is not
// offered (there is no cuDNN), nor are variable-length batches (cu_seqlens), which say so.
#include "emulation.h"
#include "registration.h"

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/Context.h>
#include <ATen/core/Tensor.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/grad_mode.h>
#include <ATen/core/stack.h>
#include <ATen/ops/_efficient_attention_backward.h>
#include <ATen/ops/_efficient_attention_forward.h>
#include <ATen/ops/_flash_attention_backward.h>
#include <ATen/ops/_flash_attention_forward.h>
#include <ATen/ops/_scaled_dot_product_attention_math.h>
#include <ATen/ops/_scaled_dot_product_efficient_attention.h>
#include <ATen/ops/_scaled_dot_product_flash_attention.h>
#include <ATen/ops/constant_pad_nd.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/empty_like.h>
#include <ATen/ops/full.h>
#include <ATen/ops/logsumexp.h>
#include <ATen/ops/matmul.h>
#include <ATen/ops/ones.h>
#include <ATen/ops/rand.h>
#include <ATen/ops/scalar_tensor.h>
#include <ATen/ops/where.h>
#include <ATen/ops/zeros.h>
#include <torch/library.h>

#include <cmath>
#include <limits>
#include <sstream>
#include <string>
#include <vector>

namespace torchplug::emulation {

namespace {

// custom_mask_type of _efficient_attention_*: where the causal diagonal starts.
enum MaskType : int64_t { kNoMask = 0, kCausalTopLeft = 1, kCausalBottomRight = 2 };

double softmax_scale(const at::Tensor& q, std::optional<double> scale) {
  return scale.has_value() ? *scale : 1.0 / std::sqrt(static_cast<double>(q.size(-1)));
}

// Keep-mask of dropout for scores of `shape`, drawn from a CPU generator seeded by `seed`: the same
// seed gives the same mask in the forward and the backward.
at::Tensor dropout_keep(int64_t seed, at::IntArrayRef shape, double p, const at::TensorOptions& options) {
  at::Generator generator = at::make_generator<at::CPUGeneratorImpl>(static_cast<uint64_t>(seed));
  return at::rand(shape, generator, at::TensorOptions().dtype(at::kFloat)).ge(p).to(options).div_(1.0 - p);
}

// A seed drawn from the device's generator (torch.cuda.manual_seed makes runs repeat).
int64_t draw_seed(const at::Tensor& like) {
  return at::empty({}, like.options().dtype(at::kLong)).random_().item<int64_t>();
}

// Scores q k^T * scale + bias with the causal mask, in float32 (float64 stays float64); [B,H,M,N].
at::Tensor scores(const at::Tensor& q, const at::Tensor& k, const std::optional<at::Tensor>& bias,
                  int64_t mask_type, double scale) {
  const auto wide = q.scalar_type() == at::kDouble ? at::kDouble : at::kFloat;
  at::Tensor s = at::matmul(q.to(wide), k.to(wide).transpose(-2, -1)).mul_(scale);
  if (bias.has_value() && bias->defined()) {
    s.add_(bias->to(wide));
  }
  if (mask_type != kNoMask) {
    const int64_t m = s.size(-2), n = s.size(-1);
    const int64_t shift = mask_type == kCausalBottomRight ? n - m : 0;  // row i sees columns <= i + shift
    at::Tensor rows = at::ones({m, n}, s.options().dtype(at::kBool)).triu(shift + 1);
    s.masked_fill_(rows, -std::numeric_limits<double>::infinity());
  }
  return s;
}

// Probabilities from scores and their log-sum-exp; a row with every score masked gives zeros.
at::Tensor probabilities(const at::Tensor& s, const at::Tensor& lse) {
  at::Tensor p = s.sub(lse.unsqueeze(-1)).exp_();
  return at::where(lse.unsqueeze(-1).isinf(), at::zeros({}, p.options()), p);
}

// Heads of k/v repeated to q's (flash's grouped-query attention); the backward sums them back.
at::Tensor widen_heads(const at::Tensor& t, int64_t heads) {
  return t.size(1) == heads ? t : t.repeat_interleave(heads / t.size(1), 1);
}

at::Tensor narrow_heads(const at::Tensor& grad, int64_t heads) {
  if (grad.size(1) == heads) {
    return grad;
  }
  auto sizes = grad.sizes().vec();
  sizes[1] = heads;
  sizes.insert(sizes.begin() + 2, grad.size(1) / heads);
  return grad.reshape(sizes).sum(2);
}

struct Forward {
  at::Tensor out;  // [B,H,M,Kv] in q's dtype
  at::Tensor lse;  // [B,H,M] float32
};

// q [B,H,M,K], k [B,Hk,N,K], v [B,Hk,N,Kv].
Forward attend(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const std::optional<at::Tensor>& bias,
               int64_t mask_type, double scale, double dropout, int64_t seed) {
  const int64_t heads = q.size(1);
  at::Tensor s = scores(q, widen_heads(k, heads), bias, mask_type, scale);
  at::Tensor lse = at::logsumexp(s, {-1});
  at::Tensor p = probabilities(s, lse);
  if (dropout > 0) {
    p.mul_(dropout_keep(seed, p.sizes(), dropout, p.options()));
  }
  at::Tensor out = at::matmul(p, widen_heads(v, heads).to(p.scalar_type())).to(q.scalar_type());
  return {out, lse.to(at::kFloat)};
}

struct Backward {
  at::Tensor dq, dk, dv, dbias;
};

Backward attend_backward(const at::Tensor& dout, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                         const std::optional<at::Tensor>& bias, const at::Tensor& out, const at::Tensor& lse,
                         int64_t mask_type, double scale, double dropout, int64_t seed) {
  const int64_t heads = q.size(1);
  const at::Tensor kw = widen_heads(k, heads), vw = widen_heads(v, heads);
  at::Tensor s = scores(q, kw, bias, mask_type, scale);
  const auto wide = s.scalar_type();
  at::Tensor p = probabilities(s, lse.narrow(-1, 0, q.size(2)).to(wide));
  at::Tensor keep = dropout > 0 ? dropout_keep(seed, p.sizes(), dropout, p.options()) : at::Tensor();
  const at::Tensor go = dout.to(wide);
  at::Tensor dropped = keep.defined() ? p.mul(keep) : p;
  at::Tensor dv = at::matmul(dropped.transpose(-2, -1), go);
  at::Tensor dp = at::matmul(go, vw.to(wide).transpose(-2, -1));
  if (keep.defined()) {
    dp.mul_(keep);
  }
  at::Tensor ds = p.mul(dp.sub(go.mul(out.to(wide)).sum(-1, true)));
  at::Tensor dq = at::matmul(ds, kw.to(wide)).mul_(scale);
  at::Tensor dk = at::matmul(ds.transpose(-2, -1), q.to(wide)).mul_(scale);
  return {dq.to(q.scalar_type()), narrow_heads(dk, k.size(1)).to(k.scalar_type()),
          narrow_heads(dv, v.size(1)).to(v.scalar_type()), ds};
}

// A result laid out as `like` (what CUDA's kernels allocate with empty_like), holding `values`.
at::Tensor laid_out_as(const at::Tensor& like, const at::Tensor& values) {
  return at::empty_like(like).copy_(values);
}

void refuse_varlen(const char* op, const std::optional<at::Tensor>& cu_seqlens) {
  TORCH_CHECK_NOT_IMPLEMENTED(!cu_seqlens.has_value() || !cu_seqlens->defined(), op,
                              ": variable-length batches (cu_seqlens) are not emulated; torchplug's emulated cuda "
                              "computes padded batches of equal length only");
}

// Checks the fused kernels make themselves (flash_api.cpp, attention.cu), with their words.
void check_fused_inputs(const char* op, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, bool flash) {
  TORCH_CHECK(q.dim() == 4 && k.dim() == 4 && v.dim() == 4, op, ": expected 4-D query, key and value ",
              "(batch, seqlen, num_heads, head_dim), got ", q.dim(), "-D, ", k.dim(), "-D and ", v.dim(), "-D");
  TORCH_CHECK(q.scalar_type() == k.scalar_type() && q.scalar_type() == v.scalar_type(), op,
              ": query, key and value must have the same dtype");
  const auto dtype = q.scalar_type();
  if (flash) {
    TORCH_CHECK(dtype == at::kHalf || dtype == at::kBFloat16, "FlashAttention only support fp16 and bf16 data type");
    TORCH_CHECK(q.size(-1) <= 256, "FlashAttention forward only supports head dimension at most 256");
    TORCH_CHECK(q.size(-1) % 8 == 0, "head_size must be a multiple of 8, this is ensured by padding!");
    TORCH_CHECK(k.size(-1) == q.size(-1) && v.size(-1) == q.size(-1), op, ": query, key and value must have the same head_dim");
    TORCH_CHECK(q.size(2) % k.size(2) == 0 && k.size(2) == v.size(2),
                "Number of heads in key/value must divide number of heads in query");
  } else {
    TORCH_CHECK(dtype == at::kHalf || dtype == at::kBFloat16 || dtype == at::kFloat,
                op, ": only fp32, half & bf16 supported at the moment, got ", dtype);
    TORCH_CHECK(q.size(-1) == k.size(-1), op, ": query and key must have the same head_dim");
    TORCH_CHECK(q.size(2) == k.size(2) && k.size(2) == v.size(2), op, ": query, key and value must have the same number of heads");
  }
  TORCH_CHECK(q.size(0) == k.size(0) && k.size(0) == v.size(0) && k.size(1) == v.size(1), op,
              ": batch sizes and key/value sequence lengths must match");
  TORCH_CHECK(q.stride(-1) == 1 && k.stride(-1) == 1 && v.stride(-1) == 1, op, ": Input tensor must have contiguous last dimension");
}

at::Tensor heads_first(const at::Tensor& t) {  // [B,M,H,K] -> [B,H,M,K], a view
  return t.transpose(1, 2);
}

// ---- the fused kernels, in their own layouts ([B, seqlen, heads, head_dim]) --------------------

// _flash_attention_forward -> (output, softmax_logsumexp, rng_state, unused, debug_attn_mask)
std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor> flash_forward(
    const at::Tensor& query, const at::Tensor& key, const at::Tensor& value, const std::optional<at::Tensor>& cum_seq_q,
    const std::optional<at::Tensor>& cum_seq_k, c10::SymInt /*max_q*/, c10::SymInt /*max_k*/, double dropout_p,
    bool is_causal, bool return_debug_mask, std::optional<double> scale, std::optional<c10::SymInt> window_size_left,
    std::optional<c10::SymInt> window_size_right, const std::optional<at::Tensor>& seqused_k,
    const std::optional<at::Tensor>& alibi_slopes, const std::optional<at::Tensor>& block_table,
    std::optional<int64_t> num_splits) {
  refuse_varlen("aten::_flash_attention_forward", cum_seq_q);
  check_fused_inputs("aten::_flash_attention_forward", query, key, value, true);
  TORCH_CHECK_NOT_IMPLEMENTED(!return_debug_mask && !window_size_left.has_value() && !window_size_right.has_value() &&
                                  !seqused_k.has_value() && !alibi_slopes.has_value() && !block_table.has_value() &&
                                  !num_splits.has_value(),
                              "aten::_flash_attention_forward on torchplug's emulated cuda computes plain attention only: "
                              "return_debug_mask, sliding windows, seqused_k, ALiBi slopes, paged KV (block_table) and "
                              "num_splits are not emulated");
  (void)cum_seq_k;
  const int64_t seed = dropout_p > 0 ? draw_seed(query) : 0;
  const int64_t mask = is_causal ? kCausalBottomRight : kNoMask;  // flash aligns the diagonal bottom-right
  Forward f = attend(heads_first(query), heads_first(key), heads_first(value), std::nullopt, mask,
                     softmax_scale(query, scale), dropout_p, seed);
  const auto u64 = query.options().dtype(at::kUInt64);
  at::Tensor rng_state = at::empty({2}, query.options().dtype(at::kLong)).zero_();
  rng_state.select(0, 0).fill_(seed);
  return {laid_out_as(query, f.out.transpose(1, 2)), f.lse, rng_state.view(at::kUInt64), at::empty({}, u64),
          at::empty({0}, query.options())};
}

// _flash_attention_backward -> (grad_query, grad_key, grad_value)
std::tuple<at::Tensor, at::Tensor, at::Tensor> flash_backward(
    const at::Tensor& grad_out, const at::Tensor& query, const at::Tensor& key, const at::Tensor& value,
    const at::Tensor& out, const at::Tensor& logsumexp, const at::Tensor& cum_seq_q, const at::Tensor& /*cum_seq_k*/,
    c10::SymInt /*max_q*/, c10::SymInt /*max_k*/, double dropout_p, bool is_causal, const at::Tensor& rng_state,
    const at::Tensor& /*unused*/, std::optional<double> scale, std::optional<c10::SymInt> window_size_left,
    std::optional<c10::SymInt> window_size_right) {
  refuse_varlen("aten::_flash_attention_backward", cum_seq_q);
  check_fused_inputs("aten::_flash_attention_backward", query, key, value, true);
  TORCH_CHECK_NOT_IMPLEMENTED(!window_size_left.has_value() && !window_size_right.has_value(),
                              "aten::_flash_attention_backward: sliding windows are not emulated");
  const int64_t seed = dropout_p > 0 ? rng_state.view(at::kLong).select(0, 0).item<int64_t>() : 0;
  Backward b = attend_backward(heads_first(grad_out), heads_first(query), heads_first(key), heads_first(value),
                               std::nullopt, heads_first(out), logsumexp, is_causal ? kCausalBottomRight : kNoMask,
                               softmax_scale(query, scale), dropout_p, seed);
  return {laid_out_as(query, b.dq.transpose(1, 2)), laid_out_as(key, b.dk.transpose(1, 2)),
          laid_out_as(value, b.dv.transpose(1, 2))};
}

// _efficient_attention_forward -> (output, logsumexp, philox_seed, philox_offset, max_seqlen_q, max_seqlen_k)
std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, c10::SymInt, c10::SymInt> efficient_forward(
    const at::Tensor& query, const at::Tensor& key, const at::Tensor& value, const std::optional<at::Tensor>& bias,
    const std::optional<at::Tensor>& cu_seqlens_q, const std::optional<at::Tensor>& cu_seqlens_k,
    std::optional<c10::SymInt> /*max_seqlen_q*/, std::optional<c10::SymInt> /*max_seqlen_k*/, double dropout_p,
    int64_t custom_mask_type, bool compute_log_sumexp, std::optional<double> scale,
    const std::optional<at::Tensor>& seqlen_k, std::optional<int64_t> window_size) {
  refuse_varlen("aten::_efficient_attention_forward", cu_seqlens_q);
  refuse_varlen("aten::_efficient_attention_forward", cu_seqlens_k);
  check_fused_inputs("aten::_efficient_attention_forward", query, key, value, false);
  TORCH_CHECK(custom_mask_type >= kNoMask && custom_mask_type <= kCausalBottomRight,
              "aten::_efficient_attention_forward: custom_mask_type must be 0 (none), 1 (causal from the top left) or 2 "
              "(causal from the bottom right), got ", custom_mask_type);
  TORCH_CHECK_NOT_IMPLEMENTED(!seqlen_k.has_value() && !window_size.has_value(),
                              "aten::_efficient_attention_forward: seqlen_k and window_size are not emulated");
  if (bias.has_value() && bias->defined()) {
    TORCH_CHECK(bias->scalar_type() == query.scalar_type(), "invalid dtype for bias - should match query's dtype");
  }
  const int64_t seed = dropout_p > 0 ? draw_seed(query) : 0;
  Forward f = attend(heads_first(query), heads_first(key), heads_first(value), bias, custom_mask_type,
                     softmax_scale(query, scale), dropout_p, seed);
  const int64_t m = query.size(1), n = key.size(1);
  // CUDA pads the log-sum-exp's rows to blocks of 32 and leaves it empty unless asked for.
  const int64_t rows = compute_log_sumexp ? (m + 31) / 32 * 32 : 0;
  at::Tensor lse = at::full({query.size(0), query.size(2), rows}, std::numeric_limits<double>::infinity(),
                            query.options().dtype(at::kFloat));
  if (rows > 0) {
    lse.narrow(-1, 0, m).copy_(f.lse);
  }
  // CUDA's seed and offset are CPU scalars (Note [Seed and Offset] in torch's meta registrations).
  const auto cpu_long = at::TensorOptions().dtype(at::kLong);
  return {laid_out_as(at::empty({query.size(0), m, query.size(2), value.size(-1)}, query.options()), f.out.transpose(1, 2)),
          lse, at::scalar_tensor(seed, cpu_long), at::scalar_tensor(0, cpu_long), c10::SymInt(m), c10::SymInt(n)};
}

// _efficient_attention_backward -> (grad_query, grad_key, grad_value, grad_bias)
std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor> efficient_backward(
    const at::Tensor& grad_out, const at::Tensor& query, const at::Tensor& key, const at::Tensor& value,
    const std::optional<at::Tensor>& bias, const at::Tensor& out, const std::optional<at::Tensor>& cu_seqlens_q,
    const std::optional<at::Tensor>& /*cu_seqlens_k*/, c10::SymInt /*max_seqlen_q*/, c10::SymInt /*max_seqlen_k*/,
    const at::Tensor& logsumexp, double dropout_p, const at::Tensor& philox_seed, const at::Tensor& /*philox_offset*/,
    int64_t custom_mask_type, bool bias_requires_grad, std::optional<double> scale,
    std::optional<int64_t> /*num_splits_key*/, std::optional<int64_t> window_size, bool /*shared_storage_dqdkdv*/) {
  refuse_varlen("aten::_efficient_attention_backward", cu_seqlens_q);
  check_fused_inputs("aten::_efficient_attention_backward", query, key, value, false);
  TORCH_CHECK_NOT_IMPLEMENTED(!window_size.has_value(), "aten::_efficient_attention_backward: window_size is not emulated");
  const int64_t seed = dropout_p > 0 ? philox_seed.item<int64_t>() : 0;
  Backward b = attend_backward(heads_first(grad_out), heads_first(query), heads_first(key), heads_first(value), bias,
                               heads_first(out), logsumexp, custom_mask_type, softmax_scale(query, scale), dropout_p, seed);
  at::Tensor dbias;
  if (bias.has_value() && bias->defined() && bias_requires_grad) {
    dbias = b.dbias.sum_to_size(bias->sizes()).to(bias->scalar_type());
  } else {
    dbias = at::empty({}, query.options());
  }
  return {laid_out_as(query, b.dq.transpose(1, 2)), laid_out_as(key, b.dk.transpose(1, 2)),
          laid_out_as(value, b.dv.transpose(1, 2)), dbias};
}

// ---- the sdpa entry points in [B, heads, seqlen, head_dim] --------------------------------------

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, c10::SymInt, c10::SymInt, at::Tensor, at::Tensor, at::Tensor>
sdpa_flash(const at::Tensor& query, const at::Tensor& key, const at::Tensor& value, double dropout_p, bool is_causal,
           bool return_debug_mask, std::optional<double> scale) {
  auto [out, lse, rng_state, unused, debug] = at::_flash_attention_forward(
      query.transpose(1, 2), key.transpose(1, 2), value.transpose(1, 2), std::nullopt, std::nullopt, query.size(2),
      key.size(2), dropout_p, is_causal, return_debug_mask, scale);
  return {out.transpose(1, 2), lse, at::Tensor(), at::Tensor(), c10::SymInt(query.size(2)), c10::SymInt(key.size(2)),
          rng_state, unused, debug};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> sdpa_flash_backward(
    const at::Tensor& grad_out, const at::Tensor& query, const at::Tensor& key, const at::Tensor& value,
    const at::Tensor& out, const at::Tensor& logsumexp, const at::Tensor& cum_seq_q, const at::Tensor& cum_seq_k,
    c10::SymInt max_q, c10::SymInt max_k, double dropout_p, bool is_causal, const at::Tensor& philox_seed,
    const at::Tensor& philox_offset, std::optional<double> scale) {
  if (!grad_out.defined()) {
    return {at::Tensor(), at::Tensor(), at::Tensor()};
  }
  auto [dq, dk, dv] = at::_flash_attention_backward(
      grad_out.transpose(1, 2), query.transpose(1, 2), key.transpose(1, 2), value.transpose(1, 2), out.transpose(1, 2),
      logsumexp, cum_seq_q, cum_seq_k, max_q.expect_int(), max_k.expect_int(), dropout_p, is_causal, philox_seed,
      philox_offset, scale);
  return {dq.transpose(1, 2), dk.transpose(1, 2), dv.transpose(1, 2)};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor> sdpa_efficient(
    const at::Tensor& query, const at::Tensor& key, const at::Tensor& value, const std::optional<at::Tensor>& attn_bias,
    bool compute_log_sumexp, double dropout_p, bool is_causal, std::optional<double> scale) {
  auto [out, lse, seed, offset, max_q, max_k] = at::_efficient_attention_forward(
      query.transpose(1, 2), key.transpose(1, 2), value.transpose(1, 2), attn_bias, std::nullopt, std::nullopt,
      std::nullopt, std::nullopt, dropout_p, is_causal ? kCausalTopLeft : kNoMask, compute_log_sumexp, scale);
  return {out.transpose(1, 2), lse, seed, offset};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor> sdpa_efficient_backward(
    const at::Tensor& grad_out, const at::Tensor& query, const at::Tensor& key, const at::Tensor& value,
    const at::Tensor& attn_bias, const at::Tensor& out, const at::Tensor& logsumexp, const at::Tensor& philox_seed,
    const at::Tensor& philox_offset, double dropout_p, std::array<bool, 4> grad_input_mask, bool is_causal,
    std::optional<double> scale) {
  if (!grad_out.defined()) {
    return {at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor()};
  }
  auto [dq, dk, dv, db] = at::_efficient_attention_backward(
      grad_out.transpose(1, 2), query.transpose(1, 2), key.transpose(1, 2), value.transpose(1, 2),
      attn_bias.defined() ? std::optional<at::Tensor>(attn_bias) : std::nullopt, out.transpose(1, 2), std::nullopt,
      std::nullopt, query.size(2), key.size(2), logsumexp, dropout_p, philox_seed, philox_offset,
      is_causal ? kCausalTopLeft : kNoMask, grad_input_mask[3], scale);
  return {dq.transpose(1, 2), dk.transpose(1, 2), dv.transpose(1, 2), grad_input_mask[3] ? db : at::Tensor()};
}

// ---- the backend choice (select_sdp_backend in CUDA's sdp_utils.cpp) ----------------------------

struct Params {
  const at::Tensor& q;
  const at::Tensor& k;
  const at::Tensor& v;
  const std::optional<at::Tensor>& mask;
  double dropout;
  bool is_causal;
  bool enable_gqa;
};

bool dense_4d(const Params& p, const char* kernel, std::vector<std::string>& why) {
  if (p.q.dim() != 4 || p.k.dim() != 4 || p.v.dim() != 4) {
    why.push_back(std::string(kernel) + " requires query, key and value to be 4 dimensional");
    return false;
  }
  if (p.q.size(2) == 0 || p.k.size(2) == 0) {
    why.push_back(std::string(kernel) + " does not support sequence lengths of 0");
    return false;
  }
  if (p.q.stride(-1) != 1 || p.k.stride(-1) != 1 || p.v.stride(-1) != 1) {
    why.push_back(std::string(kernel) + " requires the last dimension of query, key and value to be contiguous");
    return false;
  }
  return true;
}

bool heads_fit(const Params& p, bool supports_gqa, const char* kernel, std::vector<std::string>& why) {
  const int64_t hq = p.q.size(1), hk = p.k.size(1), hv = p.v.size(1);
  const bool same = hq == hk && hk == hv;
  const bool grouped = p.enable_gqa && supports_gqa && hk == hv && hk > 0 && hq % hk == 0;
  if (p.q.size(0) != p.k.size(0) || p.k.size(0) != p.v.size(0) || !(same || grouped)) {
    why.push_back(std::string(kernel) + " requires equal batch sizes and numbers of heads for query, key and value" +
                  (p.enable_gqa && !supports_gqa ? " (it has no grouped-query attention)" : ""));
    return false;
  }
  return true;
}

bool flash_fits(const Params& p, std::vector<std::string>& why) {
  const char* kernel = "Flash attention";
  if (!at::globalContext().userEnabledFlashSDP()) {
    why.push_back("Flash attention has been runtime disabled.");
    return false;
  }
  if (!dense_4d(p, kernel, why) || !heads_fit(p, true, kernel, why)) {
    return false;
  }
  if (p.mask.has_value() && p.mask->defined()) {
    why.push_back("Flash attention does not support non-null attn_mask.");
    return false;
  }
  const auto dtype = p.q.scalar_type();
  if (dtype != at::kHalf && dtype != at::kBFloat16) {
    why.push_back("Expected query, key and value to all be of dtype: {Half, BFloat16}. Got Query dtype: " +
                  std::string(c10::toString(dtype)) + " (flash attention)");
    return false;
  }
  const int64_t d = p.q.size(-1);
  if (d != p.k.size(-1) || d != p.v.size(-1) || d > 256) {
    why.push_back("Flash attention requires q, k and v to have the same last dimension, at most 256");
    return false;
  }
  if (p.is_causal && p.q.size(2) != p.k.size(2)) {
    why.push_back("Flash attention does not support the is_causal flag when seqlen_q != seqlen_k.");
    return false;
  }
  return true;
}

bool efficient_fits(const Params& p, std::vector<std::string>& why) {
  const char* kernel = "Mem efficient attention";
  if (!at::globalContext().userEnabledMemEfficientSDP()) {
    why.push_back("Memory Efficient attention has been runtime disabled.");
    return false;
  }
  if (!dense_4d(p, kernel, why) || !heads_fit(p, false, kernel, why)) {
    return false;
  }
  const auto dtype = p.q.scalar_type();
  if (dtype != at::kHalf && dtype != at::kBFloat16 && dtype != at::kFloat) {
    why.push_back("Expected query, key and value to all be of dtype: {Half, Float, BFloat16}. Got Query dtype: " +
                  std::string(c10::toString(dtype)) + " (memory-efficient attention)");
    return false;
  }
  // sm80's GEMM alignment: 128 bits, at least 4 elements.
  const int64_t alignment = dtype == at::kFloat ? 4 : 8;
  const int64_t d = p.q.size(-1), dv = p.v.size(-1);
  if (d != p.k.size(-1) || d % alignment != 0 || dv % alignment != 0 || d == 0 || dv == 0) {
    why.push_back("Mem efficient attention requires last dimension of inputs to be divisible by " +
                  std::to_string(alignment) + ". Got Query.size(-1): " + std::to_string(d) +
                  ", Key.size(-1): " + std::to_string(p.k.size(-1)) + ", Value.size(-1): " + std::to_string(dv));
    return false;
  }
  return true;
}

at::SDPBackend choose(const Params& p) {
  std::vector<std::string> why;
  for (at::SDPBackend backend : at::globalContext().sDPPriorityOrder()) {
    switch (backend) {
      case at::SDPBackend::flash_attention:
        if (flash_fits(p, why)) return backend;
        break;
      case at::SDPBackend::efficient_attention:
        if (efficient_fits(p, why)) return backend;
        break;
      case at::SDPBackend::math:
        if (at::globalContext().userEnabledMathSDP()) return backend;
        why.push_back("Math attention has been runtime disabled.");
        break;
      case at::SDPBackend::cudnn_attention:
        if (at::globalContext().userEnabledCuDNNSDP()) {
          why.push_back("CuDNN attention is not available: torchplug's emulated cuda has no cuDNN.");
        }
        break;
      default:
        break;
    }
  }
  std::ostringstream reasons;
  for (const std::string& reason : why) {
    reasons << "\n  " << reason;
  }
  TORCH_WARN("torchplug's emulated cuda found no scaled_dot_product_attention kernel for these inputs:", reasons.str());
  TORCH_CHECK(false, "No available kernel. Aborting execution.");
}

// A boolean mask as CUDA's sdpa converts it: 0 where attended, -inf elsewhere, in the query's dtype.
std::optional<at::Tensor> additive_mask(const std::optional<at::Tensor>& mask, const at::Tensor& q) {
  if (!mask.has_value() || !mask->defined() || mask->scalar_type() != at::kBool) {
    return mask;
  }
  at::Tensor zero = at::zeros({}, q.options());
  return at::where(*mask, zero, at::full({}, -std::numeric_limits<double>::infinity(), q.options()));
}

at::Tensor pad_to_8(const at::Tensor& t) {
  const int64_t rest = t.size(-1) % 8;
  return rest == 0 ? t : at::constant_pad_nd(t, {0, 8 - rest}, 0);
}

// scaled_dot_product_attention(q, k, v, attn_mask, dropout_p, is_causal, *, scale, enable_gqa), as
// CUDA's composite runs it (attention.cpp): the chosen backend, its input preparation, its op.
at::Tensor cuda_sdpa(const at::Tensor& query, const at::Tensor& key, const at::Tensor& value,
                     const std::optional<at::Tensor>& attn_mask, double dropout_p, bool is_causal,
                     std::optional<double> scale, bool enable_gqa) {
  TORCH_CHECK(query.scalar_type() == key.scalar_type() && query.scalar_type() == value.scalar_type(),
              "Expected query, key, and value to have the same dtype, but got query.dtype: ", query.scalar_type(),
              " key.dtype: ", key.scalar_type(), " and value.dtype: ", value.scalar_type(), " instead.");
  TORCH_CHECK(query.dim() >= 2 && key.dim() >= 2 && value.dim() >= 2,
              "Expected query, key, and value to all be  at least 2 dimensional, but got query.dim: ", query.dim(),
              " key.dim: ", key.dim(), " and value.dim: ", value.dim(), " instead.");
  TORCH_CHECK(!attn_mask.has_value() || !attn_mask->defined() || !is_causal,
              "_scaled_dot_product_attention: Explicit attn_mask should not be set when is_causal=True");
  const Params params{query, key, value, attn_mask, dropout_p, is_causal, enable_gqa};
  const at::SDPBackend backend = choose(params);
  const std::optional<at::Tensor> mask = additive_mask(attn_mask, query);
  switch (backend) {
    case at::SDPBackend::flash_attention: {
      const int64_t head_dim = query.size(-1);
      const double og_scale = softmax_scale(query, scale);  // from the head dim before padding
      at::Tensor out = std::get<0>(at::_scaled_dot_product_flash_attention(
          pad_to_8(query), pad_to_8(key), pad_to_8(value), dropout_p, is_causal, false, og_scale));
      return out.narrow(-1, 0, head_dim);
    }
    case at::SDPBackend::efficient_attention: {
      const bool lse = at::GradMode::is_enabled() && (query.requires_grad() || key.requires_grad() || value.requires_grad());
      std::optional<at::Tensor> bias = mask;
      if (bias.has_value() && bias->defined()) {
        bias = bias->expand({query.size(0), query.size(1), query.size(2), key.size(2)});
      }
      return std::get<0>(at::_scaled_dot_product_efficient_attention(query, key, value, bias, lse, dropout_p, is_causal, scale));
    }
    default:
      return std::get<0>(at::_scaled_dot_product_attention_math(query, key, value, mask, dropout_p, is_causal,
                                                                std::nullopt, scale, enable_gqa));
  }
}

// _fused_sdp_choice: what torch.compile asks before it traces sdpa; the same choice as above.
int64_t cuda_sdp_choice(const at::Tensor& query, const at::Tensor& key, const at::Tensor& value,
                        const std::optional<at::Tensor>& attn_mask, double dropout_p, bool is_causal,
                        std::optional<double> /*scale*/, bool enable_gqa) {
  return static_cast<int64_t>(choose(Params{query, key, value, attn_mask, dropout_p, is_causal, enable_gqa}));
}

}  // namespace

void register_cuda_attention(c10::DeviceType type) {
  torch::Library& kernels = kept_library(torch::Library::IMPL, "aten", dispatch_key(type), __FILE__, __LINE__);
  kernels.impl("_flash_attention_forward", TORCH_FN(flash_forward));
  kernels.impl("_flash_attention_backward", TORCH_FN(flash_backward));
  kernels.impl("_efficient_attention_forward", TORCH_FN(efficient_forward));
  kernels.impl("_efficient_attention_backward", TORCH_FN(efficient_backward));
  kernels.impl("_scaled_dot_product_flash_attention", TORCH_FN(sdpa_flash));
  kernels.impl("_scaled_dot_product_flash_attention_backward", TORCH_FN(sdpa_flash_backward));
  kernels.impl("_scaled_dot_product_efficient_attention", TORCH_FN(sdpa_efficient));
  kernels.impl("_scaled_dot_product_efficient_attention_backward", TORCH_FN(sdpa_efficient_backward));
  kernels.impl("_fused_sdp_choice", TORCH_FN(cuda_sdp_choice));
  kernels.impl("scaled_dot_product_attention", TORCH_FN(cuda_sdpa));
  // sdpa is an implicit composite: its kernel on the autograd key decomposes into differentiable ops
  // (the fused ops have autograd formulas of their own), as CompositeImplicitAutograd does.
  torch::Library& grad = kept_library(torch::Library::IMPL, "aten", c10::DispatchKey::AutogradCUDA, __FILE__, __LINE__);
  grad.impl("scaled_dot_product_attention", TORCH_FN(cuda_sdpa));
}

}  // namespace torchplug::emulation
