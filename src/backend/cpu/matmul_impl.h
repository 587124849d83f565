// Generic matmul kernels (out = x · wᵀ + bias) over the TU's `Simd`: register tiles of MR rows × NR columns,
// each output element one vector accumulator over k. M = 1 (decode GEMV) and M > 1 (prefill GEMM) share the
// tile template, so a row's bits never depend on M. NOTE: include only from a kernels_<isa>.cpp.
#pragma once

#include <cstdint>

#include "backend/cpu/cpu_kernels.h"
#include "backend/cpu/simd_common.h"

namespace {

// NOTE determinism: for every (i, j) the sequence is acc = 0; acc = fma(x_i[k..k+L), w_j[k..k+L), acc) for
// k = 0, L, 2L, ...; one zero-padded tail step; hsum in Simd's fixed order; then + bias. Nothing here may
// depend on MR, NR, M or the caller's range split.
template <class E, int MR, int NR>
void matmul_tile(const float* x, const typename E::T* w, int64_t k, const float* bias, float* out, int64_t ldo) {
  V acc[MR][NR];
#pragma GCC unroll 8
  for (int i = 0; i < MR; ++i)
#pragma GCC unroll 8
    for (int j = 0; j < NR; ++j) acc[i][j] = Simd::zero();
  const int64_t k_main = k - k % kLanes;
  int64_t kk = 0;
  for (; kk < k_main; kk += kLanes) {
    if constexpr (MR == 1) {  // GEMV: one weight vector live at a time, so NR accumulators fit in registers
      // The next tile's rows at this offset, once per cache line: the tile reads NR short streams at once, which
      // the hardware prefetchers follow poorly (past the matrix's end a prefetch is a no-op).
      if constexpr (Simd::kGemvPrefetch) {
        if ((kk * static_cast<int64_t>(sizeof(typename E::T))) % 64 == 0) {
#pragma GCC unroll 8
          for (int j = 0; j < NR; ++j) __builtin_prefetch(w + (NR + j) * k + kk);
        }
      }
      const V xv = Simd::load(x + kk);
#pragma GCC unroll 8
      for (int j = 0; j < NR; ++j) acc[0][j] = Simd::fma(xv, E::load(w + j * k + kk), acc[0][j]);
    } else {
      V wv[NR];
#pragma GCC unroll 8
      for (int j = 0; j < NR; ++j) wv[j] = E::load(w + j * k + kk);
#pragma GCC unroll 8
      for (int i = 0; i < MR; ++i) {
        const V xv = Simd::load(x + i * k + kk);
#pragma GCC unroll 8
        for (int j = 0; j < NR; ++j) acc[i][j] = Simd::fma(xv, wv[j], acc[i][j]);
      }
    }
  }
  if (kk < k) {
    const int64_t rest = k - kk;
    V wv[NR];
#pragma GCC unroll 8
    for (int j = 0; j < NR; ++j) wv[j] = load_partial<E>(w + j * k + kk, rest);
#pragma GCC unroll 8
    for (int i = 0; i < MR; ++i) {
      V xv = load_partial<ElemF32>(x + i * k + kk, rest);
#pragma GCC unroll 8
      for (int j = 0; j < NR; ++j) acc[i][j] = Simd::fma(xv, wv[j], acc[i][j]);
    }
  }
  for (int i = 0; i < MR; ++i)
    for (int j = 0; j < NR; ++j) {
      float s = Simd::hsum(acc[i][j]);
      out[i * ldo + j] = bias ? s + bias[j] : s;
    }
}

// Calls matmul_tile<E, MR, nr> for a run-time nr in [1, NR].
template <class E, int MR, int NR>
void matmul_tile_n(int nr, const float* x, const typename E::T* w, int64_t k, const float* bias, float* out,
                   int64_t ldo) {
  if (nr == NR) return matmul_tile<E, MR, NR>(x, w, k, bias, out, ldo);
  if constexpr (NR > 1) return matmul_tile_n<E, MR, NR - 1>(nr, x, w, k, bias, out, ldo);
}

// Rows [i, i + mr) of x (a run-time mr in [1, MR]) against weight rows [j0, j1), in MR x NR tiles; a single row
// takes the GEMV's kGemvNr columns (one accumulator per column would be a chain of dependent FMAs).
template <class E, int MR, int NR>
void matmul_rows(int mr, const float* x, const typename E::T* w, int64_t k, int64_t j0, int64_t j1,
                 const float* bias, float* out, int64_t ldo) {
  if (mr == MR) {
    constexpr int kNr = MR == 1 ? Simd::kGemvNr : NR;
    for (int64_t j = j0; j < j1; j += kNr)
      matmul_tile_n<E, MR, kNr>(static_cast<int>(min_i(kNr, j1 - j)), x, w + j * k, k, bias ? bias + j : nullptr,
                                out + j, ldo);
    return;
  }
  if constexpr (MR > 1) return matmul_rows<E, MR - 1, NR>(mr, x, w, k, j0, j1, bias, out, ldo);
}

template <class E>
void matmul_typed(const peregrine::cpu::MatmulArgs& a, int64_t m0, int64_t m1, int64_t n0, int64_t n1) {
  const auto* w = static_cast<const typename E::T*>(a.w);
  const int64_t k = a.k, n = a.n;
  // Decode GEMV: stream kGemvNr weight rows at a time, each with its own accumulator.
  if (m1 - m0 == 1) return matmul_rows<E, 1, Simd::kGemvNr>(1, a.x + m0 * k, w, k, n0, n1, a.bias, a.out + m0 * n, n);
  // Prefill GEMM: a panel of weight rows (at most ~256 KiB, so it stays in L2 next to an x row tile) is reused
  // by every row tile of x. A few rows of x (a verify step) against short weight rows (K * sizeof(T) <= 2 KiB: the
  // small models whose verify steps speculation runs) take Simd's short tile, which reads the weights one row at a
  // time, where the GEMM tile's several rows at a time are as many short streams (measured on Zen 1: 1.2-1.9x at
  // M 2-16, K 384). The tile never changes an element's arithmetic (see matmul_tile): a row's bits are those of any M.
  constexpr int64_t kPanelBytes = int64_t{256} << 10;
  const int64_t row_bytes = k * static_cast<int64_t>(sizeof(typename E::T));
  const int64_t panel_rows = kPanelBytes / row_bytes;
  const bool short_rows = m1 - m0 <= 16 && row_bytes <= 2048;
  const int64_t mr_max = short_rows ? Simd::kShortMr : Simd::kGemmMr;
  // Short rows: 128 weight rows (at most 256 KiB) per panel; longer ones as many kGemmNr-row tiles as fit.
  const int64_t block_n =
      short_rows ? 128 : max_i(Simd::kGemmNr, min_i(16 * Simd::kGemmNr, panel_rows / Simd::kGemmNr * Simd::kGemmNr));
  for (int64_t jb = n0; jb < n1; jb += block_n) {
    const int64_t jb_end = min_i(n1, jb + block_n);
    for (int64_t i = m0; i < m1; i += mr_max) {
      const int mr = static_cast<int>(min_i(mr_max, m1 - i));
      if (short_rows)
        matmul_rows<E, Simd::kShortMr, Simd::kShortNr>(mr, a.x + i * k, w, k, jb, jb_end, a.bias, a.out + i * n, n);
      else
        matmul_rows<E, Simd::kGemmMr, Simd::kGemmNr>(mr, a.x + i * k, w, k, jb, jb_end, a.bias, a.out + i * n, n);
    }
  }
}

void matmul_kernel(const peregrine::cpu::MatmulArgs& a, int64_t m0, int64_t m1, int64_t n0, int64_t n1) {
  if (m0 >= m1 || n0 >= n1) return;
  switch (a.w_dtype) {
    case peregrine::DType::kBF16:
      return matmul_typed<ElemBF16>(a, m0, m1, n0, n1);
    case peregrine::DType::kF16:
      return matmul_typed<ElemF16>(a, m0, m1, n0, n1);
    default:
      return matmul_typed<ElemF32>(a, m0, m1, n0, n1);
  }
}

}  // namespace
