// Skinny products, m <= kMaxRows (decode-time F.linear, matrix-vector products; n <= kMaxRows
// arrives here transposed), and m up to gemm.cpp's kSkinnyDotRows when B is contiguous along k
// (F.linear's weight for a few tokens: small batches, speculative decoding). Each element of B is
// used only m times, so packing it would cost as much as the arithmetic: B is read once, as it
// lies, converted in registers and multiplied into fp32 sums for all m rows at once. Two layouts are vectorised: B contiguous along k (F.linear's
// weight: dot products) and B contiguous along n (row updates); other strides take a scalar loop.
// Included inside namespace torchplug_cpu::TP_ISA (see isa_table.h), after gemm_kernel.h.
#pragma once

constexpr int64_t kMaxRows = 4;  // keep in step with kSkinnyRows in gemm.cpp
constexpr int64_t kHalvesPerLine = 32;  // fp16 elements in a 64-byte cache line

template <class I>
struct Gemv {
  using V = typename I::V;
  static constexpr int64_t W = I::W, KC = I::gemm.kc;
  static int64_t min(int64_t a, int64_t b) { return a < b ? a : b; }

  // sums[r * ld + q] = a[r] . b[:, q] for R rows of a (k floats each, `k` apart) and Q columns
  // of b (`cs` apart, contiguous along k, each read start to end: a stream the prefetcher
  // follows). Each KC slice is summed in its own registers, then added to the total: the same
  // two-level sum as the GEMM.
  template <int R, int Q>
  static void dot_block(const float* a, const fp16_t* b, int64_t cs, int64_t k, float* sums, int64_t ld) {
    V total[R][Q], part[R][Q];
    for (int r = 0; r < R; ++r)
      for (int q = 0; q < Q; ++q) total[r][q] = I::zero();
    int64_t kk = 0;
    const int64_t k_vec = k - k % W;
    while (kk < k_vec) {
      const int64_t slice_end = min(kk + KC, k_vec);
      for (int r = 0; r < R; ++r)
        for (int q = 0; q < Q; ++q) part[r][q] = I::zero();
      for (; kk < slice_end; kk += W) {
        // Once per 64-byte line, the next Q columns' same offset: a large weight streams from
        // memory, and its lines are on their way before the block reaches them (a prefetch past
        // B's end is harmless).
        if (kk % kHalvesPerLine == 0)
          for (int q = 0; q < Q; ++q) __builtin_prefetch(b + (q + 2 * Q) * cs + kk, 0, 0);
        V bv[Q];
        for (int q = 0; q < Q; ++q) bv[q] = I::load(b + q * cs + kk);
        for (int r = 0; r < R; ++r) {
          const V av = I::load(a + r * k + kk);
          for (int q = 0; q < Q; ++q) part[r][q] = I::fma(av, bv[q], part[r][q]);
        }
      }
      for (int r = 0; r < R; ++r)
        for (int q = 0; q < Q; ++q) total[r][q] = I::add(total[r][q], part[r][q]);
    }
    for (int r = 0; r < R; ++r)
      for (int q = 0; q < Q; ++q) {
        float s = I::reduce_add(total[r][q]);
        for (int64_t t = k_vec; t < k; ++t) s += a[r * k + t] * I::to_float(b[q * cs + t]);
        sums[r * ld + q] = s;
      }
  }

  template <int R>
  static void dots(const float* a, const fp16_t* b, int64_t cs, int64_t k, int64_t n, float* sums, int64_t ld) {
    // R x Q accumulators fit the registers with room for loads; one row streams 8 columns: more
    // loads in flight for a product bound by memory (on AVX2's 16 registers the 8 slice totals,
    // touched once per KC slice, are the ones the compiler keeps on the stack).
    constexpr int Q = R == 1 ? 8 : R <= 2 ? 4 : 2;
    int64_t j = 0;
    for (; j + Q <= n; j += Q) dot_block<R, Q>(a, b + j * cs, cs, k, sums + j, ld);
    for (; j < n; ++j) dot_block<R, 1>(a, b + j * cs, cs, k, sums + j, ld);
  }

  // dots() for 5 or more rows (gemm.cpp sends up to kSkinnyDotRows): two columns at a time, each pair taken by every group of 4
  // rows while it is in L1, so B still streams from memory once.
  static void dots_many(const float* a, const fp16_t* b, int64_t cs, int64_t k, int64_t n, int64_t m, float* sums,
                        int64_t ld) {
    auto rows = [&](auto q_const, int64_t j) {
      constexpr int Q = decltype(q_const)::value;
      int64_t r = 0;
      for (; r + 4 <= m; r += 4) dot_block<4, Q>(a + r * k, b + j * cs, cs, k, sums + r * ld + j, ld);
      switch (m - r) {
        case 3: dot_block<3, Q>(a + r * k, b + j * cs, cs, k, sums + r * ld + j, ld); break;
        case 2: dot_block<2, Q>(a + r * k, b + j * cs, cs, k, sums + r * ld + j, ld); break;
        case 1: dot_block<1, Q>(a + r * k, b + j * cs, cs, k, sums + r * ld + j, ld); break;
        default: break;
      }
    };
    int64_t j = 0;
    for (; j + 2 <= n; j += 2) rows(std::integral_constant<int, 2>{}, j);
    for (; j < n; ++j) rows(std::integral_constant<int, 1>{}, j);
  }

