// The four portable LLM ops as row kernels, written once and instantiated per ISA (`I`) and
// storage type (T: float, bf16_t, fp16_t; weight / cos / sin either T or float). Everything is
// computed in fp32 and rounded once on store, which is what torchplug.ops' reference does.
// Included inside namespace torchplug_cpu::TP_ISA (see isa_table.h).
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

  // exp(x) in fp32 (Cephes expf: range reduction by ln 2, degree-6 polynomial, ~1 ulp).
  static V exp(V x) {
    x = I::min(I::max(x, I::set1(-87.f)), I::set1(88.f));  // 2^n stays a normal float
    const V n = I::round(I::mul(x, I::set1(1.44269504088896341f)));
    V r = I::fma(n, I::set1(-0.693359375f), x);
    r = I::fma(n, I::set1(2.12194440e-4f), r);
    constexpr float poly[] = {1.3981999507e-3f, 8.3334519073e-3f, 4.1665795894e-2f, 1.6666665459e-1f, 5.0000001201e-1f};
    V y = I::set1(1.9875691500e-4f);
    for (float c : poly) y = I::fma(y, r, I::set1(c));
    y = I::fma(y, I::mul(r, r), I::add(r, I::set1(1.f)));
    return I::mul(y, I::pow2n(n));
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

  // out = x * inv_rms * w, in the reference's order of operations.
  template <class T, class Wt> static void scale_row(const T* x, const Wt* w, float inv_rms, T* out, int64_t n) {
    const V inv = I::set1(inv_rms);
    int64_t j = 0;
    for (; j + W <= n; j += W) I::store(out + j, I::mul(I::mul(I::load(x + j), inv), I::load(w + j)));
    if (j < n) store_n(out + j, I::mul(I::mul(load_n(x + j, n - j), inv), load_n(w + j, n - j)), n - j);
  }

  static float inv_rms(float sum_sq, int64_t n, float eps) { return 1.f / std::sqrt(sum_sq / static_cast<float>(n) + eps); }

  template <class T, class Wt>
  static void rms_norm(const void* x_, int64_t x_rs, void* out_, int64_t out_rs, const void* w_, int64_t rows,
                       int64_t hidden, float eps) {
    const Wt* w = static_cast<const Wt*>(w_);
    for (int64_t r = 0; r < rows; ++r) {
      const T* x = static_cast<const T*>(x_) + r * x_rs;
      scale_row(x, w, inv_rms(sum_squares(x, hidden), hidden, eps), static_cast<T*>(out_) + r * out_rs, hidden);
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
};
