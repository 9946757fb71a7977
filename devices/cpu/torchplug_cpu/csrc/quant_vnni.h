// int4 decode rows with int8 activations on AVX512-VNNI (vpdpbusd): the dot products and the
// rounding of quant_int8_activations.h's contract. The float path is bound by converting nibbles to
// floats (6 port-5 micro-ops per 64 weights on AVX-512); here 256 weights cost four byte permutes,
// two ands and four vpdpbusd.
//  - torch's AVX-512 layout has a block's 64 columns along a 32-byte k row (byte b: column b low,
//    b + 32 high); vpdpbusd sums 4 bytes of one lane, so two vpermb per 16 lanes gather byte b
//    of 4 consecutive k rows into lane b, and the 4 x bytes of those rows are broadcast as the
//    signed operand. The low nibbles (an and) give column b's products; the whole bytes, lo + 16 hi
//    (unsigned, at most 255), give lo's plus 16 times column b + 32's, which (whole - lo) / 16
//    recovers exactly once per block of 32 k (a lane holds at most 8 * 4 * 255 * 127): no shift per
//    step. Vector shifts and vpdpbusd share one port on Intel; this cut the step from 6 to 4 of them.
// Only the AVX-512 layout (blocks of 64) runs here.
// Included inside namespace torchplug_cpu::avx512vnni (isa_avx512vnni.cpp), after
// quant_int8_activations.h.
#pragma once

// _mm512_dpbusd_epi32 and _mm512_dpwssd_epi32 as one instruction on acc's register. On arrays of
// accumulators GCC 12 compiles the intrinsics to a copy of each accumulator to a spare register and
// back per instruction, some through the stack; these loops then have none. (So does a prefetch
// level fixed at compile time: a run-time test in a loop splits its body, with the same copies.)
inline __m512i dpbusd(__m512i acc, __m512i u8, __m512i s8) {
  asm("vpdpbusd %2, %1, %0" : "+v"(acc) : "v"(u8), "v"(s8));
  return acc;
}
inline __m512i dpwssd(__m512i acc, __m512i a, __m512i b) {
  asm("vpdpwssd %2, %1, %0" : "+v"(acc) : "v"(a), "v"(b));
  return acc;
}

template <class I>
struct VnniDots {
  using V = typename I::V;
  static constexpr int kRows = 4;
  static constexpr bool kBlock32 = false;

