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

// How far ahead the skinny products' dot kernels (gemv_kernel.h) prefetch their weight stream, in
// bytes: what kernels.py set for this CPU and path (TORCHPLUG_CPU_PREFETCH_KB), or negative for
// the ISA path's own distance; and the cache level those prefetches fill, 1 (prefetcht0, the
// default) or 2 (prefetcht1: TORCHPLUG_CPU_PREFETCH_LEVEL). Defined in isa_select.cpp.
int64_t gemv_prefetch_bytes();
int gemv_prefetch_level();
// How many weight streams a skinny product's task reads at once (1, 2 or 4; gemv_kernel.h's
// dots(), the int4 and int8 decode kernels): TORCHPLUG_CPU_STREAMS, or what kernels.py set for this
// CPU. Defined in isa_select.cpp.
int gemv_streams();

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

// out[m, n] = x[m, k] @ dequantized(w)^T for weight-only quantized weights (quant_kernel.h), in
// torch's formats: activations, scales and out of one dtype (T), x contiguous along k; fp32 sums,
// rounded once.
//  int8: w [n, k] int8, row-major; scales [n]: out[:, j] = (x @ w[j]) * scales[j].
//  int4: w as _convert_weight_to_int4pack_for_cpu packs it: blocks of `block` columns (64 with
//    torch's AVX-512 kernels, 32 otherwise), each [k][block / 2] bytes. A full block is `split`
//    (torch's AVX-512 / AVX2 layouts: byte b holds column b in its low nibble and column b + block
//    / 2 in its high one) or in pairs (columns 2b, 2b + 1), as the last, narrower block always is.
//    scales [ceil(k / group), n, 2] (scale, zero): w = (q - 8) * scale + zero.
// Tasks: column chunks of `nc` (skinny: all m rows at once), or (row block of `mc`, column block
// of `nc`) pairs, column blocks first (the GEMM). int8's GEMM runs the product transposed, rows of w
// against columns of x: its row blocks are of n and its column blocks of m.
struct QuantProblem {
  int64_t m, n, k;
  const void* x; int64_t x_rs;
  const void* w;
  const void* scales;
  int64_t group, block;
  bool split;
  void* out; int64_t out_rs;
  int64_t mc, nc, col_blocks;
};
// int8 prefill with int16 activations (quant_int16_activations.h): x in fp32 for 4 rows at a time,
// where the float path's scratch for them (x and 4 x nc sums) also fits.
inline int64_t prefill_x32(const QuantProblem& p) {
  return (4 * p.k + 4 * (p.nc > 64 ? p.nc : 64) + 15) / 16 * 16;
}
// The skinny (decode) kernels' scratch: x in fp32, x's sums per int4 group (groups are 32 columns or
// more), the fp32 results (int4: of up to 4 rows by a block of 64), one group's 64 scales and zeros;
// int4: then x rounded to int8 for quant_int8_activations.h, its scales per 32 and its bytes; int8:
// then x rounded to int16 for quant_int16_activations.h, its scales in the sums' place.
inline int64_t quant_skinny_scratch(const QuantProblem& p) {
  auto up = [](int64_t a, int64_t b) { return (a + b - 1) / b * b; };
  const int64_t skinny = up(p.m * p.k, 16) + up(p.m * (p.k / 32 + 1), 16) + up((p.m > 4 ? p.m : 4) * (p.nc > 64 ? p.nc : 64), 16) + 2 * 64;
  return p.block == 0 ? skinny + up(p.m * p.k / 2 + 1, 16) : skinny + up(p.m * (p.k / 32 + 1), 16) + up(p.m * p.k / 4 + 1, 16);
}
// Floats of scratch one thread needs for a QuantProblem's tasks.
inline int64_t quant_scratch(const GemmBlocking& g, const QuantProblem& p, bool gemm) {
  const int64_t kc = p.k < g.kc ? p.k : g.kc;
  auto up = [](int64_t a, int64_t b) { return (a + b - 1) / b * b; };
  if (!gemm && p.mc) {  // prefill with rounded activations, p.mc rows at a time
    QuantProblem rows = p;
    rows.m = p.mc;
    const int64_t groups = p.block ? (p.k + p.group - 1) / p.group : 0, blocks = p.k / 32 + 1;
    // int8 (quant_int16_activations.h): the skinny layout for mc rows, but x in fp32 for 4 rows
    // (and the float path's sums); int4 (quant_vnni.h): the float path's own, x in fp32 for 4
    // rows, d, the sums per group, one block's scales and zeros per group, the block unpacked
    // (k / 2 x 64), xq
    if (p.block == 0) return quant_skinny_scratch(rows) - up(p.mc * p.k, 16) + prefill_x32(p);  // x for 4 rows only
    return quant_skinny_scratch(rows) + up(4 * p.k, 16) + up(p.mc * blocks, 16) + up(p.mc * groups, 16) +
           2 * groups * 64 + p.k / 2 * 64 + up(p.mc * p.k / 2 + 1, 16);
  }
  if (!gemm) return quant_skinny_scratch(p);
  // GEMM: packed A, one packed B panel, the block's fp32 sums, one panel's scales and zeros
  return up(up(p.mc, g.mr) * kc, 16) + up(kc * g.nr, 16) + up(p.mc, g.mr) * up(p.nc, g.nr) + 2 * g.nr;
}

// One ISA's kernels. Row kernels process rows [0, rows) of 2-D views with a row stride and a
// contiguous last dimension; the `aux` index says whether weight / cos / sin are fp32 (1) or
// of the activation's dtype (0).
struct IsaKernels {
  const char* name;
  GemmBlocking gemm;
  void (*gemm_tasks)(const GemmProblem&, const GemmTiling&, int64_t begin, int64_t end, float* scratch);
  void (*gemv_tasks)(const GemmProblem&, const GemmTiling&, int64_t begin, int64_t end, float* scratch);  // m <= 4
  int64_t own_prefetch_bytes;  // the skinny products' prefetch distance unless one is set (gemv_kernel.h)

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
  // Tasks [begin, end) of a QuantProblem; scratch: quant_scratch() floats.
  using QuantTasks = void (*)(const QuantProblem&, int64_t begin, int64_t end, float* scratch);
  QuantTasks int8_gemv[kNumDtypes], int8_gemm[kNumDtypes], int4_gemv[kNumDtypes], int4_gemm[kNumDtypes];
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
// int4 decode kernels with int8 activations (quant_int8_activations.h) per dtype (null for fp32,
// whose callers asked for fp32's precision), which replace a table's int4_gemv (isa_select.cpp):
// isa_avx512vnni.cpp's (quant_vnni.h) the avx512 table's where the CPU has AVX512-VNNI and VBMI,
// isa_avx2.cpp's (quant_avx2_dots.h) the avx2 table's.
const IsaKernels::QuantTasks* avx512vnni_int4_gemv_int8_dots();
const IsaKernels::QuantTasks* avx2_int4_gemv_int8_dots();
// The same for int8 decode rows with int16 activations (quant_int16_activations.h).
const IsaKernels::QuantTasks* avx512vnni_int8_gemv_int16_dots();
// int4 prefill with int16 activations (quant_vnni.h), for the avx512 path of AVX512-VNNI CPUs.
const IsaKernels::QuantTasks* avx512vnni_int4_prefill_int16();
const IsaKernels::QuantTasks* avx2_int8_gemv_int16_dots();

}  // namespace torchplug_cpu
