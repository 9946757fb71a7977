// int8 weight-only products (aten's _weight_int8pack_mm) with fp16 / bf16 activations rounded to
// int16 and integer dot products: the part every ISA shares. The float paths (quant_kernel.h) convert
// every int8 weight to fp32 (decode: a widening and a conversion per 16 weights, then an FMA per row,
// bound by that arithmetic with 8 rows; prefill: the fp32 GEMM, one FMA per 16 products). Here a weight is
// widened to int16 once and multiplied into int32 sums (Dots: vpdpwssd on AVX512-VNNI, vpmaddwd on
// AVX2), the rounding scales applied once per block of 256 k.
//  - Each x row is rounded once per call, per block of 256 along k (the last may be shorter; k is a
//    multiple of 32): d = max|x| / 32767, xq = round(x * (1 / d)) to nearest even, in fp32. x_hat =
//    d * xq is x to within d / 2 = max|x| / 65534 per element, 254 times finer than the int8
//    weights' own step (max|w| / 127).
//  - Per block the int32 sums are exact: a lane adds 16 products of at most 32767 * 128.
//  - out = scale * sum over blocks of d * (xq . w), in fp32, rounded to T once.
// A row with an infinity or NaN cannot be rounded: that call (prefill: its 4 rows) runs the float
// path (torch's results).
// Prefill (more than 16 rows) reads each chunk of columns from L2 once per 4 rows: vpdpwssd's 32
// products an instruction against the fp32 GEMM's 16 per FMA, 1.4-1.85x it on a Zen 4 VM
// (docs/cpu-fp16.md).
// Blocks of 256 (from memory, 2 threads): one row 1.09x the float path (blocks of 128: 1.02x),
// 8 rows 1.46-1.52x (128: 1.30x) while the rows were taken in groups over a whole chunk, 1.60x
// since they are taken per column; 512 gained nothing more (docs/cpu-fp16.md).
// Dots provides:
//   Acc, kK: an integer accumulator and the k it takes per step (32 on AVX-512, 16 on AVX2);
//   kChains: accumulators per row (the multiply-add's latency over its throughput, for one row);
//   zero(), add(a, b), dot(acc, w, xq): acc plus kK products of the widened w and xq's kK int16;
//   widen(col): kK int8 weights as int16; to_float(acc): the lanes as I::V (I::W lanes);
//   to_int16(v, out): I::W floats, already scaled, rounded to nearest even into out.
// Included inside namespace torchplug_cpu::<isa>, after quant_kernel.h.
#pragma once

template <class I, class Dots>
struct Int16Activations : Quant<I> {
  using Q = Quant<I>;
  using V = typename I::V;
  static constexpr int64_t kBlock = 256;  // k per activation scale
  static constexpr int64_t kK = Dots::kK;
  static_assert(kBlock % kK == 0 && kK % I::W == 0, "a block is whole steps, a step whole vectors");

  static int64_t blocks(const QuantProblem& p) { return (p.k + kBlock - 1) / kBlock; }

  // Rows [0, m) of a32 (k floats each) as xq (int16, k apart) with d per block; false if a row holds
  // an infinity or NaN.
  static bool quantize_rows(const QuantProblem& p, const float* a32, int16_t* xq, float* d) {
    for (int64_t r = 0; r < p.m; ++r) {
      for (int64_t b = 0; b < blocks(p); ++b) {
        const int64_t k0 = b * kBlock, len = std::min(kBlock, p.k - k0);
        const float* x = a32 + r * p.k + k0;
        V top = I::zero();
        bool finite = true;
        for (int64_t i = 0; i < len; i += I::W) {
          const V v = I::load(x + i);
          top = I::max(top, I::max(v, I::sub(I::zero(), v)));
          finite = finite && I::eq_mask(v, v) == (uint32_t{1} << I::W) - 1;  // NaN is unequal to itself
        }
        const float amax = I::reduce_max(top);
        if (!finite || !(amax <= 3.4028235e38f)) return false;
        const float scale = amax / 32767.f, inv = scale != 0.f ? 1.f / scale : 0.f;
        for (int64_t i = 0; i < len; i += I::W) Dots::to_int16(I::mul(I::load(x + i), I::set1(inv)), xq + r * p.k + k0 + i);
        d[r * blocks(p) + b] = scale;
      }
    }
    return true;
  }

