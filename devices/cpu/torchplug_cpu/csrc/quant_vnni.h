// int4 decode rows with int8 activations and integer dot products (AVX512-VNNI vpdpbusd), as
// llama.cpp's Q4_0 x Q8_0: the float path (quant_kernel.h, int4_gemv) is bound by converting
// nibbles to floats (6 port-5 micro-ops per 64 weights on AVX-512); here 256 weights cost two byte
// permutes, four and/shifts and four vpdpbusd.
//  - Each x row is rounded to int8 once per call, per block of 32 along k (groups are multiples of
//    32): d = max|x| / 127, xq = round(x * (1 / d)) to nearest even, in fp32 (exactly what the
//    tests recompute). The result is x_hat @ dequantized(w)^T with x_hat = d * xq: the products
//    are exact in int32, their block sums scaled by d in fp32.
//  - torch's AVX-512 layout has a block's 64 columns along a 32-byte k row (byte b: column b low,
//    b + 32 high); vpdpbusd sums 4 bytes of one lane, so one vpermt2b per 16 lanes gathers byte b
//    of 4 consecutive k rows into lane b, and/shift split the nibbles (unsigned 0..15, the first
//    operand), and the 4 x bytes of those rows are broadcast as the signed one.
//  - Per group, as the float path: scale * sum(x_hat q) + (zero - 8 scale) * sum(x_hat).
// Only the full, split blocks of 64 columns with k a multiple of 32 run here (quant_ops.cpp picks
// it); a row with an infinity or NaN runs the float path, so that it propagates as torch's does.
// Included inside namespace torchplug_cpu::avx512vnni (isa_avx512vnni.cpp), after quant_kernel.h.
#pragma once

template <class I>
struct QuantVnni : Quant<I> {
  using Q = Quant<I>;
  using V = typename I::V;
  static constexpr int64_t kBlock = 32;  // k values per activation scale
  static constexpr int kRows = 4;        // x rows per pass over a block of weights

  // Rows [0, m) of a32 (k floats each, k a multiple of 32) as int8 xq with scales d per block of 32,
  // and xs[r * groups + g] = sum of d * xq over group g. False if a row holds an infinity or NaN.
  static bool quantize_rows(const QuantProblem& p, const float* a32, int8_t* xq, float* d, float* xs, int64_t groups) {
    const int64_t blocks = p.k / kBlock, per_group = p.group / kBlock;
    for (int64_t r = 0; r < p.m; ++r) {
      for (int64_t b = 0; b < blocks; ++b) {
        const float* x = a32 + r * p.k + b * kBlock;
        const V v0 = I::load(x), v1 = I::load(x + 16);
        const float amax = _mm512_reduce_max_ps(_mm512_max_ps(_mm512_abs_ps(v0), _mm512_abs_ps(v1)));
        if (!(amax <= 3.4028235e38f) || _mm512_cmp_ps_mask(v0, v1, _CMP_UNORD_Q)) return false;  // vmaxps drops NaNs
        const float scale = amax / 127.f, inv = scale != 0.f ? 1.f / scale : 0.f;
        const __m512i q0 = _mm512_cvtps_epi32(I::mul(v0, I::set1(inv)));  // MXCSR's rounding: nearest even
        const __m512i q1 = _mm512_cvtps_epi32(I::mul(v1, I::set1(inv)));
        int8_t* out = xq + r * p.k + b * kBlock;
        _mm_storeu_si128(reinterpret_cast<__m128i*>(out), _mm512_cvtsepi32_epi8(q0));
        _mm_storeu_si128(reinterpret_cast<__m128i*>(out + 16), _mm512_cvtsepi32_epi8(q1));
        d[r * blocks + b] = scale;
        const float part = scale * static_cast<float>(_mm512_reduce_add_epi32(_mm512_add_epi32(q0, q1)));
        float& sum = xs[r * groups + b / per_group];
        sum = b % per_group == 0 ? part : sum + part;
      }
    }
    return true;
  }

