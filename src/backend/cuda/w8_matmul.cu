// 8-bit weight matmul kernels (see w8_matmul.cuh).
#include <cuda_fp8.h>

#include "backend/cuda/act_quant.cuh"
#include "backend/cuda/cuda_common.cuh"
#include "backend/cuda/w8_matmul.cuh"

#include <cstdlib>
#include <string_view>

namespace peregrine::cuda {
namespace {

constexpr int kQuantThreads = 256;
constexpr int kWarpsPerBlock = 4;

__device__ __forceinline__ float fp8_to_f32(uint8_t b) {
  __nv_fp8_e4m3 v;
  v.__x = b;
  return static_cast<float>(v);
}

// One block per (row, activation group): amax (fmaxf: order-free), then the codes, as ops.h defines them.
template <typename T>
__global__ void __launch_bounds__(kQuantThreads) act_quant_kernel(W8MatmulLaunch p, uint8_t* __restrict__ xq,
                                                                   float* __restrict__ xs) {
  pdl_wait();  // x is the kernel before's output; xq / xs may still be read by the matmul before
  pdl_trigger();
  const int64_t row = blockIdx.y, g = blockIdx.x, len = p.act_group;
  const T* x = static_cast<const T*>(p.x) + row * p.k + g * len;
  float amax = 0.0f;
  for (int64_t i = threadIdx.x; i < len; i += kQuantThreads) amax = fmaxf(amax, fabsf(to_f32(x[i])));
  amax = block_max<kQuantThreads>(amax);
  uint8_t* q = xq + row * p.k + g * len;
  const int64_t si = p.xs_row_stride || p.xs_group_stride ? row * p.xs_row_stride + g * p.xs_group_stride
                                                          : row * (p.k / len) + g;
  if (p.act == 1) {
    const float inv = int8_act_inv(amax);
    for (int64_t i = threadIdx.x; i < len; i += kQuantThreads) q[i] = int8_act_code(to_f32(x[i]), amax, inv);
    if (threadIdx.x == 0) xs[si] = int8_act_scale(amax);
  } else {
    const float s = fp8_act_scale(amax);
    for (int64_t i = threadIdx.x; i < len; i += kQuantThreads) q[i] = fp8_act_code(to_f32(x[i]), s);
    if (threadIdx.x == 0) xs[si] = s;
  }
}

// The same for 16-bit x whose groups are whole 8-value pieces, 16-byte aligned: each thread holds its pieces of the
// group in registers (at most kQuantVecs), so x is read once, 16 bytes at a time, and the codes go out 8 bytes at a
// time. The same amax (fmaxf is order-free) and the same code of each value: the same bits as act_quant_kernel.
constexpr int kQuantVecs = 8;  // groups up to 8 x 8 x 256 = 16384 values
template <typename T>
__global__ void __launch_bounds__(kQuantThreads) act_quant_vec_kernel(W8MatmulLaunch p, uint8_t* __restrict__ xq,
                                                                       float* __restrict__ xs) {
  static_assert(sizeof(T) == 2, "16-bit x");
  pdl_wait();
  pdl_trigger();
  const int64_t row = blockIdx.y, g = blockIdx.x, len = p.act_group;
  const int pieces = static_cast<int>(len / 8);
  const uint4* x = reinterpret_cast<const uint4*>(static_cast<const T*>(p.x) + row * p.k + g * len);
  uint4 v[kQuantVecs];
  float amax = 0.0f;
#pragma unroll
  for (int j = 0; j < kQuantVecs; ++j) {
    const int i = static_cast<int>(threadIdx.x) + j * kQuantThreads;
    if (i < pieces) v[j] = x[i];
  }
#pragma unroll
  for (int j = 0; j < kQuantVecs; ++j) {
    const int i = static_cast<int>(threadIdx.x) + j * kQuantThreads;
    if (i < pieces) {
      const T* e = reinterpret_cast<const T*>(&v[j]);
#pragma unroll
      for (int u = 0; u < 8; ++u) amax = fmaxf(amax, fabsf(to_f32(e[u])));
    }
  }
  amax = block_max<kQuantThreads>(amax);
  uint2* q = reinterpret_cast<uint2*>(xq + row * p.k + g * len);
  const int64_t si = p.xs_row_stride || p.xs_group_stride ? row * p.xs_row_stride + g * p.xs_group_stride
                                                          : row * (p.k / len) + g;
  const ActQuantizer qz(p.act, amax);
#pragma unroll
  for (int j = 0; j < kQuantVecs; ++j) {
    const int i = static_cast<int>(threadIdx.x) + j * kQuantThreads;
    if (i < pieces) {
      const T* e = reinterpret_cast<const T*>(&v[j]);
      float f[8];
#pragma unroll
      for (int u = 0; u < 8; ++u) f[u] = to_f32(e[u]);
      q[i] = qz.codes8(f);
    }
  }
  if (threadIdx.x == 0) xs[si] = qz.scale();
}

// One warp per output (row, n). ACT: 0 float x times dequantized codes, 1 int8 x int8 (dp4a), 2 fp8 x fp8.
template <typename T, int ACT, bool kFp8W>
__global__ void __launch_bounds__(kWarpsPerBlock * 32) w8_matmul_kernel(W8MatmulLaunch p, const uint8_t* __restrict__ xq,
                                                                         const float* __restrict__ xs) {
  const int lane = threadIdx.x & 31;
  const int64_t n = static_cast<int64_t>(blockIdx.x) * kWarpsPerBlock + threadIdx.x / 32, row = blockIdx.y;
  if (n >= p.n) return;
  const uint8_t* w = p.codes + n * p.k;
  const float* ws = p.scales + (n / p.block_rows) * p.groups;
  const int64_t gs = p.group_size, per_act = p.act_group / gs;  // weight groups per activation scale (>= 1)
  float acc = 0.0f;
  for (int64_t g = 0; g < p.groups; ++g) {
    const int64_t c0 = g * gs, c1 = min(p.k, c0 + gs);
    float part;
    if constexpr (ACT == 1) {
      int32_t s = 0;
      const uint8_t* xr = xq + row * p.k;
      for (int64_t c = c0 + 4 * lane; c < c1; c += 128)
        s = __dp4a(*reinterpret_cast<const int32_t*>(w + c), *reinterpret_cast<const int32_t*>(xr + c), s);
      for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
      part = static_cast<float>(s) * xs[row * (p.k / p.act_group) + g / per_act];
    } else {
      float s = 0.0f;
      for (int64_t c = c0 + 4 * lane; c < c1; c += 128) {
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          const float wv = kFp8W ? fp8_to_f32(w[c + i]) : static_cast<float>(static_cast<int8_t>(w[c + i]));
          const float xv = ACT == 2 ? fp8_to_f32(xq[row * p.k + c + i])
                                    : to_f32(static_cast<const T*>(p.x)[row * p.k + c + i]);
          s = fmaf(wv, xv, s);
        }
      }
      for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
      part = ACT == 2 ? s * xs[row * (p.k / p.act_group) + g / per_act] : s;
    }
    acc = fmaf(part, ws[g], acc);
  }
  if (lane == 0) {
    if (p.bias) acc += load_any(p.bias, p.bias_dtype, n);
    store_any(p.out, p.out_dtype, row * p.n + n, acc);
  }
}

__global__ void w8_int32_epilogue_kernel(W8MatmulLaunch p, const int32_t* __restrict__ c,
                                         const float* __restrict__ xs, int64_t row0, int64_t rows) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= rows * p.n) return;
  const int64_t r = i / p.n, n = i % p.n;
  const float part = static_cast<float>(c[i]) * xs[r];
  float acc = fmaf(part, p.scales[n / p.block_rows], 0.0f);
  if (p.bias) acc += load_any(p.bias, p.bias_dtype, n);
  store_any(p.out, p.out_dtype, (row0 + r) * p.n + n, acc);
}

