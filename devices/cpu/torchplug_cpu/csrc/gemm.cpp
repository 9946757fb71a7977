// The fp16 GEMM on tensors: turns a [batch, m, k] x [batch, k, n] call with any strides into a
// GemmProblem, picks the blocked GEMM or, for at most 4 rows or columns, the skinny path, cuts
// the work into tasks for torch's thread pool, and gives each thread its scratch. The
// arithmetic lives in gemm_kernel.h and gemv_kernel.h, once per ISA.
#include <ATen/MemoryOverlap.h>
#include <ATen/Parallel.h>
#include <ATen/ops/empty.h>
#include <c10/core/impl/alloc_cpu.h>

#include <algorithm>
#include <atomic>
#include <memory>

#include "api.h"

namespace torchplug_cpu {
namespace {

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }
int64_t round_up(int64_t a, int64_t b) { return ceil_div(a, b) * b; }

// Tasks are (batch, m-block, n-block) over all of K, so threads never synchronise. A task
// packs its own B and A panels: a block of M re-converts B, a block of N re-converts A. When
// there are few tasks, blocks are added along the dimension that is cheaper to re-convert until
// every thread gets the same number of tasks.
GemmTiling plan(const GemmBlocking& g, int64_t batch, int64_t m, int64_t n, int64_t k, int64_t threads) {
  int64_t m_blocks = ceil_div(m, g.mc), n_blocks = ceil_div(n, g.nc);
  const int64_t max_m_blocks = ceil_div(m, g.mr), max_n_blocks = ceil_div(n, g.nr);
  for (;;) {
    const int64_t tasks = batch * m_blocks * n_blocks;
    if (tasks % threads == 0 || tasks >= 8 * threads) break;
    const bool more_m = m_blocks < max_m_blocks, more_n = n_blocks < max_n_blocks;
    if (more_m && (!more_n || m >= n)) ++m_blocks;  // costs another pass over B (k x n)
    else if (more_n) ++n_blocks;                    // costs another pass over A (m x k)
    else break;
  }
  GemmTiling t{};
  t.mc = m_blocks == 1 ? m : round_up(ceil_div(m, m_blocks), g.mr);
  t.nc = n_blocks == 1 ? n : round_up(ceil_div(n, n_blocks), g.nr);
  t.m_blocks = ceil_div(m, t.mc);
  t.n_blocks = ceil_div(n, t.nc);
  const int64_t kc = std::min(k, g.kc);
  t.packed_a = round_up(round_up(t.mc, g.mr) * kc, 16);  // 16 floats: keep each part 64-byte aligned
  t.packed_b = round_up(kc * g.nr, 16);
  t.accumulator = k > g.kc ? round_up(t.mc, g.mr) * round_up(t.nc, g.nr) : 0;
  return t;
}

// Products with at most this many rows (or columns) take the skinny path (gemv_kernel.h)...
constexpr int64_t kSkinnyRows = 4;
// ... and up to this many when B is contiguous along k (F.linear's weight): the weight streams
// once for all rows instead of being packed (gemv_kernel.h, dots_many).
constexpr int64_t kSkinnyDotRows = 16;

// The skinny path's tasks are (batch, n-block), at least one per thread; n-blocks of at most
// 1024 columns keep the m x nc fp32 sums in L1.
GemmTiling plan_skinny(int64_t batch, int64_t m, int64_t n, int64_t k, int64_t threads) {
  int64_t n_blocks = ceil_div(n, 1024);
  while ((batch * n_blocks) % threads != 0 && batch * n_blocks < 8 * threads && n_blocks < ceil_div(n, 16)) ++n_blocks;
  GemmTiling t{};
  t.mc = m, t.m_blocks = 1;
  t.nc = n_blocks == 1 ? n : round_up(ceil_div(n, n_blocks), 16);
  t.n_blocks = ceil_div(n, t.nc);
  t.packed_a = round_up(m * k, 16);
  t.accumulator = 2 * round_up(m * t.nc, 16);
  return t;
}

// C^T = B^T A^T: the same product with the roles of rows and columns swapped (strides only).
GemmProblem transposed(const GemmProblem& p) {
  GemmProblem t = p;
  t.m = p.n, t.n = p.m;
  t.a = p.b, t.a_bs = p.b_bs, t.a_rs = p.b_cs, t.a_cs = p.b_rs;
  t.b = p.a, t.b_bs = p.a_bs, t.b_rs = p.a_cs, t.b_cs = p.a_rs;
  t.c_rs = p.c_cs, t.c_cs = p.c_rs;
  t.cin_rs = p.cin_cs, t.cin_cs = p.cin_rs;
  return t;
}

// Operands are [batch, rows, cols] or, for a batch of one, [rows, cols].
int64_t batch_stride(const at::Tensor& t) { return t.dim() == 3 ? t.stride(0) : 0; }

const fp16_t* cdata(const at::Tensor& t) { return reinterpret_cast<const fp16_t*>(t.const_data_ptr<at::Half>()); }

// Whether writing x could change what y reads. Different storages never overlap; within one,
// torch's check answers TooHard for non-contiguous views, which counts as overlapping.
bool may_overlap(const at::Tensor& x, const at::Tensor& y) {
  return x.storage().is_alias_of(y.storage()) && at::get_overlap_status(x, y) != at::MemOverlapStatus::No;
}

// C without any A or B: beta * cin, or zeros.
void scale_only(const at::Tensor& c, const at::Tensor& cin, float beta) {
  if (beta == 0.f) c.zero_();
  else c.copy_(cin.mul(beta));
}

std::atomic<uint64_t> g_calls{0};
std::atomic<bool> g_onednn_fp16{false};

}  // namespace

