// Quantized-weight matmul kernels (W4A16 / W8A16: int4 or uint8 codes, f32 group scales, optional zero points)
// over the TU's `Simd`: codes are widened to f32 in registers and never written out. NOTE: include only from a
// kernels_<isa>.cpp.
//
// Per output (i, j) and group g:  accq = sum over the group of code * x (one vector accumulator, in k order of
// the group's vectors), then acc = fma(scale, accq - zero * xsum[i, g], acc), where xsum holds the lane sums of
// x over the group (prepared by the caller once per row). After the last group: hsum(acc) (+ bias).
// NOTE determinism: that sequence does not depend on MR, NR, M or the range split, so a row's bits never depend
// on the batch; GEMV (M = 1) and GEMM share the tile template.
#pragma once

#include <cstdint>

#include "backend/cpu/cpu_kernels.h"
#include "backend/cpu/simd_common.h"

namespace {

// int4: a vector of kLanes bytes holds 2·kLanes codes; lo lanes are the even k, hi lanes the odd k of the block,
// so the caller lays x out per block of 2·kLanes as [even k..., odd k...].
template <int MR, int NR, bool kI4>
void qmatmul_tile(const peregrine::cpu::QuantMatmulArgs& a, int64_t i0, int64_t j0) {
  const int64_t k = a.k, groups = a.groups, gs = a.group_size;
  const int64_t row_bytes = kI4 ? k / 2 : k;
  const uint8_t* w[NR];
#pragma GCC unroll 8
  for (int j = 0; j < NR; ++j) w[j] = a.codes + (j0 + j) * row_bytes;
  const float* x[MR];
#pragma GCC unroll 8
  for (int i = 0; i < MR; ++i) x[i] = a.x + (i0 + i) * k;
  V acc[MR][NR];
#pragma GCC unroll 8
  for (int i = 0; i < MR; ++i)
#pragma GCC unroll 8
    for (int j = 0; j < NR; ++j) acc[i][j] = Simd::zero();
  constexpr int64_t kStep = kI4 ? 2 * kLanes : kLanes;  // codes per vector of bytes
  // GEMV: the next tile's rows (one contiguous block of NR rows) are prefetched as this tile streams, two cache
  // lines per step of kLanes bytes per row, so the hardware never waits for a new set of row streams to ramp up.
  const char* next = reinterpret_cast<const char*>(a.codes + (j0 + NR) * row_bytes);
  const char* next_end = reinterpret_cast<const char*>(a.codes + a.n * row_bytes);
  for (int64_t g = 0; g < groups; ++g) {
    V accq[MR][NR];
#pragma GCC unroll 8
    for (int i = 0; i < MR; ++i)
#pragma GCC unroll 8
      for (int j = 0; j < NR; ++j) accq[i][j] = Simd::zero();
    const int64_t k0 = g * gs, k1 = k0 + gs;
    for (int64_t kk = k0; kk < k1; kk += kStep) {
      if constexpr (MR == 1) {
        constexpr int64_t kAhead = NR * kLanes;  // bytes of the next block per step (its size / steps per row)
        const char* pf = next + (kk / kStep) * kAhead;
        if (pf < next_end) {
          __builtin_prefetch(pf, 0, 3);
          if constexpr (kAhead > 64) __builtin_prefetch(pf + 64, 0, 3);
        }
      }
      if constexpr (kI4) {
        const int64_t b = kk / 2;
        if constexpr (MR == 1) {
          const V xe = Simd::load(x[0] + kk), xo = Simd::load(x[0] + kk + kLanes);
#pragma GCC unroll 8
          for (int j = 0; j < NR; ++j) {
            V lo, hi;
            Simd::load_u4(w[j] + b, &lo, &hi);
            accq[0][j] = Simd::fma(lo, xe, accq[0][j]);
            accq[0][j] = Simd::fma(hi, xo, accq[0][j]);
          }
        } else {
          V lo[NR], hi[NR];
#pragma GCC unroll 8
          for (int j = 0; j < NR; ++j) Simd::load_u4(w[j] + b, &lo[j], &hi[j]);
#pragma GCC unroll 8
          for (int i = 0; i < MR; ++i) {
            const V xe = Simd::load(x[i] + kk), xo = Simd::load(x[i] + kk + kLanes);
#pragma GCC unroll 8
            for (int j = 0; j < NR; ++j) {
              accq[i][j] = Simd::fma(lo[j], xe, accq[i][j]);
              accq[i][j] = Simd::fma(hi[j], xo, accq[i][j]);
            }
          }
        }
      } else {
        if constexpr (MR == 1) {
          const V xv = Simd::load(x[0] + kk);
#pragma GCC unroll 8
          for (int j = 0; j < NR; ++j) accq[0][j] = Simd::fma(Simd::load_u8(w[j] + kk), xv, accq[0][j]);
        } else {
          V wv[NR];
#pragma GCC unroll 8
          for (int j = 0; j < NR; ++j) wv[j] = Simd::load_u8(w[j] + kk);
#pragma GCC unroll 8
          for (int i = 0; i < MR; ++i) {
            const V xv = Simd::load(x[i] + kk);
#pragma GCC unroll 8
            for (int j = 0; j < NR; ++j) accq[i][j] = Simd::fma(wv[j], xv, accq[i][j]);
          }
        }
      }
    }
    const float mid = kI4 ? 8.0f : 128.0f;
#pragma GCC unroll 8
    for (int j = 0; j < NR; ++j) {
      const V s = Simd::set1(a.scales[(j0 + j) * groups + g]);
      const V z = Simd::set1(a.zeros ? a.zeros[(j0 + j) * groups + g] : mid);
#pragma GCC unroll 8
      for (int i = 0; i < MR; ++i) {
        const V xs = Simd::load(a.xsum + ((i0 + i) * groups + g) * kLanes);
        acc[i][j] = Simd::fma(s, Simd::sub(accq[i][j], Simd::mul(z, xs)), acc[i][j]);
      }
    }
  }
  for (int i = 0; i < MR; ++i)
    for (int j = 0; j < NR; ++j) {
      const float r = Simd::hsum(acc[i][j]);
      a.out[(i0 + i) * a.n + j0 + j] = a.bias ? r + a.bias[j0 + j] : r;
    }
}

template <int MR, int NR, bool kI4>
void qmatmul_tile_n(int nr, const peregrine::cpu::QuantMatmulArgs& a, int64_t i0, int64_t j0) {
  if (nr == NR) return qmatmul_tile<MR, NR, kI4>(a, i0, j0);
  if constexpr (NR > 1) return qmatmul_tile_n<MR, NR - 1, kI4>(nr, a, i0, j0);
}
template <int MR, int NR, bool kI4>
void qmatmul_tile_mn(int mr, int nr, const peregrine::cpu::QuantMatmulArgs& a, int64_t i0, int64_t j0) {
  if (mr == MR) return qmatmul_tile_n<MR, NR, kI4>(nr, a, i0, j0);
  if constexpr (MR > 1) return qmatmul_tile_mn<MR - 1, NR, kI4>(mr, nr, a, i0, j0);
}

template <bool kI4>
void qmatmul_typed(const peregrine::cpu::QuantMatmulArgs& a, int64_t m0, int64_t m1, int64_t n0, int64_t n1) {
  if (m1 - m0 == 1) {
    for (int64_t j = n0; j < n1; j += Simd::kQGemvNr)
      qmatmul_tile_n<1, Simd::kQGemvNr, kI4>(static_cast<int>(min_i(Simd::kQGemvNr, n1 - j)), a, m0, j);
    return;
  }
  // Blocks of weight rows (≈ 128 KiB of codes, in L2) reused by every row tile of x.
  const int64_t row_bytes = kI4 ? a.k / 2 : a.k;
  const int64_t block_n =
      max_i(Simd::kQGemmNr, min_i(64 * Simd::kQGemmNr, (int64_t{128} << 10) / row_bytes / Simd::kQGemmNr * Simd::kQGemmNr));
  for (int64_t jb = n0; jb < n1; jb += block_n) {
    const int64_t jb_end = min_i(n1, jb + block_n);
    for (int64_t i = m0; i < m1; i += Simd::kQGemmMr) {
      const int mr = static_cast<int>(min_i(Simd::kQGemmMr, m1 - i));
      for (int64_t j = jb; j < jb_end; j += Simd::kQGemmNr)
        qmatmul_tile_mn<Simd::kQGemmMr, Simd::kQGemmNr, kI4>(mr, static_cast<int>(min_i(Simd::kQGemmNr, jb_end - j)), a,
                                                             i, j);
    }
  }
}

void qmatmul_kernel(const peregrine::cpu::QuantMatmulArgs& a, int64_t m0, int64_t m1, int64_t n0, int64_t n1) {
  if (m0 >= m1 || n0 >= n1) return;
  if (a.codes_dtype == peregrine::DType::kI4) return qmatmul_typed<true>(a, m0, m1, n0, n1);
  return qmatmul_typed<false>(a, m0, m1, n0, n1);
}

}  // namespace