__global__ void relayout_f32_kernel(const float* __restrict__ src, int64_t rows, int64_t cols, float* __restrict__ dst,
                                    int64_t row_stride, int64_t col_stride) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= rows * cols) return;
  const int64_t r = i / cols, c = i % cols;
  dst[r * row_stride + c * col_stride] = src[i];
}

}  // namespace

void launch_relayout_f32(const float* src, int64_t rows, int64_t cols, float* dst, int64_t row_stride,
                         int64_t col_stride, cudaStream_t stream) {
  const int64_t total = rows * cols;
  if (total == 0) return;
  constexpr int kThreads = 256;
  relayout_f32_kernel<<<static_cast<unsigned>((total + kThreads - 1) / kThreads), kThreads, 0, stream>>>(
      src, rows, cols, dst, row_stride, col_stride);
  PEREGRINE_CUDA_CHECK(cudaGetLastError());
}

bool w8_matmul_supports(const W8MatmulLaunch& l) {
  return l.k % 4 == 0 && l.group_size % 4 == 0 && (l.act == 0 || l.act_group == l.k || l.act_group == l.group_size) &&
         (l.act == 0 || l.act_group % l.group_size == 0);
}

void launch_act_quant(const W8MatmulLaunch& l, uint8_t* xq, float* xs, cudaStream_t stream) {
  if (l.act == 0 || l.m == 0) return;
  static const bool vec_on = [] {
    const char* v = std::getenv("PEREGRINE_ACT_QUANT_VEC");
    return !(v && std::string_view(v) == "0");
  }();
  const bool vec = vec_on && l.x_dtype != DType::kF32 && l.k % 8 == 0 && l.act_group % 8 == 0 &&
                   l.act_group <= int64_t{8} * kQuantVecs * kQuantThreads && aligned16(l.x) &&
                   (reinterpret_cast<uintptr_t>(xq) & 7u) == 0;
  if (vec) {
    const dim3 grid(static_cast<unsigned>(l.k / l.act_group), static_cast<unsigned>(l.m));
    if (l.x_dtype == DType::kBF16) {
      launch_pdl(act_quant_vec_kernel<bf16>, grid, dim3(kQuantThreads), 0, stream, l.m, l, xq, xs);
    } else {
      launch_pdl(act_quant_vec_kernel<f16>, grid, dim3(kQuantThreads), 0, stream, l.m, l, xq, xs);
    }
    return;
  }
  dispatch_float(l.x_dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    launch_pdl(act_quant_kernel<T>, dim3(static_cast<unsigned>(l.k / l.act_group), static_cast<unsigned>(l.m)),
               dim3(kQuantThreads), 0, stream, l.m, l, xq, xs);
  });
}