  // Accumulators per row and column when S columns are read at once: S columns' chains hide the
  // multiply-add's latency as well as one column's (integer sums: the same results whatever U).
  template <int Rn, int S>
  static constexpr int kUnroll = ((Rn <= 2 ? Dots::kChains : (Dots::kChains + 1) / 2) + S - 1) / S;
  template <int Rn, int S>  // the accumulators, sums and widened weights fit the vector registers
  static constexpr bool kFits = S * Rn * (kUnroll<Rn, S> + 1) + S <= (I::W >= 16 ? 28 : 14);

  // sums[r * ld + at[s]] = sum over blocks of d * (xq row r . column col[s]), for Rn rows and S columns
  // of w (int8, k values each) at once, each read start to end (S streams, prefetched as the float
  // path's).
  template <int Rn, int S>
  static void columns(const QuantProblem& p, const int8_t* const* col, const int16_t* xq, const float* d,
                      float* sums, int64_t ld, const int64_t* at) {
    if (Gemv<I>::prefetch_to_l2()) columns_to<Rn, S, true>(p, col, xq, d, sums, ld, at);
    else columns_to<Rn, S, false>(p, col, xq, d, sums, ld, at);
  }

  // columns, prefetching into L2 or L1 (a level fixed at compile time: quant_vnni.h, dpbusd).
  template <int Rn, int S, bool ToL2>
  static void columns_to(const QuantProblem& p, const int8_t* const* col, const int16_t* xq, const float* d,
                         float* sums, int64_t ld, const int64_t* at) {
    constexpr int U = kUnroll<Rn, S>;
    const int64_t nb = blocks(p), ahead = Gemv<I>::prefetch_bytes();
    V total[S][Rn];
    for (int s = 0; s < S; ++s)
      for (int r = 0; r < Rn; ++r) total[s][r] = I::zero();
    for (int64_t b = 0; b < nb; ++b) {
      const int64_t k0 = b * kBlock, k1 = std::min(p.k, k0 + kBlock);
      typename Dots::Acc acc[S][Rn][U];
      for (int s = 0; s < S; ++s)
        for (int r = 0; r < Rn; ++r)
          for (int u = 0; u < U; ++u) acc[s][r][u] = Dots::zero();
      auto step = [&](int64_t kk, int u) {
        for (int s = 0; s < S; ++s) {
          if (kk % 64 == 0) Gemv<I>::template prefetch<ToL2>(col[s] + kk + ahead);
          const auto wv = Dots::widen(col[s] + kk);
          for (int r = 0; r < Rn; ++r) acc[s][r][u] = Dots::dot(acc[s][r][u], wv, xq + r * p.k + kk);
        }
      };
      int64_t kk = k0;
      for (; kk + U * kK <= k1; kk += U * kK)
        for (int u = 0; u < U; ++u) step(kk + u * kK, u);
      for (; kk < k1; kk += kK) step(kk, 0);  // a shorter last block
      for (int s = 0; s < S; ++s)
        for (int r = 0; r < Rn; ++r) {
          for (int v = 1; v < U; ++v) acc[s][r][0] = Dots::add(acc[s][r][0], acc[s][r][v]);
          total[s][r] = I::fma(Dots::to_float(acc[s][r][0]), I::set1(d[r * nb + b]), total[s][r]);
        }
    }
    for (int s = 0; s < S; ++s)
      for (int r = 0; r < Rn; ++r) sums[r * ld + at[s]] = I::reduce_add(total[s][r]);
  }

  // All Rn rows (m <= 4) against columns [0, nc) of the chunk at w: gemv_streams() columns at a time.
  template <int Rn>
  static void chunk(const QuantProblem& p, const int8_t* w, int64_t nc, const int16_t* xq, const float* d,
                    float* sums) {
    Gemv<I>::template in_streams<kFits<Rn, 4> ? 4 : kFits<Rn, 2> ? 2 : 1>(nc, [&](auto streams, const int64_t* at) {
      constexpr int S = decltype(streams)::value;
      const int8_t* col[S];
      for (int s = 0; s < S; ++s) col[s] = w + at[s] * p.k;
      columns<Rn, S>(p, col, xq, d, sums, nc, at);
    });
  }

