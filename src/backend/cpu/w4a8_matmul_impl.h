// W4A8 matmul kernels (cpu_kernels.h, W4A8MatmulArgs) over the TU's `I4Dot` traits: int4 codes unpacked to
// unsigned bytes in registers (low and high nibbles, never written out), multiplied by int8 activations with
// integer dot products into int32 lanes, per group: acc = dot(codes, x) - x_corr (the 8 * sum(x) of the midpoint,
// lane by lane), then accf = accf + float(acc) * scale (one f32 vector per output), and at the end
// out = hsum(accf) * x_scale (+ bias).
// NOTE: include only from a kernel TU that defined `I4Dot` (its simd_<isa>.h, or int8_avx512vnni.cpp).
//
// I4Dot provides: kBytes (code bytes per step = int8 columns per half block), kLanes (int32 lanes of Acc),
// kGemvNr / kGemmMr / kGemmNr (tiles), kName; Acc, F (f32 vector of kLanes), W, X; zero(), fzero(),
// load_codes(p, &lo, &hi), load_x(p), dot2(acc, lo, xe, hi, xo) (acc += lane sums of lo*xe + hi*xo, products of
// unsigned codes and signed x), correct(acc, corr) (acc - corr[lane]), scale_add(accf, acc, s), hsum(accf).
// NOTE determinism: the int32 sums are exact and the float sequence per output (groups in order, then one
// horizontal sum, then x_scale, then bias) depends on neither the tile, M nor the thread split: rows are
// bit-identical whatever M. Different ISAs (lane counts) round differently.
#pragma once

#include <cstdint>

#include "backend/cpu/cpu_kernels.h"

