// The GGUF block kernels (ggml_kernels.h) over the TU's integer traits `G` (32-byte integer vectors of int8 /
// int16 / int32 lanes, 8-lane f32 vectors). NOTE: include only from a ggml_kernels_<isa>.cpp, after its traits.
//
// Per output (i, j) and weight block b (of 32 values, or a 256-value super-block):
//   iacc = T::init (the code offset times the x block's sum, in lane 0, for the offset types)
//   for each 32-value step s of the block: iacc += T::dot(codes(j, b, s), xq(i, b, s))  (int32 lane sums, exact)
//   T::finish: acc = fma(f32(iacc), d_w * d_x, acc) (and the min terms of Q4_1/Q5_1/Q4_K/Q5_K, the -32 of Q6_K)
// then out = hsum(acc) (+ bias). None of it depends on MR, NR, M or the range
// split (see the determinism note in ggml_kernels.h).
#pragma once

#include <cstdint>
#include <cstring>

#include "backend/cpu/ggml_kernels.h"

namespace {

using I = G::I;
using F = G::F;

inline int64_t gmin(int64_t a, int64_t b) { return a < b ? a : b; }
inline int64_t gmax(int64_t a, int64_t b) { return a > b ? a : b; }
inline uint32_t load_u32(const uint8_t* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

// What a block's init / finish see of its row of x: the block's scale and 16-sums, and for the paired layout the
// pair's lane offsets and float vectors.
struct XB {
  float dx;
  const int16_t* xs;
  const int32_t* off;
  const float* pf;
};

// ---- block types -------------------------------------------------------------------------------------------------

// Q4_0 / Q4_1 / Q5_0 / Q5_1 on two blocks at once (the paired x layout, ggml_kernels.h): one vector holds the
// 16 nibble bytes of both blocks, so its low nibbles are values 0..15 of each and its high nibbles values 16..31;
// lanes 0-3 of every dot product then belong to the first block and lanes 4-7 to the second, and the scale
// vector is [d(first) x4, d(second) x4]. kHigh: the Q5 high bits; kMin: w = d * q + m (else w = d * (q - off)).
template <int kTypeSize, int kQsAt, int kQhAt, bool kMinT>
struct BPair {
  static constexpr int kQk = 64, kSteps = 2, kBytes = 2 * kTypeSize;
  static constexpr bool kPair = true;
  struct H {
    I v;
    F d, m;
    uint32_t lo_bits, hi_bits;
  };
  // b: the pair's first block; single: no second block (the row's last, unpaired one).
  static H head(const uint8_t* b, bool single) {
    H h;
    const uint8_t* b2 = single ? nullptr : b + kTypeSize;
    h.v = G::pair16(b + kQsAt, b2 ? b2 + kQsAt : nullptr);
    h.d = G::f16x2(b, b2);
    if constexpr (kMinT) h.m = G::f16x2(b + 2, b2 ? b2 + 2 : nullptr);
    if constexpr (kQhAt >= 0) {
      const uint32_t a = load_u32(b + kQhAt), c = b2 ? load_u32(b2 + kQhAt) : 0u;
      h.lo_bits = (a & 0xffffu) | (c << 16);
      h.hi_bits = (a >> 16) | (c & 0xffff0000u);
    }
    return h;
  }
  static I init(const H&, const XB& xb) {
    if constexpr (kMinT) return G::zero();
    else return G::load(xb.off);
  }
  static I codes(const uint8_t*, const H& h, int s) {
    I c = s == 0 ? G::lo4(h.v) : G::hi4(h.v);
    if constexpr (kQhAt >= 0) c = G::or_(c, G::bits_to_bytes(s == 0 ? h.lo_bits : h.hi_bits, 0x10));
    return c;
  }
  static I dot(I acc, I w, I x, const H&, int) { return G::dot(acc, w, x); }
  static void finish(F& acc, I iacc, const H& h, const XB& xb) {
    acc = G::fma(G::cvt(iacc), G::mulf(h.d, G::loadf(xb.pf)), acc);
    if constexpr (kMinT) acc = G::fma(h.m, G::loadf(xb.pf + 8), acc);
  }
};
using BP4_0 = BPair<18, 2, -1, false>;
using BP4_1 = BPair<20, 4, -1, true>;
using BP5_0 = BPair<22, 6, 2, false>;
using BP5_1 = BPair<24, 8, 4, true>;

struct BQ8_0 {
  static constexpr bool kPair = false;
  static constexpr int kQk = 32, kSteps = 1, kBytes = 34;
  struct H { float d; };
  static H head(const uint8_t* b, bool) { return {G::f16(b)}; }
  static I init(const H&, const XB&) { return G::zero(); }
  static I codes(const uint8_t* b, const H&, int) { return G::load(b + 2); }
  static I dot(I acc, I w, I x, const H&, int) { return G::dot_ss(acc, w, x); }
  static void finish(F& acc, I iacc, const H& h, const XB& xb) {
    acc = G::fma(G::cvt(iacc), G::set1f(h.d * xb.dx), acc);
  }
};

// Q4_K / Q5_K: the 6-bit scales and mins of the 8 sub-blocks from the 12 packed bytes (words a, b, c): scales
// 0-3 and mins 0-3 are the low 6 bits of a and b; scales / mins 4-7 take their low 4 bits from the nibbles of c
// and their top 2 bits from the top bits of a / b. sc: the 8 scales as int16 in both halves; m2: the mins as
// int16, each twice (so min s meets the two 16-value sums of sub-block s).
struct HeadK {
  float d, dmin;
  I sc, m2;
};
inline HeadK head_k(const uint8_t* b) {
  HeadK h;
  h.d = G::f16(b);
  h.dmin = G::f16(b + 2);
  const uint32_t wa = load_u32(b + 4), wb = load_u32(b + 8), wc = load_u32(b + 12);
  const uint32_t sc_lo = wa & 0x3f3f3f3fu, m_lo = wb & 0x3f3f3f3fu;
  const uint32_t sc_hi = (wc & 0x0f0f0f0fu) | (((wa >> 6) & 0x03030303u) << 4);
  const uint32_t m_hi = ((wc >> 4) & 0x0f0f0f0fu) | (((wb >> 6) & 0x03030303u) << 4);
  h.sc = G::u8x8_to16(sc_lo, sc_hi);
  h.m2 = G::u8x8_to16_twice(m_lo, m_hi);
  return h;
}
inline void finish_k(F& acc, I iacc, const HeadK& h, float dx, const int16_t* xs) {
  acc = G::fma(G::cvt(iacc), G::set1f(h.d * dx), acc);
  acc = G::fma(G::cvt(G::madd16(h.m2, G::load(xs))), G::set1f(-(h.dmin * dx)), acc);
}

struct BQ4_K {
  static constexpr bool kPair = false;
  static constexpr int kQk = 256, kSteps = 8, kBytes = 144;
  using H = HeadK;
  static H head(const uint8_t* b, bool) { return head_k(b); }
  static I init(const H&, const XB&) { return G::zero(); }
  static I codes(const uint8_t* b, const H&, int s) {
    const I v = G::load(b + 16 + 32 * (s >> 1));
    return (s & 1) ? G::hi4(v) : G::lo4(v);
  }
  static I dot(I acc, I w, I x, const H& h, int s) { return G::dot_sc(acc, w, x, G::pick16(h.sc, s)); }
  static void finish(F& acc, I iacc, const H& h, const XB& xb) { finish_k(acc, iacc, h, xb.dx, xb.xs); }
};

struct BQ5_K {
  static constexpr bool kPair = false;
  static constexpr int kQk = 256, kSteps = 8, kBytes = 176;
  using H = HeadK;
  static H head(const uint8_t* b, bool) { return head_k(b); }
  static I init(const H&, const XB&) { return G::zero(); }
  static I codes(const uint8_t* b, const H&, int s) {
    const I v = G::load(b + 48 + 32 * (s >> 1));
    const I high = G::slli16(G::and_(G::srli16(G::load(b + 16), s), G::set1_8(1)), 4);
    return G::or_((s & 1) ? G::hi4(v) : G::lo4(v), high);
  }
  static I dot(I acc, I w, I x, const H& h, int s) { return G::dot_sc(acc, w, x, G::pick16(h.sc, s)); }
  static void finish(F& acc, I iacc, const H& h, const XB& xb) { finish_k(acc, iacc, h, xb.dx, xb.xs); }
};

struct BQ6_K {
  static constexpr bool kPair = false;
  static constexpr int kQk = 256, kSteps = 8, kBytes = 210;
  struct H {
    float d;
    const int8_t* sc;
    I scb;  // the 16 int8 scales in both halves
  };
  static H head(const uint8_t* b, bool) {
    return {G::f16(b + 208), reinterpret_cast<const int8_t*>(b + 192), G::bcast16(b + 192)};
  }
  static I init(const H&, const XB&) { return G::zero(); }
  // Step s = 4 * half + t: values 128 * half + 32 * t + [0, 32): low or high nibbles of ql[64 * half + 32 * (t & 1)
  // + l], two high bits from qh[32 * half + l] at bit 2t.
  static I codes(const uint8_t* b, const H&, int s) {
    const int half = s >> 2, t = s & 3;
    const I v = G::load(b + 64 * half + 32 * (t & 1));
    const I high = G::slli16(G::and_(G::srli16(G::load(b + 128 + 32 * half), 2 * t), G::set1_8(3)), 4);
    return G::or_(t < 2 ? G::lo4(v) : G::hi4(v), high);
  }
  static I dot(I acc, I w, I x, const H& h, int s) {
    return G::dot_sc(acc, w, x, G::pick_s8_pair(h.scb, s));
  }
  // Codes are stored + 32: subtract 32 * sum over the 16 sub-blocks of scale * (sum of x codes).
  static void finish(F& acc, I iacc, const H& h, const XB& xb) {
    iacc = G::sub32(iacc, G::slli32(G::madd16(G::cvt8_16(h.sc), G::load(xb.xs)), 5));
    acc = G::fma(G::cvt(iacc), G::set1f(h.d * xb.dx), acc);
  }
};

// ---- tiles ---------------------------------------------------------------------------------------------------------

template <class T, int MR, int NR>
void ggml_tile(const peregrine::cpu::GgmlMatmulArgs& a, int64_t i0, int64_t j0) {
  const int64_t k = a.k, blocks32 = k / 32;
  const int64_t nb = T::kPair ? (blocks32 + 1) / 2 : k / T::kQk;
  const int64_t xd_stride = k / (T::kPair ? 32 : T::kQk), xs_stride = k / 16, qs = a.x.q_stride;
  const uint8_t* w[NR];
#pragma GCC unroll 8
  for (int j = 0; j < NR; ++j) w[j] = a.w + (j0 + j) * a.row_bytes;
  F acc[MR][NR];
#pragma GCC unroll 8
  for (int i = 0; i < MR; ++i)
#pragma GCC unroll 8
    for (int j = 0; j < NR; ++j) acc[i][j] = G::zerof();
  for (int64_t b = 0; b < nb; ++b) {
    const bool single = T::kPair && 2 * b + 1 == blocks32;
    typename T::H h[NR];
#pragma GCC unroll 8
    for (int j = 0; j < NR; ++j) h[j] = T::head(w[j] + b * T::kBytes, single);
    XB xb[MR];
#pragma GCC unroll 8
    for (int i = 0; i < MR; ++i) {
      const int64_t r = i0 + i;
      xb[i].dx = a.x.d[r * xd_stride + (T::kPair ? 0 : b)];
      xb[i].xs = a.x.sums + r * xs_stride + b * (T::kQk / 16);
      if constexpr (T::kPair) {
        const int64_t pairs = (blocks32 + 1) / 2;
        xb[i].off = a.x.pair_off + (r * pairs + b) * 8;
        xb[i].pf = a.x.pair_f + (r * pairs + b) * 16;
      }
    }
    I iacc[MR][NR];
#pragma GCC unroll 8
    for (int i = 0; i < MR; ++i)
#pragma GCC unroll 8
      for (int j = 0; j < NR; ++j) iacc[i][j] = T::init(h[j], xb[i]);
#pragma GCC unroll 8
    for (int s = 0; s < T::kSteps; ++s) {
      I wq[NR];
#pragma GCC unroll 8
      for (int j = 0; j < NR; ++j) wq[j] = T::codes(w[j] + b * T::kBytes, h[j], s);
#pragma GCC unroll 8
      for (int i = 0; i < MR; ++i) {
        const I xv = G::load(a.x.q + (i0 + i) * qs + b * T::kQk + 32 * s);
#pragma GCC unroll 8
        for (int j = 0; j < NR; ++j) iacc[i][j] = T::dot(iacc[i][j], wq[j], xv, h[j], s);
      }
    }
#pragma GCC unroll 8
    for (int i = 0; i < MR; ++i)
#pragma GCC unroll 8
      for (int j = 0; j < NR; ++j) T::finish(acc[i][j], iacc[i][j], h[j], xb[i]);
  }
  for (int i = 0; i < MR; ++i)
    for (int j = 0; j < NR; ++j) {
      const float r = G::hsum(acc[i][j]);
      a.out[(i0 + i) * a.n + j0 + j] = a.bias ? r + a.bias[j0 + j] : r;
    }
}

template <class T, int MR, int NR>
void ggml_tile_n(int nr, const peregrine::cpu::GgmlMatmulArgs& a, int64_t i0, int64_t j0) {
  if (nr == NR) return ggml_tile<T, MR, NR>(a, i0, j0);
  if constexpr (NR > 1) return ggml_tile_n<T, MR, NR - 1>(nr, a, i0, j0);
}
template <class T, int MR, int NR>
void ggml_tile_mn(int mr, int nr, const peregrine::cpu::GgmlMatmulArgs& a, int64_t i0, int64_t j0) {
  if (mr == MR) return ggml_tile_n<T, MR, NR>(nr, a, i0, j0);
  if constexpr (MR > 1) return ggml_tile_mn<T, MR - 1, NR>(mr, nr, a, i0, j0);
}

template <class T>
void ggml_matmul_typed(const peregrine::cpu::GgmlMatmulArgs& a, int64_t m0, int64_t m1, int64_t n0, int64_t n1) {
  if (m1 - m0 == 1) {
    for (int64_t j = n0; j < n1; j += G::kGemvNr)
      ggml_tile_n<T, 1, G::kGemvNr>(static_cast<int>(gmin(G::kGemvNr, n1 - j)), a, m0, j);
    return;
  }
  // Panels of weight rows (about 64 KiB of blocks, in L2) reused by every row tile of x.
  constexpr int kMr = T::kQk == 256 ? G::kMrK : G::kMr, kNr = T::kQk == 256 ? G::kNrK : G::kNr;
  const int64_t block_n = gmax(kNr, gmin(64 * kNr, (int64_t{64} << 10) / a.row_bytes / kNr * kNr));
  for (int64_t jb = n0; jb < n1; jb += block_n) {
    const int64_t jb_end = gmin(n1, jb + block_n);
    for (int64_t i = m0; i < m1; i += kMr) {
      const int mr = static_cast<int>(gmin(kMr, m1 - i));
      for (int64_t j = jb; j < jb_end; j += kNr)
        ggml_tile_mn<T, kMr, kNr>(mr, static_cast<int>(gmin(kNr, jb_end - j)), a, i, j);
    }
  }
}

void ggml_matmul_kernel(const peregrine::cpu::GgmlMatmulArgs& a, int64_t m0, int64_t m1, int64_t n0, int64_t n1) {
  using peregrine::GgmlType;
  if (m0 >= m1 || n0 >= n1) return;
  switch (a.type) {
    case GgmlType::kQ4_0: return ggml_matmul_typed<BP4_0>(a, m0, m1, n0, n1);
    case GgmlType::kQ4_1: return ggml_matmul_typed<BP4_1>(a, m0, m1, n0, n1);
    case GgmlType::kQ5_0: return ggml_matmul_typed<BP5_0>(a, m0, m1, n0, n1);
    case GgmlType::kQ5_1: return ggml_matmul_typed<BP5_1>(a, m0, m1, n0, n1);
    case GgmlType::kQ8_0: return ggml_matmul_typed<BQ8_0>(a, m0, m1, n0, n1);
    case GgmlType::kQ4_K: return ggml_matmul_typed<BQ4_K>(a, m0, m1, n0, n1);
    case GgmlType::kQ5_K: return ggml_matmul_typed<BQ5_K>(a, m0, m1, n0, n1);
    case GgmlType::kQ6_K: return ggml_matmul_typed<BQ6_K>(a, m0, m1, n0, n1);
    default: return;  // validated by the caller
  }
}

// Round to nearest even through the float adder (exact for |v| < 2^22), no libm call, no ISA assumption.
inline int32_t round_even(float v) {
  const float t = v + 12582912.0f;  // 1.5 * 2^23
  int32_t bits;
  std::memcpy(&bits, &t, 4);
  return (bits & 0x007fffff) - 0x00400000;
}

void ggml_quantize_x_kernel(const float* x, int64_t rows, int64_t k, peregrine::GgmlType t,
                            const peregrine::cpu::GgmlQuantizedX& o) {
  const int64_t qk = peregrine::cpu::ggml_x_block(t), nb = k / qk, q_stride = o.q_stride;
  // pair_off null: the plain layout even for the paired types (the packed kernels, ggml_packed.h, read it).
  const bool paired = peregrine::cpu::ggml_x_paired(t) && o.pair_off != nullptr;
  const int32_t offset = peregrine::cpu::ggml_x_offset(t);
  const int64_t pairs = peregrine::cpu::ggml_x_pairs(t, k);
  auto* q = const_cast<int8_t*>(o.q);
  auto* d = const_cast<float*>(o.d);
  auto* sums = const_cast<int16_t*>(o.sums);
  int8_t codes[256];
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * k;
    int8_t* qr = q + r * q_stride;
    int16_t* sr = sums + r * (k / 16);
    for (int64_t b = 0; b < nb; ++b) {
      float amax = 0.0f;
      for (int64_t i = 0; i < qk; ++i) {
        const float v = xr[b * qk + i] < 0 ? -xr[b * qk + i] : xr[b * qk + i];
        amax = v > amax ? v : amax;
      }
      const float inv = amax > 0.0f ? 127.0f / amax : 0.0f;
      d[r * nb + b] = amax / 127.0f;
      for (int64_t i = 0; i < qk; ++i) {
        int32_t c = round_even(xr[b * qk + i] * inv);
        codes[i] = static_cast<int8_t>(c > 127 ? 127 : (c < -127 ? -127 : c));
      }
      for (int64_t g = 0; g < qk / 16; ++g) {
        int32_t s = 0;
        for (int i = 0; i < 16; ++i) s += codes[g * 16 + i];
        sr[b * (qk / 16) + g] = static_cast<int16_t>(s);
      }
      if (!paired) {
        std::memcpy(qr + b * qk, codes, static_cast<size_t>(qk));
        continue;
      }
      // Block b is half `b & 1` of pair b / 2: its values 0..15 and 16..31 go to the pair's two vectors.
      int8_t* pq = qr + (b / 2) * 64 + (b & 1) * 16;
      std::memcpy(pq, codes, 16);
      std::memcpy(pq + 32, codes + 16, 16);
    }
    if (!paired) continue;
    if (nb % 2) {  // the unpaired last block: its partner's codes are zero
      int8_t* pq = qr + (nb / 2) * 64 + 16;
      std::memset(pq, 0, 16);
      std::memset(pq + 32, 0, 16);
    }
    auto* off = const_cast<int32_t*>(o.pair_off) + r * pairs * 8;
    auto* pf = const_cast<float*>(o.pair_f) + r * pairs * 16;
    for (int64_t p = 0; p < pairs; ++p) {
      for (int i = 0; i < 8; ++i) off[p * 8 + i] = 0;
      for (int i = 0; i < 16; ++i) pf[p * 16 + i] = 0.0f;
      for (int h = 0; h < 2 && 2 * p + h < nb; ++h) {
        const int64_t b = 2 * p + h;
        const int32_t sum = sr[2 * b] + sr[2 * b + 1];
        off[p * 8 + 4 * h] = -offset * sum;
        for (int i = 0; i < 4; ++i) pf[p * 16 + 4 * h + i] = d[r * nb + b];
        pf[p * 16 + 8 + 4 * h] = d[r * nb + b] * static_cast<float>(sum);
      }
    }
  }
}

peregrine::cpu::GgmlKernelTable make_ggml_table() {
  peregrine::cpu::GgmlKernelTable t;
  t.name = G::kName;
  t.quantize_x = ggml_quantize_x_kernel;
  t.matmul = ggml_matmul_kernel;
  return t;
}

}  // namespace
