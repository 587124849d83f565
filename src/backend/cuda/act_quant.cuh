// The activation quantizer's arithmetic (ops.h ActQuant, in float32), for device code: per token (or group) the
// amax of |x|, then FP8 e4m3 codes x / s with s = max(amax / 448, 1 / (448 * 512)) (round to nearest even,
// saturating), or int8 codes rint(x * (127 / amax)) clamped to [-128, 127] with the scale amax / 127 (codes and
// scale 0 for an all-zero row). The quantizer kernel (w8_matmul.cu) and the 8-bit skinny kernel's in-block
// quantizer (skinny_gemm.cu) both compute through these, so they make the same bits.
#pragma once

#include <cuda_fp8.h>

#include <cstdint>

namespace peregrine::cuda {

__device__ __forceinline__ float fp8_act_scale(float amax) { return fmaxf(amax / 448.0f, 1.0f / (448.0f * 512.0f)); }

__device__ __forceinline__ uint8_t fp8_act_code(float x, float scale) {
  const float v = fminf(fmaxf(__fdiv_rn(x, scale), -448.0f), 448.0f);
  return static_cast<uint8_t>(__nv_cvt_float_to_fp8(v, __NV_SATFINITE, __NV_E4M3));
}

__device__ __forceinline__ float int8_act_inv(float amax) { return 127.0f / amax; }

__device__ __forceinline__ uint8_t int8_act_code(float x, float amax, float inv) {
  const float r = amax == 0.0f ? 0.0f : fminf(fmaxf(rintf(x * inv), -128.0f), 127.0f);
  return static_cast<uint8_t>(static_cast<int8_t>(r));
}

__device__ __forceinline__ float int8_act_scale(float amax) { return amax == 0.0f ? 0.0f : amax / 127.0f; }

// The maximum of v over a block of kThreads threads (fmaxf: order-free), returned to every thread. Every thread of
// the block must call it; it synchronizes once.
template <int kThreads>
__device__ __forceinline__ float block_max(float v) {
  __shared__ float red[kThreads / 32];
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  if ((threadIdx.x & 31) == 0) red[threadIdx.x / 32] = v;
  __syncthreads();
  v = 0.0f;
  for (int w = 0; w < kThreads / 32; ++w) v = fmaxf(v, red[w]);
  return v;
}

// A token's quantizer once its amax is known (act: 1 int8, 2 FP8): the codes of 8 values and the token's scale.
struct ActQuantizer {
  int act;
  float amax, inv, s;
  __device__ __forceinline__ ActQuantizer(int act_, float amax_)
      : act(act_), amax(amax_), inv(act_ == 1 ? int8_act_inv(amax_) : 0.0f), s(act_ == 1 ? 0.0f : fp8_act_scale(amax_)) {}
  __device__ __forceinline__ uint2 codes8(const float (&v)[8]) const {
    alignas(8) uint8_t c[8];
#pragma unroll
    for (int u = 0; u < 8; ++u) c[u] = act == 1 ? int8_act_code(v[u], amax, inv) : fp8_act_code(v[u], s);
    return *reinterpret_cast<const uint2*>(c);
  }
  __device__ __forceinline__ float scale() const { return act == 1 ? int8_act_scale(amax) : s; }
};

}  // namespace peregrine::cuda