namespace {

inline int64_t w4_min(int64_t a, int64_t b) { return a < b ? a : b; }
inline int64_t w4_max(int64_t a, int64_t b) { return a > b ? a : b; }

template <int MR, int NR>
void w4a8_tile(const peregrine::cpu::W4A8MatmulArgs& a, int64_t i0, int64_t j0) {
  constexpr int64_t kB = I4Dot::kBytes, kBlock = 2 * kB;
  const int64_t k = a.k, groups = a.groups, gs = a.group_size, row_bytes = k / 2;
  const uint8_t* w[NR];
#pragma GCC unroll 8
  for (int j = 0; j < NR; ++j) w[j] = a.codes + (j0 + j) * row_bytes;
  const int8_t* x[MR];
#pragma GCC unroll 8
  for (int i = 0; i < MR; ++i) x[i] = a.x + (i0 + i) * k;
  typename I4Dot::F accf[MR][NR];
#pragma GCC unroll 8
  for (int i = 0; i < MR; ++i)
#pragma GCC unroll 8
    for (int j = 0; j < NR; ++j) accf[i][j] = I4Dot::fzero();
  // GEMV: the next tile's rows (contiguous) are prefetched while this tile streams.
  const char* next = reinterpret_cast<const char*>(a.codes + (j0 + NR) * row_bytes);
  const char* next_end = reinterpret_cast<const char*>(a.codes + a.n * row_bytes);
  for (int64_t g = 0; g < groups; ++g) {
    typename I4Dot::Acc acc[MR][NR];
#pragma GCC unroll 8
    for (int i = 0; i < MR; ++i)
#pragma GCC unroll 8
      for (int j = 0; j < NR; ++j) acc[i][j] = I4Dot::zero();
    for (int64_t kk = g * gs; kk < (g + 1) * gs; kk += kBlock) {
      const int64_t b = kk / 2;
      if constexpr (MR == 1) {
        constexpr int64_t kAhead = NR * kB;
        const char* pf = next + b / kB * kAhead;
        if (pf < next_end) {
          __builtin_prefetch(pf, 0, 3);
          if constexpr (kAhead > 64) __builtin_prefetch(pf + 64, 0, 3);
          if constexpr (kAhead > 128) __builtin_prefetch(pf + 128, 0, 3);
          if constexpr (kAhead > 192) __builtin_prefetch(pf + 192, 0, 3);
        }
        const typename I4Dot::X xe = I4Dot::load_x(x[0] + kk), xo = I4Dot::load_x(x[0] + kk + kB);
#pragma GCC unroll 8
        for (int j = 0; j < NR; ++j) {
          typename I4Dot::W lo, hi;
          I4Dot::load_codes(w[j] + b, &lo, &hi);
          acc[0][j] = I4Dot::dot2(acc[0][j], lo, xe, hi, xo);
        }
      } else {
        typename I4Dot::W lo[NR], hi[NR];
#pragma GCC unroll 8
        for (int j = 0; j < NR; ++j) I4Dot::load_codes(w[j] + b, &lo[j], &hi[j]);
#pragma GCC unroll 8
        for (int i = 0; i < MR; ++i) {
          const typename I4Dot::X xe = I4Dot::load_x(x[i] + kk), xo = I4Dot::load_x(x[i] + kk + kB);
#pragma GCC unroll 8
          for (int j = 0; j < NR; ++j) acc[i][j] = I4Dot::dot2(acc[i][j], lo[j], xe, hi[j], xo);
        }
      }
    }
#pragma GCC unroll 8
    for (int i = 0; i < MR; ++i) {
      const int32_t* corr = a.x_corr + ((i0 + i) * groups + g) * I4Dot::kLanes;
#pragma GCC unroll 8
      for (int j = 0; j < NR; ++j)
        accf[i][j] = I4Dot::scale_add(accf[i][j], I4Dot::correct(acc[i][j], corr), a.scales[(j0 + j) * groups + g]);
    }
  }
  for (int i = 0; i < MR; ++i)
    for (int j = 0; j < NR; ++j) {
      const float r = I4Dot::hsum(accf[i][j]) * a.x_scale[i0 + i];
      a.out[(i0 + i) * a.n + j0 + j] = a.bias ? r + a.bias[j0 + j] : r;
    }
}

template <int MR, int NR>
void w4a8_tile_n(int nr, const peregrine::cpu::W4A8MatmulArgs& a, int64_t i0, int64_t j0) {
  if (nr == NR) return w4a8_tile<MR, NR>(a, i0, j0);
  if constexpr (NR > 1) return w4a8_tile_n<MR, NR - 1>(nr, a, i0, j0);
}
template <int MR, int NR>
void w4a8_tile_mn(int mr, int nr, const peregrine::cpu::W4A8MatmulArgs& a, int64_t i0, int64_t j0) {
  if (mr == MR) return w4a8_tile_n<MR, NR>(nr, a, i0, j0);
  if constexpr (MR > 1) return w4a8_tile_mn<MR - 1, NR>(mr, nr, a, i0, j0);
}

// Columns [n0, n1) of rows [m0, m1): GEMV for one row; otherwise blocks of weight rows (about 128 KiB of codes,
// in L2) reused by every row tile of x.
void w4a8_kernel(const peregrine::cpu::W4A8MatmulArgs& a, int64_t m0, int64_t m1, int64_t n0, int64_t n1) {
  if (m0 >= m1 || n0 >= n1) return;
  if (m1 - m0 == 1) {
    for (int64_t j = n0; j < n1; j += I4Dot::kGemvNr)
      w4a8_tile_n<1, I4Dot::kGemvNr>(static_cast<int>(w4_min(I4Dot::kGemvNr, n1 - j)), a, m0, j);
    return;
  }
  const int64_t row_bytes = w4_max(1, a.k / 2);
  const int64_t block_n =
      w4_max(I4Dot::kGemmNr, w4_min(64 * I4Dot::kGemmNr, (int64_t{128} << 10) / row_bytes / I4Dot::kGemmNr * I4Dot::kGemmNr));
  for (int64_t jb = n0; jb < n1; jb += block_n) {
    const int64_t jb_end = w4_min(n1, jb + block_n);
    for (int64_t i = m0; i < m1; i += I4Dot::kGemmMr) {
      const int mr = static_cast<int>(w4_min(I4Dot::kGemmMr, m1 - i));
      for (int64_t j = jb; j < jb_end; j += I4Dot::kGemmNr)
        w4a8_tile_mn<I4Dot::kGemmMr, I4Dot::kGemmNr>(mr, static_cast<int>(w4_min(I4Dot::kGemmNr, jb_end - j)), a, i, j);
    }
  }
}

inline peregrine::cpu::W4A8Kernel w4a8_kernel_info() {
  peregrine::cpu::W4A8Kernel k;
  k.fn = w4a8_kernel;
  k.step = static_cast<int>(I4Dot::kBytes);
  k.lanes = I4Dot::kLanes;
  k.name = I4Dot::kName;
  return k;
}

}  // namespace