  static bool quantize_block(const float* x, int8_t* out, float* d, int32_t* sum) {
    const V v0 = I::load(x), v1 = I::load(x + 16);
    const float amax = _mm512_reduce_max_ps(_mm512_max_ps(_mm512_abs_ps(v0), _mm512_abs_ps(v1)));
    if (!(amax <= 3.4028235e38f) || _mm512_cmp_ps_mask(v0, v1, _CMP_UNORD_Q)) return false;  // vmaxps drops NaNs
    const float scale = amax / 127.f, inv = scale != 0.f ? 1.f / scale : 0.f;
    const __m512i q0 = _mm512_cvtps_epi32(I::mul(v0, I::set1(inv)));  // MXCSR's rounding: nearest even
    const __m512i q1 = _mm512_cvtps_epi32(I::mul(v1, I::set1(inv)));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out), _mm512_cvtsepi32_epi8(q0));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + 16), _mm512_cvtsepi32_epi8(q1));
    *d = scale;
    *sum = _mm512_reduce_add_epi32(_mm512_add_epi32(q0, q1));
    return true;
  }

  template <int BW, int Rn, int S>
  static void group_dots(const QuantProblem& p, const uint8_t* const* blk, int64_t b0, int64_t b1, const int8_t* xq,
                         const float* d, float* part) {
    static_assert(BW == 64, "torch's AVX-512 layout only");
    if (Gemv<I>::prefetch_to_l2()) group_dots_to<Rn, S, true>(p, blk, b0, b1, xq, d, part);
    else group_dots_to<Rn, S, false>(p, blk, b0, b1, xq, d, part);
  }

 private:
  // group_dots, prefetching into L2 or L1. Not inlined: in block_rows, GCC keeps `part` in
  // registers across blocks, and the accumulators then go to the stack.
  template <int Rn, int S, bool ToL2>
  __attribute__((noinline)) static void group_dots_to(const QuantProblem& p, const uint8_t* const* blk, int64_t b0,
                                                      int64_t b1, const int8_t* xq, const float* d, float* part) {
    static_assert(Rn * S <= kRows, "the accumulators fill the registers");
    constexpr int BW = 64;
    constexpr int64_t HB = 32, kBlock = 32;  // bytes per k row, k per activation scale
    const int64_t blocks = p.k / kBlock, ahead = Gemv<I>::prefetch_bytes();  // bytes
    // Lane j of the first gather: byte j of rows 0..3. Rows 0 and 1 are bytes j and 32 + j of r01,
    // rows 2 and 3 the same bytes of r23, so one index serves both: a vpermb of r01, then one of r23
    // merged into bytes 2 and 3 of each lane (two one-micro-op vpermb: a vpermt2b is three). The
    // second gather: byte 16 + j.
    const __m512i gather0 = _mm512_set_epi8(
        47, 15, 47, 15, 46, 14, 46, 14, 45, 13, 45, 13, 44, 12, 44, 12, 43, 11, 43, 11, 42, 10, 42, 10,
        41, 9, 41, 9, 40, 8, 40, 8, 39, 7, 39, 7, 38, 6, 38, 6, 37, 5, 37, 5, 36, 4, 36, 4,
        35, 3, 35, 3, 34, 2, 34, 2, 33, 1, 33, 1, 32, 0, 32, 0);
    const __m512i gather1 = _mm512_add_epi8(gather0, _mm512_set1_epi8(16));
    constexpr __mmask64 kRows23 = 0xCCCCCCCCCCCCCCCCull;
    const __m512i low4 = _mm512_set1_epi8(15);
    std::memset(part, 0, S * Rn * BW * sizeof(float));  // the fp32 sums, added to once per 32 k
    for (int64_t b = b0; b < b1; ++b) {
      __m512i acc[S][Rn][4];
      for (int s = 0; s < S; ++s)
        for (int r = 0; r < Rn; ++r)
          for (int v = 0; v < 4; ++v) acc[s][r][v] = _mm512_setzero_si512();
      for (int64_t kk = b * kBlock; kk < (b + 1) * kBlock; kk += 4) {
        for (int s = 0; s < S; ++s) {
          const uint8_t* rows = blk[s] + kk * HB;
          // Each stream prefetched as far ahead as the float path's (128 bytes here: two lines).
          Gemv<I>::template prefetch<ToL2>(rows + ahead);
          Gemv<I>::template prefetch<ToL2>(rows + ahead + 64);
          const __m512i r01 = _mm512_loadu_si512(rows), r23 = _mm512_loadu_si512(rows + 64);
          const __m512i t0 = _mm512_mask_permutexvar_epi8(_mm512_permutexvar_epi8(gather0, r01), kRows23, gather0, r23);
          const __m512i t1 = _mm512_mask_permutexvar_epi8(_mm512_permutexvar_epi8(gather1, r01), kRows23, gather1, r23);
          const __m512i q[4] = {_mm512_and_si512(t0, low4), _mm512_and_si512(t1, low4), t0, t1};  // lo, lo, whole, whole
          for (int r = 0; r < Rn; ++r) {
            int32_t x4;
            std::memcpy(&x4, xq + r * p.k + kk, 4);
            const __m512i xb = _mm512_set1_epi32(x4);
            for (int v = 0; v < 4; ++v) acc[s][r][v] = dpbusd(acc[s][r][v], q[v], xb);
          }
        }
      }
      for (int r = 0; r < Rn; ++r) {
        const V dv = I::set1(d[r * blocks + b]);
        for (int s = 0; s < S; ++s) {
          for (int v = 2; v < 4; ++v) acc[s][r][v] = _mm512_srai_epi32(_mm512_sub_epi32(acc[s][r][v], acc[s][r][v - 2]), 4);  // hi
          float* sums = part + (s * Rn + r) * BW;
          for (int v = 0; v < 4; ++v) I::store(sums + v * 16, I::fma(_mm512_cvtepi32_ps(acc[s][r][v]), dv, I::load(sums + v * 16)));
        }
      }
    }
  }
};

template <class I> using QuantVnni = Int8Activations<I, VnniDots<I>>;

// int8 decode rows with int16 activations (quant_int16_activations.h): vpdpwssd multiplies 32 int16
// pairs into 16 int32 lanes. Per 32 weights: one vpmovsxbw, then one vpdpwssd per row; its 4-cycle
// latency takes 4 accumulators for one row (2 per row for more).
template <class I>
struct VnniInt16Dots {
  using Acc = __m512i;
  static constexpr int64_t kK = 32;
  static constexpr int kChains = 4;
  static Acc zero() { return _mm512_setzero_si512(); }
  static Acc add(Acc a, Acc b) { return _mm512_add_epi32(a, b); }
  static __m512i widen(const int8_t* w) { return _mm512_cvtepi8_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(w))); }
  static Acc dot(Acc acc, __m512i w, const int16_t* x) { return dpwssd(acc, w, _mm512_loadu_si512(x)); }
  static typename I::V to_float(Acc a) { return _mm512_cvtepi32_ps(a); }
  static void to_int16(typename I::V v, int16_t* out) {
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out), _mm512_cvtsepi32_epi16(_mm512_cvtps_epi32(v)));
  }
};

