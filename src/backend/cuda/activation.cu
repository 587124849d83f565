// SiLU-mul (vectorised, one dtype) with a generic mixed-dtype fallback, and the bias-add kernel.
#include "backend/cuda/activation.cuh"

#include "backend/cuda/act_quant.cuh"
#include "backend/cuda/cuda_common.cuh"
#include "backend/cuda/env_switch.h"
#include "backend/cuda/ggml_xq.cuh"

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

// A block a row (silu_mul_quant_takes: 16-bit, 16-byte pieces, at most kQuantPieces a thread): every piece of gate
// and up loaded first (all of a thread's loads in flight at once), the products rounded to T in place as
// silu_mul_vec_kernel stores them, their amax (fmaxf: order-free), then act_quant.cuh's codes of those rounded values:
// act_quant_vec_kernel's bits on silu_mul_vec_kernel's output.
// kGgml: the packed GGUF kernels' int8 blocks instead (ggml_xq.cuh; cols % 128 == 0, so a block's four pieces are
// four neighbouring threads' and every warp's lanes all have pieces or all none).
constexpr int kQuantThreads = 256, kQuantPieces = 8;
template <typename T, bool kGgml>
__global__ void __launch_bounds__(kQuantThreads) silu_mul_quant_kernel(const T* __restrict__ gate,
                                                                        const T* __restrict__ up, int64_t cols,
                                                                        int act, uint8_t* __restrict__ xq,
                                                                        float* __restrict__ xs, GgmlXq gx) {
  pdl_wait();
  pdl_trigger();
  const int64_t row = blockIdx.x;
  const int pieces = static_cast<int>(cols / 8);
  const uint4* g4 = reinterpret_cast<const uint4*>(gate + row * cols);
  const uint4* u4 = reinterpret_cast<const uint4*>(up + row * cols);
  uint4 h[kQuantPieces], u[kQuantPieces];
#pragma unroll
  for (int j = 0; j < kQuantPieces; ++j) {
    const int i = static_cast<int>(threadIdx.x) + j * kQuantThreads;
    if (i < pieces) {
      h[j] = g4[i];
      u[j] = u4[i];
    }
  }
  float amax = 0.0f;
#pragma unroll
  for (int j = 0; j < kQuantPieces; ++j) {
    const int i = static_cast<int>(threadIdx.x) + j * kQuantThreads;
    if (i < pieces) {
      T* he = reinterpret_cast<T*>(&h[j]);
      const T* ue = reinterpret_cast<const T*>(&u[j]);
#pragma unroll
      for (int e = 0; e < 8; ++e) {
        he[e] = from_f32<T>(silu(to_f32(he[e])) * to_f32(ue[e]));
        amax = fmaxf(amax, fabsf(to_f32(he[e])));
      }
    }
  }
  if constexpr (kGgml) {
#pragma unroll
    for (int j = 0; j < kQuantPieces; ++j) {
      const int i = static_cast<int>(threadIdx.x) + j * kQuantThreads;
      if (j * kQuantThreads >= pieces) break;  // block-uniform
      const T* he = reinterpret_cast<const T*>(&h[j]);
      float v[8];
#pragma unroll
      for (int e = 0; e < 8; ++e) v[e] = i < pieces ? to_f32(he[e]) : 0.0f;
      ggml_xq_piece8(v, i < pieces, row, cols, int64_t{i} * 8, gx);
    }
    return;
  }
  amax = block_max<kQuantThreads>(amax);
  const ActQuantizer qz(act, amax);
  uint2* q = reinterpret_cast<uint2*>(xq + row * cols);
#pragma unroll
  for (int j = 0; j < kQuantPieces; ++j) {
    const int i = static_cast<int>(threadIdx.x) + j * kQuantThreads;
    if (i < pieces) {
      const T* he = reinterpret_cast<const T*>(&h[j]);
      float v[8];
#pragma unroll
      for (int e = 0; e < 8; ++e) v[e] = to_f32(he[e]);
      q[i] = qz.codes8(v);
    }
  }
  if (threadIdx.x == 0) xs[row] = qz.scale();
}