  // Rows [0, Rn) of xq / d against one full split block of 64 columns: tot[r * 64 + column].
  template <int Rn, class T>
  static void block_rows(const QuantProblem& p, const uint8_t* blk, int64_t c0, const int8_t* xq, const float* d,
                         const float* xs, int64_t groups, float* tot, float* scale, float* zero) {
    constexpr int64_t BW = 64, HB = 32;  // columns, bytes per k row
    const int64_t blocks = p.k / kBlock;
    // Lane j of the first gather: byte j of rows 0..3 (row i is bytes 32 i.. of r01:r23); the
    // second: byte 16 + j.
    const __m512i gather0 = _mm512_set_epi8(
        111, 79, 47, 15, 110, 78, 46, 14, 109, 77, 45, 13, 108, 76, 44, 12, 107, 75, 43, 11, 106, 74, 42, 10,
        105, 73, 41, 9, 104, 72, 40, 8, 103, 71, 39, 7, 102, 70, 38, 6, 101, 69, 37, 5, 100, 68, 36, 4,
        99, 67, 35, 3, 98, 66, 34, 2, 97, 65, 33, 1, 96, 64, 32, 0);
    const __m512i gather1 = _mm512_add_epi8(gather0, _mm512_set1_epi8(16));
    const __m512i low4 = _mm512_set1_epi8(15);
    std::memset(tot, 0, Rn * BW * sizeof(float));
    for (int64_t g = 0; g < groups; ++g) {
      Q::template group_scales_vec<T>(p, g, c0, BW, scale, zero);
      V part[Rn][4];
      for (int r = 0; r < Rn; ++r)
        for (int v = 0; v < 4; ++v) part[r][v] = I::zero();
      for (int64_t b = g * p.group / kBlock; b < std::min(blocks, (g + 1) * p.group / kBlock); ++b) {
        __m512i acc[Rn][4];
        for (int r = 0; r < Rn; ++r)
          for (int v = 0; v < 4; ++v) acc[r][v] = _mm512_setzero_si512();
        for (int64_t kk = b * kBlock; kk < (b + 1) * kBlock; kk += 4) {
          const uint8_t* rows = blk + kk * HB;
          // One stream, prefetched as far ahead as the float path's (128 bytes here: two lines).
          __builtin_prefetch(rows + Gemv<I>::kPrefetchLines * 64, 0, 3);
          __builtin_prefetch(rows + Gemv<I>::kPrefetchLines * 64 + 64, 0, 3);
          const __m512i r01 = _mm512_loadu_si512(rows), r23 = _mm512_loadu_si512(rows + 64);
          const __m512i t0 = _mm512_permutex2var_epi8(r01, gather0, r23), t1 = _mm512_permutex2var_epi8(r01, gather1, r23);
          const __m512i q[4] = {_mm512_and_si512(t0, low4), _mm512_and_si512(t1, low4),
                                _mm512_and_si512(_mm512_srli_epi16(t0, 4), low4),
                                _mm512_and_si512(_mm512_srli_epi16(t1, 4), low4)};
          for (int r = 0; r < Rn; ++r) {
            int32_t x4;
            std::memcpy(&x4, xq + r * p.k + kk, 4);
            const __m512i xb = _mm512_set1_epi32(x4);
            for (int v = 0; v < 4; ++v) acc[r][v] = _mm512_dpbusd_epi32(acc[r][v], q[v], xb);
          }
        }
        for (int r = 0; r < Rn; ++r) {
          const V dv = I::set1(d[r * blocks + b]);
          for (int v = 0; v < 4; ++v) part[r][v] = I::fma(_mm512_cvtepi32_ps(acc[r][v]), dv, part[r][v]);
        }
      }
      for (int r = 0; r < Rn; ++r) {
        const V sum_x = I::set1(xs[r * groups + g]);
        for (int v = 0; v < 4; ++v) {
          float* t = tot + r * BW + v * 16;
          I::store(t, I::fma(I::load(scale + v * 16), part[r][v], I::fma(I::load(zero + v * 16), sum_x, I::load(t))));
        }
      }
    }
  }

  // int4_gemv's contract (quant_kernel.h) for split blocks of 64 and k % 32 == 0; scratch:
  // quant_scratch() floats (which counts xq and d for int4).
  template <class T> static void int4_gemv(const QuantProblem& p, int64_t begin, int64_t end, float* scratch) {
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
    for (int64_t c = begin * p.nc; c < std::min(p.n, end * p.nc);) {
      int64_t c0, bw;
      const uint8_t* blk = Q::block_of(p, c, &c0, &bw);
      if (bw != 64) {  // the last, narrower block: the float path's loop on x_hat
        for (int64_t r = 0; r < p.m; ++r)
          for (int64_t kk = 0; kk < p.k; ++kk) a32[r * p.k + kk] = d[r * blocks + kk / kBlock] * xq[r * p.k + kk];
        Q::template int4_narrow_block<T>(p, blk, c0, bw, a32, xs, groups, scale, zero);
      } else {
        for (int64_t r0 = 0; r0 < p.m; r0 += kRows) {
          const int8_t* x = xq + r0 * p.k;
          const float* dr = d + r0 * blocks;
          const float* xr = xs + r0 * groups;
          switch (std::min<int64_t>(kRows, p.m - r0)) {
            case 4: block_rows<4, T>(p, blk, c0, x, dr, xr, groups, tot, scale, zero); break;
            case 3: block_rows<3, T>(p, blk, c0, x, dr, xr, groups, tot, scale, zero); break;
            case 2: block_rows<2, T>(p, blk, c0, x, dr, xr, groups, tot, scale, zero); break;
            default: block_rows<1, T>(p, blk, c0, x, dr, xr, groups, tot, scale, zero); break;
          }
          for (int64_t r = r0; r < std::min(p.m, r0 + kRows); ++r)
            Q::template write_row<T>(tot + (r - r0) * 64, nullptr, 64, static_cast<T*>(p.out) + r * p.out_rs + c0);
        }
      }
      c = c0 + bw;
    }
  }
};
