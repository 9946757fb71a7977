// Weight-only int8 and int4 products (aten's _weight_int8pack_mm and _weight_int4pack_mm_for_cpu)
// in the layouts torch packs (isa.h, QuantProblem), for fp32, bf16 and fp16 activations (T),
// written once and instantiated per ISA. Everything sums in fp32 and rounds to T once.
//  - A few rows (decode) stream the weights once, as they lie, converted in registers:
//    int8: each column's k bytes are contiguous, so gemv_kernel.h's dot products run on them;
//    int4: a block's k rows of nibbles are contiguous, so each row of nibbles is multiplied by a
//      broadcast of each x row. Per group the sums become scale * sum(x q) + (zero - 8 scale) *
//      sum(x): one conversion and one FMA per weight and row, the scales applied once per group.
//  - More rows (prefill) run the GEMM's micro-kernel (gemm_kernel.h) on fp32 panels: int8 weights
//    are its A operand (rows contiguous along k, converted W at a time) against x^T, int4 weights
//    its B operand (dequantized one k row of a block at a time) against x.
// Included inside namespace torchplug_cpu::TP_ISA (see isa_table.h), after the other kernels.
#pragma once

template <class I>
struct Quant {
  using V = typename I::V;
  using G = Gemm<I>;
  using R = Rows<I>;
  static constexpr int64_t W = I::W, MR = I::gemm.mr, NR = I::gemm.nr, KC = I::gemm.kc;
  static int64_t min(int64_t a, int64_t b) { return a < b ? a : b; }
  static int64_t up(int64_t a, int64_t b) { return (a + b - 1) / b * b; }

  // float -> T, rounded as the vector stores round (bf16: to nearest even, NaN a quiet NaN).
  template <class T> static T round_to(float v) {
    if constexpr (std::is_same_v<T, float>) {
      return v;
    } else if constexpr (std::is_same_v<T, fp16_t>) {
      return I::to_half(v);
    } else {
      uint32_t u;
      std::memcpy(&u, &v, sizeof u);
      if (v != v) return bf16_t{0x7fc0};
      return bf16_t{static_cast<uint16_t>((u + 0x7fff + ((u >> 16) & 1)) >> 16)};
    }
  }

  // out[j] = T(sums[j] * scale[j]) for j < n (scale null: T(sums[j])).
  template <class T> static void write_row(const float* sums, const T* scale, int64_t n, T* out) {
    int64_t j = 0;
    for (; j + W <= n; j += W) {
      const V v = I::load(sums + j);
      I::store(out + j, scale ? I::mul(v, I::load(scale + j)) : v);
    }
    if (j < n) {
      const V v = R::load_n(sums + j, n - j);
      R::store_n(out + j, scale ? I::mul(v, R::load_n(scale + j, n - j)) : v, n - j);
    }
  }

  // Rows [r0, r0 + count) of p (x and out), as a problem of their own.
  template <class T> static QuantProblem rows_of(const QuantProblem& p, int64_t r0, int64_t count) {
    QuantProblem rows = p;
    rows.m = count;
    rows.x = static_cast<const T*>(p.x) + r0 * p.x_rs;
    rows.out = static_cast<T*>(p.out) + r0 * p.out_rs;
    return rows;
  }

  // ---- int8 ---------------------------------------------------------------------------------------

  // Column chunks [begin, end) of nc columns for all m rows (at most gemm.cpp's skinny 16): x's rows
  // in fp32, then every column's dot products, scaled and rounded.
  template <class T> static void int8_gemv(const QuantProblem& p, int64_t begin, int64_t end, float* scratch) {
    float* a32 = scratch;
    float* sums = a32 + up(p.m * p.k, 16);
    G::pack(static_cast<const T*>(p.x), p.x_rs, 1, p.m, p.k, a32, p.k, p.m, p.k);
    for (int64_t c = begin; c < end; ++c) {
      const int64_t n0 = c * p.nc, nc = min(p.nc, p.n - n0);
      const int8_t* b = static_cast<const int8_t*>(p.w) + n0 * p.k;
      switch (p.m) {
        case 1: Gemv<I>::template dots<1>(a32, b, p.k, p.k, nc, sums, nc); break;
        case 2: Gemv<I>::template dots<2>(a32, b, p.k, p.k, nc, sums, nc); break;
        case 3: Gemv<I>::template dots<3>(a32, b, p.k, p.k, nc, sums, nc); break;
        case 4: Gemv<I>::template dots<4>(a32, b, p.k, p.k, nc, sums, nc); break;
        default: Gemv<I>::dots_many(a32, b, p.k, p.k, nc, p.m, sums, nc); break;
      }
      for (int64_t r = 0; r < p.m; ++r)
        write_row(sums + r * nc, static_cast<const T*>(p.scales) + n0, nc,
                  static_cast<T*>(p.out) + r * p.out_rs + n0);
    }
  }

