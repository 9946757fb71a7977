// The AVX2 + FMA + F16C vocabulary: 8 floats per vector. Used only by isa_avx2.cpp.
#pragma once
#include "vec_x86_common.h"

struct Avx2 {
  using V = __m256;
  static constexpr int W = 8;
  // GEMM: 6x16 register tile = 12 accumulators + 2 B vectors + 1 broadcast of the 16 ymm.
  // A block 192 x 256 fp32 = 192 KiB (L2 is 512 KiB on Zen 3), B micro-panel 256 x 16 = 16 KiB (L1).
  static constexpr GemmBlocking gemm{6, 16, 192, 256, 1024};

  static V zero() { return _mm256_setzero_ps(); }
  static V set1(float x) { return _mm256_set1_ps(x); }
  static V load(const float* p) { return _mm256_loadu_ps(p); }
  static void store(float* p, V v) { _mm256_storeu_ps(p, v); }
  static V load(const fp16_t* p) { return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))); }
  static void store(fp16_t* p, V v) {
    _mm_storeu_si128(reinterpret_cast<__m128i*>(p), _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT));
  }
  static V load(const bf16_t* p) {
    __m256i wide = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
    return _mm256_castsi256_ps(_mm256_slli_epi32(wide, 16));
  }
  static void store(bf16_t* p, V v) {  // round to nearest even; NaN stays a quiet NaN
    __m256i u = _mm256_castps_si256(v);
    __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
    __m256i r = _mm256_srli_epi32(_mm256_add_epi32(_mm256_add_epi32(u, _mm256_set1_epi32(0x7fff)), lsb), 16);
    __m256i nan = _mm256_castps_si256(_mm256_cmp_ps(v, v, _CMP_UNORD_Q));
    r = _mm256_blendv_epi8(r, _mm256_set1_epi32(0x7fc0), nan);
    __m128i packed = _mm_packus_epi32(_mm256_castsi256_si128(r), _mm256_extracti128_si256(r, 1));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(p), packed);
  }
  // Quantized weights: W int8, or W 4-bit fields (bits S..S+3 of W bytes), as fp32.
  static V load(const int8_t* p) { return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)))); }
  template <int S> static V load_u4(const uint8_t* p) {
    const __m256i b = _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)));
    return _mm256_cvtepi32_ps(_mm256_and_si256(_mm256_srli_epi32(b, S), _mm256_set1_epi32(15)));
  }
  // Both nibbles of W bytes: lo = bits 0-3, hi = bits 4-7.
  static void load_u4x2(const uint8_t* p, V& lo, V& hi) {
    const __m256i b = _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)));
    lo = _mm256_cvtepi32_ps(_mm256_and_si256(b, _mm256_set1_epi32(15)));
    hi = _mm256_cvtepi32_ps(_mm256_srli_epi32(b, 4));
  }
  // Lanes 0, 2, 4, ... and 1, 3, 5, ... of the 2W floats a, b (interleaved pairs, e.g. scale / zero).
  static void deinterleave(V a, V b, V& even, V& odd) {
    even = _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(_mm256_shuffle_ps(a, b, 0x88)), 0xD8));
    odd = _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(_mm256_shuffle_ps(a, b, 0xDD)), 0xD8));
  }
  static V add(V a, V b) { return _mm256_add_ps(a, b); }
  static V sub(V a, V b) { return _mm256_sub_ps(a, b); }
  static V mul(V a, V b) { return _mm256_mul_ps(a, b); }
  static V div(V a, V b) { return _mm256_div_ps(a, b); }
  static V fma(V a, V b, V c) { return _mm256_fmadd_ps(a, b, c); }  // a * b + c
  static V min(V a, V b) { return _mm256_min_ps(a, b); }
  static V max(V a, V b) { return _mm256_max_ps(a, b); }
  static V round(V a) { return _mm256_round_ps(a, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC); }
  static V pow2n(V n) {  // 2^n for integral n in [-126, 127], by building the exponent bits
    __m256i e = _mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127));
    return _mm256_castsi256_ps(_mm256_slli_epi32(e, 23));
  }
  static float reduce_add(V v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
  }
  static float reduce_max(V v) {
    __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    m = _mm_max_ps(m, _mm_movehl_ps(m, m));
    m = _mm_max_ss(m, _mm_movehdup_ps(m));
    return _mm_cvtss_f32(m);
  }
  // Bit i set where lane i of a == lane i of b (a NaN equals nothing, itself included).
  static uint32_t eq_mask(V a, V b) { return _mm256_movemask_ps(_mm256_cmp_ps(a, b, _CMP_EQ_OQ)); }
  static float to_float(fp16_t h) { return half_to_float(h); }
  static float to_float(bf16_t h) { return bf16_to_float(h); }
  static float to_float(float f) { return f; }
  static float to_float(int8_t i) { return i; }
  static fp16_t to_half(float f) { return float_to_half(f); }
  static void convert_transpose_8x8(const fp16_t* src, int64_t src_ld, float* dst, int64_t dst_ld) {
    TP_ISA::convert_transpose_8x8(src, src_ld, dst, dst_ld);
  }
};
