// Hash-based uniform fill (splitmix64 of seed ^ index): cheap, stateless and different per buffer.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "backend/cuda/cuda_check.h"
#include "bench_fill.cuh"

namespace peregrine::cuda_bench {
namespace {

__device__ __forceinline__ uint64_t mix(uint64_t z) {
  z += 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

__global__ void fill_kernel(void* data, DType t, size_t n, uint64_t seed, float scale) {
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    const float u = static_cast<float>(mix(seed * 0x100000001B3ull ^ i) >> 40) * (1.0f / 16777216.0f);
    const float v = (2.0f * u - 1.0f) * scale;
    if (t == DType::kBF16) static_cast<__nv_bfloat16*>(data)[i] = __float2bfloat16_rn(v);
    else if (t == DType::kF16) static_cast<__half*>(data)[i] = __float2half_rn(v);
    else static_cast<float*>(data)[i] = v;
  }
}

}  // namespace

void fill_random(void* data, DType t, size_t n, uint64_t seed, float scale, cudaStream_t stream) {
  if (n == 0) return;
  fill_kernel<<<4096, 256, 0, stream>>>(data, t, n, seed, scale);
  PEREGRINE_CUDA_CHECK_LAUNCH();
}

}  // namespace peregrine::cuda_bench