  // Scratch (quant_scratch()): x in fp32 (`x32` floats), d for `rows` rows, the fp32 sums of 4 rows
  // (m <= 4: m rows) by nc columns, xq for `rows` rows.
  struct Scratch {
    float *a32, *d, *sums;
    int16_t* xq;
    Scratch(const QuantProblem& p, int64_t x32, int64_t rows, float* scratch)
        : a32(scratch), d(a32 + x32), sums(d + Q::up(rows * (p.k / 32 + 1), 16)),
          xq(reinterpret_cast<int16_t*>(sums + Q::up((rows > 4 ? rows : 4) * (p.nc > 64 ? p.nc : 64), 16) + 2 * 64)) {}
  };
  // Rows [0, p.m) of x rounded to xq, with d; false if a row holds an infinity or NaN.
  template <class T> static bool round_rows(const QuantProblem& p, float* a32, int16_t* xq, float* d) {
    Q::G::pack(static_cast<const T*>(p.x), p.x_rs, 1, p.m, p.k, a32, p.k, p.m, p.k);
    return quantize_rows(p, a32, xq, d);
  }

  // Prefill: rows [r0, r0 + rows) (at most 64) rounded 4 at a time, group g's xq and d at 4g rows in
  // (k and blocks(p) apart). Bit g of the result: rows 4g..4g + 3 hold an infinity or NaN (not rounded).
  template <class T>
  static uint64_t round_fours(const QuantProblem& p, int64_t r0, int64_t rows, float* a32, int16_t* xq, float* d) {
    uint64_t unrounded = 0;
    for (int64_t g = 0; g * 4 < rows; ++g)
      if (!round_rows<T>(Q::template rows_of<T>(p, r0 + 4 * g, std::min<int64_t>(4, rows - 4 * g)), a32,
                         xq + 4 * g * p.k, d + 4 * g * blocks(p)))
        unrounded |= uint64_t{1} << g;
    return unrounded;
  }

  // Columns [0, nc) of the chunk at w against Rn rows (prefill: the chunk in L2), three at a time
  // where the registers hold them (else two): each weight load serves Rn rows, each activation load
  // S columns. 3 x 4 against 2 x 4: 1.05x on one Zen 4 thread.
  template <int Rn>
  static void prefill_columns(const QuantProblem& p, const int8_t* w, int64_t nc, const int16_t* xq, const float* d,
                    float* sums) {
    constexpr int S = kFits<Rn, 3> ? 3 : 2;
    int64_t j = 0;
    for (; j + S <= nc; j += S) {
      const int8_t* col[S];
      int64_t at[S];
      for (int s = 0; s < S; ++s) col[s] = w + (j + s) * p.k, at[s] = j + s;
      columns<Rn, S>(p, col, xq, d, sums, nc, at);
    }
    for (; j < nc; ++j) {
      const int8_t* col[1] = {w + j * p.k};
      columns<Rn, 1>(p, col, xq, d, sums, nc, &j);
    }
  }

