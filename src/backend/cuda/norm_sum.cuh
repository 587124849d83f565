// RMSNorm's sum of squares of a row, for device code: norm.cu's kernels and the 8-bit skinny kernel's norm fusion
// (skinny_gemm.cu) both compute it through these, so the fused norm gives the norm kernel's bits. A row of `units`
// 16-byte pieces (or elements, unvectorised) is taken by rms_norm_lanes(units) threads of a block of kNormThreads;
// each lane adds its pieces' squares in order with explicit fmas (add_squares8), then row_sum adds the lanes: the xor
// butterfly within each warp, then the row's warps' partials in warp order.
#pragma once

#include <cstdint>

namespace peregrine::cuda {

constexpr int kNormThreads = 256;

__host__ __device__ constexpr int rms_norm_lanes(int64_t units) {
  int tpr = 32;
  while (tpr < kNormThreads && tpr * 4 < units) tpr *= 2;
  return tpr;
}

__device__ __forceinline__ float add_squares8(const float (&v)[8], float ss) {
#pragma unroll
  for (int e = 0; e < 8; ++e) ss = __fmaf_rn(v[e], v[e], ss);
  return ss;
}

// A row's sum over its tpr lanes (a group of 32..kNormThreads threads of the block). Every thread of the block must
// call it (it may synchronize); a caller that calls it again must synchronize first (the partials are reused).
__device__ __forceinline__ float row_sum(float v, int tpr) {
  __shared__ float partial[kNormThreads / 32];
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) v += __shfl_xor_sync(0xffffffffu, v, off);
  if (tpr <= 32) return v;
  if (threadIdx.x % 32 == 0) partial[threadIdx.x / 32] = v;
  __syncthreads();
  const int first = (threadIdx.x / tpr) * (tpr / 32);
  v = 0.f;
  for (int i = 0; i < tpr / 32; ++i) v += partial[first + i];
  return v;
}

// A row's maximum over its tpr lanes, as row_sum (its own shared partials, so it may follow row_sum directly).
__device__ __forceinline__ float row_max(float v, int tpr) {
  __shared__ float partial[kNormThreads / 32];
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, off));
  if (tpr <= 32) return v;
  if (threadIdx.x % 32 == 0) partial[threadIdx.x / 32] = v;
  __syncthreads();
  const int first = (threadIdx.x / tpr) * (tpr / 32);
  v = 0.f;
  for (int i = 0; i < tpr / 32; ++i) v = fmaxf(v, partial[first + i]);
  return v;
}

// 1 / rms of a row from its sum of squares.
__device__ __forceinline__ float rms_inv(float ss, int64_t hidden, float eps) {
  return 1.0f / sqrtf(ss / static_cast<float>(hidden) + eps);
}

}  // namespace peregrine::cuda