// The same blocks from a grid over (pieces, rows), a thread an 8-value piece (silu_mul_vec_kernel's rounded
// products; a block's four pieces on four neighbouring threads, cols % 128 == 0: every warp's lanes all have pieces
// or none), so a single row spreads over the SMs instead of one block. The same bits; not yet run on a GPU, so
// behind PEREGRINE_SILU_GGML_GRID=1 (silu_mul_ggml_grid_mode).
template <typename T>
__global__ void __launch_bounds__(256) silu_mul_ggml_kernel(const T* __restrict__ gate, const T* __restrict__ up,
                                                            int64_t cols, GgmlXq gx) {
  pdl_wait();
  pdl_trigger();
  const int64_t row = blockIdx.y, piece = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  const bool present = piece < cols / 8;
  float v[8] = {};
  if (present) {
    float u[8];
    load8(gate + row * cols + piece * 8, v);
    load8(up + row * cols + piece * 8, u);
#pragma unroll
    for (int e = 0; e < 8; ++e) v[e] = to_f32(from_f32<T>(silu(v[e]) * u[e]));
  }
  ggml_xq_piece8(v, present, row, cols, piece * 8, gx);
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

bool silu_mul_ggml_takes(const SiluMulLaunch& p) {
  return silu_mul_quant_takes(p) && (p.numel / p.rows) % 128 == 0;
}

bool silu_mul_quant_takes(const SiluMulLaunch& p) {
  const bool b16 = p.out_dtype == DType::kBF16 || p.out_dtype == DType::kF16;
  if (!b16 || p.gate_dtype != p.out_dtype || p.up_dtype != p.out_dtype || p.rows < 1 || p.numel % p.rows != 0)
    return false;
  const int64_t cols = p.numel / p.rows;
  return cols % 8 == 0 && cols <= int64_t{8} * kQuantPieces * kQuantThreads && aligned16(p.gate) && aligned16(p.up);
}

void launch_silu_mul_quant(const SiluMulLaunch& p, int act, uint8_t* xq, float* xs, cudaStream_t stream) {
  PEREGRINE_CHECK(silu_mul_quant_takes(p) && (act == 1 || act == 2) && (reinterpret_cast<uintptr_t>(xq) & 7u) == 0,
                  "silu_mul_quant: a launch the kernel does not take");
  const int64_t cols = p.numel / p.rows;
  dispatch_float(p.out_dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (sizeof(T) == 2) {
      launch_pdl(silu_mul_quant_kernel<T, false>, static_cast<unsigned>(p.rows), kQuantThreads, 0, stream, p.rows,
                 static_cast<const T*>(p.gate), static_cast<const T*>(p.up), cols, act, xq, xs, GgmlXq{});
    }
  });
  PEREGRINE_CUDA_CHECK_LAUNCH();
}

namespace {
EnvSwitch g_silu_grid("PEREGRINE_SILU_GGML_GRID");  // silu_mul_ggml_grid_mode
}  // namespace

void silu_mul_ggml_grid_mode(int mode) { g_silu_grid.set(mode); }

void launch_silu_mul_ggml(const SiluMulLaunch& p, const GgmlXq& xq, cudaStream_t stream) {
  const bool grid_form = g_silu_grid.on();
  PEREGRINE_CHECK(silu_mul_ggml_takes(p) && xq.q && xq.d && xq.sum && xq.sum16 &&
                      (reinterpret_cast<uintptr_t>(xq.q) & 3u) == 0,
                  "silu_mul_ggml: a launch the kernel does not take");
  const int64_t cols = p.numel / p.rows;
  dispatch_float(p.out_dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (sizeof(T) == 2) {
      if (grid_form) {
        const dim3 grid(static_cast<unsigned>(ceil_div(cols / 8, int64_t{256})), static_cast<unsigned>(p.rows));
        launch_pdl(silu_mul_ggml_kernel<T>, grid, 256, 0, stream, p.rows, static_cast<const T*>(p.gate),
                   static_cast<const T*>(p.up), cols, xq);
      } else {
        launch_pdl(silu_mul_quant_kernel<T, true>, static_cast<unsigned>(p.rows), kQuantThreads, 0, stream, p.rows,
                   static_cast<const T*>(p.gate), static_cast<const T*>(p.up), cols, 0, nullptr, nullptr, xq);
      }
    }
  });
  PEREGRINE_CUDA_CHECK_LAUNCH();
}

void launch_add_bias(const AddBiasLaunch& p, cudaStream_t stream) {
  if (p.m * p.n == 0) return;
  add_bias_kernel<<<grid_for(p.m * p.n, 256), 256, 0, stream>>>(p);
  PEREGRINE_CUDA_CHECK_LAUNCH();
}

}  // namespace peregrine::cuda
