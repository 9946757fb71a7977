// The four portable LLM ops, decode attention and argmax as row kernels, written once and
// instantiated per ISA (`I`) and storage type (T: float, bf16_t, fp16_t; weight / cos / sin either
// T or float). Everything is computed in fp32 and rounded once on store, which is what
// torchplug.ops' reference does. Included inside namespace torchplug_cpu::TP_ISA (see isa_table.h).
#pragma once

template <class I>
struct Rows {
  using V = typename I::V;
  static constexpr int64_t W = I::W;

  // Row tails: go through a W-element buffer so the loads and stores stay vector-shaped.
  template <class T> static V load_n(const T* p, int64_t n) {
    T buf[W] = {};
    std::memcpy(buf, p, n * sizeof(T));
    return I::load(buf);
  }
  template <class T> static void store_n(T* p, V v, int64_t n) {
    T buf[W];
    I::store(buf, v);
    std::memcpy(p, buf, n * sizeof(T));
  }

  // exp(x) in fp32 (Cephes expf: range reduction by ln 2, degree-6 polynomial, ~1 ulp). 2^n is
  // applied as two factors, each a normal float, so the result overflows to inf above ~88.7 and
  // underflows through the subnormals to 0, as expf does: clamping to the normal range made
  // silu(-100) = -100 / (1 + exp(88)) = -6e-37 instead of -0, and silu(-inf) -inf, not torch's NaN.
  static V exp(V x) {
    x = I::min(I::max(x, I::set1(-110.f)), I::set1(89.5f));  // n in [-159, 129]: halves in pow2n's range
    const V n = I::round(I::mul(x, I::set1(1.44269504088896341f)));
    V r = I::fma(n, I::set1(-0.693359375f), x);
    r = I::fma(n, I::set1(2.12194440e-4f), r);
    constexpr float poly[] = {1.3981999507e-3f, 8.3334519073e-3f, 4.1665795894e-2f, 1.6666665459e-1f, 5.0000001201e-1f};
    V y = I::set1(1.9875691500e-4f);
    for (float c : poly) y = I::fma(y, r, I::set1(c));
    y = I::fma(y, I::mul(r, r), I::add(r, I::set1(1.f)));
    const V half = I::round(I::mul(n, I::set1(0.5f)));
    return I::mul(I::mul(y, I::pow2n(half)), I::pow2n(I::sub(n, half)));
  }

  template <class T> static float sum_squares(const T* x, int64_t n) {
    V s0 = I::zero(), s1 = I::zero();  // two chains hide the FMA latency
    int64_t j = 0;
    for (; j + 2 * W <= n; j += 2 * W) {
      const V a = I::load(x + j), b = I::load(x + j + W);
      s0 = I::fma(a, a, s0);
      s1 = I::fma(b, b, s1);
    }
    for (; j < n; j += W) {
      const V a = j + W <= n ? I::load(x + j) : load_n(x + j, n - j);
      s0 = I::fma(a, a, s0);
    }
    return I::reduce_add(I::add(s0, s1));
  }

  // out = x * inv_rms * w (x * inv_rms where w is null), in the reference's order of operations.
  template <class T, class Wt> static void scale_row(const T* x, const Wt* w, float inv_rms, T* out, int64_t n) {
    const V inv = I::set1(inv_rms);
    int64_t j = 0;
    for (; j + W <= n; j += W) {
      const V y = I::mul(I::load(x + j), inv);
      I::store(out + j, w ? I::mul(y, I::load(w + j)) : y);
    }
    if (j < n) {
      const V y = I::mul(load_n(x + j, n - j), inv);
      store_n(out + j, w ? I::mul(y, load_n(w + j, n - j)) : y, n - j);
    }
  }

  static float inv_rms(float sum_sq, int64_t n, float eps) { return 1.f / std::sqrt(sum_sq / static_cast<float>(n) + eps); }

  template <class T, class Wt>
  static void rms_norm(const void* x_, int64_t x_rs, void* out_, int64_t out_rs, const void* w_, float* rstd,
                       int64_t rows, int64_t hidden, float eps) {
    const Wt* w = static_cast<const Wt*>(w_);
    for (int64_t r = 0; r < rows; ++r) {
      const T* x = static_cast<const T*>(x_) + r * x_rs;
      const float inv = inv_rms(sum_squares(x, hidden), hidden, eps);
      if (rstd) rstd[r] = inv;
      scale_row(x, w, inv, static_cast<T*>(out_) + r * out_rs, hidden);
    }
  }