template <class I> using Int8Vnni = Int16Activations<I, VnniInt16Dots<I>>;

// int4 prefill (more than 16 rows) with int16 activations on AVX512-VNNI, in torch's AVX-512
// layout: x rounded as for int8 weights (quant_int16_activations.h: int16 per block of 256 along
// k), each block of 64 columns unpacked once per 64 rows into int16 pairs along k (the nibbles of
// rows k and k + 1 of a column in one 32-bit lane), and 4 rows at a time multiplied into int32
// sums by vpdpwssd (32 products an instruction, where the fp32 GEMM's FMA does 16). A group lies
// in one block of 256 (groups are 32 to 256), so per group: scale * d * sum(xq q) + (zero - 8 scale)
// * sum(x_hat), in fp32. 4 rows holding an infinity or NaN, and a narrower last block, run the
// float path (quant_kernel.h, int4_gemv).
template <class I>
struct VnniInt4Prefill : Quant<I> {
  using Q = Quant<I>;
  using V = typename I::V;
  using Rounding = Int16Activations<I, VnniInt16Dots<I>>;
  static constexpr int64_t kBlock = 64;  // columns of a block of torch's AVX-512 layout

  // The block's k rows (32 bytes: column c's nibble low in byte c, column 32 + c's high) as pairs:
  // packed[(kk / 2) * 64 + c] = q(kk, c) | q(kk + 1, c) << 16.
  static void unpack(const uint8_t* blk, int64_t k, uint32_t* packed) {
    const __m512i low4 = _mm512_set1_epi8(15);
    for (int64_t kk = 0; kk < k; kk += 2) {
      const __m512i rows = _mm512_loadu_si512(blk + kk * 32);  // rows kk and kk + 1
      const __m512i half[2] = {_mm512_and_si512(rows, low4), _mm512_and_si512(_mm512_srli_epi16(rows, 4), low4)};
      uint32_t* out = packed + kk / 2 * kBlock;
      for (int v = 0; v < 4; ++v) {  // columns 16v..16v+15: bytes 16 (v % 2) of half v / 2, row kk then kk + 1
        const __m512i& h = half[v / 2];
        const __m512i a = _mm512_cvtepu8_epi32(_mm512_extracti32x4_epi32(h, 0 + v % 2));
        const __m512i b = _mm512_cvtepu8_epi32(_mm512_extracti32x4_epi32(h, 2 + v % 2));
        _mm512_storeu_si512(out + 16 * v, _mm512_or_si512(a, _mm512_slli_epi32(b, 16)));
      }
    }
  }

  // Rows [0, Rn) (xq k apart, d per 256, xs per group) against the unpacked block: out[r * 64 + c].
  template <int Rn>
  static void tile(const QuantProblem& p, const uint32_t* packed, const int16_t* xq, const float* d, const float* xs,
                   int64_t groups, const float* scale, const float* zero, float* out) {
    const int64_t nb = Rounding::blocks(p);
    V tot[Rn][4];
    for (int r = 0; r < Rn; ++r)
      for (int v = 0; v < 4; ++v) tot[r][v] = I::zero();
    for (int64_t g = 0; g < groups; ++g) {
      const int64_t k0 = g * p.group, k1 = std::min(p.k, k0 + p.group);
      __m512i acc[Rn][4];
      for (int r = 0; r < Rn; ++r)
        for (int v = 0; v < 4; ++v) acc[r][v] = _mm512_setzero_si512();
      for (int64_t kk = k0; kk < k1; kk += 2) {
        const uint32_t* b = packed + kk / 2 * kBlock;
        const __m512i q[4] = {_mm512_loadu_si512(b), _mm512_loadu_si512(b + 16), _mm512_loadu_si512(b + 32),
                              _mm512_loadu_si512(b + 48)};
        for (int r = 0; r < Rn; ++r) {
          int32_t x2;
          std::memcpy(&x2, xq + r * p.k + kk, 4);
          const __m512i xb = _mm512_set1_epi32(x2);
          for (int v = 0; v < 4; ++v) acc[r][v] = dpwssd(acc[r][v], q[v], xb);
        }
      }
      for (int r = 0; r < Rn; ++r) {
        const V dr = I::set1(d[r * nb + k0 / Rounding::kBlock]), sum_x = I::set1(xs[r * groups + g]);
        for (int v = 0; v < 4; ++v)
          tot[r][v] = I::fma(I::mul(I::load(scale + g * kBlock + 16 * v), dr), _mm512_cvtepi32_ps(acc[r][v]),
                             I::fma(I::load(zero + g * kBlock + 16 * v), sum_x, tot[r][v]));
      }
    }
    for (int r = 0; r < Rn; ++r)
      for (int v = 0; v < 4; ++v) I::store(out + r * kBlock + 16 * v, tot[r][v]);
  }

