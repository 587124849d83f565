// int8 W8A8 matmul kernels over the TU's `I8Dot` traits: int8 activations (quantized per row of x by the caller)
// times int8 weights, products summed exactly in int32, then out = float(sum) * x_scale[m] * w_scale[n / rows]
// (+ bias). NOTE: include only from a kernel TU that defined `I8Dot` (its simd_<isa>.h, or int8_avx512vnni.cpp).
//
// I8Dot provides: kBytes (int8 columns per step), Acc (an int32 accumulator vector), W / X (loaded operands),
// zero(), load_w(p), load_x(p) (kBytes each), dot(acc, w, x) (acc += lane sums of w*x, or of (w+128)*x where
// kBias = 128: the correction kBias * sum(x) is subtracted at the end), hsum(acc).
// NOTE determinism: the sums are exact integers, so every path (GEMV, GEMM tile, ISA, thread split) gives the
// same int32 and the same float expression afterwards: rows are bit-identical whatever M or the ISA.
#pragma once

#include <cstdint>
#include <cstring>

#include "backend/cpu/cpu_kernels.h"

namespace {

inline int64_t i8_min(int64_t a, int64_t b) { return a < b ? a : b; }
inline int64_t i8_max(int64_t a, int64_t b) { return a > b ? a : b; }

template <int MR, int NR>
void i8_tile(const peregrine::cpu::Int8MatmulArgs& a, int64_t i0, int64_t j0) {
  constexpr int64_t kB = I8Dot::kBytes;
  const int64_t k = a.k, kv = k / kB * kB;
  const int8_t* w[NR];
#pragma GCC unroll 8
  for (int j = 0; j < NR; ++j) w[j] = a.w + (j0 + j) * k;
  const int8_t* x[MR];
#pragma GCC unroll 8
  for (int i = 0; i < MR; ++i) x[i] = a.x + (i0 + i) * k;
  typename I8Dot::Acc acc[MR][NR];
#pragma GCC unroll 8
  for (int i = 0; i < MR; ++i)
#pragma GCC unroll 8
    for (int j = 0; j < NR; ++j) acc[i][j] = I8Dot::zero();
  // GEMV: the next tile's rows (contiguous) are prefetched while this tile streams.
  const char* next = reinterpret_cast<const char*>(a.w + (j0 + NR) * k);
  const char* next_end = reinterpret_cast<const char*>(a.w + a.n * k);
  auto step = [&](const typename I8Dot::W* wv, const int8_t* const* xp, int64_t off, bool tail) {
#pragma GCC unroll 8
    for (int i = 0; i < MR; ++i) {
      typename I8Dot::X xv;
      if (tail) {
        alignas(64) int8_t buf[kB];
        std::memset(buf, 0, sizeof buf);
        std::memcpy(buf, xp[i] + off, static_cast<size_t>(k - off));
        xv = I8Dot::load_x(buf);
      } else {
        xv = I8Dot::load_x(xp[i] + off);
      }
#pragma GCC unroll 8
      for (int j = 0; j < NR; ++j) acc[i][j] = I8Dot::dot(acc[i][j], wv[j], xv);
    }
  };
  for (int64_t kk = 0; kk < kv; kk += kB) {
    if constexpr (MR == 1) {
      constexpr int64_t kAhead = NR * kB;
      const char* pf = next + kk / kB * kAhead;
      if (pf < next_end) {
        __builtin_prefetch(pf, 0, 3);
        if constexpr (kAhead > 64) __builtin_prefetch(pf + 64, 0, 3);
        if constexpr (kAhead > 128) __builtin_prefetch(pf + 128, 0, 3);
        if constexpr (kAhead > 192) __builtin_prefetch(pf + 192, 0, 3);
      }
    }
    typename I8Dot::W wv[NR];
#pragma GCC unroll 8
    for (int j = 0; j < NR; ++j) wv[j] = I8Dot::load_w(w[j] + kk);
    step(wv, x, kk, false);
  }
  if (kv < k) {  // zero-padded last step: padded x columns are 0, so they add nothing in any scheme
    typename I8Dot::W wv[NR];
    for (int j = 0; j < NR; ++j) {
      alignas(64) int8_t buf[kB];
      std::memset(buf, 0, sizeof buf);
      std::memcpy(buf, w[j] + kv, static_cast<size_t>(k - kv));
      wv[j] = I8Dot::load_w(buf);
    }
    step(wv, x, kv, true);
  }
  for (int i = 0; i < MR; ++i)
    for (int j = 0; j < NR; ++j) {
      const int32_t s = I8Dot::hsum(acc[i][j]) - I8Dot::kBias * a.x_sum[i0 + i];
      const int64_t n = j0 + j;
      const float r = static_cast<float>(s) * a.x_scale[i0 + i] * a.w_scale[n / a.block_rows];
      a.out[(i0 + i) * a.n + n] = a.bias ? r + a.bias[n] : r;
    }
}

template <int MR, int NR>
void i8_tile_n(int nr, const peregrine::cpu::Int8MatmulArgs& a, int64_t i0, int64_t j0) {
  if (nr == NR) return i8_tile<MR, NR>(a, i0, j0);
  if constexpr (NR > 1) return i8_tile_n<MR, NR - 1>(nr, a, i0, j0);
}
template <int MR, int NR>
void i8_tile_mn(int mr, int nr, const peregrine::cpu::Int8MatmulArgs& a, int64_t i0, int64_t j0) {
  if (mr == MR) return i8_tile_n<MR, NR>(nr, a, i0, j0);
  if constexpr (MR > 1) return i8_tile_mn<MR - 1, NR>(mr, nr, a, i0, j0);
}

// Columns [n0, n1) of rows [m0, m1): GEMV for one row; otherwise blocks of weight rows (about 128 KiB, in L2)
// reused by every row tile of x.
void i8matmul_kernel(const peregrine::cpu::Int8MatmulArgs& a, int64_t m0, int64_t m1, int64_t n0, int64_t n1) {
  if (m0 >= m1 || n0 >= n1) return;
  if (m1 - m0 == 1) {
    for (int64_t j = n0; j < n1; j += I8Dot::kGemvNr)
      i8_tile_n<1, I8Dot::kGemvNr>(static_cast<int>(i8_min(I8Dot::kGemvNr, n1 - j)), a, m0, j);
    return;
  }
  const int64_t block_n = i8_max(I8Dot::kGemmNr, i8_min(64 * I8Dot::kGemmNr,
                                                        (int64_t{128} << 10) / i8_max(1, a.k) / I8Dot::kGemmNr * I8Dot::kGemmNr));
  for (int64_t jb = n0; jb < n1; jb += block_n) {
    const int64_t jb_end = i8_min(n1, jb + block_n);
    for (int64_t i = m0; i < m1; i += I8Dot::kGemmMr) {
      const int mr = static_cast<int>(i8_min(I8Dot::kGemmMr, m1 - i));
      for (int64_t j = jb; j < jb_end; j += I8Dot::kGemmNr)
        i8_tile_mn<I8Dot::kGemmMr, I8Dot::kGemmNr>(mr, static_cast<int>(i8_min(I8Dot::kGemmNr, jb_end - j)), a, i, j);
    }
  }
}

}  // namespace