  // residual = T(x + residual); x = rms_norm(residual) * w. The sum of squares is taken on the
  // rounded residual, read back from where it was just stored, so x == rms_norm(new residual).
  template <class T, class Wt>
  static void fused_add_rms_norm(void* x_, int64_t x_rs, void* res_, int64_t res_rs, const void* w_, int64_t rows,
                                 int64_t hidden, float eps) {
    const Wt* w = static_cast<const Wt*>(w_);
    for (int64_t r = 0; r < rows; ++r) {
      T* x = static_cast<T*>(x_) + r * x_rs;
      T* res = static_cast<T*>(res_) + r * res_rs;
      V s = I::zero();
      int64_t j = 0;
      for (; j + W <= hidden; j += W) {
        I::store(res + j, I::add(I::load(x + j), I::load(res + j)));
        const V rounded = I::load(res + j);
        s = I::fma(rounded, rounded, s);
      }
      if (j < hidden) {
        const int64_t n = hidden - j;
        store_n(res + j, I::add(load_n(x + j, n), load_n(res + j, n)), n);
        const V rounded = load_n(res + j, n);
        s = I::fma(rounded, rounded, s);
      }
      scale_row(res, w, inv_rms(I::reduce_add(s), hidden, eps), x, hidden);
    }
  }

  // out[:, j] = silu(x[:, j]) * x[:, d + j] with silu(a) = a / (1 + exp(-a)), as torch computes it.
  template <class T>
  static void silu_and_mul(const void* x_, int64_t x_rs, void* out_, int64_t out_rs, int64_t rows, int64_t d) {
    const V one = I::set1(1.f), zero = I::zero();
    auto f = [&](V a, V b) { return I::mul(I::div(a, I::add(one, exp(I::sub(zero, a)))), b); };
    for (int64_t r = 0; r < rows; ++r) {
      const T* a = static_cast<const T*>(x_) + r * x_rs;
      const T* b = a + d;
      T* out = static_cast<T*>(out_) + r * out_rs;
      int64_t j = 0;
      for (; j + W <= d; j += W) I::store(out + j, f(I::load(a + j), I::load(b + j)));
      if (j < d) store_n(out + j, f(load_n(a + j, d - j), load_n(b + j, d - j)), d - j);
    }
  }

  // Neox rotate-half: with x = [x1, x2] (halves of head_dim), out = [x1 c - x2 s, x2 c + x1 s].
  // src and dst may be the same tensor (every element is read before it is written).
  template <class T, class C>
  static void rotary(const void* src_, int64_t s_ts, int64_t s_hs, void* dst_, int64_t d_ts, int64_t d_hs,
                     const void* cos_, const void* sin_, int64_t cs_rs, int64_t tokens, int64_t heads, int64_t head_dim) {
    const int64_t half = head_dim / 2;
    auto rotate = [&](const T* s, T* d, const C* cs, const C* sn, int64_t j, int64_t n) {
      const bool full = n == W;
      const V x1 = full ? I::load(s + j) : load_n(s + j, n), x2 = full ? I::load(s + half + j) : load_n(s + half + j, n);
      const V c = full ? I::load(cs + j) : load_n(cs + j, n), sn_ = full ? I::load(sn + j) : load_n(sn + j, n);
      const V o1 = I::sub(I::mul(x1, c), I::mul(x2, sn_)), o2 = I::add(I::mul(x2, c), I::mul(x1, sn_));
      if (full) {
        I::store(d + j, o1);
        I::store(d + half + j, o2);
      } else {
        store_n(d + j, o1, n);
        store_n(d + half + j, o2, n);
      }
    };
    for (int64_t t = 0; t < tokens; ++t) {
      const C* cs = static_cast<const C*>(cos_) + t * cs_rs;
      const C* sn = static_cast<const C*>(sin_) + t * cs_rs;
      for (int64_t h = 0; h < heads; ++h) {
        const T* s = static_cast<const T*>(src_) + t * s_ts + h * s_hs;
        T* d = static_cast<T*>(dst_) + t * d_ts + h * d_hs;
        int64_t j = 0;
        for (; j + W <= half; j += W) rotate(s, d, cs, sn, j, W);
        if (j < half) rotate(s, d, cs, sn, j, half - j);
      }
    }
  }

