// Dense bf16/f16 matmuls of few rows (decode and verify steps): out[M, N] = x[M, K] * w[N, K]^T (+ bias) for
// M <= kSkinnyMaxM, on tensor cores with the operands swapped (w is mma's A, 16 weight rows per tile; x is B,
// 8 tokens per n-tile), every weight byte read once with 16-byte streaming loads straight into fragments.
// Batch invariance: each output's sum runs over K in an order fixed by K alone (8 warps take interleaved 64-wide
// chunks, their partials are added in warp order), never by M, so a row's bits are the same for every
// M <= kSkinnyMaxM and whether or not the matmul is grouped with others. Larger M goes to cuBLASLt, whose rows
// differ from these: the boundary is the one place a row's result depends on M (ops::MatmulPolicy says so).
// Several matmuls over the same x (q/k/v, gate/up) run as one launch: segments of one grid.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "core/dtype.h"

namespace peregrine::cuda {

constexpr int64_t kSkinnyMaxM = 16;  // ops::kSkinnyMatmulMaxM (cuda_backend.h) says the same
constexpr int kSkinnyMaxSegments = 4;

struct SkinnySegment {
  const void* w;     // [n, K], x's dtype, 16-byte aligned
  const void* bias;  // [n] or null
  DType bias_dtype;
  void* out;  // [M, n]
  int64_t n;
};

struct SkinnyGemmLaunch {
  const void* x;  // [M, K], bf16 or f16, 16-byte aligned
  DType dtype;    // of x and every w
  DType out_dtype;
  int64_t m, k;
  int num_segments;
  SkinnySegment seg[kSkinnyMaxSegments];
  int sm_count;  // the device's multiprocessors (how many blocks fill a wave)
};

// Whether the kernel takes it: bf16/f16 x and w of one dtype, f32/bf16/f16 out, K % 8 == 0, 16-byte aligned
// x and w, 1 <= M <= kSkinnyMaxM.
bool skinny_gemm_supports(const SkinnyGemmLaunch& l);
void launch_skinny_gemm(const SkinnyGemmLaunch& l, cudaStream_t stream);

}  // namespace peregrine::cuda
