// torchplug_cpu::_weight_int8pack_mm / _weight_int4pack_mm_for_cpu: aten's weight-only quantized
// products (what torchao's CPU int8 and int4 weight-only layouts call), registered by
// torchplug_cpu.kernels as their fp32 / bf16 / fp16 CPU kernels. A call in the layouts torch
// documents runs quant_kernel.h's kernels; anything else (a wrong dtype or shape, a layout torch
// would refuse, an empty k) goes to torch's own CPU kernel, for torch's result or torch's error.
// int4 weights come packed by torch's _convert_weight_to_int4pack_for_cpu, whose layout depends on
// the kernels torch picked for this CPU (its "CPU capability"): it is read here, so the packing and
// these kernels always agree.
#include <ATen/Parallel.h>
#include <ATen/Version.h>
#include <ATen/ops/_weight_int4pack_mm_for_cpu_cpu_dispatch.h>
#include <ATen/ops/_weight_int8pack_mm_cpu_dispatch.h>
#include <ATen/ops/empty.h>
#include <torch/library.h>

#include <atomic>

#include "api.h"

// The sources other than isa_*.cpp build as one unit: this file's helpers get a namespace of their own.
namespace torchplug_cpu::quant {
namespace {

using at::Tensor;

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }
int64_t round_up(int64_t a, int64_t b) { return ceil_div(a, b) * b; }

// Products of up to this many rows stream the weights once for all rows (decode, small batches);
// more rows run the GEMM.
constexpr int64_t kSkinnyRows = 16;
// Columns of x (int8's GEMM) or of the weights (int4's) per GEMM task.
constexpr int64_t kGemmColumns = 256;
// Prefill with int16 activations: rows rounded at a time (at most 64: the scratch's 4-row groups
// fit a 64-bit mask), and int8's weight bytes per chunk of columns, read once per 4 rows from L2.
constexpr int64_t kPrefillRows = 64, kPrefillChunkBytes = 256 << 10;

std::atomic<uint64_t> g_calls{0};

bool plain(const Tensor& t) { return t.device().is_cpu() && t.layout() == at::kStrided && !t.is_neg() && !t.is_conj(); }

// x: 2-D, fp32 / bf16 / fp16, contiguous along k, with at least one row, column and k.
bool ours_x(const Tensor& x, const Tensor& w, int64_t n) {
  return plain(x) && kernel_dtype(x.scalar_type()) && x.dim() == 2 && x.stride(1) == 1 && plain(w) && w.dim() == 2 &&
         w.is_contiguous() && x.size(0) > 0 && x.size(1) > 0 && n > 0;
}

// torch's _convert_weight_to_int4pack_for_cpu layout on this CPU (isa.h, QuantProblem).
void int4_layout(QuantProblem& p) {
  static const std::string capability = at::get_cpu_capability();
  p.block = capability == "AVX512" ? 64 : 32;
  p.split = capability == "AVX512" || capability == "AVX2";
}

// Cuts the product into tasks (isa.h, QuantProblem) and runs them on torch's thread pool. The GEMM
// of int4 (p.block set) has x's rows as its rows, int8's the weights' (it runs transposed).
void run(const QuantProblem& base, bool gemm, IsaKernels::QuantTasks kernel) {
  QuantProblem p = base;
  const IsaKernels& isa = active_kernels();
  const bool int4 = p.block != 0;
  int64_t tasks;
  if (!gemm) {
    tasks = p.col_blocks = ceil_div(p.n, p.nc);
  } else {
    const int64_t rows = int4 ? p.m : p.n, cols = int4 ? p.n : p.m;
    p.mc = std::min(rows, isa.gemm.mc);
    p.nc = int4 ? round_up(std::min(cols, kGemmColumns), p.block) : std::min(cols, kGemmColumns);
    p.col_blocks = ceil_div(cols, p.nc);
    tasks = ceil_div(rows, p.mc) * p.col_blocks;
  }
  const int64_t bytes = quant_scratch(isa.gemm, p, gemm) * int64_t{sizeof(float)};
  const int64_t grain = p.m * p.n * p.k < (int64_t{1} << 16) ? tasks : 1;  // tiny: not worth the thread pool
  at::parallel_for(0, tasks, grain, [&](int64_t begin, int64_t end) { kernel(p, begin, end, thread_scratch(bytes)); });
}

// The skinny kernels' column chunks: one per thread, so that each thread streams one contiguous
// run of weights, in units of `unit` columns; int8's m x nc fp32 sums kept within 64 KB.
int64_t skinny_columns(int64_t m, int64_t n, int64_t unit, bool int8) {
  int64_t nc = round_up(ceil_div(n, at::get_num_threads()), unit);
  while (int8 && m * nc > 16384 && nc > unit) nc = round_up(ceil_div(nc, 2), unit);
  return nc;
}

QuantProblem problem(const Tensor& x, const Tensor& w, const Tensor& scales, const Tensor& out, int64_t n) {
  QuantProblem p{};
  p.m = x.size(0), p.n = n, p.k = x.size(1);
  p.x = x.const_data_ptr(), p.x_rs = x.stride(0);
  p.w = w.const_data_ptr(), p.scales = scales.const_data_ptr();
  p.out = out.data_ptr(), p.out_rs = out.stride(0);
  return p;
}

Tensor weight_int8pack_mm(const Tensor& x, const Tensor& w, const Tensor& scales) {
  const int64_t n = w.dim() == 2 ? w.size(0) : 0;
  if (!ours_x(x, w, n) || w.scalar_type() != at::kChar || w.size(1) != x.size(1) || !plain(scales) ||
      scales.scalar_type() != x.scalar_type() || scales.dim() != 1 || scales.size(0) != n)
    return at::cpu::_weight_int8pack_mm(x, w, scales);
  g_calls.fetch_add(1, std::memory_order_relaxed);
  const Tensor s = scales.contiguous();
  Tensor out = at::empty({x.size(0), n}, x.options());
  QuantProblem p = problem(x, w, s, out, n);
  const int d = *kernel_dtype(x.scalar_type());
  const bool skinny = p.m <= kSkinnyRows;
  if (skinny) p.nc = skinny_columns(p.m, n, 16, true);
  // fp16 / bf16 activations rounded to int16 and integer dot products (quant_int16_activations.h)
  // where the active path has them, for k a multiple of 32: decode rows streaming the weights, and
  // prefill in chunks of columns that stay in L2, kPrefillRows rows rounded at a time
  const IsaKernels::QuantTasks* int16_dots = p.k % 32 == 0 ? int8_int16_kernels() : nullptr;
  const bool rounded = int16_dots && int16_dots[d];
  if (rounded && !skinny) {
    p.nc = std::min(round_up(ceil_div(n, at::get_num_threads()), 16), std::max<int64_t>(16, kPrefillChunkBytes / p.k / 16 * 16));
    p.mc = std::min(p.m, kPrefillRows);
  }
  const IsaKernels::QuantTasks kernel = rounded ? int16_dots[d]
                                       : skinny ? active_kernels().int8_gemv[d]
                                                : active_kernels().int8_gemm[d];
  run(p, !skinny && !rounded, kernel);
  return out;
}

Tensor weight_int4pack_mm(const Tensor& x, const Tensor& w, int64_t group, const Tensor& scales_zeros) {
  const int64_t n = w.dim() == 2 ? w.size(0) : 0, k = x.dim() == 2 ? x.size(1) : 0;
  const bool shapes = w.dim() == 2 && w.size(1) * 2 == k && n % 16 == 0 && (group == 32 || group == 64 ||
                      group == 128 || group == 256) && scales_zeros.dim() == 3 &&
                      scales_zeros.size(0) == ceil_div(k, group) && scales_zeros.size(1) == n &&
                      scales_zeros.size(2) == 2;
  if (!ours_x(x, w, n) || !x.is_contiguous() || w.scalar_type() != at::kByte || !shapes || !plain(scales_zeros) ||
      scales_zeros.scalar_type() != x.scalar_type())
    return at::cpu::_weight_int4pack_mm_for_cpu(x, w, group, scales_zeros);
  g_calls.fetch_add(1, std::memory_order_relaxed);
  const Tensor sz = scales_zeros.contiguous();
  Tensor out = at::empty({x.size(0), n}, x.options());
  QuantProblem p = problem(x, w, sz, out, n);
  p.group = group;
  int4_layout(p);
  const int d = *kernel_dtype(x.scalar_type());
  const bool skinny = p.m <= kSkinnyRows;
  // prefill with fp16 / bf16 activations rounded to int16 (quant_vnni.h) on the avx512 path of
  // AVX512-VNNI CPUs, in torch's AVX-512 layout: blocks of 64 columns, kPrefillRows rows rounded at a time
  const IsaKernels::QuantTasks* prefill = !skinny && k % 32 == 0 && p.split && p.block == 64 ? int4_prefill_kernels() : nullptr;
  if (prefill && prefill[d]) {
    p.nc = p.block;
    p.mc = std::min(p.m, kPrefillRows);
    run(p, false, prefill[d]);
    return out;
  }
  if (skinny) p.nc = skinny_columns(p.m, n, p.block, false);
  // fp16 / bf16 activations rounded to int8 and integer dot products (quant_int8_activations.h)
  // where the active path has them, for whole blocks of 32 along k (those kernels run the float
  // path for a packed layout they do not read)
  const IsaKernels::QuantTasks* int8_dots = skinny && k % 32 == 0 ? int4_int8_kernels() : nullptr;
  const IsaKernels::QuantTasks kernel = int8_dots && int8_dots[d] ? int8_dots[d]
                                       : skinny                   ? active_kernels().int4_gemv[d]
                                                                  : active_kernels().int4_gemm[d];
  run(p, !skinny, kernel);
  return out;
}

}  // namespace
}  // namespace torchplug_cpu::quant

uint64_t torchplug_cpu::quant_mm_calls() { return quant::g_calls.load(std::memory_order_relaxed); }

TORCH_LIBRARY_FRAGMENT(torchplug_cpu, m) {
  m.def("_weight_int8pack_mm(Tensor self, Tensor mat2, Tensor scales) -> Tensor");
  m.def("_weight_int4pack_mm_for_cpu(Tensor self, Tensor mat2, int qGroupSize, Tensor qScaleAndZeros) -> Tensor");
}

TORCH_LIBRARY_IMPL(torchplug_cpu, CPU, m) {
  m.impl("_weight_int8pack_mm", TORCH_FN(torchplug_cpu::quant::weight_int8pack_mm));
  m.impl("_weight_int4pack_mm_for_cpu", TORCH_FN(torchplug_cpu::quant::weight_int4pack_mm));
}