bool fp16_route_onednn() { return g_onednn_fp16.load(std::memory_order_relaxed); }
void set_fp16_route_onednn(bool onednn) { g_onednn_fp16.store(onednn, std::memory_order_relaxed); }

// Each thread keeps its scratch between calls (it only grows): allocating ~100 KB-2 MB per call
// costs page faults that show on small products. No kernel calls another while it holds it, so
// one buffer per thread is enough.
float* thread_scratch(int64_t bytes) {
  thread_local std::unique_ptr<void, void (*)(void*)> buffer(nullptr, &c10::free_cpu);
  thread_local int64_t capacity = 0;
  if (capacity < bytes) {
    buffer.reset();
    buffer.reset(c10::alloc_cpu(bytes));
    capacity = bytes;
  }
  return static_cast<float*>(buffer.get());
}

uint64_t fp16_gemm_calls() { return g_calls.load(std::memory_order_relaxed); }

void fp16_gemm(const at::Tensor& a, const at::Tensor& b, const at::Tensor& c, const at::Tensor& cin, float alpha,
               float beta) {
  g_calls.fetch_add(1, std::memory_order_relaxed);
  const int64_t batch = c.dim() == 3 ? c.size(0) : 1, m = c.size(-2), n = c.size(-1), k = a.size(-1);
  if (batch == 0 || m == 0 || n == 0) return;
  at::assert_no_internal_overlap(c);
  // Writing C while A or B are still being read from it would corrupt them: go through a copy.
  if (may_overlap(c, a) || may_overlap(c, b)) {
    at::Tensor tmp = at::empty(c.sizes(), c.options());
    fp16_gemm(a, b, tmp, cin.defined() && beta != 0.f ? cin.clone() : cin, alpha, beta);
    c.copy_(tmp);
    return;
  }
  at::Tensor in = cin;
  // cin may be c itself (addmm_): every element is read, then written, by one task. Any other
  // overlap (a shifted or transposed view of c) would read values already overwritten.
  if (beta != 0.f && may_overlap(c, in) && !(in.data_ptr() == c.data_ptr() && in.strides() == c.strides())) {
    in = in.clone();
  }
  if (k == 0) return scale_only(c, in, beta);

  const IsaKernels& isa = active_kernels();
  GemmProblem p{};
  p.batch = batch, p.m = m, p.n = n, p.k = k, p.alpha = alpha, p.beta = beta;
  p.a = cdata(a), p.a_bs = batch_stride(a), p.a_rs = a.stride(-2), p.a_cs = a.stride(-1);
  p.b = cdata(b), p.b_bs = batch_stride(b), p.b_rs = b.stride(-2), p.b_cs = b.stride(-1);
  p.c = reinterpret_cast<fp16_t*>(c.data_ptr<at::Half>()), p.c_bs = batch_stride(c), p.c_rs = c.stride(-2),
  p.c_cs = c.stride(-1);
  if (beta != 0.f) p.cin = cdata(in), p.cin_bs = batch_stride(in), p.cin_rs = in.stride(-2), p.cin_cs = in.stride(-1);

  // A few rows (or columns: C^T = B^T A^T) make a memory-bound product: no packing (gemv_kernel.h).
  if (p.n < p.m && p.n <= kSkinnyRows) p = transposed(p);
  const bool skinny = p.m <= kSkinnyRows || (p.m <= kSkinnyDotRows && p.b_rs == 1);
  const int64_t threads = at::get_num_threads();
  const GemmTiling t = skinny ? plan_skinny(batch, p.m, p.n, k, threads) : plan(isa.gemm, batch, m, n, k, threads);
  const auto run_tasks = skinny ? isa.gemv_tasks : isa.gemm_tasks;
  const int64_t tasks = batch * t.m_blocks * t.n_blocks;
  const int64_t scratch_bytes = (t.packed_a + t.packed_b + t.accumulator) * int64_t{sizeof(float)};
  // Tiny products are not worth waking the thread pool for.
  const int64_t grain = batch * m * n * k < (int64_t{1} << 18) ? tasks : 1;
  at::parallel_for(0, tasks, grain, [&](int64_t begin, int64_t end) {
    run_tasks(p, t, begin, end, thread_scratch(scratch_bytes));
  });
}

