// x86 pieces shared by the AVX2 and AVX-512 vocabularies (both TUs enable AVX2, FMA and F16C).
// Included inside namespace torchplug_cpu::TP_ISA, so each ISA gets its own copy.
#pragma once

// fp16 -> fp32 of an 8x8 block, transposed: dst[j * dst_ld + i] = src[i * src_ld + j].
// Packing uses it when the matrix is contiguous along the other dimension (e.g. F.linear's
// weight, B = W.t()), so the panels are still built with vector loads and stores.
static inline void convert_transpose_8x8(const fp16_t* src, int64_t src_ld, float* dst, int64_t dst_ld) {
  __m256 r[8], t[8];
  for (int i = 0; i < 8; ++i) r[i] = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i * src_ld)));
  for (int i = 0; i < 8; i += 2) {
    t[i] = _mm256_unpacklo_ps(r[i], r[i + 1]);
    t[i + 1] = _mm256_unpackhi_ps(r[i], r[i + 1]);
  }
  for (int i = 0; i < 8; i += 4) {
    r[i] = _mm256_shuffle_ps(t[i], t[i + 2], 0x44);
    r[i + 1] = _mm256_shuffle_ps(t[i], t[i + 2], 0xEE);
    r[i + 2] = _mm256_shuffle_ps(t[i + 1], t[i + 3], 0x44);
    r[i + 3] = _mm256_shuffle_ps(t[i + 1], t[i + 3], 0xEE);
  }
  for (int i = 0; i < 4; ++i) {
    _mm256_storeu_ps(dst + i * dst_ld, _mm256_permute2f128_ps(r[i], r[i + 4], 0x20));
    _mm256_storeu_ps(dst + (i + 4) * dst_ld, _mm256_permute2f128_ps(r[i], r[i + 4], 0x31));
  }
}

static inline float half_to_float(fp16_t h) { return _cvtsh_ss(h.bits); }
static inline float bf16_to_float(bf16_t h) {
  const uint32_t u = uint32_t{h.bits} << 16;
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}
static inline fp16_t float_to_half(float f) { return fp16_t{static_cast<uint16_t>(_cvtss_sh(f, _MM_FROUND_TO_NEAREST_INT))}; }
