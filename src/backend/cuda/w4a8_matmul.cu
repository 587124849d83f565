// W4A8 matmul kernels (see w4a8_matmul.cuh).
#include "backend/cuda/cuda_common.cuh"
#include "backend/cuda/w4a8_matmul.cuh"

namespace peregrine::cuda {
namespace {

constexpr int kWarps = 4;  // outputs (columns n) per block of the GEMV
constexpr int kThreads = 256;

// 8 codes of one 32-bit word (byte b: code 2b low, 2b + 1 high) as two words of 4 unsigned bytes in column order.
__device__ __forceinline__ void widen8(uint32_t w, uint32_t& a, uint32_t& b) {
  const uint32_t lo = w & 0x0f0f0f0fu, hi = (w >> 4) & 0x0f0f0f0fu;
  a = __byte_perm(lo, hi, 0x5140);  // codes 0, 1, 2, 3
  b = __byte_perm(lo, hi, 0x7362);  // codes 4, 5, 6, 7
}

__global__ void __launch_bounds__(kThreads) chunk_sums_kernel(const int8_t* __restrict__ xq, int32_t* __restrict__ xsum,
                                                              int64_t total, int64_t chunks) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x;
  if (i >= total) return;
  const int64_t r = i / chunks, c = i % chunks;
  const int4* p = reinterpret_cast<const int4*>(xq + r * chunks * 32 + c * 32);
  const int4 v0 = p[0], v1 = p[1];
  int32_t s = 0;
  const int ones = 0x01010101;
  s = __dp4a(v0.x, ones, s);
  s = __dp4a(v0.y, ones, s);
  s = __dp4a(v0.z, ones, s);
  s = __dp4a(v0.w, ones, s);
  s = __dp4a(v1.x, ones, s);
  s = __dp4a(v1.y, ones, s);
  s = __dp4a(v1.z, ones, s);
  s = __dp4a(v1.w, ones, s);
  xsum[i] = s;
}

// One warp per output column n, rows [0, m) with m <= MR; lane l takes chunks l, l + 32, ... of 32 columns.
template <int MR>
__global__ void __launch_bounds__(kWarps * 32) w4a8_gemv_kernel(W4A8MatmulLaunch p, const int8_t* __restrict__ xq,
                                                                 const float* __restrict__ xs,
                                                                 const int32_t* __restrict__ xsum) {
  const int lane = threadIdx.x & 31;
  const int64_t n = static_cast<int64_t>(blockIdx.x) * kWarps + threadIdx.x / 32;
  if (n >= p.n) return;
  const int64_t chunks = p.k / 32, chunks_per_group = p.group_size / 32;
  const uint4* w = reinterpret_cast<const uint4*>(p.codes + n * (p.k / 2));
  const float* ws = p.scales + n * p.groups;
  float acc[MR];
#pragma unroll
  for (int r = 0; r < MR; ++r) acc[r] = 0.0f;
  // Small M: several chunks' loads in flight per lane (decode is bound by the code stream).
#pragma unroll(MR <= 4 ? 4 : 1)
  for (int64_t c = lane; c < chunks; c += 32) {
    const uint4 raw = __ldg(w + c);
    uint32_t wv[8];
    widen8(raw.x, wv[0], wv[1]);
    widen8(raw.y, wv[2], wv[3]);
    widen8(raw.z, wv[4], wv[5]);
    widen8(raw.w, wv[6], wv[7]);
    const float s = ws[c / chunks_per_group];
#pragma unroll
    for (int r = 0; r < MR; ++r) {
      if (r < p.m) {
        const int4* xp = reinterpret_cast<const int4*>(xq + r * p.k + c * 32);
        const int4 x0 = xp[0], x1 = xp[1];
        int32_t d = 0;
        d = __dp4a(static_cast<int>(wv[0]), x0.x, d);
        d = __dp4a(static_cast<int>(wv[1]), x0.y, d);
        d = __dp4a(static_cast<int>(wv[2]), x0.z, d);
        d = __dp4a(static_cast<int>(wv[3]), x0.w, d);
        d = __dp4a(static_cast<int>(wv[4]), x1.x, d);
        d = __dp4a(static_cast<int>(wv[5]), x1.y, d);
        d = __dp4a(static_cast<int>(wv[6]), x1.z, d);
        d = __dp4a(static_cast<int>(wv[7]), x1.w, d);
        d -= 8 * xsum[r * chunks + c];
        acc[r] = fmaf(static_cast<float>(d), s, acc[r]);
      }
    }
  }
#pragma unroll
  for (int r = 0; r < MR; ++r) {
    float v = acc[r];
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    acc[r] = v;
  }
  if (lane == 0) {
    const float b = p.bias ? load_any(p.bias, p.bias_dtype, n) : 0.0f;
#pragma unroll
    for (int r = 0; r < MR; ++r)
      if (r < p.m) {
        const float y = acc[r] * xs[r];
        store_any(p.out, p.out_dtype, r * p.n + n, p.bias ? y + b : y);
      }
  }
}

template <typename T>
__global__ void __launch_bounds__(kThreads) widen_kernel(const int8_t* __restrict__ xq, T* __restrict__ a, int64_t count) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x;
  if (i < count) a[i] = from_f32<T>(static_cast<float>(xq[i]));
}