  // One task's C block (rows x cols) = A (rows x k) @ B (k x cols) on the micro-kernel, one kc slice
  // at a time: pack_a(k0, kc, dst) fills the rows' MR-row panels (one row-major matrix, rows padded
  // with zeros to MR), pack_b(k0, kc, j, nr, dst) the kc x NR panel of columns j..j+nr (zeros after
  // nr), and write(tile, i, j, mr, nr) takes each finished MR x NR tile. The fp32 sums of a block
  // stay in `scratch` between slices (quant_scratch()).
  template <class PackA, class PackB, class Write>
  static void blocked(int64_t rows, int64_t cols, int64_t k, PackA pack_a, PackB pack_b, Write write, float* scratch) {
    const int64_t acc_ld = up(cols, NR);
    float* packed_a = scratch;
    float* packed_b = packed_a + up(up(rows, MR) * min(k, KC), 16);
    float* acc = packed_b + up(min(k, KC) * NR, 16);
    alignas(64) float tile[MR * NR];
    for (int64_t k0 = 0; k0 < k; k0 += KC) {
      const int64_t kc = min(KC, k - k0);
      pack_a(k0, kc, packed_a);
      for (int64_t j = 0; j < cols; j += NR) {
        pack_b(k0, kc, j, min(NR, cols - j), packed_b);
        for (int64_t i = 0; i < rows; i += MR) {
          float* sums = acc + i * acc_ld + j;
          const float* in = k0 == 0 ? nullptr : sums;
          if (k0 + kc < k) {
            G::micro_kernel(kc, packed_a + i * kc, packed_b, in, acc_ld, sums, acc_ld);
          } else {
            G::micro_kernel(kc, packed_a + i * kc, packed_b, in, acc_ld, tile, NR);
            write(tile, i, j, min(MR, rows - i), min(NR, cols - j));
          }
        }
      }
    }
  }

  // Tasks over (block of mc weight rows, block of nc x rows): out^T = w @ x^T, each weight row's
  // sums times its scale.
  template <class T> static void int8_gemm(const QuantProblem& p, int64_t begin, int64_t end, float* scratch) {
    const T* x = static_cast<const T*>(p.x);
    const int8_t* w = static_cast<const int8_t*>(p.w);
    const T* scales = static_cast<const T*>(p.scales);
    T* out = static_cast<T*>(p.out);
    for (int64_t task = begin; task < end; ++task) {
      const int64_t n0 = task / p.col_blocks * p.mc, rows = min(p.mc, p.n - n0);
      const int64_t m0 = task % p.col_blocks * p.nc, cols = min(p.nc, p.m - m0);
      blocked(
          rows, cols, p.k,
          [&](int64_t k0, int64_t kc, float* dst) { G::pack(w + n0 * p.k + k0, p.k, 1, rows, kc, dst, kc, up(rows, MR), kc); },
          [&](int64_t k0, int64_t kc, int64_t j, int64_t nr, float* dst) {
            G::pack(x + (m0 + j) * p.x_rs + k0, 1, p.x_rs, kc, nr, dst, NR, kc, NR);
          },
          [&](const float* tile, int64_t i, int64_t j, int64_t mr, int64_t nr) {
            for (int64_t ii = 0; ii < mr; ++ii) {
              const float scale = I::to_float(scales[n0 + i + ii]);
              for (int64_t jj = 0; jj < nr; ++jj)
                out[(m0 + j + jj) * p.out_rs + n0 + i + ii] = round_to<T>(tile[ii * NR + jj] * scale);
            }
          },
          scratch);
    }
  }

  // ---- int4 ---------------------------------------------------------------------------------------

  // The 4-bit value of column o (0-based in its block of bw columns) in one k row of the block.
  static int nibble(const QuantProblem& p, const uint8_t* row, int64_t o, int64_t bw) {
    if (p.split && bw == p.block) return (row[o % (bw / 2)] >> (o < bw / 2 ? 0 : 4)) & 15;
    return (row[o / 2] >> (o % 2 * 4)) & 15;
  }

