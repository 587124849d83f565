// W4A8 matmul on CUDA (ops.h WeightQuant with symmetric kI4 codes and act = kInt8): the activations are quantized
// per row by w8_matmul's launch_act_quant (the float32 formula of ops.h), then
//  - M <= kW4A8GemvMaxM: launch_w4a8_gemv, one warp per output column n over every row: each lane takes 32 codes
//    (16 bytes, one 128-bit load) at a time, widens them to unsigned bytes in registers (mask, shift and
//    byte_perm: no write-out), and sums code * x with __dp4a into int32; the midpoint 8 comes off through the
//    per-32-column sums of x (launch_w4a8_chunk_sums), the 32 columns' group scale is applied once in f32, the
//    lanes meet in a fixed xor butterfly, and the row's x scale comes last. The order depends on K only, so a
//    row's bits do not depend on M (within this path).
//  - larger M: the int8 x is widened to the activation dtype (exact), the codes are dequantized into a dense
//    scratch (code - 8 exactly for per-channel weights; (code - 8) * group scale otherwise), cuBLASLt runs the
//    GEMM into f32, and launch_w4a8_epilogue applies x_scale[m] (and the channel scale) and the bias.
//    Per-channel W4A8 is then exact integer arithmetic on the tensor cores (|sum| < 2^24 for K <= 16384).
//    (No int8 IMMA GEMM exists in this backend yet: docs/quantization.md.)
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "core/dtype.h"

namespace peregrine::cuda {

constexpr int64_t kW4A8GemvMaxM = 16;

struct W4A8MatmulLaunch {
  const void* x;          // [M, K] activations (bf16, f16 or f32)
  DType x_dtype;
  const uint8_t* codes;   // [N, K / 2] int4 (low nibble = even k), midpoint 8
  const float* scales;    // [N, groups] f32
  int64_t groups, group_size;
  const void* bias;       // [N] or null
  DType bias_dtype;
  void* out;              // [M, N]
  DType out_dtype;
  int64_t m, n, k;
};

// True when the kernels take this shape: K and the group multiples of 32, K = groups * group_size.
bool w4a8_supports(const W4A8MatmulLaunch& l);
// xsum[r, c] = sum of xq[r, 32c .. 32c + 31] (int32), [M, K / 32].
void launch_w4a8_chunk_sums(const int8_t* xq, int32_t* xsum, int64_t m, int64_t k, cudaStream_t stream);
// M <= kW4A8GemvMaxM; xq / xs from launch_act_quant, xsum from launch_w4a8_chunk_sums.
void launch_w4a8_gemv(const W4A8MatmulLaunch& l, const int8_t* xq, const float* xs, const int32_t* xsum,
                      cudaStream_t stream);
// a[i] = xq[i] as `dtype` (f32, bf16 or f16; exact), count elements.
void launch_w4a8_widen(const int8_t* xq, void* a, DType dtype, int64_t count, cudaStream_t stream);
// w [N, K] in `dtype`: code - 8, times the group scale unless per_channel (groups == 1; the scale then goes to the
// epilogue).
void launch_w4a8_dequantize(const W4A8MatmulLaunch& l, void* w, DType dtype, bool per_channel, cudaStream_t stream);
// out[m, n] = c[m, n] * xs[m] (* channel_scale[n]) (+ bias[n]); c is f32 [M, N]; channel_scale may be null.
void launch_w4a8_epilogue(const W4A8MatmulLaunch& l, const float* c, const float* xs, const float* channel_scale,
                          cudaStream_t stream);

}  // namespace peregrine::cuda
