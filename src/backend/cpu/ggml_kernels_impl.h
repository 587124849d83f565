// The GGUF block kernels (ggml_kernels.h) over the TU's integer traits `G` (32-byte integer vectors of int8 /
// int16 / int32 lanes, 8-lane f32 vectors). NOTE: include only from a ggml_kernels_<isa>.cpp, after its traits.
//
// Per output (i, j) and weight block b (of 32 values, or a 256-value super-block):
//   iacc = T::init (the code offset times the x block's sum, in lane 0, for the offset types)
//   for each 32-value step s of the block: iacc += T::dot(codes(j, b, s), xq(i, b, s))  (int32 lane sums, exact)
//   T::finish: acc = fma(f32(iacc), d_w * d_x, acc) (and the min terms of Q4_1/Q5_1/Q4_K/Q5_K, the -32 of Q6_K)
// then out = hsum(acc) (+ the scalar min sum of Q4_1/Q5_1) (+ bias). None of it depends on MR, NR, M or the range
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

// ---- block types -------------------------------------------------------------------------------------------------

struct BQ4_0 {
  static constexpr int kQk = 32, kSteps = 1, kBytes = 18;
  static constexpr bool kMin = false;
  struct H { float d; };
  static H head(const uint8_t* b) { return {G::f16(b)}; }
  static I init(const H&, const int16_t* xs) { return G::lane0(-8 * (xs[0] + xs[1])); }
  static I codes(const uint8_t* b, const H&, int) { return G::nibbles16(b + 2); }
  static I dot(I acc, I w, I x, const H&, int) { return G::dot(acc, w, x); }
  static void finish(F& acc, float&, I iacc, const H& h, float dx, const int16_t*) {
    acc = G::fma(G::cvt(iacc), G::set1f(h.d * dx), acc);
  }
};

struct BQ4_1 {
  static constexpr int kQk = 32, kSteps = 1, kBytes = 20;
  static constexpr bool kMin = true;
  struct H { float d, m; };
  static H head(const uint8_t* b) { return {G::f16(b), G::f16(b + 2)}; }
  static I init(const H&, const int16_t*) { return G::zero(); }
  static I codes(const uint8_t* b, const H&, int) { return G::nibbles16(b + 4); }
  static I dot(I acc, I w, I x, const H&, int) { return G::dot(acc, w, x); }
  static void finish(F& acc, float& accm, I iacc, const H& h, float dx, const int16_t* xs) {
    acc = G::fma(G::cvt(iacc), G::set1f(h.d * dx), acc);
    accm += (h.m * dx) * static_cast<float>(xs[0] + xs[1]);
  }
};

