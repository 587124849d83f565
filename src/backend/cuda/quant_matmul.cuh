// W4A16 / W8A16 matmul on Hopper (ops.h WeightQuant with kI4 / kU8 codes, f32 group scales, optional zeros and
// act-order perm). M <= 16 with bf16/f16 activations runs the skinny tensor-core kernel on the codes
// (skinny_gemm.cuh: groups of 128 and more factored, exact codes on the tensor cores and the group's zero and scale
// applied to the sums; smaller groups dequantized in registers into mma fragments; PEREGRINE_QUANT_SKINNY=i4|u8|0
// keeps this file's GEMV for those codes, for comparisons); f32 activations take this file's small-M GEMV
// (a block per four output rows, K split over its threads by K alone and summed in a fixed order: a row's bits do
// not depend on M); int4 codes at 17 <= M <= 256 with bf16/f16 x run the fused tensor-core GEMM (w4_gemm.cuh) where
// it takes the shape; larger M dequantizes into a dense [N, K] scratch in the activation dtype for the cuBLASLt GEMM.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "core/dtype.h"

namespace peregrine::cuda {

struct QuantMatmulLaunch {
  const void* x;            // [M, K] activations (bf16, f16 or f32)
  DType x_dtype;
  const uint8_t* codes;     // [N, K] kI4 (low nibble = even k) or kU8
  DType codes_dtype;
  const float* scales;      // [N, groups] f32
  const float* zeros;       // [N, groups] f32 or null (midpoint 8 / 128)
  const int32_t* g_idx;     // [K] or null (group of each code column)
  const int32_t* perm;      // [K] or null (input column of each code column)
  const void* bias;         // [N] or null
  DType bias_dtype;
  void* out;                // [M, N]
  DType out_dtype;          // x's dtype or f32
  int64_t m, n, k, groups, group_size;
};

constexpr int64_t kQuantGemvMaxM = 16;

// True when the small-M kernel takes this shape (M <= kQuantGemvMaxM, K and the group a multiple of 32, no g_idx).
bool quant_gemv_supports(const QuantMatmulLaunch& l);
// x_perm: [M, K] scratch in x's dtype when l.perm is set (the gathered activations), else unused.
void launch_quant_gemv(const QuantMatmulLaunch& l, void* x_perm, cudaStream_t stream);
// out[r, j] = x[r, perm[j]] for an [M, K] x of a float dtype (act-order: the activations in code-column order).
void launch_permute_columns(const void* x, DType dtype, const int32_t* perm, void* out, int64_t m, int64_t k,
                            cudaStream_t stream);
// w_out [N, K] in x's dtype: W[n, perm[k]] = (code(n, k) - zero) * scale (perm identity when null).
void launch_dequantize(const QuantMatmulLaunch& l, void* w_out, cudaStream_t stream);

}  // namespace peregrine::cuda
