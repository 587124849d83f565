// SiLU-mul (vectorised, one dtype) with a generic mixed-dtype fallback, and the bias-add kernel.
#include "backend/cuda/activation.cuh"
#include "backend/cuda/cuda_common.cuh"

namespace peregrine::cuda {
namespace {

__device__ __forceinline__ float silu(float g) { return g / (1.0f + expf(-g)); }

template <typename T>
__global__ void silu_mul_vec_kernel(const T* gate, const T* up, T* out, int64_t n8) {
  pdl_wait();
  pdl_trigger();
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n8;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    float g[8], u[8];
    load8(gate + i * 8, g);
    load8(up + i * 8, u);
#pragma unroll
    for (int e = 0; e < 8; ++e) g[e] = silu(g[e]) * u[e];
    store8(out + i * 8, g);
  }
}

__global__ void silu_mul_generic_kernel(SiluMulLaunch p) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < p.numel;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    store_any(p.out, p.out_dtype, i, silu(load_any(p.gate, p.gate_dtype, i)) * load_any(p.up, p.up_dtype, i));
}

__global__ void add_bias_kernel(AddBiasLaunch p) {
  int64_t total = p.m * p.n;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    store_any(p.out, p.out_dtype, i, load_any(p.out, p.out_dtype, i) + load_any(p.bias, p.bias_dtype, i % p.n));
}

unsigned grid_for(int64_t work, int threads) {
  int64_t blocks = ceil_div(work, threads);
  return static_cast<unsigned>(blocks > 65536 ? 65536 : (blocks < 1 ? 1 : blocks));
}

}  // namespace

void launch_silu_mul(const SiluMulLaunch& p, cudaStream_t stream) {
  if (p.numel == 0) return;
  bool same = p.gate_dtype == p.up_dtype && p.up_dtype == p.out_dtype;
  bool vec = same && p.numel % 8 == 0 && aligned16(p.gate) && aligned16(p.up) && aligned16(p.out);
  if (vec) {
    dispatch_float(p.out_dtype, [&](auto tag) {
      using T = typename decltype(tag)::type;
      launch_pdl(silu_mul_vec_kernel<T>, grid_for(p.numel / 8, 256), 256, 0, stream, p.rows > 0 ? p.rows : p.numel,
                 static_cast<const T*>(p.gate), static_cast<const T*>(p.up), static_cast<T*>(p.out), p.numel / 8);
    });
  } else {
    silu_mul_generic_kernel<<<grid_for(p.numel, 256), 256, 0, stream>>>(p);
  }
  PEREGRINE_CUDA_CHECK_LAUNCH();
}

void launch_add_bias(const AddBiasLaunch& p, cudaStream_t stream) {
  if (p.m * p.n == 0) return;
  add_bias_kernel<<<grid_for(p.m * p.n, 256), 256, 0, stream>>>(p);
  PEREGRINE_CUDA_CHECK_LAUNCH();
}

}  // namespace peregrine::cuda
