// W4A16 / W8A16 kernels (see quant_matmul.cuh).
//
// Small M: a block of kWarps warps owns kRows output rows (x read once per chunk for all of them); thread t takes the 32-column chunks t, t + 128, ... of
// K (so a chunk lies in one group). Codes become floats in registers with the exponent trick: 0x4B000000 | code is
// the float 2^23 + code, and subtracting 2^23 + zero gives code - zero exactly; each chunk's products are summed in
// column order and scaled once; the threads' sums meet in a fixed xor butterfly per warp, then the warps' in warp
// order. The split depends on K only (never on M), so it keeps rows independent of the batch. Codes are read once,
// 16 bytes per load.
#include "backend/cuda/cuda_common.cuh"
#include "backend/cuda/quant_matmul.cuh"

namespace peregrine::cuda {
namespace {

constexpr int kWarps = 4;
constexpr int kRows = 4;  // output rows per block

// NV consecutive elements of T (NV * sizeof(T) in {8, 16, 32} bytes, aligned to that) as floats.
template <typename T, int NV>
__device__ __forceinline__ void load_vals(const T* p, float (&v)[NV]) {
  constexpr int kBytes = NV * static_cast<int>(sizeof(T));
  if constexpr (kBytes == 8) {
    uint2 raw = *reinterpret_cast<const uint2*>(p);
    const T* e = reinterpret_cast<const T*>(&raw);
#pragma unroll
    for (int i = 0; i < NV; ++i) v[i] = to_f32(e[i]);
  } else if constexpr (kBytes == 16) {
    uint4 raw = *reinterpret_cast<const uint4*>(p);
    const T* e = reinterpret_cast<const T*>(&raw);
#pragma unroll
    for (int i = 0; i < NV; ++i) v[i] = to_f32(e[i]);
  } else {
    uint4 raw[2];
    raw[0] = reinterpret_cast<const uint4*>(p)[0];
    raw[1] = reinterpret_cast<const uint4*>(p)[1];
    const T* e = reinterpret_cast<const T*>(raw);
#pragma unroll
    for (int i = 0; i < NV; ++i) v[i] = to_f32(e[i]);
  }
}

template <typename T, bool kI4, int MT>
__global__ void __launch_bounds__(kWarps * 32) quant_gemv_kernel(QuantMatmulLaunch p, const T* __restrict__ x) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t n0 = static_cast<int64_t>(blockIdx.x) * kRows;
  const int64_t k = p.k, chunks = k / 32, groups = p.groups, gs = p.group_size;
  const int64_t row_bytes = kI4 ? k / 2 : k;
  constexpr int kWords = kI4 ? 4 : 8;      // 32-bit words per 32-column chunk
  constexpr int kPerWord = kI4 ? 8 : 4;    // codes per word
  const float mid = kI4 ? 8.0f : 128.0f;
  float acc[MT][kRows];
#pragma unroll
  for (int m = 0; m < MT; ++m)
#pragma unroll
    for (int r = 0; r < kRows; ++r) acc[m][r] = 0.0f;
#pragma unroll 2
  for (int64_t c = threadIdx.x; c < chunks; c += kWarps * 32) {
    const int64_t g = c * 32 / gs;
    // Every row's codes first (their loads in flight together; streamed past L1, which keeps x).
    uint32_t words[kRows][kWords];
    float s[kRows], off[kRows];
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
      const int64_t n = n0 + r < p.n ? n0 + r : n0;  // a missing last row recomputes row n0 (not stored)
      const uint4* wp = reinterpret_cast<const uint4*>(p.codes + n * row_bytes + c * (kI4 ? 16 : 32));
#pragma unroll
      for (int i = 0; i < kWords / 4; ++i) {
        const uint4 v = __ldcs(wp + i);
        words[r][4 * i] = v.x;
        words[r][4 * i + 1] = v.y;
        words[r][4 * i + 2] = v.z;
        words[r][4 * i + 3] = v.w;
      }
      s[r] = p.scales[n * groups + g];
      off[r] = 8388608.0f + (p.zeros ? p.zeros[n * groups + g] : mid);
    }
    float part[MT][kRows];
#pragma unroll
    for (int m = 0; m < MT; ++m)
#pragma unroll
      for (int r = 0; r < kRows; ++r) part[m][r] = 0.0f;
#pragma unroll
    for (int wi = 0; wi < kWords; ++wi) {
      float wv[kRows][kPerWord];
#pragma unroll
      for (int r = 0; r < kRows; ++r)
#pragma unroll
        for (int q = 0; q < kPerWord; ++q) {
          const uint32_t code = kI4 ? (words[r][wi] >> (4 * q)) & 0xfu : (words[r][wi] >> (8 * q)) & 0xffu;
          wv[r][q] = __uint_as_float(0x4B000000u | code) - off[r];
        }
#pragma unroll
      for (int m = 0; m < MT; ++m) {
        if (m < p.m) {
          float xv[kPerWord];  // read once for every row
          load_vals<T, kPerWord>(x + m * k + c * 32 + wi * kPerWord, xv);
#pragma unroll
          for (int r = 0; r < kRows; ++r)
#pragma unroll
            for (int q = 0; q < kPerWord; ++q) part[m][r] = fmaf(wv[r][q], xv[q], part[m][r]);
        }
      }
    }
#pragma unroll
    for (int m = 0; m < MT; ++m)
#pragma unroll
      for (int r = 0; r < kRows; ++r) acc[m][r] = fmaf(s[r], part[m][r], acc[m][r]);
  }
  __shared__ float partial[kWarps][MT][kRows];
#pragma unroll
  for (int m = 0; m < MT; ++m)
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
      float v = acc[m][r];
#pragma unroll
      for (int o = 16; o >= 1; o /= 2) v += __shfl_xor_sync(0xffffffffu, v, o);
      if (lane == 0) partial[warp][m][r] = v;
    }
  __syncthreads();
  for (int i = threadIdx.x; i < MT * kRows; i += blockDim.x) {
    const int m = i / kRows, r = i % kRows;
    const int64_t n = n0 + r;
    if (m >= p.m || n >= p.n) continue;
    float v = partial[0][m][r];
#pragma unroll
    for (int w = 1; w < kWarps; ++w) v += partial[w][m][r];
    if (p.bias) v += load_any(p.bias, p.bias_dtype, n);
    store_any(p.out, p.out_dtype, m * p.n + n, v);
  }
}