void launch_w8_matmul(const W8MatmulLaunch& l, const uint8_t* xq, const float* xs, cudaStream_t stream) {
  if (l.m == 0 || l.n == 0) return;
  const dim3 grid(static_cast<unsigned>(ceil_div(l.n, kWarpsPerBlock)), static_cast<unsigned>(l.m));
  const bool fp8w = l.codes_dtype == DType::kF8E4M3;
  dispatch_float(l.x_dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    if (l.act == 1) w8_matmul_kernel<T, 1, false><<<grid, kWarpsPerBlock * 32, 0, stream>>>(l, xq, xs);
    else if (l.act == 2) w8_matmul_kernel<T, 2, true><<<grid, kWarpsPerBlock * 32, 0, stream>>>(l, xq, xs);
    else if (fp8w) w8_matmul_kernel<T, 0, true><<<grid, kWarpsPerBlock * 32, 0, stream>>>(l, xq, xs);
    else w8_matmul_kernel<T, 0, false><<<grid, kWarpsPerBlock * 32, 0, stream>>>(l, xq, xs);
  });
  PEREGRINE_CUDA_CHECK(cudaGetLastError());
}

void launch_w8_int32_epilogue(const W8MatmulLaunch& l, const int32_t* c, const float* xs, int64_t row0, int64_t rows,
                              cudaStream_t stream) {
  const int64_t total = rows * l.n;
  if (total == 0) return;
  constexpr int kThreads = 256;
  w8_int32_epilogue_kernel<<<static_cast<unsigned>((total + kThreads - 1) / kThreads), kThreads, 0, stream>>>(
      l, c, xs, row0, rows);
  PEREGRINE_CUDA_CHECK(cudaGetLastError());
}

}  // namespace peregrine::cuda