inline uint32_t load_u32(const uint8_t* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

struct BQ5_0 {
  static constexpr int kQk = 32, kSteps = 1, kBytes = 22;
  static constexpr bool kMin = false;
  struct H { float d; };
  static H head(const uint8_t* b) { return {G::f16(b)}; }
  static I init(const H&, const int16_t* xs) { return G::lane0(-16 * (xs[0] + xs[1])); }
  static I codes(const uint8_t* b, const H&, int) {
    return G::or_(G::nibbles16(b + 6), G::bits_to_bytes(load_u32(b + 2), 0x10));
  }
  static I dot(I acc, I w, I x, const H&, int) { return G::dot(acc, w, x); }
  static void finish(F& acc, float&, I iacc, const H& h, float dx, const int16_t*) {
    acc = G::fma(G::cvt(iacc), G::set1f(h.d * dx), acc);
  }
};

struct BQ5_1 {
  static constexpr int kQk = 32, kSteps = 1, kBytes = 24;
  static constexpr bool kMin = true;
  struct H { float d, m; };
  static H head(const uint8_t* b) { return {G::f16(b), G::f16(b + 2)}; }
  static I init(const H&, const int16_t*) { return G::zero(); }
  static I codes(const uint8_t* b, const H&, int) {
    return G::or_(G::nibbles16(b + 8), G::bits_to_bytes(load_u32(b + 4), 0x10));
  }
  static I dot(I acc, I w, I x, const H&, int) { return G::dot(acc, w, x); }
  static void finish(F& acc, float& accm, I iacc, const H& h, float dx, const int16_t* xs) {
    acc = G::fma(G::cvt(iacc), G::set1f(h.d * dx), acc);
    accm += (h.m * dx) * static_cast<float>(xs[0] + xs[1]);
  }
};

struct BQ8_0 {
  static constexpr int kQk = 32, kSteps = 1, kBytes = 34;
  static constexpr bool kMin = false;
  struct H { float d; };
  static H head(const uint8_t* b) { return {G::f16(b)}; }
  static I init(const H&, const int16_t*) { return G::zero(); }
  static I codes(const uint8_t* b, const H&, int) { return G::load(b + 2); }
  static I dot(I acc, I w, I x, const H&, int) { return G::dot_ss(acc, w, x); }
  static void finish(F& acc, float&, I iacc, const H& h, float dx, const int16_t*) {
    acc = G::fma(G::cvt(iacc), G::set1f(h.d * dx), acc);
  }
};

// Q4_K / Q5_K: the 6-bit scale and min of each of the 8 sub-blocks (the oracle's scale_min_k4), the mins
// duplicated so that min[s] lines up with the two 16-value sums of sub-block s.
struct HeadK {
  float d, dmin;
  int16_t sc[8];
  alignas(32) int16_t m2[16];
};
inline HeadK head_k(const uint8_t* b) {
  HeadK h;
  h.d = G::f16(b);
  h.dmin = G::f16(b + 2);
  const uint8_t* q = b + 4;
  for (int j = 0; j < 8; ++j) {
    int sc, m;
    if (j < 4) {
      sc = q[j] & 63;
      m = q[j + 4] & 63;
    } else {
      sc = (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4);
      m = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
    }
    h.sc[j] = static_cast<int16_t>(sc);
    h.m2[2 * j] = h.m2[2 * j + 1] = static_cast<int16_t>(m);
  }
  return h;
}
inline void finish_k(F& acc, I iacc, const HeadK& h, float dx, const int16_t* xs) {
  acc = G::fma(G::cvt(iacc), G::set1f(h.d * dx), acc);
  acc = G::fma(G::cvt(G::madd16(G::load(h.m2), G::load(xs))), G::set1f(-(h.dmin * dx)), acc);
}

struct BQ4_K {
  static constexpr int kQk = 256, kSteps = 8, kBytes = 144;
  static constexpr bool kMin = false;
  using H = HeadK;
  static H head(const uint8_t* b) { return head_k(b); }
  static I init(const H&, const int16_t*) { return G::zero(); }
  static I codes(const uint8_t* b, const H&, int s) {
    const I v = G::load(b + 16 + 32 * (s >> 1));
    return (s & 1) ? G::hi4(v) : G::lo4(v);
  }
  static I dot(I acc, I w, I x, const H& h, int s) { return G::dot_sc(acc, w, x, G::set1_16(h.sc[s])); }
  static void finish(F& acc, float&, I iacc, const H& h, float dx, const int16_t* xs) { finish_k(acc, iacc, h, dx, xs); }
};

struct BQ5_K {
  static constexpr int kQk = 256, kSteps = 8, kBytes = 176;
  static constexpr bool kMin = false;
  using H = HeadK;
  static H head(const uint8_t* b) { return head_k(b); }
  static I init(const H&, const int16_t*) { return G::zero(); }
  static I codes(const uint8_t* b, const H&, int s) {
    const I v = G::load(b + 48 + 32 * (s >> 1));
    const I high = G::slli16(G::and_(G::srli16(G::load(b + 16), s), G::set1_8(1)), 4);
    return G::or_((s & 1) ? G::hi4(v) : G::lo4(v), high);
  }
  static I dot(I acc, I w, I x, const H& h, int s) { return G::dot_sc(acc, w, x, G::set1_16(h.sc[s])); }
  static void finish(F& acc, float&, I iacc, const H& h, float dx, const int16_t* xs) { finish_k(acc, iacc, h, dx, xs); }
};

struct BQ6_K {
  static constexpr int kQk = 256, kSteps = 8, kBytes = 210;
  static constexpr bool kMin = false;
  struct H { float d; const int8_t* sc; };
  static H head(const uint8_t* b) { return {G::f16(b + 208), reinterpret_cast<const int8_t*>(b + 192)}; }
  static I init(const H&, const int16_t*) { return G::zero(); }
  // Step s = 4 * half + t: values 128 * half + 32 * t + [0, 32): low or high nibbles of ql[64 * half + 32 * (t & 1)
  // + l], two high bits from qh[32 * half + l] at bit 2t.
  static I codes(const uint8_t* b, const H&, int s) {
    const int half = s >> 2, t = s & 3;
    const I v = G::load(b + 64 * half + 32 * (t & 1));
    const I high = G::slli16(G::and_(G::srli16(G::load(b + 128 + 32 * half), 2 * t), G::set1_8(3)), 4);
    return G::or_(t < 2 ? G::lo4(v) : G::hi4(v), high);
  }
  static I dot(I acc, I w, I x, const H& h, int s) {
    return G::dot_sc(acc, w, x, G::set_16x2(h.sc[2 * s], h.sc[2 * s + 1]));
  }
  // Codes are stored + 32: subtract 32 * sum over the 16 sub-blocks of scale * (sum of x codes).
  static void finish(F& acc, float&, I iacc, const H& h, float dx, const int16_t* xs) {
    iacc = G::sub32(iacc, G::slli32(G::madd16(G::cvt8_16(h.sc), G::load(xs)), 5));
    acc = G::fma(G::cvt(iacc), G::set1f(h.d * dx), acc);
  }
};

// ---- tiles ---------------------------------------------------------------------------------------------------------

template <class T, int MR, int NR>
void ggml_tile(const peregrine::cpu::GgmlMatmulArgs& a, int64_t i0, int64_t j0) {
  const int64_t k = a.k, nb = k / T::kQk, xd_stride = k / T::kQk, xs_stride = k / 16;
  const uint8_t* w[NR];
#pragma GCC unroll 8
  for (int j = 0; j < NR; ++j) w[j] = a.w + (j0 + j) * a.row_bytes;
  F acc[MR][NR];
  float accm[MR][NR];
#pragma GCC unroll 8
  for (int i = 0; i < MR; ++i)
#pragma GCC unroll 8
    for (int j = 0; j < NR; ++j) {
      acc[i][j] = G::zerof();
      accm[i][j] = 0.0f;
    }
  for (int64_t b = 0; b < nb; ++b) {
    typename T::H h[NR];
#pragma GCC unroll 8
    for (int j = 0; j < NR; ++j) h[j] = T::head(w[j] + b * T::kBytes);
    I iacc[MR][NR];
#pragma GCC unroll 8
    for (int i = 0; i < MR; ++i)
#pragma GCC unroll 8
      for (int j = 0; j < NR; ++j) iacc[i][j] = T::init(h[j], a.x.sums + (i0 + i) * xs_stride + b * (T::kQk / 16));
#pragma GCC unroll 8
    for (int s = 0; s < T::kSteps; ++s) {
      I wq[NR];
#pragma GCC unroll 8
      for (int j = 0; j < NR; ++j) wq[j] = T::codes(w[j] + b * T::kBytes, h[j], s);
#pragma GCC unroll 8
      for (int i = 0; i < MR; ++i) {
        const I xv = G::load(a.x.q + (i0 + i) * k + b * T::kQk + 32 * s);
#pragma GCC unroll 8
        for (int j = 0; j < NR; ++j) iacc[i][j] = T::dot(iacc[i][j], wq[j], xv, h[j], s);
      }
    }
#pragma GCC unroll 8
    for (int i = 0; i < MR; ++i) {
      const float dx = a.x.d[(i0 + i) * xd_stride + b];
      const int16_t* xs = a.x.sums + (i0 + i) * xs_stride + b * (T::kQk / 16);
#pragma GCC unroll 8
      for (int j = 0; j < NR; ++j) T::finish(acc[i][j], accm[i][j], iacc[i][j], h[j], dx, xs);
    }
  }
  for (int i = 0; i < MR; ++i)
    for (int j = 0; j < NR; ++j) {
      float r = G::hsum(acc[i][j]);
      if constexpr (T::kMin) r += accm[i][j];
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
  const int64_t block_n = gmax(G::kNr, gmin(64 * G::kNr, (int64_t{64} << 10) / a.row_bytes / G::kNr * G::kNr));
  for (int64_t jb = n0; jb < n1; jb += block_n) {
    const int64_t jb_end = gmin(n1, jb + block_n);
    for (int64_t i = m0; i < m1; i += G::kMr) {
      const int mr = static_cast<int>(gmin(G::kMr, m1 - i));
      for (int64_t j = jb; j < jb_end; j += G::kNr)
        ggml_tile_mn<T, G::kMr, G::kNr>(mr, static_cast<int>(gmin(G::kNr, jb_end - j)), a, i, j);
    }
  }
}

void ggml_matmul_kernel(const peregrine::cpu::GgmlMatmulArgs& a, int64_t m0, int64_t m1, int64_t n0, int64_t n1) {
  using peregrine::GgmlType;
  if (m0 >= m1 || n0 >= n1) return;
  switch (a.type) {
    case GgmlType::kQ4_0: return ggml_matmul_typed<BQ4_0>(a, m0, m1, n0, n1);
    case GgmlType::kQ4_1: return ggml_matmul_typed<BQ4_1>(a, m0, m1, n0, n1);
    case GgmlType::kQ5_0: return ggml_matmul_typed<BQ5_0>(a, m0, m1, n0, n1);
    case GgmlType::kQ5_1: return ggml_matmul_typed<BQ5_1>(a, m0, m1, n0, n1);
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

void ggml_quantize_x_kernel(const float* x, int64_t rows, int64_t k, int64_t qk, int8_t* q, float* d, int16_t* sums) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * k;
    int8_t* qr = q + r * k;
    for (int64_t b = 0; b < k / qk; ++b) {
      float amax = 0.0f;
      for (int64_t i = b * qk; i < (b + 1) * qk; ++i) {
        const float v = xr[i] < 0 ? -xr[i] : xr[i];
        amax = v > amax ? v : amax;
      }
      const float scale = amax / 127.0f;
      const float inv = amax > 0.0f ? 127.0f / amax : 0.0f;
      d[r * (k / qk) + b] = scale;
      for (int64_t i = b * qk; i < (b + 1) * qk; ++i) {
        int32_t c = round_even(xr[i] * inv);
        c = c > 127 ? 127 : (c < -127 ? -127 : c);
        qr[i] = static_cast<int8_t>(c);
      }
    }
    for (int64_t g = 0; g < k / 16; ++g) {
      int32_t s = 0;
      for (int i = 0; i < 16; ++i) s += qr[g * 16 + i];
      sums[r * (k / 16) + g] = static_cast<int16_t>(s);
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
