// Fused residual-add + RMSNorm (ops.h RmsNormParams): residual += x; out = rmsnorm(residual) * weight.
// f32 statistics; one row per group of 32..256 threads so per-head norms ([T*heads, head_dim]) stay cheap.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "core/dtype.h"

namespace peregrine::cuda {

struct RmsNormLaunch {
  const void* x;   // [R, H] act
  void* residual;  // [R, H] act or nullptr
  const void* weight;  // [H]
  void* out;       // [R, H] act (may alias x)
  DType act, weight_dtype;
  int64_t rows, hidden;
  float eps;
};
void launch_rms_norm(const RmsNormLaunch& p, cudaStream_t stream);

}  // namespace peregrine::cuda