  // The block holding column c: its first byte, first column and width.
  static const uint8_t* block_of(const QuantProblem& p, int64_t c, int64_t* c0, int64_t* bw) {
    const int64_t b = c / p.block;
    *c0 = b * p.block;
    *bw = min(p.block, p.n - *c0);
    return static_cast<const uint8_t*>(p.w) + *c0 * p.k / 2;  // the blocks before it are full
  }

  // scale[j] and zero[j] - 8 * scale[j] of group g for columns col(0..count) (the w = q * scale +
  // zero form the kernels sum in).
  template <class T, class Col>
  static void group_scales(const QuantProblem& p, int64_t g, int64_t count, Col col, float* scale, float* zero) {
    const T* sz = static_cast<const T*>(p.scales) + g * p.n * 2;
    for (int64_t j = 0; j < count; ++j) {
      const int64_t c = col(j);
      scale[j] = I::to_float(sz[2 * c]);
      zero[j] = I::to_float(sz[2 * c + 1]) - 8.f * scale[j];
    }
  }

  // Column of slot s in a full block of BW columns: the kernels accumulate slot s from byte
  // s % (BW / 2), low nibble for s < BW / 2.
  static int64_t column_of_slot(const QuantProblem& p, int64_t s, int64_t bw) {
    return p.split ? s : s < bw / 2 ? 2 * s : 2 * (s - bw / 2) + 1;
  }

  // group_scales() of `count` (a multiple of W) consecutive columns from c, W at a time.
  template <class T>
  static void group_scales_vec(const QuantProblem& p, int64_t g, int64_t c, int64_t count, float* scale, float* zero) {
    const T* sz = static_cast<const T*>(p.scales) + (g * p.n + c) * 2;
    for (int64_t j = 0; j < count; j += W) {
      V s, z;
      I::deinterleave(I::load(sz + 2 * j), I::load(sz + 2 * j + W), s, z);
      I::store(scale + j, s);
      I::store(zero + j, I::fma(s, I::set1(-8.f), z));
    }
  }

  // Asks for the scales and zeros the block of `bw` columns at c0 reads after group g: group g + 1's,
  // or after the last group the next block's first. A group's are n * 2 values away from the next
  // one's, a jump the hardware prefetcher does not follow, so each group would otherwise wait for
  // them (from memory in a model, whose scales are read once per token).
  template <class T>
  static void prefetch_next_scales(const QuantProblem& p, int64_t g, int64_t groups, int64_t c0, int64_t bw) {
    const int64_t next_g = g + 1 < groups ? g + 1 : 0, next_c = g + 1 < groups ? c0 : c0 + bw;
    if (next_c >= p.n) return;
    const char* sz = reinterpret_cast<const char*>(static_cast<const T*>(p.scales) + (next_g * p.n + next_c) * 2);
    for (int64_t b = 0; b < 2 * bw * int64_t{sizeof(T)}; b += 64) __builtin_prefetch(sz + b, 0, 3);
  }

  // Rows [0, Rn) of x (a, k floats apart; xs: their sums per group, `groups` apart) against one
  // full block of BW columns: tot[r * BW + slot] = fp32 results in slot order.
  template <int BW, int Rn, class T>
  static void int4_full_block(const QuantProblem& p, const uint8_t* blk, int64_t c0, const float* a, const float* xs,
                              int64_t groups, float* tot, float* scale, float* zero) {
    constexpr int NV = BW / W, HV = NV / 2;
    constexpr int64_t HB = BW / 2;  // bytes per k row
    static_assert(HB % W == 0, "a half block is whole vectors");
    const int64_t ahead = Gemv<I>::prefetch_bytes();  // bytes
    const bool to_l2 = Gemv<I>::prefetch_to_l2();
    std::memset(tot, 0, Rn * BW * sizeof(float));
    for (int64_t g = 0; g < groups; ++g) {
      const int64_t k_begin = g * p.group, k_end = min(p.k, k_begin + p.group);
      prefetch_next_scales<T>(p, g, groups, c0, BW);
      if (p.split) group_scales_vec<T>(p, g, c0, BW, scale, zero);
      else group_scales<T>(p, g, BW, [&](int64_t s) { return c0 + column_of_slot(p, s, BW); }, scale, zero);
      V part[Rn][NV];
      for (int r = 0; r < Rn; ++r)
        for (int v = 0; v < NV; ++v) part[r][v] = I::zero();
      for (int64_t kk = k_begin; kk < k_end; ++kk) {
        const uint8_t* row = blk + kk * HB;
        // The blocks follow one another in memory: one stream, prefetched as far ahead as the
        // fp16 GEMV's (a prefetch per row; at most 32 bytes a row, so every line is asked for).
        Gemv<I>::prefetch(row + ahead, to_l2);
        V q[NV];
        for (int v = 0; v < HV; ++v) I::load_u4x2(row + v * W, q[v], q[HV + v]);
        for (int r = 0; r < Rn; ++r) {
          const V xv = I::set1(a[r * p.k + kk]);
          for (int v = 0; v < NV; ++v) part[r][v] = I::fma(xv, q[v], part[r][v]);
        }
      }
      for (int r = 0; r < Rn; ++r) {
        const V sum_x = I::set1(xs[r * groups + g]);
        for (int v = 0; v < NV; ++v) {
          float* t = tot + r * BW + v * W;
          I::store(t, I::fma(I::load(scale + v * W), part[r][v], I::fma(I::load(zero + v * W), sum_x, I::load(t))));
        }
      }
    }
  }

