// The AVX-512F vocabulary: 16 floats per vector. Used only by isa_avx512.cpp.
#pragma once
#include "vec_x86_common.h"

struct Avx512 {
  using V = __m512;
  static constexpr int W = 16;
  static constexpr GemmBlocking gemm = kAvx512Gemm;

  static V zero() { return _mm512_setzero_ps(); }
  static V set1(float x) { return _mm512_set1_ps(x); }
  static V load(const float* p) { return _mm512_loadu_ps(p); }
  static void store(float* p, V v) { _mm512_storeu_ps(p, v); }
  static V load(const fp16_t* p) { return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p))); }
  static void store(fp16_t* p, V v) {
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), _mm512_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
  }
  static V load(const bf16_t* p) {
    __m512i wide = _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
    return _mm512_castsi512_ps(_mm512_slli_epi32(wide, 16));
  }
  static void store(bf16_t* p, V v) {  // round to nearest even; NaN stays a quiet NaN
    __m512i u = _mm512_castps_si512(v);
    __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
    __m512i r = _mm512_srli_epi32(_mm512_add_epi32(_mm512_add_epi32(u, _mm512_set1_epi32(0x7fff)), lsb), 16);
    r = _mm512_mask_mov_epi32(r, _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q), _mm512_set1_epi32(0x7fc0));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), _mm512_cvtepi32_epi16(r));
  }
  // Quantized weights: W int8, or W 4-bit fields (bits S..S+3 of W bytes), as fp32.
  static V load(const int8_t* p) { return _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)))); }
  // vpermps reads the low 4 bits of each index: a table of 0..15 converts a nibble in one step.
  static V nibbles(__m512i b) { return _mm512_permutexvar_ps(b, _mm512_setr_ps(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15)); }
  template <int S> static V load_u4(const uint8_t* p) {
    return nibbles(_mm512_srli_epi32(_mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))), S));
  }
  // Both nibbles of W bytes: lo = bits 0-3, hi = bits 4-7.
  static void load_u4x2(const uint8_t* p, V& lo, V& hi) {
    const __m512i b = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
    lo = nibbles(b);
    hi = nibbles(_mm512_srli_epi32(b, 4));
  }
  // Lanes 0, 2, 4, ... and 1, 3, 5, ... of the 2W floats a, b (interleaved pairs, e.g. scale / zero).
  static void deinterleave(V a, V b, V& even, V& odd) {
    even = _mm512_permutex2var_ps(a, _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30), b);
    odd = _mm512_permutex2var_ps(a, _mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31), b);
  }
  static V add(V a, V b) { return _mm512_add_ps(a, b); }
  static V sub(V a, V b) { return _mm512_sub_ps(a, b); }
  static V mul(V a, V b) { return _mm512_mul_ps(a, b); }
  static V div(V a, V b) { return _mm512_div_ps(a, b); }
  static V fma(V a, V b, V c) { return _mm512_fmadd_ps(a, b, c); }  // a * b + c
  static V min(V a, V b) { return _mm512_min_ps(a, b); }
  static V max(V a, V b) { return _mm512_max_ps(a, b); }
  static V round(V a) { return _mm512_roundscale_ps(a, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC); }
  static V pow2n(V n) {  // 2^n for integral n in [-126, 127], by building the exponent bits
    __m512i e = _mm512_add_epi32(_mm512_cvtps_epi32(n), _mm512_set1_epi32(127));
    return _mm512_castsi512_ps(_mm512_slli_epi32(e, 23));
  }
  static float reduce_add(V v) { return _mm512_reduce_add_ps(v); }
  static float reduce_max(V v) { return _mm512_reduce_max_ps(v); }
  static uint32_t eq_mask(V a, V b) { return _mm512_cmp_ps_mask(a, b, _CMP_EQ_OQ); }
  static float to_float(fp16_t h) { return half_to_float(h); }
  static float to_float(bf16_t h) { return bf16_to_float(h); }
  static float to_float(float f) { return f; }
  static float to_float(int8_t i) { return i; }
  static fp16_t to_half(float f) { return float_to_half(f); }
  static void convert_transpose_8x8(const fp16_t* src, int64_t src_ld, float* dst, int64_t dst_ld) {
    TP_ISA::convert_transpose_8x8(src, src_ld, dst, dst_ld);
  }
};