template <typename T>
__global__ void permute_columns_kernel(const T* __restrict__ x, const int32_t* __restrict__ perm, T* __restrict__ out,
                                       int64_t m, int64_t k) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < m * k;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t r = i / k, j = i % k;
    out[i] = x[r * k + perm[j]];
  }
}

// One thread per 8 code columns of a row.
template <typename T, bool kI4>
__global__ void dequantize_kernel(QuantMatmulLaunch p, T* __restrict__ w) {
  const int64_t k = p.k, per_row = k / 8, total = p.n * per_row;
  const float mid = kI4 ? 8.0f : 128.0f;
  for (int64_t t = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; t < total;
       t += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t n = t / per_row, k0 = (t % per_row) * 8;
    uint32_t lo, hi = 0;
    if constexpr (kI4) {
      lo = reinterpret_cast<const uint32_t*>(p.codes)[t];
    } else {
      const uint2 v = reinterpret_cast<const uint2*>(p.codes)[t];
      lo = v.x;
      hi = v.y;
    }
    float vals[8];
#pragma unroll
    for (int q = 0; q < 8; ++q) {
      const uint32_t code = kI4 ? (lo >> (4 * q)) & 0xfu : ((q < 4 ? lo : hi) >> (8 * (q % 4))) & 0xffu;
      const int64_t col = k0 + q;
      const int64_t g = p.g_idx ? p.g_idx[col] : col / p.group_size;
      const float z = p.zeros ? p.zeros[n * p.groups + g] : mid;
      vals[q] = (static_cast<float>(code) - z) * p.scales[n * p.groups + g];
    }
    if (p.perm) {
#pragma unroll
      for (int q = 0; q < 8; ++q) w[n * k + p.perm[k0 + q]] = from_f32<T>(vals[q]);
    } else {
      store8(w + n * k + k0, vals);
    }
  }
}

// One thread per 32 code columns of a row, all in one group (no g_idx, group a multiple of 32).
template <typename T, bool kI4>
__global__ void dequantize32_kernel(QuantMatmulLaunch p, T* __restrict__ w) {
  const int64_t k = p.k, per_row = k / 32, total = p.n * per_row;
  const float mid = kI4 ? 8.0f : 128.0f;
  for (int64_t t = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; t < total;
       t += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t n = t / per_row, k0 = (t % per_row) * 32, g = k0 / p.group_size;
    uint32_t words[kI4 ? 4 : 8];
    const uint4* src = reinterpret_cast<const uint4*>(p.codes + (kI4 ? t * 16 : t * 32));
#pragma unroll
    for (int i = 0; i < (kI4 ? 1 : 2); ++i) {
      const uint4 v = __ldcs(src + i);
      words[4 * i] = v.x;
      words[4 * i + 1] = v.y;
      words[4 * i + 2] = v.z;
      words[4 * i + 3] = v.w;
    }
    const float s = p.scales[n * p.groups + g];
    const float z = p.zeros ? p.zeros[n * p.groups + g] : mid;
#pragma unroll
    for (int b = 0; b < 4; ++b) {  // 8 columns at a time
      float vals[8];
#pragma unroll
      for (int q = 0; q < 8; ++q) {
        const uint32_t code = kI4 ? (words[b] >> (4 * q)) & 0xfu : (words[2 * b + q / 4] >> (8 * (q % 4))) & 0xffu;
        vals[q] = (static_cast<float>(code) - z) * s;
      }
      if (p.perm) {
#pragma unroll
        for (int q = 0; q < 8; ++q) w[n * k + p.perm[k0 + 8 * b + q]] = from_f32<T>(vals[q]);
      } else {
        store8(w + n * k + k0 + 8 * b, vals);
      }
    }
  }
}