  // Attention of L query rows (one head) over S key / value rows: softmax(q k^T * scale + mask) v,
  // in fp32, rounded once on store. A key whose mask is -inf is skipped, so a decode step over a
  // static cache reads only the filled slots. mask (fp32, additive) may be null; a row with every
  // key masked gives zeros and a logsumexp of 0, as torch's flash kernel does. scratch: S + 2 *
  // round_up(D, W) floats.
  template <class T>
  static void attend(const void* q_, int64_t q_ls, const void* k_, int64_t k_ss, const void* v_, int64_t v_ss,
                     const float* mask, int64_t mask_ls, int64_t L, int64_t S, int64_t D, float scale, void* out_,
                     int64_t out_ls, float* lse, int64_t lse_ls, float* scratch) {
    const T* k = static_cast<const T*>(k_);
    const T* v = static_cast<const T*>(v_);
    const int64_t dv = (D + W - 1) / W * W;
    float* scores = scratch;
    float* qf = scores + S;
    float* acc = qf + dv;
    const V vscale = I::set1(scale);
    const float neg_inf = -INFINITY;
    for (int64_t l = 0; l < L; ++l) {
      const T* ql = static_cast<const T*>(q_) + l * q_ls;
      T* out = static_cast<T*>(out_) + l * out_ls;
      const float* ml = mask ? mask + l * mask_ls : nullptr;
      for (int64_t j = 0; j < dv; j += W) I::store(qf + j, I::mul(j + W <= D ? I::load(ql + j) : load_n(ql + j, D - j), vscale));
      float mx = neg_inf;
      for (int64_t s = 0; s < S; ++s) {
        if (ml && ml[s] == neg_inf) {
          scores[s] = neg_inf;
          continue;
        }
        const T* ks = k + s * k_ss;
        V d0 = I::zero(), d1 = I::zero();
        int64_t j = 0;
        for (; j + 2 * W <= D; j += 2 * W) {
          d0 = I::fma(I::load(qf + j), I::load(ks + j), d0);
          d1 = I::fma(I::load(qf + j + W), I::load(ks + j + W), d1);
        }
        for (; j < D; j += W) d0 = I::fma(I::load(qf + j), j + W <= D ? I::load(ks + j) : load_n(ks + j, D - j), d0);
        const float score = I::reduce_add(I::add(d0, d1)) + (ml ? ml[s] : 0.f);
        scores[s] = score;
        mx = score > mx ? score : mx;
      }
      if (mx == neg_inf) {  // every key masked
        for (int64_t j = 0; j < D; j += W) j + W <= D ? I::store(out + j, I::zero()) : store_n(out + j, I::zero(), D - j);
        lse[l * lse_ls] = 0.f;
        continue;
      }
      const V vmx = I::set1(mx);
      int64_t s = 0;
      for (; s + W <= S; s += W) I::store(scores + s, exp(I::sub(I::load(scores + s), vmx)));
      for (; s < S; ++s) scores[s] = std::exp(scores[s] - mx);
      for (int64_t j = 0; j < dv; j += W) I::store(acc + j, I::zero());
      float sum = 0.f;
      for (s = 0; s < S; ++s) {
        if (ml && ml[s] == neg_inf) continue;
        const float p = scores[s];
        sum += p;
        const V vp = I::set1(p);
        const T* vs = v + s * v_ss;
        int64_t j = 0;
        for (; j + W <= D; j += W) I::store(acc + j, I::fma(vp, I::load(vs + j), I::load(acc + j)));
        if (j < D) I::store(acc + j, I::fma(vp, load_n(vs + j, D - j), I::load(acc + j)));
      }
      const V inv = I::set1(1.f / sum);
      for (int64_t j = 0; j < D; j += W) {
        const V o = I::mul(I::load(acc + j), inv);
        j + W <= D ? I::store(out + j, o) : store_n(out + j, o, D - j);
      }
      lse[l * lse_ls] = mx + std::log(sum);
    }
  }

