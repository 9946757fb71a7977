// int4 decode rows with int8 activations on AVX2 (vpmaddubsw; for CPUs without VNNI of any kind,
// such as AMD Zen 3): the dot products and the rounding of quant_int8_activations.h's contract,
// as llama.cpp's AVX2 Q4_0 x Q8_0. vpmaddubsw multiplies unsigned bytes (the nibbles, 0..15) by
// signed ones (x) and adds adjacent pairs to int16, so each pair of bytes must hold one column at two
// k rows, while torch's layouts hold a k row's columns side by side. One step takes 64 bytes (128
// weights) in two loads a, b and pairs them with one vpunpcklbw and one vpunpckhbw:
//  - torch's AVX2 layout (blocks of 32 columns, 16-byte k rows; byte c: column c low, c + 16 high):
//    a = rows k, k+1 and b = rows k+2, k+3, so lane 0 pairs rows (k, k+2) and lane 1 (k+1, k+3)
//    of the same 8 columns: x is a broadcast of x[k..k+3] and one vpshufb (x[k], x[k+2] | x[k+1],
//    x[k+3]); the lanes are added once per group.
//  - torch's AVX-512 layout (blocks of 64, 32-byte k rows; column c + 32 in the high nibble):
//    a = row k, b = row k+1: rows (k, k+1) of 16 columns; x is a broadcast of (x[k], x[k+1]).
// and/shift split the nibbles; four vpmaddubsw per x row then give the step's 128 products in int16
// pairs (each at most 2 * 15 * 127 = 3810), added in int16 over 8 steps (at most 30480 < 32767),
// then widened (vpmaddwd by (1, 0) takes the even int16, vpsrad the odd), scaled by d in fp32.
// Micro-ops per 128 weights: 2 loads, 2 unpacks and 6 and/shifts, then per x row 1 broadcast load,
// 1 vpshufb (the AVX2 layout) or vpbroadcastw, 4 vpmaddubsw and 4 vpaddw, and about 2 for the
// widening: 3 port-5 shuffles for one row (the float path: 8 vpmovzxbd, 16 vcvtdq2ps, 16 ALU and
// 16 FMAs). x's vpshufb could go by storing each row's x vectors pre-shuffled (32 bytes per 4 k:
// 8 m k bytes of scratch, read again for every block of columns) instead of xq (m k bytes): not done.
// Also the int16 dots of int8 decode rows (quant_int16_activations.h): vpmaddwd.
// Included inside namespace torchplug_cpu::avx2 (isa_avx2.cpp), after quant_int8_activations.h and
// quant_int16_activations.h.
#pragma once

template <class I>
struct Avx2Dots {
  static constexpr int kRows = 2;  // 4 int16 sums per row and step, with the step's 4 nibble vectors in 16 ymm
  static constexpr bool kBlock32 = true;