unsigned grid_for(int64_t work, int threads) {
  const int64_t blocks = ceil_div(work, threads);
  return static_cast<unsigned>(blocks > 65536 ? 65536 : (blocks < 1 ? 1 : blocks));
}

template <typename T, bool kI4>
void gemv_m(const QuantMatmulLaunch& l, const T* x, cudaStream_t stream) {
  const unsigned grid = static_cast<unsigned>(ceil_div(l.n, kRows));
  const dim3 block(kWarps * 32);
  if (l.m <= 1) quant_gemv_kernel<T, kI4, 1><<<grid, block, 0, stream>>>(l, x);
  else if (l.m <= 2) quant_gemv_kernel<T, kI4, 2><<<grid, block, 0, stream>>>(l, x);
  else if (l.m <= 4) quant_gemv_kernel<T, kI4, 4><<<grid, block, 0, stream>>>(l, x);
  else if (l.m <= 8) quant_gemv_kernel<T, kI4, 8><<<grid, block, 0, stream>>>(l, x);
  else quant_gemv_kernel<T, kI4, 16><<<grid, block, 0, stream>>>(l, x);
}

}  // namespace

bool quant_gemv_supports(const QuantMatmulLaunch& l) {
  return l.m >= 1 && l.m <= kQuantGemvMaxM && l.k % 32 == 0 && l.group_size % 32 == 0 &&
         l.groups * l.group_size == l.k && !l.g_idx && aligned16(l.x) && aligned16(l.codes) &&
         (l.codes_dtype == DType::kI4 || l.codes_dtype == DType::kU8);
}

void launch_quant_gemv(const QuantMatmulLaunch& l, void* x_perm, cudaStream_t stream) {
  if (l.m == 0 || l.n == 0) return;
  dispatch_float(l.x_dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* x = static_cast<const T*>(l.x);
    if (l.perm) {
      permute_columns_kernel<T><<<grid_for(l.m * l.k, 256), 256, 0, stream>>>(x, l.perm, static_cast<T*>(x_perm), l.m,
                                                                              l.k);
      PEREGRINE_CUDA_CHECK_LAUNCH();
      x = static_cast<const T*>(x_perm);
    }
    if (l.codes_dtype == DType::kI4) gemv_m<T, true>(l, x, stream);
    else gemv_m<T, false>(l, x, stream);
  });
  PEREGRINE_CUDA_CHECK_LAUNCH();
}

void launch_permute_columns(const void* x, DType dtype, const int32_t* perm, void* out, int64_t m, int64_t k,
                            cudaStream_t stream) {
  if (m == 0 || k == 0) return;
  dispatch_float(dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    permute_columns_kernel<T><<<grid_for(m * k, 256), 256, 0, stream>>>(static_cast<const T*>(x), perm,
                                                                          static_cast<T*>(out), m, k);
  });
  PEREGRINE_CUDA_CHECK_LAUNCH();
}

void launch_dequantize(const QuantMatmulLaunch& l, void* w_out, cudaStream_t stream) {
  if (l.n == 0 || l.k == 0) return;
  dispatch_float(l.x_dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    T* w = static_cast<T*>(w_out);
    if (!l.g_idx && l.k % 32 == 0 && l.group_size % 32 == 0 && aligned16(l.codes)) {
      const unsigned grid = grid_for(l.n * l.k / 32, 256);
      if (l.codes_dtype == DType::kI4) dequantize32_kernel<T, true><<<grid, 256, 0, stream>>>(l, w);
      else dequantize32_kernel<T, false><<<grid, 256, 0, stream>>>(l, w);
      return;
    }
    const unsigned grid = grid_for(l.n * l.k / 8, 256);
    if (l.codes_dtype == DType::kI4) dequantize_kernel<T, true><<<grid, 256, 0, stream>>>(l, w);
    else dequantize_kernel<T, false><<<grid, 256, 0, stream>>>(l, w);
  });
  PEREGRINE_CUDA_CHECK_LAUNCH();
}

}  // namespace peregrine::cuda