  // attend() for many query rows (prefill), with the same results contract, plus `causal` (row l
  // sees keys 0..l: torch's is_causal, aligned top-left). Two small GEMMs on the GEMM's
  // micro-kernel: K and V are converted once per call into its fp32 B panels; then, MR query rows
  // at a time, scores = q k^T over the keys up to the block's causal or mask edge (key blocks
  // masked for all MR rows are not computed), a softmax per row, and out = p v. scratch:
  // attend_rows_scratch() floats.
  template <class T>
  static void attend_rows(const void* q_, int64_t q_ls, const void* k_, int64_t k_ss, const void* v_, int64_t v_ss,
                          const float* mask, int64_t mask_ls, bool causal, int64_t L, int64_t S, int64_t D,
                          float scale, void* out_, int64_t out_ls, float* lse, int64_t lse_ls, float* scratch) {
    using G = Gemm<I>;
    constexpr int64_t MR = G::MR, NR = G::NR;
    const int64_t sp = (S + NR - 1) / NR * NR, dp = (D + NR - 1) / NR * NR;
    float* k_panels = scratch;            // sp / NR panels of D x NR: k^T
    float* v_panels = k_panels + D * sp;  // dp / NR panels of sp x NR (keys past S are zeros)
    float* scores = v_panels + sp * dp;   // MR rows, as many keys as the block reaches
    float* qa = scores + MR * sp;         // MR x D, scaled
    alignas(64) float tile[MR * NR];
    const T* k = static_cast<const T*>(k_);
    const T* v = static_cast<const T*>(v_);
    for (int64_t s0 = 0; s0 < S; s0 += NR) G::pack(k + s0 * k_ss, 1, k_ss, D, std::min(NR, S - s0), k_panels + s0 * D, NR, D, NR);
    for (int64_t d0 = 0; d0 < D; d0 += NR) G::pack(v + d0, v_ss, 1, S, std::min(NR, D - d0), v_panels + d0 * sp, NR, sp, NR);
    for (int64_t l0 = 0; l0 < L; l0 += MR) {
      const int64_t rows = std::min(MR, L - l0);
      G::pack(static_cast<const T*>(q_) + l0 * q_ls, q_ls, 1, rows, D, qa, D, MR, D);
      for (int64_t i = 0; i < MR * D; ++i) qa[i] *= scale;
      // Keys up to the last one any of the block's rows sees: its causal edge, or its mask's.
      int64_t s_end = causal ? std::min(S, l0 + rows) : S;
      if (mask) {
        int64_t reach = 0;
        for (int64_t r = 0; r < rows; ++r) {
          const float* ml = mask + (l0 + r) * mask_ls;
          int64_t n = s_end;
          while (n > reach && ml[n - 1] == -INFINITY) --n;
          reach = n;
        }
        s_end = reach;
      }
      const int64_t kb = (s_end + NR - 1) / NR * NR;
      for (int64_t s0 = 0; s0 < s_end; s0 += NR) {
        if (mask && all_masked(mask + l0 * mask_ls + s0, mask_ls, rows, std::min(NR, S - s0)))
          for (int64_t r = 0; r < MR; ++r) std::fill_n(scores + r * kb + s0, NR, -INFINITY);
        else
          G::micro_kernel(D, qa, k_panels + s0 * D, nullptr, 0, scores + s0, kb);
      }
      float inv_sum[MR] = {};
      for (int64_t r = 0; r < rows; ++r) {
        const int64_t l = l0 + r;
        inv_sum[r] = softmax_row(scores + r * kb, mask ? mask + l * mask_ls : nullptr,
                                 causal ? std::min(S, l + 1) : S, kb, lse + l * lse_ls);
      }
      for (int64_t r = rows; r < MR; ++r) std::fill_n(scores + r * kb, kb, 0.f);
      for (int64_t d0 = 0; d0 < D; d0 += NR) {
        G::micro_kernel(kb, scores, v_panels + d0 * sp, nullptr, 0, tile, NR);
        const int64_t cols = std::min(NR, D - d0);
        for (int64_t r = 0; r < rows; ++r) {
          T* out = static_cast<T*>(out_) + (l0 + r) * out_ls + d0;
          const V inv = I::set1(inv_sum[r]);
          int64_t j = 0;
          for (; j + W <= cols; j += W) I::store(out + j, I::mul(I::load(tile + r * NR + j), inv));
          if (j < cols) store_n(out + j, I::mul(I::load(tile + r * NR + j), inv), cols - j);
        }
      }
    }
  }