  // Rows per pass over a block: the partial sums (rows x BW / W vectors) must stay in registers.
  template <int BW> static constexpr int kInt4Rows = BW / W <= 4 ? 4 : BW / W <= 8 ? 2 : 1;

  // All m rows against one full block, kInt4Rows<BW> rows per pass, written to out as T.
  template <int BW, class T>
  static void int4_full_block_rows(const QuantProblem& p, const uint8_t* blk, int64_t c0, const float* a32,
                                   const float* xs, int64_t groups, float* tot, float* scale, float* zero) {
    constexpr int RP = kInt4Rows<BW>;
    for (int64_t r0 = 0; r0 < p.m; r0 += RP) {
      const float* a = a32 + r0 * p.k;
      const float* x = xs + r0 * groups;
      switch (min(RP, p.m - r0)) {
        case 4: int4_full_block<BW, (RP >= 4 ? 4 : 1), T>(p, blk, c0, a, x, groups, tot, scale, zero); break;
        case 3: int4_full_block<BW, (RP >= 3 ? 3 : 1), T>(p, blk, c0, a, x, groups, tot, scale, zero); break;
        case 2: int4_full_block<BW, (RP >= 2 ? 2 : 1), T>(p, blk, c0, a, x, groups, tot, scale, zero); break;
        default: int4_full_block<BW, 1, T>(p, blk, c0, a, x, groups, tot, scale, zero); break;
      }
      for (int64_t r = r0; r < min(p.m, r0 + RP); ++r) {
        T* out = static_cast<T*>(p.out) + r * p.out_rs + c0;
        const float* t = tot + (r - r0) * BW;
        if (p.split) {
          write_row<T>(t, nullptr, BW, out);
        } else {
          for (int64_t s = 0; s < BW; ++s) out[column_of_slot(p, s, BW)] = round_to<T>(t[s]);
        }
      }
    }
  }

  // The last, narrower block (any width, pairs): one element at a time.
  template <class T>
  static void int4_narrow_block(const QuantProblem& p, const uint8_t* blk, int64_t c0, int64_t bw, const float* a32,
                                const float* xs, int64_t groups, float* scale, float* zero) {
    for (int64_t o = 0; o < bw; ++o) {
      for (int64_t r = 0; r < p.m; ++r) {
        float total = 0.f;
        for (int64_t g = 0; g < groups; ++g) {
          group_scales<T>(p, g, 1, [&](int64_t) { return c0 + o; }, scale, zero);
          float part = 0.f;
          for (int64_t kk = g * p.group; kk < min(p.k, (g + 1) * p.group); ++kk)
            part += a32[r * p.k + kk] * static_cast<float>(nibble(p, blk + kk * bw / 2, o, bw));
          total += scale[0] * part + zero[0] * xs[r * groups + g];
        }
        static_cast<T*>(p.out)[r * p.out_rs + c0 + o] = round_to<T>(total);
      }
    }
  }

