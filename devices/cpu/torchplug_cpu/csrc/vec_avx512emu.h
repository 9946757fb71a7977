// The AVX-512 path's shape on AVX2 instructions: 16-float vectors made of two ymm halves, and
// the AVX-512 tiling (kAvx512Gemm). Every 16-lane loop, tail and 12x32 tile of the shared
// templates then runs, and is tested, on CPUs without AVX-512; only vec_avx512.h's intrinsics
// themselves need such a CPU. Used only by isa_avx512emu.cpp, after vec_avx2.h.
#pragma once

struct Avx512Emu {
  struct V {
    Avx2::V lo, hi;
  };
  static constexpr int W = 16;
  static constexpr GemmBlocking gemm = kAvx512Gemm;

  static V both(Avx2::V (*op)(Avx2::V, Avx2::V), V a, V b) { return {op(a.lo, b.lo), op(a.hi, b.hi)}; }

  static V zero() { return {Avx2::zero(), Avx2::zero()}; }
  static V set1(float x) { return {Avx2::set1(x), Avx2::set1(x)}; }
  template <class T>
  static V load(const T* p) { return {Avx2::load(p), Avx2::load(p + 8)}; }
  template <class T>
  static void store(T* p, V v) {
    Avx2::store(p, v.lo);
    Avx2::store(p + 8, v.hi);
  }
  template <int S> static V load_u4(const uint8_t* p) { return {Avx2::load_u4<S>(p), Avx2::load_u4<S>(p + 8)}; }
  static void load_u4x2(const uint8_t* p, V& lo, V& hi) {
    Avx2::load_u4x2(p, lo.lo, hi.lo);
    Avx2::load_u4x2(p + 8, lo.hi, hi.hi);
  }
  static void deinterleave(V a, V b, V& even, V& odd) {
    Avx2::deinterleave(a.lo, a.hi, even.lo, odd.lo);
    Avx2::deinterleave(b.lo, b.hi, even.hi, odd.hi);
  }
  static V add(V a, V b) { return both(&Avx2::add, a, b); }
  static V sub(V a, V b) { return both(&Avx2::sub, a, b); }
  static V mul(V a, V b) { return both(&Avx2::mul, a, b); }
  static V div(V a, V b) { return both(&Avx2::div, a, b); }
  static V fma(V a, V b, V c) { return {Avx2::fma(a.lo, b.lo, c.lo), Avx2::fma(a.hi, b.hi, c.hi)}; }
  static V min(V a, V b) { return both(&Avx2::min, a, b); }
  static V max(V a, V b) { return both(&Avx2::max, a, b); }
  static V round(V a) { return {Avx2::round(a.lo), Avx2::round(a.hi)}; }
  static V pow2n(V n) { return {Avx2::pow2n(n.lo), Avx2::pow2n(n.hi)}; }
  static float reduce_add(V v) { return Avx2::reduce_add(Avx2::add(v.lo, v.hi)); }
  static float reduce_max(V v) { return Avx2::reduce_max(Avx2::max(v.lo, v.hi)); }
  static uint32_t eq_mask(V a, V b) { return Avx2::eq_mask(a.lo, b.lo) | Avx2::eq_mask(a.hi, b.hi) << 8; }
  static float to_float(fp16_t h) { return half_to_float(h); }
  static float to_float(bf16_t h) { return bf16_to_float(h); }
  static float to_float(float f) { return f; }
  static float to_float(int8_t i) { return i; }
  static fp16_t to_half(float f) { return float_to_half(f); }
  static void convert_transpose_8x8(const fp16_t* src, int64_t src_ld, float* dst, int64_t dst_ld) {
    TP_ISA::convert_transpose_8x8(src, src_ld, dst, dst_ld);
  }
};