std::optional<std::vector<at::Tensor>> fp16_gemm_group(const at::Tensor& a, at::TensorList bs) {
  const int64_t m = a.size(0), k = a.size(1);
  if (m > kSkinnyDotRows) return std::nullopt;
  std::vector<int64_t> start{0};  // where each product's columns begin in the concatenation
  for (const at::Tensor& b : bs) {
    if (b.size(0) != k || b.stride(0) != 1) return std::nullopt;
    start.push_back(start.back() + b.size(1));
  }
  g_calls.fetch_add(bs.size(), std::memory_order_relaxed);
  std::vector<at::Tensor> outs;
  for (const at::Tensor& b : bs) outs.push_back(at::empty({m, b.size(1)}, a.options()));
  const int64_t n = start.back();
  if (m == 0 || n == 0) return outs;
  if (k == 0) {
    for (at::Tensor& out : outs) out.zero_();
    return outs;
  }
  const IsaKernels& isa = active_kernels();
  const GemmTiling t = plan_skinny(1, m, n, k, at::get_num_threads());
  const int64_t scratch_bytes = (t.packed_a + t.packed_b + t.accumulator) * int64_t{sizeof(float)};
  // Columns [lo, hi) of product i, as a skinny problem of its own (one task).
  auto segment = [&](size_t i, int64_t lo, int64_t hi, float* scratch) {
    const at::Tensor &b = bs[i], &c = outs[i];
    GemmProblem p{};
    p.batch = 1, p.m = m, p.n = hi - lo, p.k = k, p.alpha = 1.f, p.beta = 0.f;
    p.a = cdata(a), p.a_rs = a.stride(0), p.a_cs = a.stride(1);
    p.b = cdata(b) + lo * b.stride(1), p.b_rs = b.stride(0), p.b_cs = b.stride(1);
    p.c = reinterpret_cast<fp16_t*>(c.data_ptr<at::Half>()) + lo, p.c_rs = c.stride(0), p.c_cs = 1;
    GemmTiling one = t;
    one.nc = hi - lo, one.m_blocks = one.n_blocks = 1;
    isa.gemv_tasks(p, one, 0, 1, scratch);
  };
  const int64_t grain = m * n * k < (int64_t{1} << 18) ? t.n_blocks : 1;
  at::parallel_for(0, t.n_blocks, grain, [&](int64_t begin, int64_t end) {
    float* scratch = thread_scratch(scratch_bytes);
    for (int64_t task = begin; task < end; ++task) {
      const int64_t n0 = task * t.nc, n1 = std::min(n, n0 + t.nc);
      for (size_t i = 0; i < bs.size(); ++i) {
        const int64_t lo = std::max(n0, start[i]), hi = std::min(n1, start[i + 1]);
        if (lo < hi) segment(i, lo - start[i], hi - start[i], scratch);
      }
    }
  });
  return outs;
}

}  // namespace torchplug_cpu
