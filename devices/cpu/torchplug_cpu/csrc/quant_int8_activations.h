// int4 decode rows with int8 activations and integer dot products, as llama.cpp's Q4_0 x Q8_0: the
// part every ISA shares. The float path (quant_kernel.h, int4_gemv) is bound by converting nibbles
// to floats; here each ISA's `Dots` (quant_vnni.h: AVX512-VNNI vpdpbusd; quant_avx2_dots.h: AVX2
// vpmaddubsw) multiplies the nibbles by int8 bytes directly.
//  - Each x row is rounded to int8 once per call, per block of 32 along k (groups are multiples of
//    32): d = max|x| / 127, xq = round(x * (1 / d)) to nearest even, in fp32 (exactly what the
//    tests recompute). The result is x_hat @ dequantized(w)^T with x_hat = d * xq: the products
//    are exact in integers, their block sums scaled by d in fp32.
//  - Per group, as the float path: scale * sum(x_hat q) + (zero - 8 scale) * sum(x_hat).
// Only split blocks (torch's AVX-512 layout of 64 columns, and its AVX2 one of 32 where Dots reads
// it) with k a multiple of 32 run here (quant_ops.cpp checks k); any other layout, and a row with
// an infinity or NaN (which then propagates as torch's does), run the float path.
// Dots provides:
//   kRows: x rows per pass over a block of weights (their sums stay in registers);
//   kBlock32: whether it reads torch's AVX2 layout (blocks of 32) besides the AVX-512 one;
//   quantize_block(x, xq, &d, &sum): 32 floats to int8 (with their scale d and the sum of the
//     bytes); false if one is an infinity or NaN;
//   group_dots<BW, Rn, S>(p, blk, b0, b1, xq, d, part): part[(s * Rn + r) * BW + column] = sum over
//     blocks b of 32 k in [b0, b1) of d[r * blocks + b] * (xq's block . the nibbles of block blk[s]),
//     for rows r < Rn (xq: rows p.k bytes apart) and S full blocks of BW columns read at once (S
//     weight streams, gemv_kernel.h's in_streams; Rn * S <= kRows).
// Included inside namespace torchplug_cpu::<isa>, after quant_kernel.h.
#pragma once

template <class I, class Dots>
struct Int8Activations : Quant<I> {
  using Q = Quant<I>;
  using V = typename I::V;
  static constexpr int64_t kBlock = 32;  // k values per activation scale

  static bool reads(const QuantProblem& p) { return p.split && (p.block == 64 || (Dots::kBlock32 && p.block == 32)); }

  // Rows [0, m) of a32 (k floats each, k a multiple of 32) as int8 xq with scales d per block of 32,
  // and xs[r * groups + g] = sum of d * xq over group g. False if a row holds an infinity or NaN.
  static bool quantize_rows(const QuantProblem& p, const float* a32, int8_t* xq, float* d, float* xs, int64_t groups) {
    const int64_t blocks = p.k / kBlock, per_group = p.group / kBlock;
    for (int64_t r = 0; r < p.m; ++r) {
      for (int64_t b = 0; b < blocks; ++b) {
        float scale;
        int32_t sum;
        if (!Dots::quantize_block(a32 + r * p.k + b * kBlock, xq + r * p.k + b * kBlock, &scale, &sum)) return false;
        d[r * blocks + b] = scale;
        const float part = scale * static_cast<float>(sum);
        float& total = xs[r * groups + b / per_group];
        total = b % per_group == 0 ? part : total + part;
      }
    }
    return true;
  }