  // Column chunks [begin, end) of nc columns (whole blocks) for all m rows: x's rows in fp32 and
  // their sums per group, then block after block, each one sequential stream.
  template <class T> static void int4_gemv(const QuantProblem& p, int64_t begin, int64_t end, float* scratch) {
    const int64_t groups = (p.k + p.group - 1) / p.group;
    float* a32 = scratch;
    float* xs = a32 + up(p.m * p.k, 16);
    float* tot = xs + up(p.m * (p.k / 32 + 1), 16);
    float* scale = tot + up((p.m > 4 ? p.m : 4) * (p.nc > 64 ? p.nc : 64), 16);
    float* zero = scale + 64;
    G::pack(static_cast<const T*>(p.x), p.x_rs, 1, p.m, p.k, a32, p.k, p.m, p.k);
    for (int64_t r = 0; r < p.m; ++r)
      for (int64_t g = 0; g < groups; ++g) {
        float s = 0.f;
        for (int64_t kk = g * p.group; kk < min(p.k, (g + 1) * p.group); ++kk) s += a32[r * p.k + kk];
        xs[r * groups + g] = s;
      }
    for (int64_t c = begin * p.nc; c < min(p.n, end * p.nc);) {
      int64_t c0, bw;
      const uint8_t* blk = block_of(p, c, &c0, &bw);
      if (bw == 64 && p.block == 64) int4_full_block_rows<64, T>(p, blk, c0, a32, xs, groups, tot, scale, zero);
      else if (bw == 32 && p.block == 32) int4_full_block_rows<32, T>(p, blk, c0, a32, xs, groups, tot, scale, zero);
      else int4_narrow_block<T>(p, blk, c0, bw, a32, xs, groups, scale, zero);
      c = c0 + bw;
    }
  }

  // dst[kk * NR + o] = w[k0 + kk][c + o] dequantized, for kk < kc and o < nr (zeros up to NR).
  // The panel lies in one block (nr and the block offset are multiples of NR, or it ends the
  // block); W columns at a time where the block is split and full.
  template <class T>
  static void int4_panel(const QuantProblem& p, int64_t k0, int64_t kc, int64_t c, int64_t nr, float* dst, float* scale,
                         float* zero) {
    int64_t c0, bw;
    const uint8_t* blk = block_of(p, c, &c0, &bw);
    const int64_t o0 = c - c0, half = bw / 2;
    const bool vector = p.split && bw == p.block && half % W == 0 && o0 % W == 0 && nr % W == 0;
    for (int64_t kk = 0; kk < kc; ++kk) {
      const int64_t k = k0 + kk;
      if (kk == 0 || k % p.group == 0) {
        if (vector) group_scales_vec<T>(p, k / p.group, c, nr, scale, zero);
        else group_scales<T>(p, k / p.group, nr, [&](int64_t j) { return c + j; }, scale, zero);
      }
      const uint8_t* row = blk + k * half;
      float* d = dst + kk * NR;
      if (vector) {
        for (int64_t o = 0; o < nr; o += W) {
          const int64_t b = o0 + o;
          const V q = b < half ? I::template load_u4<0>(row + b) : I::template load_u4<4>(row + b - half);
          I::store(d + o, I::fma(q, I::load(scale + o), I::load(zero + o)));
        }
      } else {
        for (int64_t o = 0; o < nr; ++o) d[o] = static_cast<float>(nibble(p, row, o0 + o, bw)) * scale[o] + zero[o];
      }
      for (int64_t o = nr; o < NR; ++o) d[o] = 0.f;
    }
  }

  // Tasks over (block of mc x rows, block of nc weight columns: whole blocks): out = x @ w^T on the
  // micro-kernel, w dequantized panel by panel.
  template <class T> static void int4_gemm(const QuantProblem& p, int64_t begin, int64_t end, float* scratch) {
    const T* x = static_cast<const T*>(p.x);
    T* out = static_cast<T*>(p.out);
    float* scale = scratch + quant_scratch(I::gemm, p, true) - 2 * NR;
    float* zero = scale + NR;
    for (int64_t task = begin; task < end; ++task) {
      const int64_t m0 = task / p.col_blocks * p.mc, rows = min(p.mc, p.m - m0);
      const int64_t n0 = task % p.col_blocks * p.nc, cols = min(p.nc, p.n - n0);
      blocked(
          rows, cols, p.k,
          [&](int64_t k0, int64_t kc, float* dst) { G::pack(x + m0 * p.x_rs + k0, p.x_rs, 1, rows, kc, dst, kc, up(rows, MR), kc); },
          [&](int64_t k0, int64_t kc, int64_t j, int64_t nr, float* dst) {
            int4_panel<T>(p, k0, kc, n0 + j, nr, dst, scale, zero);
          },
          [&](const float* tile, int64_t i, int64_t j, int64_t mr, int64_t nr) {
            for (int64_t ii = 0; ii < mr; ++ii)
              write_row<T>(tile + ii * NR, nullptr, nr, out + (m0 + i + ii) * p.out_rs + n0 + j);
          },
          scratch);
    }
  }
};