// One thread per 8 codes (one 32-bit word).
template <typename T>
__global__ void __launch_bounds__(kThreads) dequantize_kernel(W4A8MatmulLaunch p, T* __restrict__ w, bool per_channel) {
  const int64_t words = p.n * (p.k / 8);
  const int64_t i = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x;
  if (i >= words) return;
  const int64_t n = i / (p.k / 8), c0 = (i % (p.k / 8)) * 8;
  const uint32_t v = reinterpret_cast<const uint32_t*>(p.codes)[i];
  const float s = per_channel ? 1.0f : p.scales[n * p.groups + c0 / p.group_size];
  float out[8];
#pragma unroll
  for (int j = 0; j < 8; ++j) out[j] = static_cast<float>(static_cast<int>((v >> (4 * j)) & 0xfu) - 8) * s;
  store8(w + n * p.k + c0, out);
}

__global__ void __launch_bounds__(kThreads) epilogue_kernel(W4A8MatmulLaunch p, const float* __restrict__ c,
                                                            const float* __restrict__ xs,
                                                            const float* __restrict__ channel_scale) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x;
  if (i >= p.m * p.n) return;
  const int64_t r = i / p.n, n = i % p.n;
  float y = c[i] * xs[r];
  if (channel_scale) y *= channel_scale[n];
  if (p.bias) y += load_any(p.bias, p.bias_dtype, n);
  store_any(p.out, p.out_dtype, i, y);
}

unsigned blocks_for(int64_t count) { return static_cast<unsigned>(ceil_div(count, kThreads)); }

}  // namespace

bool w4a8_supports(const W4A8MatmulLaunch& l) {
  return l.k % 32 == 0 && l.group_size > 0 && l.group_size % 32 == 0 && l.k % l.group_size == 0 &&
         l.groups == l.k / l.group_size;
}

void launch_w4a8_chunk_sums(const int8_t* xq, int32_t* xsum, int64_t m, int64_t k, cudaStream_t stream) {
  const int64_t total = m * (k / 32);
  if (total == 0) return;
  chunk_sums_kernel<<<blocks_for(total), kThreads, 0, stream>>>(xq, xsum, total, k / 32);
  PEREGRINE_CUDA_CHECK(cudaGetLastError());
}

void launch_w4a8_gemv(const W4A8MatmulLaunch& l, const int8_t* xq, const float* xs, const int32_t* xsum,
                      cudaStream_t stream) {
  if (l.m == 0 || l.n == 0) return;
  const dim3 grid(static_cast<unsigned>(ceil_div(l.n, kWarps)));
  const int threads = kWarps * 32;
  if (l.m <= 1) w4a8_gemv_kernel<1><<<grid, threads, 0, stream>>>(l, xq, xs, xsum);
  else if (l.m <= 2) w4a8_gemv_kernel<2><<<grid, threads, 0, stream>>>(l, xq, xs, xsum);
  else if (l.m <= 4) w4a8_gemv_kernel<4><<<grid, threads, 0, stream>>>(l, xq, xs, xsum);
  else if (l.m <= 8) w4a8_gemv_kernel<8><<<grid, threads, 0, stream>>>(l, xq, xs, xsum);
  else w4a8_gemv_kernel<16><<<grid, threads, 0, stream>>>(l, xq, xs, xsum);
  PEREGRINE_CUDA_CHECK(cudaGetLastError());
}

void launch_w4a8_widen(const int8_t* xq, void* a, DType dtype, int64_t count, cudaStream_t stream) {
  if (count == 0) return;
  dispatch_float(dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    widen_kernel<T><<<blocks_for(count), kThreads, 0, stream>>>(xq, static_cast<T*>(a), count);
  });
  PEREGRINE_CUDA_CHECK(cudaGetLastError());
}

void launch_w4a8_dequantize(const W4A8MatmulLaunch& l, void* w, DType dtype, bool per_channel, cudaStream_t stream) {
  const int64_t words = l.n * (l.k / 8);
  if (words == 0) return;
  dispatch_float(dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    dequantize_kernel<T><<<blocks_for(words), kThreads, 0, stream>>>(l, static_cast<T*>(w), per_channel);
  });
  PEREGRINE_CUDA_CHECK(cudaGetLastError());
}

void launch_w4a8_epilogue(const W4A8MatmulLaunch& l, const float* c, const float* xs, const float* channel_scale,
                          cudaStream_t stream) {
  if (l.m * l.n == 0) return;
  epilogue_kernel<<<blocks_for(l.m * l.n), kThreads, 0, stream>>>(l, c, xs, channel_scale);
  PEREGRINE_CUDA_CHECK(cudaGetLastError());
}

}  // namespace peregrine::cuda