  // sums[r * ld + j] += sum_k a[r][k] * b[k, j]: rows of b (`rs` apart, contiguous along n) read
  // in order, each loaded once for all R rows of a; the sums stay in L1.
  template <int R>
  static void row_updates(const float* a, int64_t a_ld, const fp16_t* b, int64_t rs, int64_t k, int64_t n,
                          float* sums, int64_t ld) {
    for (int64_t kk = 0; kk < k; ++kk) {
      const fp16_t* row = b + kk * rs;
      V av[R];
      for (int r = 0; r < R; ++r) av[r] = I::set1(a[r * a_ld + kk]);
      int64_t j = 0;
      for (; j + W <= n; j += W) {
        const V bv = I::load(row + j);
        for (int r = 0; r < R; ++r) I::store(sums + r * ld + j, I::fma(av[r], bv, I::load(sums + r * ld + j)));
      }
      for (; j < n; ++j) {
        const float bj = I::to_float(row[j]);
        for (int r = 0; r < R; ++r) sums[r * ld + j] += a[r * a_ld + kk] * bj;
      }
    }
  }

  // The m rows of one (batch, n-block) task; a32 holds them in fp32, m x k.
  template <int R>
  static void block(const GemmProblem& p, const float* a32, const fp16_t* b, int64_t nc, float* total, float* slice,
                    int64_t ld) {
    if (p.b_rs == 1) return dots<R>(a32, b, p.b_cs, p.k, nc, total, ld);
    // Slices of KC summed separately, then added: a two-level sum, as in the GEMM.
    std::memset(total, 0, R * ld * sizeof(float));
    for (int64_t k0 = 0; k0 < p.k; k0 += KC) {
      const int64_t kc = min(KC, p.k - k0);
      const fp16_t* bk = b + k0 * p.b_rs;
      std::memset(slice, 0, R * ld * sizeof(float));
      if (p.b_cs == 1) {
        row_updates<R>(a32 + k0, p.k, bk, p.b_rs, kc, nc, slice, ld);
      } else {
        for (int r = 0; r < R; ++r)
          for (int64_t j = 0; j < nc; ++j)
            for (int64_t kk = 0; kk < kc; ++kk)
              slice[r * ld + j] += a32[r * p.k + k0 + kk] * I::to_float(bk[kk * p.b_rs + j * p.b_cs]);
      }
      for (int64_t i = 0; i < R * ld; ++i) total[i] += slice[i];
    }
  }

  // Tasks [begin, end) over (batch, n-block); scratch: A's m rows in fp32 (tiling.packed_a
  // floats), then the fp32 sums of the block and of its current k slice (tiling.accumulator).
  static void tasks(const GemmProblem& p, const GemmTiling& t, int64_t begin, int64_t end, float* scratch) {
    float* a32 = scratch;
    float* total = a32 + t.packed_a;
    float* slice = total + t.accumulator / 2;
    const int64_t ld = t.nc;
    for (int64_t task = begin; task < end; ++task) {
      const int64_t nb = task % t.n_blocks, bt = task / t.n_blocks;
      const int64_t n0 = nb * t.nc, nc = min(t.nc, p.n - n0);
      Gemm<I>::pack(p.a + bt * p.a_bs, p.a_rs, p.a_cs, p.m, p.k, a32, p.k, p.m, p.k);
      const fp16_t* b = p.b + bt * p.b_bs + n0 * p.b_cs;
      switch (p.m) {
        case 1: block<1>(p, a32, b, nc, total, slice, ld); break;
        case 2: block<2>(p, a32, b, nc, total, slice, ld); break;
        case 3: block<3>(p, a32, b, nc, total, slice, ld); break;
        case 4: block<4>(p, a32, b, nc, total, slice, ld); break;
        default: dots_many(a32, b, p.b_cs, p.k, nc, p.m, total, ld); break;  // 5..kSkinnyDotRows, b_rs == 1
      }
      static_assert(kMaxRows == 4, "one case per row count");
      for (int64_t r = 0; r < p.m; ++r) {
        const fp16_t* cin = p.beta != 0.f ? p.cin + bt * p.cin_bs + r * p.cin_rs + n0 * p.cin_cs : nullptr;
        Gemm<I>::write_row(total + r * ld, nc, p, cin, p.c + bt * p.c_bs + r * p.c_rs + n0 * p.c_cs);
      }
    }
  }
};