  // Prefill (p.mc rows rounded at a time, chunks of p.nc columns small enough to stay in L2): per
  // block of mc rows and chunk, every 4 rows against the chunk's columns a few at a time. A row's
  // results are decode's bit for bit: each column's sums run in the same order whatever the rows
  // and columns taken with it. A block of 4 rows with an infinity or NaN runs the float path.
  template <class T> static void int8_rows(const QuantProblem& p, int64_t begin, int64_t end, float* scratch) {
    const Scratch s(p, prefill_x32(p), p.mc, scratch);
    const int64_t nb = blocks(p);
    for (int64_t r0 = 0; r0 < p.m; r0 += p.mc) {
      const int64_t rows = std::min(p.mc, p.m - r0);
      const uint64_t unrounded = round_fours<T>(p, r0, rows, s.a32, s.xq, s.d);
      for (int64_t c = begin; c < end; ++c) {
        const int64_t n0 = c * p.nc, nc = std::min(p.nc, p.n - n0);
        const int8_t* w = static_cast<const int8_t*>(p.w) + n0 * p.k;
        for (int64_t g = 0; g * 4 < rows; ++g) {
          const QuantProblem four = Q::template rows_of<T>(p, r0 + 4 * g, std::min<int64_t>(4, rows - 4 * g));
          if (unrounded >> g & 1) {
            Q::template int8_gemv<T>(four, c, c + 1, s.a32);  // its scratch fits x's place (prefill_x32)
            continue;
          }
          const int16_t* xq = s.xq + 4 * g * p.k;
          const float* d = s.d + 4 * g * nb;
          switch (four.m) {
            case 4: prefill_columns<4>(p, w, nc, xq, d, s.sums); break;
            case 3: prefill_columns<3>(p, w, nc, xq, d, s.sums); break;
            case 2: prefill_columns<2>(p, w, nc, xq, d, s.sums); break;
            default: prefill_columns<1>(p, w, nc, xq, d, s.sums); break;
          }
          for (int64_t r = 0; r < four.m; ++r)
            Q::write_row(s.sums + r * nc, static_cast<const T*>(p.scales) + n0, nc, static_cast<T*>(four.out) + r * p.out_rs + n0);
        }
      }
    }
  }

  // int8_gemv's contract (quant_kernel.h) for k % 32 == 0, and with p.mc set, int8_rows'; scratch:
  // quant_scratch() floats (which counts xq and d for int8; with p.mc, for mc rows).
  template <class T> static void int8_gemv(const QuantProblem& p, int64_t begin, int64_t end, float* scratch) {
    if (p.mc) return int8_rows<T>(p, begin, end, scratch);
    const Scratch s(p, Q::up(p.m * p.k, 16), p.m, scratch);
    if (!round_rows<T>(p, s.a32, s.xq, s.d)) return Q::template int8_gemv<T>(p, begin, end, scratch);
    for (int64_t c = begin; c < end; ++c) {
      const int64_t n0 = c * p.nc, nc = std::min(p.nc, p.n - n0);
      const int8_t* w = static_cast<const int8_t*>(p.w) + n0 * p.k;
      switch (p.m) {
        case 1: chunk<1>(p, w, nc, s.xq, s.d, s.sums); break;
        case 2: chunk<2>(p, w, nc, s.xq, s.d, s.sums); break;
        case 3: chunk<3>(p, w, nc, s.xq, s.d, s.sums); break;
        case 4: chunk<4>(p, w, nc, s.xq, s.d, s.sums); break;
        default:  // column by column, every group of 4 rows while the column is in L1: the weights stream once
          for (int64_t j = 0; j < nc; ++j) {
            const int8_t* col[1] = {w + j * p.k};
            for (int64_t r0 = 0; r0 < p.m; r0 += 4) {
              const int16_t* x = s.xq + r0 * p.k;
              const float* dr = s.d + r0 * blocks(p);
              float* sums = s.sums + r0 * nc;
              switch (std::min<int64_t>(4, p.m - r0)) {
                case 4: columns<4, 1>(p, col, x, dr, sums, nc, &j); break;
                case 3: columns<3, 1>(p, col, x, dr, sums, nc, &j); break;
                case 2: columns<2, 1>(p, col, x, dr, sums, nc, &j); break;
                default: columns<1, 1>(p, col, x, dr, sums, nc, &j); break;
              }
            }
          }
      }
      for (int64_t r = 0; r < p.m; ++r)
        Q::write_row(s.sums + r * nc, static_cast<const T*>(p.scales) + n0, nc, static_cast<T*>(p.out) + r * p.out_rs + n0);
    }
  }
};

// An ISA's int8_gemv replacements per dtype (isa.h): null for fp32 activations, whose callers asked
// for fp32's precision.
template <class Kernels>
const IsaKernels::QuantTasks* int16_activation_kernels() {
  static constexpr IsaKernels::QuantTasks kKernels[kNumDtypes] = {
      nullptr, &Kernels::template int8_gemv<bf16_t>, &Kernels::template int8_gemv<fp16_t>};
  return kKernels;
}
