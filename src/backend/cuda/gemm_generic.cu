// Generic GEMM for dtype mixes cuBLASLt does not take: 64x64 output tiles, 256 threads with 4x4 outputs
// each, operands converted to f32 in shared memory. Each output sums K in order, independent of M.
#include "backend/cuda/cuda_common.cuh"
#include "backend/cuda/gemm.cuh"

namespace peregrine::cuda {
namespace {

constexpr int kTile = 64;
constexpr int kStep = 16;

__global__ void __launch_bounds__(256) gemm_generic_kernel(GemmLaunch p) {
  __shared__ float xs[kStep][kTile + 1];
  __shared__ float ws[kStep][kTile + 1];
  const int64_t row0 = static_cast<int64_t>(blockIdx.y) * kTile, col0 = static_cast<int64_t>(blockIdx.x) * kTile;
  const int tr = threadIdx.x / 16, tc = threadIdx.x % 16;  // outputs rows tr + 16 i, cols tc + 16 j
  float acc[4][4] = {};
  for (int64_t k0 = 0; k0 < p.k; k0 += kStep) {
    for (int idx = threadIdx.x; idx < kTile * kStep; idx += 256) {
      const int r = idx / kStep, kk = idx % kStep;
      const int64_t gk = k0 + kk;
      const int64_t xr = row0 + r, wr = col0 + r;
      xs[kk][r] = (xr < p.m && gk < p.k) ? load_any(p.x, p.x_dtype, xr * p.k + gk) : 0.f;
      ws[kk][r] = (wr < p.n && gk < p.k) ? load_any(p.w, p.w_dtype, wr * p.k + gk) : 0.f;
    }
    __syncthreads();
#pragma unroll
    for (int kk = 0; kk < kStep; ++kk) {
      float a[4], b[4];
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        a[i] = xs[kk][tr + 16 * i];
        b[i] = ws[kk][tc + 16 * i];
      }
#pragma unroll
      for (int i = 0; i < 4; ++i)
#pragma unroll
        for (int j = 0; j < 4; ++j) acc[i][j] = fmaf(a[i], b[j], acc[i][j]);
    }
    __syncthreads();
  }
#pragma unroll
  for (int i = 0; i < 4; ++i)
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const int64_t r = row0 + tr + 16 * i, c = col0 + tc + 16 * j;
      if (r < p.m && c < p.n) {
        float v = acc[i][j];
        if (p.bias) v += load_any(p.bias, p.bias_dtype, c);
        store_any(p.out, p.out_dtype, r * p.n + c, v);
      }
    }
}

}  // namespace

void launch_gemm_generic(const GemmLaunch& p, cudaStream_t stream) {
  if (p.m == 0 || p.n == 0) return;
  dim3 grid(static_cast<unsigned>(ceil_div(p.n, kTile)), static_cast<unsigned>(ceil_div(p.m, kTile)));
  gemm_generic_kernel<<<grid, 256, 0, stream>>>(p);
  PEREGRINE_CUDA_CHECK_LAUNCH();
}

}  // namespace peregrine::cuda