  static bool all_masked(const float* mask, int64_t ls, int64_t rows, int64_t cols) {
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < cols; ++c)
        if (mask[r * ls + c] != -INFINITY) return false;
    return true;
  }

  // Turns one row of attend_rows' scores (scaled q.k over keys [0, n), the row `len` long) into
  // unnormalised probabilities exp(x - max), with masked keys and keys [n, len) at exactly 0.
  // Sets the row's logsumexp and returns 1 / sum (0 when every key is masked: zeros out).
  static float softmax_row(float* scores, const float* ml, int64_t n, int64_t len, float* lse) {
    const float neg_inf = -INFINITY;
    if (ml)
      while (n > 0 && ml[n - 1] == neg_inf) --n;  // a causal or padding mask masks a suffix
    V vmx = I::set1(neg_inf);
    int64_t s = 0;
    for (; s + W <= n; s += W) {
      const V x = ml ? I::add(I::load(scores + s), I::load(ml + s)) : I::load(scores + s);
      I::store(scores + s, x);
      vmx = I::max(vmx, x);
    }
    float mx = I::reduce_max(vmx);
    for (; s < n; ++s) {
      scores[s] = ml ? scores[s] + ml[s] : scores[s];
      mx = scores[s] > mx ? scores[s] : mx;
    }
    if (mx == neg_inf) {  // every key masked
      std::fill_n(scores, len, 0.f);
      *lse = 0.f;
      return 0.f;
    }
    const V vmax = I::set1(mx);
    V vsum = I::zero();
    for (s = 0; s + W <= n; s += W) {
      const V e = exp(I::sub(I::load(scores + s), vmax));
      I::store(scores + s, e);
      vsum = I::add(vsum, e);
    }
    float sum = I::reduce_add(vsum);
    for (; s < n; ++s) sum += scores[s] = std::exp(scores[s] - mx);
    // A masked key's exp is 0 already, unless its score was inf or NaN (score + mask is NaN then):
    // its probability is exactly 0 whatever the score.
    if (ml)
      for (s = 0; s < n; ++s)
        if (ml[s] == neg_inf) scores[s] = 0.f;
    std::fill(scores + n, scores + len, 0.f);
    *lse = mx + std::log(sum);
    return 1.f / sum;
  }

  // argmax's row tail: the missing lanes repeat the tail's first element, which changes neither
  // the maximum nor where it first occurs (zeros could be a new maximum).
  template <class T> static V load_n_repeat(const T* p, int64_t n) {
    T buf[W];
    for (int64_t i = 0; i < W; ++i) buf[i] = p[i < n ? i : 0];
    return I::load(buf);
  }

  // The index of the maximum of x[0, n), n >= 1, by torch's rules: NaN is greater than any number
  // (the first NaN wins) and ties go to the first index. Two passes, as a first-index search needs
  // the maximum first: the maximum and whether any lane saw a NaN, then the first lane equal to
  // the maximum (or the first NaN). fp16 / bf16 -> fp32 is exact and keeps the order.
  template <class T> static int64_t argmax_row(const T* x, int64_t n) {
    constexpr uint32_t all = (uint32_t{1} << W) - 1;
    auto load = [&](int64_t j) { return j + W <= n ? I::load(x + j) : load_n_repeat(x + j, n - j); };
    const V lowest = I::set1(-INFINITY);
    V m[4] = {lowest, lowest, lowest, lowest};  // four chains hide the max latency
    uint32_t nan = 0;                           // lanes that held a NaN
    int64_t j = 0;
    for (; j + 4 * W <= n; j += 4 * W)
      for (int u = 0; u < 4; ++u) {
        const V a = I::load(x + j + u * W);
        m[u] = I::max(a, m[u]);
        nan |= I::eq_mask(a, a) ^ all;
      }
    for (; j < n; j += W) {
      const V a = load(j);
      m[0] = I::max(a, m[0]);
      nan |= I::eq_mask(a, a) ^ all;
    }
    const V target = I::set1(I::reduce_max(I::max(I::max(m[0], m[1]), I::max(m[2], m[3]))));
    for (j = 0;; j += W) {  // ends within the row: the maximum (or a NaN) is in it
      const V a = load(j);
      if (const uint32_t hit = nan ? I::eq_mask(a, a) ^ all : I::eq_mask(a, target)) return j + __builtin_ctz(hit);
    }
  }

  template <class T> static void argmax(const void* x_, int64_t x_rs, int64_t rows, int64_t n, int64_t* out) {
    for (int64_t r = 0; r < rows; ++r) out[r] = argmax_row(static_cast<const T*>(x_) + r * x_rs, n);
  }
};
