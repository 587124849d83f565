// One row group of RMSNorm's register path, for device code: norm.cu's rms_norm_regs_kernel runs it once a block,
// and the skinny kernel's last block (skinny_gemm.cu, the norm after a residual add) loops over row groups with it,
// so both give the same bits. The same arithmetic as rms_norm_kernel's vector path (each lane's sum of squares over
// its 8-element pieces in order, then row_sum: the xor butterfly, then the warps' partials in order), with a lane's
// C pieces of x, residual and weight all loaded before anything is stored, so a row costs one round trip to memory
// instead of one per piece and pass (out may alias x, which forces the generic kernel's order).
#pragma once

#include "backend/cuda/cuda_common.cuh"
#include "backend/cuda/norm.cuh"
#include "backend/cuda/norm_sum.cuh"

namespace peregrine::cuda {

// The pieces a lane takes at these rows' width (launch_rms_norm's kernel choice: C = 2, 4 or 8 takes 1-2, 3-4, 5-8
// pieces; 0 when the register path does not apply: more pieces, or hidden not a multiple of 8).
__host__ __device__ constexpr int rms_norm_regs_pieces(int64_t hidden) {
  if (hidden % 8 != 0) return 0;
  const int64_t units = hidden / 8;
  const int tpr = rms_norm_lanes(units);
  const int64_t pieces = (units + tpr - 1) / tpr;
  return pieces <= 2 ? 2 : pieces <= 4 ? 4 : pieces <= 8 ? 8 : 0;
}

// Rows row_base + threadIdx.x / tpr of p, lane threadIdx.x % tpr (kNormThreads threads: kNormThreads / tpr rows).
// Every thread of the block must call it (row_sum may synchronize); a caller that calls it again must synchronize
// first. kL2: x and the residual read through L2 only (written by other blocks of the running kernel).
template <typename T, typename TW, int C, bool kL2>
__device__ __forceinline__ void rms_norm_regs_rows(const RmsNormLaunch& p, int64_t row_base, int tpr) {
  const int64_t row = row_base + threadIdx.x / tpr;
  const int lane = threadIdx.x % tpr;
  const bool active = row < p.rows;
  const int64_t h = p.hidden;
  const T* x = static_cast<const T*>(p.x) + row * h;
  T* res = p.residual ? static_cast<T*>(p.residual) + row * h : nullptr;
  T* out = static_cast<T*>(p.out) + row * h;
  const TW* w = static_cast<const TW*>(p.weight);
  auto load = [](const T* src, float (&v)[8]) {
    if constexpr (kL2) {
      load8_cg(src, v);
    } else {
      load8(src, v);
    }
  };
  float v[C][8], wv[C][8];
  float ss = 0.f;
  if (active) {
#pragma unroll
    for (int c = 0; c < C; ++c) {
      const int64_t i = (lane + static_cast<int64_t>(c) * tpr) * 8;
      if (i < h) {
        load(x + i, v[c]);
        load8(w + i, wv[c]);
        if (res) {
          float r[8];
          load(res + i, r);
#pragma unroll
          for (int e = 0; e < 8; ++e) v[c][e] = to_f32(from_f32<T>(v[c][e] + r[e]));
        }
      }
    }
#pragma unroll
    for (int c = 0; c < C; ++c) {
      const int64_t i = (lane + static_cast<int64_t>(c) * tpr) * 8;
      if (i < h) {
        if (res) store8(res + i, v[c]);
        ss = add_squares8(v[c], ss);
      }
    }
  }
  ss = row_sum(ss, tpr);
  if (!active) return;
  const float inv = rms_inv(ss, h, p.eps);
#pragma unroll
  for (int c = 0; c < C; ++c) {
    const int64_t i = (lane + static_cast<int64_t>(c) * tpr) * 8;
    if (i < h) {
#pragma unroll
      for (int e = 0; e < 8; ++e) v[c][e] = v[c][e] * inv * wv[c][e];
      store8(out + i, v[c]);
    }
  }
}

}  // namespace peregrine::cuda
