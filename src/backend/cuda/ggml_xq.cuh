// x's int8 blocks for the packed GGUF kernels (ggml_matmul.cuh GgmlXq: codes in the kernels' lane order, each
// 32-value block's scale, code sum and half-block sums) made by the op that computes x — RMSNorm or SiLU·mul told of
// GGUF matmuls next (ops.h RmsNormParams::next) — with launch_ggml_quantize_x's arithmetic on the values that op would
// have stored: d = amax / 127, codes round(v · 127 / amax) clamped to ±127 (amax and the sums are order-free), so the
// codes are that quantizer's bits on the op's output.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "backend/cuda/ggml_matmul.cuh"

namespace peregrine::cuda {

// The eight values col .. col + 7 (col % 8 == 0) of row r of x [*, k], held by lane (col % 32) / 8 of an aligned
// group of four lanes of one warp that holds the block's four pieces in order (lanes lane ^ 1 and lane ^ 2 are its
// partners). Every lane of the warp calls it (shuffles); a lane without a piece passes present = false, and so do its
// three partners (k % 32 == 0 keeps blocks whole).
__device__ __forceinline__ void ggml_xq_piece8(const float (&v)[8], bool present, int64_t r, int64_t k, int64_t col,
                                               const GgmlXq& out) {
  float amax = 0.0f;
#pragma unroll
  for (int e = 0; e < 8; ++e) amax = fmaxf(amax, fabsf(present ? v[e] : 0.0f));
  amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, 1));
  amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, 2));
  const float inv = amax > 0.0f ? 127.0f / amax : 0.0f;
  uint32_t w[2] = {0u, 0u};
  int sum = 0;
#pragma unroll
  for (int e = 0; e < 8; ++e) {
    const int q = max(-127, min(127, __float2int_rn((present ? v[e] : 0.0f) * inv)));
    sum += q;
    w[e / 4] |= (static_cast<uint32_t>(q) & 0xffu) << (8 * (e % 4));
  }
  const int sum16 = sum + __shfl_xor_sync(0xffffffffu, sum, 1);  // values 0..15 (pieces 0, 1) or 16..31 (2, 3)
  const int total = sum16 + __shfl_xor_sync(0xffffffffu, sum16, 2);
  if (!present) return;
  // Values 4t..4t+3 of the chunk's block s at lane t's bytes 8s..8s+3, values 16+4t.. at 8s+4..8s+7: piece u holds
  // values 8u..8u+7, lanes t = 2 (u % 2) and + 1, half u / 2.
  const int u = static_cast<int>(col % 32) / 8, s = static_cast<int>(col % 128) / 32;
  int8_t* base = out.q + r * k + (col / 128) * 128 + 8 * s + 4 * (u / 2) + 32 * (2 * (u % 2));
  *reinterpret_cast<uint32_t*>(base) = w[0];
  *reinterpret_cast<uint32_t*>(base + 32) = w[1];
  if (u == 0) {
    out.d[r * (k / 32) + col / 32] = amax / 127.0f;
    out.sum[r * (k / 32) + col / 32] = total;
  }
  if (u % 2 == 0) out.sum16[r * (k / 16) + col / 16] = sum16;
}

}  // namespace peregrine::cuda
