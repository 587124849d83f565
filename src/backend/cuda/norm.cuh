// Fused residual-add + RMSNorm (ops.h RmsNormParams): residual += x; out = rmsnorm(residual) * weight.
// f32 statistics; one row per group of 32..256 threads so per-head norms ([T*heads, head_dim]) stay cheap.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "backend/cuda/ggml_matmul.cuh"
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
  // Set (act_quant 1 int8, 2 FP8): each normalised row also quantized per token for a W8A8 matmul that reads it next
  // (ops.h RmsNormParams::next): codes [rows, hidden] and a scale a row, exactly what launch_act_quant makes from out;
  // out itself is then not written. Only where rms_norm_quant_takes.
  uint8_t* xq = nullptr;
  float* xs = nullptr;
  int act_quant = 0;
  // Set (act_quant kActQuantGgml): the rows quantized instead into the int8 blocks the packed GGUF kernels read
  // (ggml_xq.cuh: launch_ggml_quantize_x's bits on out), out not written. hidden a multiple of 128.
  GgmlXq ggml{};
};
constexpr int kActQuantGgml = 3;
void launch_rms_norm(const RmsNormLaunch& p, cudaStream_t stream);
// Whether launch_rms_norm can quantize p's rows (16-bit activations, rows of 16-byte pieces in registers).
bool rms_norm_quant_takes(const RmsNormLaunch& p);
// Whether it can make p's rows the packed GGUF kernels' x blocks (act_quant kActQuantGgml).
bool rms_norm_ggml_takes(const RmsNormLaunch& p);

}  // namespace peregrine::cuda
