// 8-bit weight matmuls on CUDA (ops.h WeightQuant with kI8 / kF8E4M3 codes, optional W8A8 activation
// quantization): the activations of each row (and activation group) are quantized once per matmul by
// launch_act_quant exactly as ops.h defines it in float32 (amax, then rint / e4m3 RNE with satfinite), then
// launch_w8_matmul computes every output with one warp: per weight group the code products are summed exactly
// (int8: dp4a into int32) or in f32 (fp8 x fp8 products are exact in f32), the lanes meet in a fixed xor
// butterfly, and the group is scaled once (x_scale * w_scale). The split depends on K only, so a row's bits do
// not depend on M. At M > 16 FP8 per channel x per token goes to cuBLASLt instead (fp8_gemm_lt.h); int8 and
// block FP8 stay here at every M (no IMMA path yet: docs/quantization.md).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "core/dtype.h"

namespace peregrine::cuda {

struct W8MatmulLaunch {
  const void* x;          // [M, K] activations (bf16, f16 or f32)
  DType x_dtype;
  const uint8_t* codes;   // [N, K] int8 or float8_e4m3fn
  DType codes_dtype;
  const float* scales;    // [ceil(N / block_rows), groups] f32
  int64_t block_rows, groups, group_size;
  int act;                // 0 none, 1 int8, 2 fp8 (ops::ActQuant)
  int64_t act_group;      // columns per activation scale: K (one per row) or group_size
  const void* bias;       // [N] or null
  DType bias_dtype;
  void* out;              // [M, N]
  DType out_dtype;
  int64_t m, n, k;
  // Where launch_act_quant writes scale (row, group): xs[row * xs_row_stride + group * xs_group_stride]; 0 and 0:
  // [M, K / act_group] row-major (what every kernel here reads; cuBLASLt's block-scaled GEMM may want another).
  int64_t xs_row_stride = 0, xs_group_stride = 0;
};

// True when the kernels take this shape (K and group_size multiples of 4; act_group K or group_size).
bool w8_matmul_supports(const W8MatmulLaunch& l);
// xq [M, K] codes (int8 or e4m3 bytes), xs [M, K / act_group] scales.
void launch_act_quant(const W8MatmulLaunch& l, uint8_t* xq, float* xs, cudaStream_t stream);
// dst[r * row_stride + c * col_stride] = src[r * cols + c] for a [rows, cols] f32 matrix (scale tensors re-laid out
// for cuBLASLt; small).
void launch_relayout_f32(const float* src, int64_t rows, int64_t cols, float* dst, int64_t row_stride,
                         int64_t col_stride, cudaStream_t stream);
// xq / xs from launch_act_quant (ignored when l.act is 0: x is read as floats).
void launch_w8_matmul(const W8MatmulLaunch& l, const uint8_t* xq, const float* xs, cudaStream_t stream);
// int8 W8A8 per channel (groups 1, act_group K) from the exact int32 products c [M, N] (a cuBLASLt int8 GEMM): out =
// fmaf(float(c) * xs[row], w_scale[n / block_rows], 0) (+ bias), the warp kernel's arithmetic, so the rows are its
// bits. M rows from row0 (c and xs start at row0; out is the whole [M, N]).
void launch_w8_int32_epilogue(const W8MatmulLaunch& l, const int32_t* c, const float* xs, int64_t row0, int64_t rows,
                              cudaStream_t stream);

}  // namespace peregrine::cuda
