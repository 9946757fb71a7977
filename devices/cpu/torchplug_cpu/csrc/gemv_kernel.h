// Skinny products, m <= kMaxRows (decode-time F.linear, matrix-vector products; n <= kMaxRows
// arrives here transposed), and m up to gemm.cpp's kSkinnyDotRows when B is contiguous along k
// (F.linear's weight for a few tokens: small batches, speculative decoding). Each element of B is
// used only m times, so packing it would cost as much as the arithmetic: B is read once, as it
// lies, converted in registers and multiplied into fp32 sums for all m rows at once. Two layouts
// are vectorised: B contiguous along k (F.linear's weight: dot products) and B contiguous along n
// (row updates); other strides take a scalar loop.
// Included inside namespace torchplug_cpu::TP_ISA (see isa_table.h), after gemm_kernel.h.
#pragma once

constexpr int64_t kMaxRows = 4;  // keep in step with kSkinnyRows in gemm.cpp

template <class I>
struct Gemv {
  using V = typename I::V;
  static constexpr int64_t W = I::W, KC = I::gemm.kc;
  static int64_t min(int64_t a, int64_t b) { return a < b ? a : b; }

  // Vectors of B's elements (fp16, or int8 for the quantized products) in one 64-byte line, the
  // unit of the dot kernels' inner loop (at most 4: the scalar path's "vectors" are single floats).
  template <class Bt> static constexpr int64_t kLine = 64 / sizeof(Bt);
  template <class Bt> static constexpr int kLineVectors = kLine<Bt> / W < 4 ? kLine<Bt> / W : 4;

  // How far ahead of the FMAs dots() (and the int4 kernels) prefetch B, in 64-byte lines, unless
  // kernels.py set another distance for this CPU (prefetch_bytes()): 1 KB on the AVX2 path (tuned
  // on Zen 3), 6 KB on the AVX-512 path. On a Zen 5 core 1 KB cost 7-9% of the GB/s of no software
  // prefetch at all; 6 KB gained 5% over none (one thread: 32 -> 37 GB/s in F.linear, weights from
  // memory), and two threads were bound by memory at any distance.
  static constexpr int64_t kPrefetchLines = W >= 16 ? 96 : 16;
  static int64_t prefetch_bytes() {
    const int64_t bytes = gemv_prefetch_bytes();
    return bytes < 0 ? kPrefetchLines * 64 : bytes;
  }
  // Where the prefetches put the line: L1 (prefetcht0) by default, L2 (prefetcht1) where kernels.py
  // set it for this CPU. On an Intel Xeon, L2 kept more lines in flight than L1, whose fill buffers
  // the loads share: fp16 decode 9-12% faster. Callers read prefetch_to_l2() once per call.
  static bool prefetch_to_l2() { return gemv_prefetch_level() == 2; }
  // With the level fixed at compile time (loops that must not test it per step: quant_vnni.h, dpbusd).
  template <bool ToL2> static void prefetch(const void* p) { __builtin_prefetch(p, 0, ToL2 ? 2 : 3); }
  static void prefetch(const void* p, bool to_l2) {
    if (to_l2) prefetch<true>(p);
    else prefetch<false>(p);
  }

  // FMA chains per row: U partial sums per stream (R * U * S chains hide the FMA latency).
  template <int R, class Bt>
  static constexpr int kUnroll = R <= 2 || kLineVectors<Bt> == 1 ? kLineVectors<Bt> : kLineVectors<Bt> / 2;
  // Whether S streams' sums (and R rows of a) fit the vector registers.
  template <int R, class Bt, int S>
  static constexpr bool kFits = S * R * (kUnroll<R, Bt> + 1) + R <= (W >= 16 ? 28 : 14);

  // sums[r * ld + j] = a[r] . b[:, j] for R rows of a (k floats each, `k` apart) and the n
  // columns of b (`cs` apart, contiguous along k). Each column is read start to end, one sequential
  // stream through memory that the hardware prefetcher follows across pages; gemv_streams() columns
  // are read at once, one from each of as many equal parts of the n (interleaving neighbouring
  // columns was 15-35% slower on Zen 3). On an Intel Xeon, 4 streams kept more lines in flight than
  // 1: fp16 weights from memory on 2 threads 22.4 -> 23.9 GB/s, each at its best prefetch (`torchplug
  // tune`).
  template <int R, class Bt = fp16_t>
  static void dots(const float* a, const Bt* b, int64_t cs, int64_t k, int64_t n, float* sums, int64_t ld) {
    const int64_t ahead = prefetch_bytes() / int64_t{sizeof(Bt)};  // elements
    const bool to_l2 = prefetch_to_l2();
    in_streams<kFits<R, Bt, 4> ? 4 : kFits<R, Bt, 2> ? 2 : 1>(n, [&](auto streams, const int64_t* at) {
      constexpr int S = decltype(streams)::value;
      const Bt* col[S];
      for (int s = 0; s < S; ++s) col[s] = b + at[s] * cs;
      columns<R, S, Bt>(a, col, k, sums, ld, at, ahead, to_l2);
    });
  }

