// Dense matmul out[M, N] = x[M, K] * w[N, K]^T (+ bias): the cuBLASLt path (same dtype for x, w, out:
// bf16, f16 or f32, f32 accumulation) and a generic tiled kernel for mixed dtypes (e.g. f32 x, bf16 w).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "core/dtype.h"

namespace peregrine::cuda {

struct GemmLaunch {
  const void* x;     // [M, K]
  const void* w;     // [N, K]
  const void* bias;  // [N] or nullptr
  void* out;         // [M, N]
  DType x_dtype, w_dtype, bias_dtype, out_dtype;
  int64_t m, n, k;
};

// Generic f32-accumulating tiled kernel (64x64 tiles, K in steps of 16, fixed K order per element).
void launch_gemm_generic(const GemmLaunch& p, cudaStream_t stream);

}  // namespace peregrine::cuda
