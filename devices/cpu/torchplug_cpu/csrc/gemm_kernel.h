// The blocked fp16 GEMM, written once and instantiated per ISA with that ISA's vocabulary `I`
// (vec_<isa>.h). BLIS-style: for each task's C block and each kc-deep slice of K, fp16 panels of
// A and B are converted into fp32 panels laid out for the micro-kernel, which keeps an mr x nr
// tile of C in registers and does one broadcast-FMA per A element. Conversion costs O(mk + kn)
// per slice against O(mnk) FMAs, so the inner loop runs at fp32 FMA speed.
// Included inside namespace torchplug_cpu::TP_ISA (see isa_table.h).
#pragma once

template <class I>
struct Gemm {
  using V = typename I::V;
  static constexpr int64_t W = I::W, MR = I::gemm.mr, NR = I::gemm.nr, KC = I::gemm.kc, NV = NR / W;
  static_assert(NR % W == 0, "the register tile must be whole vectors wide");

  static int64_t min(int64_t a, int64_t b) { return a < b ? a : b; }

  // dst[r * ld + c] = float(src[r * rs + c * cs]) for r < rows, c < cols, then zeros up to
  // pad_rows x pad_cols, so edge tiles compute on zeros and never on stale values. S: fp16_t, or
  // any element type the vocabulary loads (float, bf16_t, int8_t: the quantized products').
  template <class S>
  static void pack(const S* src, int64_t rs, int64_t cs, int64_t rows, int64_t cols, float* dst,
                   int64_t ld, int64_t pad_rows, int64_t pad_cols) {
    if (cs == 1) {  // rows are contiguous: convert W at a time
      for (int64_t r = 0; r < rows; ++r) {
        const S* s = src + r * rs;
        float* d = dst + r * ld;
        int64_t c = 0;
        for (; c + W <= cols; c += W) I::store(d + c, I::load(s + c));
        for (; c < cols; ++c) d[c] = I::to_float(s[c]);
      }
    } else if (std::is_same_v<S, fp16_t> && rs == 1) {  // columns are contiguous: convert and transpose 8x8 blocks
      const int64_t r8 = rows - rows % 8, c8 = cols - cols % 8;
      for (int64_t c = 0; c < c8; c += 8)
        for (int64_t r = 0; r < r8; r += 8)
          if constexpr (std::is_same_v<S, fp16_t>) I::convert_transpose_8x8(src + r + c * cs, cs, dst + r * ld + c, ld);
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t c = (r < r8 ? c8 : 0); c < cols; ++c) dst[r * ld + c] = I::to_float(src[r + c * cs]);
    } else {  // any other strides (e.g. broadcast, stride 0)
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t c = 0; c < cols; ++c) dst[r * ld + c] = I::to_float(src[r * rs + c * cs]);
    }
    for (int64_t r = 0; r < pad_rows; ++r)
      for (int64_t c = (r < rows ? cols : 0); c < pad_cols; ++c) dst[r * ld + c] = 0.f;
  }

  // Ask for the fp16 source of a block (rows x cols) ahead of its packing, one request per
  // 64-byte line, so converting the next B micro-panel does not wait on memory.
  static void prefetch(const fp16_t* src, int64_t rs, int64_t cs, int64_t rows, int64_t cols) {
    constexpr int64_t line = 32;  // fp16 elements per cache line
    if (cs == 1) {
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t c = 0; c < cols; c += line) __builtin_prefetch(src + r * rs + c);
    } else if (rs == 1) {
      for (int64_t c = 0; c < cols; ++c)
        for (int64_t r = 0; r < rows; r += line) __builtin_prefetch(src + r + c * cs);
    }
  }

  // out (MR x NR, row stride out_ld) = in + a @ b, with a (MR x kc, row-major) and b (kc x NR,
  // row-major); `in` (same shape, stride in_ld) is the sum of earlier kc slices, or null. The
  // tile lives in registers (a fixed-size array, loops fully unrolled). Each slice is summed
  // from zero and then added to `in`: a two-level sum whose rounding error grows with
  // kc + k / kc rather than with k, which matters for long K.
  static inline void micro_kernel(int64_t kc, const float* __restrict a, const float* __restrict b,
                                  const float* in, int64_t in_ld, float* out, int64_t out_ld) {
    V acc[MR][NV];
#pragma GCC unroll 32
    for (int64_t i = 0; i < MR; ++i)
#pragma GCC unroll 8
      for (int64_t v = 0; v < NV; ++v) acc[i][v] = I::zero();
#pragma GCC unroll 4
    for (int64_t k = 0; k < kc; ++k) {
      V bv[NV];
#pragma GCC unroll 8
      for (int64_t v = 0; v < NV; ++v) bv[v] = I::load(b + k * NR + v * W);
#pragma GCC unroll 32
      for (int64_t i = 0; i < MR; ++i) {
        const V ai = I::set1(a[i * kc + k]);
#pragma GCC unroll 8
        for (int64_t v = 0; v < NV; ++v) acc[i][v] = I::fma(ai, bv[v], acc[i][v]);
      }
    }
#pragma GCC unroll 32
    for (int64_t i = 0; i < MR; ++i)
#pragma GCC unroll 8
      for (int64_t v = 0; v < NV; ++v)
        I::store(out + i * out_ld + v * W, in ? I::add(I::load(in + i * in_ld + v * W), acc[i][v]) : acc[i][v]);
  }

  // One row of finished fp32 sums -> C = fp16(alpha * sum + beta * cin); cin may be null.
  static void write_row(const float* sums, int64_t n, const GemmProblem& p, const fp16_t* cin, fp16_t* c) {
    int64_t j = 0;
    if (p.c_cs == 1 && (cin == nullptr || p.cin_cs == 1)) {
      const V alpha = I::set1(p.alpha), beta = I::set1(p.beta);
      for (; j + W <= n; j += W) {
        V out = I::mul(alpha, I::load(sums + j));
        if (cin) out = I::fma(beta, I::load(cin + j), out);
        I::store(c + j, out);
      }
    }
    for (; j < n; ++j) {
      float out = p.alpha * sums[j];
      if (cin) out += p.beta * I::to_float(cin[j * p.cin_cs]);
      c[j * p.c_cs] = I::to_half(out);
    }
  }

  static void write_tile(const float* tile, int64_t mr, int64_t nr, const GemmProblem& p, const fp16_t* cin, fp16_t* c) {
    for (int64_t i = 0; i < mr; ++i) write_row(tile + i * NR, nr, p, cin ? cin + i * p.cin_rs : nullptr, c + i * p.c_rs);
  }

  // Tasks [begin, end) of the grid batch x m_blocks x n_blocks; `scratch` holds tiling.packed_a
  // + packed_b + accumulator floats (one thread's). When K spans several kc slices, the running
  // sums of the task's C block stay in fp32 in `acc` (whole micro-tiles, row stride acc_ld)
  // between slices: C is fp16 and must be rounded only once.
  static void tasks(const GemmProblem& p, const GemmTiling& t, int64_t begin, int64_t end, float* scratch) {
    float* packed_a = scratch;
    float* packed_b = packed_a + t.packed_a;
    float* acc = packed_b + t.packed_b;
    const int64_t acc_ld = (t.nc + NR - 1) / NR * NR;
    alignas(64) float tile[MR * NR];
    for (int64_t task = begin; task < end; ++task) {
      const int64_t nb = task % t.n_blocks, mb = task / t.n_blocks % t.m_blocks, bt = task / t.n_blocks / t.m_blocks;
      const int64_t m0 = mb * t.mc, mc = min(t.mc, p.m - m0), n0 = nb * t.nc, nc = min(t.nc, p.n - n0);
      const fp16_t* a = p.a + bt * p.a_bs + m0 * p.a_rs;
      const fp16_t* b = p.b + bt * p.b_bs + n0 * p.b_cs;
      fp16_t* c = p.c + bt * p.c_bs + m0 * p.c_rs + n0 * p.c_cs;
      const fp16_t* cin = p.beta != 0.f ? p.cin + bt * p.cin_bs + m0 * p.cin_rs + n0 * p.cin_cs : nullptr;
      for (int64_t k0 = 0; k0 < p.k; k0 += KC) {
        const int64_t kc = min(KC, p.k - k0);
        // A block, kept in L2: its MR-row micro-panels (MR x kc, row-major) laid end to end are
        // one row-major mc x kc matrix, so it is packed in one go (8x8 blocks when transposed).
        pack(a + k0 * p.a_cs, p.a_rs, p.a_cs, mc, kc, packed_a, kc, (mc + MR - 1) / MR * MR, kc);
        for (int64_t j = 0; j < nc; j += NR) {
          // One B micro-panel (kc x NR) at a time, converted right before use: it stays in L1
          // while every A micro-panel streams past it.
          pack(b + k0 * p.b_rs + j * p.b_cs, p.b_rs, p.b_cs, kc, min(NR, nc - j), packed_b, NR, kc, NR);
          if (j + NR < nc) prefetch(b + k0 * p.b_rs + (j + NR) * p.b_cs, p.b_rs, p.b_cs, kc, min(NR, nc - j - NR));
          for (int64_t i = 0; i < mc; i += MR) {
            float* sums = acc + i * acc_ld + j;
            const float* in = k0 == 0 ? nullptr : sums;
            if (k0 + kc < p.k) {
              micro_kernel(kc, packed_a + i * kc, packed_b, in, acc_ld, sums, acc_ld);
            } else {
              micro_kernel(kc, packed_a + i * kc, packed_b, in, acc_ld, tile, NR);
              write_tile(tile, min(MR, mc - i), min(NR, nc - j), p, cin ? cin + i * p.cin_rs + j * p.cin_cs : nullptr,
                         c + i * p.c_rs + j * p.c_cs);
            }
          }
        }
      }
    }
  }
};
