// The portable vocabulary: one float per "vector", plain C++ the compiler may auto-vectorise
// for the baseline ISA. Used only by isa_scalar.cpp, which is compiled without target flags and
// so may use c10's exact fp16 / bf16 conversions (isa_scalar.cpp includes their headers).
#pragma once

struct Scalar {
  using V = float;
  static constexpr int W = 1;
  // GEMM: 4x4 register tile (16 accumulators) and small blocks; this path is about portability.
  static constexpr GemmBlocking gemm{4, 4, 64, 256, 512};

  static V zero() { return 0.f; }
  static V set1(float x) { return x; }
  static V load(const float* p) { return *p; }
  static void store(float* p, V v) { *p = v; }
  static V load(const fp16_t* p) { return c10::detail::fp16_ieee_to_fp32_value(p->bits); }
  static void store(fp16_t* p, V v) { p->bits = c10::detail::fp16_ieee_from_fp32_value(v); }
  static V load(const bf16_t* p) {
    uint32_t u = uint32_t{p->bits} << 16;
    float f;
    std::memcpy(&f, &u, sizeof f);
    return f;
  }
  static void store(bf16_t* p, V v) { p->bits = c10::detail::round_to_nearest_even(v); }
  static V load(const int8_t* p) { return *p; }
  template <int S> static V load_u4(const uint8_t* p) { return static_cast<float>((*p >> S) & 15); }
  static void load_u4x2(const uint8_t* p, V& lo, V& hi) {
    lo = static_cast<float>(*p & 15);
    hi = static_cast<float>(*p >> 4);
  }
  static void deinterleave(V a, V b, V& even, V& odd) {
    even = a;
    odd = b;
  }
  static V add(V a, V b) { return a + b; }
  static V sub(V a, V b) { return a - b; }
  static V mul(V a, V b) { return a * b; }
  static V div(V a, V b) { return a / b; }
  static V fma(V a, V b, V c) { return a * b + c; }  // std::fma would be a library call without FMA
  static V min(V a, V b) { return a < b ? a : b; }
  static V max(V a, V b) { return a > b ? a : b; }
  static V round(V a) { return std::nearbyint(a); }
  static V pow2n(V n) {
    uint32_t u = static_cast<uint32_t>(static_cast<int32_t>(n) + 127) << 23;
    float f;
    std::memcpy(&f, &u, sizeof f);
    return f;
  }
  static float reduce_add(V v) { return v; }
  static float reduce_max(V v) { return v; }
  static uint32_t eq_mask(V a, V b) { return a == b; }
  static float to_float(fp16_t h) { return load(&h); }
  static float to_float(bf16_t h) { return load(&h); }
  static float to_float(float f) { return f; }
  static float to_float(int8_t i) { return i; }
  static fp16_t to_half(float f) { fp16_t h; store(&h, f); return h; }
  static void convert_transpose_8x8(const fp16_t* src, int64_t src_ld, float* dst, int64_t dst_ld) {
    for (int i = 0; i < 8; ++i)
      for (int j = 0; j < 8; ++j) dst[j * dst_ld + i] = to_float(src[i * src_ld + j]);
  }
};