  // Rows [0, Rn) of xq / d against S full split blocks of BW columns (blk[s] at column c0[s]):
  // tot[(s * Rn + r) * BW + column].
  template <int BW, int Rn, int S, class T>
  static void block_rows(const QuantProblem& p, const uint8_t* const* blk, const int64_t* c0, const int8_t* xq,
                         const float* d, const float* xs, int64_t groups, float* tot) {
    constexpr int NV = BW / I::W;
    const int64_t blocks = p.k / kBlock;
    alignas(64) float part[S * Rn * BW], scale[S][BW], zero[S][BW];
    std::memset(tot, 0, S * Rn * BW * sizeof(float));
    for (int64_t g = 0; g < groups; ++g) {
      for (int s = 0; s < S; ++s) {
        Q::template prefetch_next_scales<T>(p, g, groups, c0[s], BW);
        Q::template group_scales_vec<T>(p, g, c0[s], BW, scale[s], zero[s]);
      }
      Dots::template group_dots<BW, Rn, S>(p, blk, g * p.group / kBlock, std::min(blocks, (g + 1) * p.group / kBlock),
                                           xq, d, part);
      for (int s = 0; s < S; ++s)
        for (int r = 0; r < Rn; ++r) {
          const V sum_x = I::set1(xs[r * groups + g]);
          for (int v = 0; v < NV; ++v) {
            float* t = tot + (s * Rn + r) * BW + v * I::W;
            const V dots = I::load(part + (s * Rn + r) * BW + v * I::W);
            I::store(t, I::fma(I::load(scale[s] + v * I::W), dots,
                               I::fma(I::load(zero[s] + v * I::W), sum_x, I::load(t))));
          }
        }
    }
  }

  // All m rows against S full blocks (m * S <= Dots::kRows: one pass, each block streams once), written
  // to out as T.
  template <int BW, int S, class T>
  static void full_blocks(const QuantProblem& p, const uint8_t* const* blk, const int64_t* c0, const int8_t* xq,
                          const float* d, const float* xs, int64_t groups, float* tot) {
    switch (p.m) {
      case 4: if constexpr (4 * S <= Dots::kRows) block_rows<BW, 4, S, T>(p, blk, c0, xq, d, xs, groups, tot); break;
      case 3: if constexpr (3 * S <= Dots::kRows) block_rows<BW, 3, S, T>(p, blk, c0, xq, d, xs, groups, tot); break;
      case 2: if constexpr (2 * S <= Dots::kRows) block_rows<BW, 2, S, T>(p, blk, c0, xq, d, xs, groups, tot); break;
      default: block_rows<BW, 1, S, T>(p, blk, c0, xq, d, xs, groups, tot); break;
    }
    for (int s = 0; s < S; ++s)
      for (int64_t r = 0; r < p.m; ++r)
        Q::template write_row<T>(tot + (s * p.m + r) * BW, nullptr, BW, static_cast<T*>(p.out) + r * p.out_rs + c0[s]);
  }

  // m rows (m <= Dots::kRows) against full blocks [b0, b1) of BW columns, as many at once as the rows
  // leave room for and half what gemv_streams() asks: a block's step reads two lines where a fp16 or
  // int8 column's reads one, so 2 blocks keep as many lines in flight as 4 columns. On a Zen 4 VM,
  // 2 blocks against 4: from memory 1.10-1.15x, the 499M decoder 1.04-1.10x (docs/cpu-fp16.md).
  template <int BW, class T>
  static void row_blocks(const QuantProblem& p, int64_t b0, int64_t b1, const int8_t* xq, const float* d,
                         const float* xs, int64_t groups, float* tot) {
    auto visit = [&](auto streams, const int64_t* at) {
      constexpr int S = decltype(streams)::value;
      const uint8_t* blk[S];
      int64_t c0[S], bw;
      for (int s = 0; s < S; ++s) blk[s] = Q::block_of(p, (b0 + at[s]) * BW, &c0[s], &bw);
      full_blocks<BW, S, T>(p, blk, c0, xq, d, xs, groups, tot);
    };
    if (Dots::kRows / p.m >= 2) Gemv<I>::template in_streams<2>(b1 - b0, visit, gemv_streams() / 2);
    else Gemv<I>::template in_streams<1>(b1 - b0, visit);
  }