  // Visits items [0, n) (columns, or blocks of columns) S at a time, visit(Streams<S>{}, at) with
  // at[0..S) item i of each of S equal parts, S the largest of 4 and 2 within `streams` and MaxS
  // (what the caller's registers hold); the rest one at a time.
  template <int S> using Streams = std::integral_constant<int, S>;
  template <int MaxS, class Visit>
  static void in_streams(int64_t n, Visit&& visit, int streams = gemv_streams()) {
    int64_t done = 0;
    auto spread = [&](auto width) {
      constexpr int S = decltype(width)::value;
      const int64_t per = n / S;
      for (int64_t i = 0; i < per; ++i) {
        int64_t at[S];
        for (int s = 0; s < S; ++s) at[s] = s * per + i;
        visit(width, at);
      }
      done = per * S;
    };
    if constexpr (MaxS >= 4) {
      if (streams >= 4) spread(Streams<4>{});
    }
    if constexpr (MaxS >= 2) {
      if (streams >= 2 && done == 0) spread(Streams<2>{});
    }
    for (int64_t j = done; j < n; ++j) visit(Streams<1>{}, &j);
  }

  // Columns col[0..S) of dots() at once, their sums to sums[r * ld + at[s]]. Each row keeps U
  // partial sums per column, and each KC slice is summed in its own registers, then added to the
  // total: the same two-level sum as the GEMM, and the same sums whatever S.
  template <int R, int S, class Bt>
  static void columns(const float* a, const Bt* const* col, int64_t k, float* sums, int64_t ld, const int64_t* at,
                      int64_t ahead, bool to_l2) {
    constexpr int U = kUnroll<R, Bt>;
    constexpr int64_t step = U * W;
    static_assert(KC % step == 0, "a KC slice is whole steps");
    const int64_t k_steps = k - k % step, k_vec = k - k % W;
    V total[S][R], part[S][R][U];
    for (int s = 0; s < S; ++s)
      for (int r = 0; r < R; ++r) total[s][r] = I::zero();
    int64_t kk = 0;
    while (kk < k_vec) {
      const int64_t slice_end = min(kk + KC, k_steps);
      for (int s = 0; s < S; ++s)
        for (int r = 0; r < R; ++r)
          for (int u = 0; u < U; ++u) part[s][r][u] = I::zero();
      for (; kk < slice_end; kk += step) {
        // `ahead` elements ahead, once per line: the next lines are on their way before the loop
        // reaches them, in this column or the next ones (a prefetch past B's end is harmless).
        if (kk % kLine<Bt> == 0)
          for (int s = 0; s < S; ++s) prefetch(col[s] + kk + ahead, to_l2);
        for (int u = 0; u < U; ++u) {
          V av[R];
          for (int r = 0; r < R; ++r) av[r] = I::load(a + r * k + kk + u * W);
          for (int s = 0; s < S; ++s) {
            const V bv = I::load(col[s] + kk + u * W);
            for (int r = 0; r < R; ++r) part[s][r][u] = I::fma(av[r], bv, part[s][r][u]);
          }
        }
      }
      if (kk == k_steps)  // the last whole vectors, fewer than a step
        for (; kk < k_vec; kk += W)
          for (int s = 0; s < S; ++s) {
            const V bv = I::load(col[s] + kk);
            for (int r = 0; r < R; ++r) part[s][r][0] = I::fma(I::load(a + r * k + kk), bv, part[s][r][0]);
          }
      for (int s = 0; s < S; ++s)
        for (int r = 0; r < R; ++r)
          for (int u = 0; u < U; ++u) total[s][r] = I::add(total[s][r], part[s][r][u]);
    }
    for (int s = 0; s < S; ++s)
      for (int r = 0; r < R; ++r) {
        float t = I::reduce_add(total[s][r]);
        for (int64_t e = k_vec; e < k; ++e) t += a[r * k + e] * I::to_float(col[s][e]);
        sums[r * ld + at[s]] = t;
      }
  }

  // dots() for 5 or more rows (gemm.cpp sends up to kSkinnyDotRows): each column taken by every
  // group of 4 rows while it is in L1, so B still streams from memory once.
  template <class Bt = fp16_t>
  static void dots_many(const float* a, const Bt* b, int64_t cs, int64_t k, int64_t n, int64_t m, float* sums,
                        int64_t ld) {
    for (int64_t j = 0; j < n; ++j) {
      int64_t r = 0;
      for (; r + 4 <= m; r += 4) dots<4>(a + r * k, b + j * cs, cs, k, 1, sums + r * ld + j, ld);
      switch (m - r) {
        case 3: dots<3>(a + r * k, b + j * cs, cs, k, 1, sums + r * ld + j, ld); break;
        case 2: dots<2>(a + r * k, b + j * cs, cs, k, 1, sums + r * ld + j, ld); break;
        case 1: dots<1>(a + r * k, b + j * cs, cs, k, 1, sums + r * ld + j, ld); break;
        default: break;
      }
    }
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
