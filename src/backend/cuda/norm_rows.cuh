// One row group of RMSNorm over 16-byte pieces, for device code, in two forms with the same arithmetic (each lane's
// sum of squares over its 8-element pieces in order, then row_sum: the xor butterfly, then the warps' partials in
// order), so the same bits: rms_norm_vec_rows, two passes over the row (the second hits L1/L2), few registers;
// rms_norm_regs_rows, a lane's C pieces of x, residual and weight all loaded before anything is stored, so a row costs
// one round trip to memory instead of one per piece and pass (out may alias x, which forces the first form's order).
// norm.cu's kernels run them once a block; the skinny kernel's last block (skinny_gemm.cu, the norm after a residual
// add) loops over row groups with rms_norm_vec_rows.
#pragma once

#include "backend/cuda/cuda_common.cuh"
#include "backend/cuda/norm.cuh"
#include "backend/cuda/norm_sum.cuh"

namespace peregrine::cuda {

// Both forms: rows row_base + threadIdx.x / tpr of p, lane threadIdx.x % tpr (kNormThreads threads: kNormThreads /
// tpr rows; p.hidden a multiple of 8, 16-byte aligned rows). Every thread of the block must call it (row_sum may
// synchronize); a caller that calls it again must synchronize first. kL2: x and the residual read through L2 only
// (written by other blocks of the running kernel).
template <typename T, typename TW, bool kL2>
__device__ __forceinline__ void rms_norm_vec_rows(const RmsNormLaunch& p, int64_t row_base, int tpr) {
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
  float ss = 0.f;
  if (active) {
    for (int64_t i = lane * 8; i < h; i += tpr * 8) {
      float v[8];
      load(x + i, v);
      if (res) {
        float r[8];
        load(res + i, r);
#pragma unroll
        for (int e = 0; e < 8; ++e) v[e] = to_f32(from_f32<T>(v[e] + r[e]));
        store8(res + i, v);
      }
      ss = add_squares8(v, ss);
    }
  }
  ss = row_sum(ss, tpr);
  if (!active) return;
  const float inv = rms_inv(ss, h, p.eps);
  const T* src = res ? res : x;
  for (int64_t i = lane * 8; i < h; i += tpr * 8) {
    float v[8], wv[8];
    load(src + i, v);
    load8(w + i, wv);
#pragma unroll
    for (int e = 0; e < 8; ++e) v[e] = v[e] * inv * wv[e];
    store8(out + i, v);
  }
}

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