  // All m rows against full blocks [b0, b1) of BW columns. Up to Dots::kRows rows in one pass (with
  // several blocks at once); more rows take every group of kRows per block while it is in L2, so the
  // weights still stream from memory once.
  template <int BW, class T>
  static void full_range(const QuantProblem& p, int64_t b0, int64_t b1, const int8_t* xq, const float* d,
                         const float* xs, int64_t groups, float* tot) {
    if (p.m <= Dots::kRows) return row_blocks<BW, T>(p, b0, b1, xq, d, xs, groups, tot);
    const int64_t blocks = p.k / kBlock;
    for (int64_t b = b0; b < b1; ++b) {
      int64_t c0, bw;
      const uint8_t* blk = Q::block_of(p, b * BW, &c0, &bw);
      for (int64_t r0 = 0; r0 < p.m; r0 += Dots::kRows) {
        QuantProblem rows = p;
        rows.m = std::min<int64_t>(Dots::kRows, p.m - r0);
        rows.out = static_cast<T*>(p.out) + r0 * p.out_rs;
        full_blocks<BW, 1, T>(rows, &blk, &c0, xq + r0 * p.k, d + r0 * blocks, xs + r0 * groups, groups, tot);
      }
    }
  }

  // int4_gemv's contract (quant_kernel.h) for k % 32 == 0; scratch: quant_scratch() floats (which
  // counts xq and d for int4). Layouts Dots does not read run the float path.
  template <class T> static void int4_gemv(const QuantProblem& p, int64_t begin, int64_t end, float* scratch) {
    if (!reads(p)) return Q::template int4_gemv<T>(p, begin, end, scratch);
    const int64_t groups = (p.k + p.group - 1) / p.group;
    float* a32 = scratch;
    float* xs = a32 + Q::up(p.m * p.k, 16);
    float* tot = xs + Q::up(p.m * (p.k / 32 + 1), 16);
    float* scale = tot + Q::up((p.m > 4 ? p.m : 4) * (p.nc > 64 ? p.nc : 64), 16);
    float* zero = scale + 64;
    float* d = zero + 64;
    int8_t* xq = reinterpret_cast<int8_t*>(d + Q::up(p.m * (p.k / 32 + 1), 16));
    Q::G::pack(static_cast<const T*>(p.x), p.x_rs, 1, p.m, p.k, a32, p.k, p.m, p.k);
    if (!quantize_rows(p, a32, xq, d, xs, groups)) return Q::template int4_gemv<T>(p, begin, end, scratch);
    const int64_t blocks = p.k / kBlock;
    const int64_t c_begin = begin * p.nc, c_end = std::min(p.n, end * p.nc);
    const int64_t full_end = std::min(c_end, p.n - p.n % p.block);  // the last, narrower block after
    if (c_begin < full_end) {
      if (p.block == 64) full_range<64, T>(p, c_begin / 64, full_end / 64, xq, d, xs, groups, tot);
      else if constexpr (Dots::kBlock32) full_range<32, T>(p, c_begin / 32, full_end / 32, xq, d, xs, groups, tot);
    }
    if (full_end < c_end) {  // the float path's loop on x_hat
      int64_t c0, bw;
      const uint8_t* blk = Q::block_of(p, full_end, &c0, &bw);
      for (int64_t r = 0; r < p.m; ++r)
        for (int64_t kk = 0; kk < p.k; ++kk) a32[r * p.k + kk] = d[r * blocks + kk / kBlock] * xq[r * p.k + kk];
      Q::template int4_narrow_block<T>(p, blk, c0, bw, a32, xs, groups, scale, zero);
    }
  }
};

// An ISA's int4_gemv replacements per dtype (isa.h): null for fp32 activations, whose callers asked
// for fp32's precision.
template <class Kernels>
const IsaKernels::QuantTasks* int8_activation_kernels() {
  static constexpr IsaKernels::QuantTasks kKernels[kNumDtypes] = {
      nullptr, &Kernels::template int4_gemv<bf16_t>, &Kernels::template int4_gemv<fp16_t>};
  return kKernels;
}