  // Tasks [begin, end) are blocks of 64 columns (p.nc = 64); p.mc rows are rounded at a time. Scratch:
  // quant_scratch() (isa.h: the float path's skinny scratch for mc rows, then the layout below).
  template <class T> static void run(const QuantProblem& p, int64_t begin, int64_t end, float* scratch) {
    const int64_t groups = (p.k + p.group - 1) / p.group, nb = Rounding::blocks(p);
    QuantProblem rows_of_float = p;
    rows_of_float.m = p.mc;
    float* a32 = scratch + quant_skinny_scratch(rows_of_float);  // the float path's scratch comes first
    float* d = a32 + Q::up(4 * p.k, 16);
    float* xs = d + Q::up(p.mc * nb, 16);
    float* scale = xs + Q::up(p.mc * groups, 16);
    float* zero = scale + groups * kBlock;
    uint32_t* packed = reinterpret_cast<uint32_t*>(zero + groups * kBlock);
    int16_t* xq = reinterpret_cast<int16_t*>(packed + p.k / 2 * kBlock);
    for (int64_t r0 = 0; r0 < p.m; r0 += p.mc) {
      const int64_t rows = std::min(p.mc, p.m - r0);
      const uint64_t unrounded = Rounding::template round_fours<T>(p, r0, rows, a32, xq, d);
      for (int64_t r = 0; r < rows; ++r) {  // the rounded rows' sums of x_hat per group
        if (unrounded >> (r / 4) & 1) continue;
        for (int64_t g = 0; g < groups; ++g) {
          const int64_t k0 = g * p.group, k1 = std::min(p.k, k0 + p.group);
          int64_t sum = 0;
          for (int64_t kk = k0; kk < k1; ++kk) sum += xq[r * p.k + kk];
          xs[r * groups + g] = d[r * nb + k0 / Rounding::kBlock] * static_cast<float>(sum);
        }
      }
      for (int64_t c = begin; c < end; ++c) {
        int64_t c0, bw;
        const uint8_t* blk = Q::block_of(p, c * kBlock, &c0, &bw);
        const bool narrow = bw < kBlock;
        if (!narrow) {
          unpack(blk, p.k, packed);
          for (int64_t g = 0; g < groups; ++g) Q::template group_scales_vec<T>(p, g, c0, kBlock, scale + g * kBlock, zero + g * kBlock);
        }
        alignas(64) float tot[4 * kBlock];
        for (int64_t i = 0; i * 4 < rows; ++i) {
          const QuantProblem f = Q::template rows_of<T>(p, r0 + 4 * i, std::min<int64_t>(4, rows - 4 * i));
          if (narrow || (unrounded >> i & 1)) {
            Q::template int4_gemv<T>(f, c, c + 1, scratch);
            continue;
          }
          const int16_t* q = xq + 4 * i * p.k;
          const float* di = d + 4 * i * nb;
          const float* xi = xs + 4 * i * groups;
          switch (f.m) {
            case 4: tile<4>(p, packed, q, di, xi, groups, scale, zero, tot); break;
            case 3: tile<3>(p, packed, q, di, xi, groups, scale, zero, tot); break;
            case 2: tile<2>(p, packed, q, di, xi, groups, scale, zero, tot); break;
            default: tile<1>(p, packed, q, di, xi, groups, scale, zero, tot); break;
          }
          for (int64_t r = 0; r < f.m; ++r)
            Q::template write_row<T>(tot + r * kBlock, nullptr, kBlock, static_cast<T*>(f.out) + r * p.out_rs + c0);
        }
      }
    }
  }
};

// The int4 prefill kernels per dtype (isa.h): null for fp32 activations.
template <class I>
const IsaKernels::QuantTasks* int4_prefill_kernels() {
  static constexpr IsaKernels::QuantTasks kKernels[kNumDtypes] = {
      nullptr, &VnniInt4Prefill<I>::template run<bf16_t>, &VnniInt4Prefill<I>::template run<fp16_t>};
  return kKernels;
}
