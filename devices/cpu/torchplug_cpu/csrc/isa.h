// The contract between the ISA-neutral C++ (tensors, threads, registration) and the per-ISA
// kernels (isa_<name>.cpp). It is plain C++ on raw pointers on purpose: the ISA files are
// compiled for instructions the CPU may lack, so they must not include torch headers, whose
// inline functions the linker could then pick for code that runs on any CPU.
#pragma once

// System headers the ISA files need, included here, before their `#pragma GCC target`.
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>

namespace torchplug_cpu {

// Storage types of the 16-bit floats, as bits (the kernels convert them to fp32 vectors).
struct fp16_t { uint16_t bits; };
struct bf16_t { uint16_t bits; };

enum Dtype : int { kF32 = 0, kBF16 = 1, kF16 = 2 };
constexpr int kNumDtypes = 3;

// C[b] = alpha * A[b] @ B[b] + beta * Cin[b] in fp16 with fp32 accumulation; strides in elements.
// Cin is read only when beta != 0 (then it may be C itself: each element is read before it is
// written, by the same task) and may broadcast (stride 0).
struct GemmProblem {
  int64_t batch, m, n, k;
  const fp16_t* a; int64_t a_bs, a_rs, a_cs;
  const fp16_t* b; int64_t b_bs, b_rs, b_cs;
  fp16_t* c; int64_t c_bs, c_rs, c_cs;
  const fp16_t* cin; int64_t cin_bs, cin_rs, cin_cs;
  float alpha, beta;
};

// The register tile and cache blocking of one ISA's GEMM.
struct GemmBlocking {
  int64_t mr, nr;  // micro-kernel tile: mr rows of A by nr columns of B
  int64_t mc, kc;  // A block mc x kc stays in L2; a B micro-panel kc x nr in L1
  int64_t nc;      // the widest block of C columns one task computes
};

// AVX-512's: a 12x32 register tile = 24 accumulators + 2 B vectors + 1 broadcast of the 32 zmm;
// A block 240 x 384 fp32 = 360 KiB (L2 >= 1 MiB on AVX-512 parts), B micro-panel 48 KiB (L1 + L2).
// Shared with the avx512emu path, which runs this tiling on AVX2 to test it anywhere.
constexpr GemmBlocking kAvx512Gemm{12, 32, 240, 384, 2048};

// How one call is cut into independent tasks: (batch, m-block, n-block), each over all of K.
struct GemmTiling {
  int64_t mc, nc;              // this call's block sizes (multiples of mr / nr, or the whole dim)
  int64_t m_blocks, n_blocks;  // tasks = batch * m_blocks * n_blocks
  // floats of scratch one thread needs: packed A, packed B, and the fp32 running sums of a
  // task's C block (whole micro-tiles) when K spans several kc slices (C is fp16: partial sums
  // must not be rounded).
  int64_t packed_a, packed_b, accumulator;
};

// One ISA's kernels. Row kernels process rows [0, rows) of 2-D views with a row stride and a
// contiguous last dimension; the `aux` index says whether weight / cos / sin are fp32 (1) or
// of the activation's dtype (0).
struct IsaKernels {
  const char* name;
  GemmBlocking gemm;
  void (*gemm_tasks)(const GemmProblem&, const GemmTiling&, int64_t begin, int64_t end, float* scratch);
  void (*gemv_tasks)(const GemmProblem&, const GemmTiling&, int64_t begin, int64_t end, float* scratch);  // m <= 4

  // w may be null (no weight); rstd (one float per row, the 1 / rms it scaled by) may be null.
  using RmsNorm = void (*)(const void* x, int64_t x_rs, void* out, int64_t out_rs, const void* w, float* rstd,
                           int64_t rows, int64_t hidden, float eps);
  using FusedAddRmsNorm = void (*)(void* x, int64_t x_rs, void* residual, int64_t r_rs, const void* w,
                                   int64_t rows, int64_t hidden, float eps);
  using SiluAndMul = void (*)(const void* x, int64_t x_rs, void* out, int64_t out_rs, int64_t rows, int64_t d);
  // Rotates heads [0, heads) of tokens [0, tokens); cos/sin rows are `cs_rs` apart.
  using Rotary = void (*)(const void* src, int64_t s_ts, int64_t s_hs, void* dst, int64_t d_ts, int64_t d_hs,
                          const void* cos, const void* sin, int64_t cs_rs, int64_t tokens, int64_t heads,
                          int64_t head_dim);
  // Attention of L query rows of one head over S keys (head_dim D contiguous everywhere; rows
  // `*_ls` / `*_ss` apart); mask: fp32 additive, or null. scratch: S + 2 * round_up(D, 16) floats.
  using Attend = void (*)(const void* q, int64_t q_ls, const void* k, int64_t k_ss, const void* v, int64_t v_ss,
                          const float* mask, int64_t mask_ls, int64_t L, int64_t S, int64_t D, float scale, void* out,
                          int64_t out_ls, float* lse, int64_t lse_ls, float* scratch);
  // The same for many query rows (prefill), and causal (row l sees keys 0..l); scratch:
  // attend_rows_scratch() floats.
  using AttendRows = void (*)(const void* q, int64_t q_ls, const void* k, int64_t k_ss, const void* v, int64_t v_ss,
                              const float* mask, int64_t mask_ls, bool causal, int64_t L, int64_t S, int64_t D,
                              float scale, void* out, int64_t out_ls, float* lse, int64_t lse_ls, float* scratch);
  RmsNorm rms_norm[kNumDtypes][2];
  FusedAddRmsNorm fused_add_rms_norm[kNumDtypes][2];
  SiluAndMul silu_and_mul[kNumDtypes];
  Rotary rotary[kNumDtypes][2];
  Attend attend_fp16;  // float16 only: fp32 and bf16 keep torch's kernel
  AttendRows attend_rows_fp16;
  // out[r] = the index of the maximum of row r (n >= 1 elements), with torch's argmax rules.
  using Argmax = void (*)(const void* x, int64_t x_rs, int64_t rows, int64_t n, int64_t* out);
  Argmax argmax[kNumDtypes];
};

// Scratch of AttendRows over S keys of head_dim D: K and V as the GEMM's B panels, then MR rows
// of scores and MR scaled query rows.
inline int64_t attend_rows_scratch(const GemmBlocking& g, int64_t S, int64_t D) {
  const int64_t keys = (S + g.nr - 1) / g.nr * g.nr, dims = (D + g.nr - 1) / g.nr * g.nr;
  return D * keys + keys * dims + g.mr * keys + g.mr * D;
}

// Defined in isa_<name>.cpp; the avx512/avx2 tables may only be used where the CPU has them.
const IsaKernels& scalar_kernels();
const IsaKernels& avx2_kernels();
const IsaKernels& avx512_kernels();
const IsaKernels& avx512emu_kernels();

}  // namespace torchplug_cpu