  static int32_t reduce_add(__m256i v) {
    __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4E));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xB1));
    return _mm_cvtsi128_si32(s);
  }

  static bool quantize_block(const float* x, int8_t* out, float* d, int32_t* sum) {
    const __m256 v[4] = {I::load(x), I::load(x + 8), I::load(x + 16), I::load(x + 24)};
    const __m256 sign = _mm256_set1_ps(-0.f);
    const __m256 top = I::max(I::max(_mm256_andnot_ps(sign, v[0]), _mm256_andnot_ps(sign, v[1])),
                              I::max(_mm256_andnot_ps(sign, v[2]), _mm256_andnot_ps(sign, v[3])));
    const __m256 nan = _mm256_or_ps(_mm256_cmp_ps(v[0], v[1], _CMP_UNORD_Q), _mm256_cmp_ps(v[2], v[3], _CMP_UNORD_Q));
    const float amax = I::reduce_max(top);
    if (!(amax <= 3.4028235e38f) || _mm256_movemask_ps(nan)) return false;  // vmaxps drops NaNs
    const float scale = amax / 127.f, inv = scale != 0.f ? 1.f / scale : 0.f;
    __m256i q[4];
    for (int i = 0; i < 4; ++i) q[i] = _mm256_cvtps_epi32(I::mul(v[i], I::set1(inv)));  // nearest even
    // Saturating packs interleave the lanes: dwords q0[0..3] q1[0..3] q2[0..3] q3[0..3] | q0[4..7] ...
    const __m256i packed = _mm256_packs_epi16(_mm256_packs_epi32(q[0], q[1]), _mm256_packs_epi32(q[2], q[3]));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out),
                        _mm256_permutevar8x32_epi32(packed, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7)));
    *d = scale;
    *sum = reduce_add(_mm256_add_epi32(_mm256_add_epi32(q[0], q[1]), _mm256_add_epi32(q[2], q[3])));
    return true;
  }

  template <int BW, int Rn, int S>
  static void group_dots(const QuantProblem& p, const uint8_t* const* blk, int64_t b0, int64_t b1, const int8_t* xq,
                         const float* d, float* part) {
    static_assert(Rn * S <= kRows, "the accumulators fill the registers");
    constexpr int64_t HB = BW / 2, kBlock = 32;  // bytes per k row, k per activation scale
    constexpr int64_t kStepK = 64 / HB;         // k rows per 64-byte step: 4 (AVX2 layout), 2 (AVX-512)
    constexpr int64_t kSteps = 8;               // steps summed in int16
    const int64_t blocks = p.k / kBlock, ahead = Gemv<I>::prefetch_bytes();  // bytes
    const bool to_l2 = Gemv<I>::prefetch_to_l2();
    const __m256i low4 = _mm256_set1_epi8(15), even = _mm256_set1_epi32(1);
    const __m256i pairs = _mm256_setr_epi8(0, 2, 0, 2, 0, 2, 0, 2, 0, 2, 0, 2, 0, 2, 0, 2,
                                           1, 3, 1, 3, 1, 3, 1, 3, 1, 3, 1, 3, 1, 3, 1, 3);
    // fp32 sums of the even (lane 0..3 / 4..7 of vector 2v) and odd (2v + 1) int16 of each acc[v]
    alignas(32) float f[S][Rn][8][8] = {};
    for (int64_t b = b0; b < b1; ++b) {
      for (int64_t k0 = b * kBlock; k0 < (b + 1) * kBlock; k0 += kSteps * kStepK) {
        __m256i acc[S][Rn][4];
        for (int s = 0; s < S; ++s)
          for (int r = 0; r < Rn; ++r)
            for (int v = 0; v < 4; ++v) acc[s][r][v] = _mm256_setzero_si256();
        for (int64_t kk = k0; kk < k0 + kSteps * kStepK; kk += kStepK) {
          for (int s = 0; s < S; ++s) {
            const uint8_t* rows = blk[s] + kk * HB;
            Gemv<I>::prefetch(rows + ahead, to_l2);  // each stream as far ahead as the float path
            const __m256i a = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(rows));
            const __m256i c = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(rows + 32));
            const __m256i u0 = _mm256_unpacklo_epi8(a, c), u1 = _mm256_unpackhi_epi8(a, c);
            const __m256i q[4] = {_mm256_and_si256(u0, low4), _mm256_and_si256(u1, low4),
                                  _mm256_and_si256(_mm256_srli_epi16(u0, 4), low4),
                                  _mm256_and_si256(_mm256_srli_epi16(u1, 4), low4)};
            for (int r = 0; r < Rn; ++r) {
              __m256i x;
              if constexpr (BW == 32) {
                int32_t x4;
                std::memcpy(&x4, xq + r * p.k + kk, 4);
                x = _mm256_shuffle_epi8(_mm256_set1_epi32(x4), pairs);
              } else {
                int16_t x2;
                std::memcpy(&x2, xq + r * p.k + kk, 2);
                x = _mm256_set1_epi16(x2);
              }
              for (int v = 0; v < 4; ++v) acc[s][r][v] = _mm256_add_epi16(acc[s][r][v], _mm256_maddubs_epi16(q[v], x));
            }
          }
        }
        for (int s = 0; s < S; ++s)
          for (int r = 0; r < Rn; ++r) {
            const __m256 dv = I::set1(d[r * blocks + b]);
            for (int v = 0; v < 4; ++v) {
              float* fe = f[s][r][2 * v];
              float* fo = f[s][r][2 * v + 1];
              I::store(fe, I::fma(_mm256_cvtepi32_ps(_mm256_madd_epi16(acc[s][r][v], even)), dv, I::load(fe)));
              I::store(fo, I::fma(_mm256_cvtepi32_ps(_mm256_srai_epi32(acc[s][r][v], 16)), dv, I::load(fo)));
            }
          }
      }
    }
    // To column order. acc[v]'s int16 i of lane l is column 8 v + i (both lanes: the AVX2 layout's
    // two k phases) or 32 (v / 2) + 8 (v % 2) + 16 l + i (the AVX-512 layout).
    for (int sr = 0; sr < S * Rn; ++sr) {
      for (int v = 0; v < 4; ++v) {
        const __m256 e = I::load(f[sr / Rn][sr % Rn][2 * v]), o = I::load(f[sr / Rn][sr % Rn][2 * v + 1]);
        if constexpr (BW == 32) {
          const __m256 sum = I::add(_mm256_permute2f128_ps(e, o, 0x20), _mm256_permute2f128_ps(e, o, 0x31));
          I::store(part + sr * BW + 8 * v, _mm256_permutevar8x32_ps(sum, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7)));
        } else {
          const __m256 lo = _mm256_unpacklo_ps(e, o), hi = _mm256_unpackhi_ps(e, o);
          float* out = part + sr * BW + 32 * (v / 2) + 8 * (v % 2);
          I::store(out, _mm256_permute2f128_ps(lo, hi, 0x20));
          I::store(out + 16, _mm256_permute2f128_ps(lo, hi, 0x31));
        }
      }
    }
  }
};

template <class I> using QuantAvx2Dots = Int8Activations<I, Avx2Dots<I>>;

// int8 decode rows with int16 activations (quant_int16_activations.h): vpmaddwd multiplies 16 int16
// pairs and adds adjacent products into 8 int32 lanes (at most 2 * 32767 * 128). Per 16 weights: one
// vpmovsxbw, then per row one vpmaddwd and one vpaddd (the float path: 2 vpmovsxbd, 2 vcvtdq2ps and
// 2 FMAs per row). Only the vpaddd chains: one accumulator per row.
template <class I>
struct Avx2Int16Dots {
  using Acc = __m256i;
  static constexpr int64_t kK = 16;
  static constexpr int kChains = 1;
  static Acc zero() { return _mm256_setzero_si256(); }
  static Acc add(Acc a, Acc b) { return _mm256_add_epi32(a, b); }
  static __m256i widen(const int8_t* w) { return _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(w))); }
  static Acc dot(Acc acc, __m256i w, const int16_t* x) {
    return _mm256_add_epi32(acc, _mm256_madd_epi16(w, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x))));
  }
  static typename I::V to_float(Acc a) { return _mm256_cvtepi32_ps(a); }
  static void to_int16(typename I::V v, int16_t* out) {
    const __m256i q = _mm256_cvtps_epi32(v);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out), _mm_packs_epi32(_mm256_castsi256_si128(q), _mm256_extracti128_si256(q, 1)));
  }
};

template <class I> using Int8Avx2 = Int16Activations<I, Avx2Int16Dots<I>>;
