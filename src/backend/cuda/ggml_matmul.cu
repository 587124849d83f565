// GGUF block kernels (see ggml_matmul.cuh).
//
// Every kernel works in chunks of 32 consecutive values of a row: a whole block of the 32-value types, one
// sub-block of a 256-value K-quant super-block. dequant32<T> turns chunk c of a row into 32 floats in registers,
// as core/ggml_quant.cpp's oracle defines them, from 16-bit loads (every block field of every type sits at an even
// offset, and every row length in bytes is even).
//
// GEMV: one warp per output; lane l takes chunks l, l + 32, ... (for a 32-value type a warp's first pass reads 32
// consecutive blocks: coalesced); each chunk's 32 products are summed in order into the lane's accumulator, then a
// fixed xor butterfly. The order depends on K only, so a row's bits never depend on M. Q4_0 takes
// ggml_gemv_q4_0_kernel (below), whose lanes share blocks so that the warp's loads are coalesced.
#include "backend/cuda/cuda_common.cuh"
#include "backend/cuda/ggml_matmul.cuh"

namespace peregrine::cuda {
namespace {

constexpr int kGemvWarps = 4;  // outputs per block

__device__ __forceinline__ uint32_t ld16(const uint8_t* p) { return *reinterpret_cast<const uint16_t*>(p); }
__device__ __forceinline__ float ldh(const uint8_t* p) {
  return __half2float(__ushort_as_half(*reinterpret_cast<const unsigned short*>(p)));
}
// n (even) bytes from an even address.
template <int N>
__device__ __forceinline__ void ld_bytes(const uint8_t* p, uint8_t (&b)[N]) {
#pragma unroll
  for (int i = 0; i < N / 2; ++i) {
    const uint32_t w = ld16(p + 2 * i);
    b[2 * i] = static_cast<uint8_t>(w & 0xffu);
    b[2 * i + 1] = static_cast<uint8_t>(w >> 8);
  }
}

// The 6-bit scale and min of sub-block j of a Q4_K / Q5_K super-block (12 packed bytes at q).
__device__ __forceinline__ void scale_min_k4(int j, const uint8_t* q, float* sc, float* m) {
  uint8_t s[12];
  ld_bytes<12>(q, s);
  if (j < 4) {
    *sc = static_cast<float>(s[j] & 63);
    *m = static_cast<float>(s[j + 4] & 63);
  } else {
    *sc = static_cast<float>((s[j + 4] & 0xF) | ((s[j - 4] >> 6) << 4));
    *m = static_cast<float>((s[j + 4] >> 4) | ((s[j] >> 6) << 4));
  }
}

// Q6_K's 6-bit code (0..63) from its low-nibble byte ql and high-bit byte qh, for chunk t (0..3) of a half
// super-block: the nibble at 4 (t / 2), the two high bits at 2t.
__device__ __forceinline__ int q6_of(uint32_t ql, uint32_t qh, int t) {
  return static_cast<int>(((ql >> (4 * (t >> 1))) & 0xFu) | (((qh >> (2 * t)) & 3u) << 4));
}

template <GgmlType T>
__device__ __forceinline__ void dequant32(const uint8_t* row, int64_t c, float (&v)[32]) {
  if constexpr (T == GgmlType::kQ4_0 || T == GgmlType::kQ4_1) {
    constexpr int kBytes = T == GgmlType::kQ4_0 ? 18 : 20, kQs = T == GgmlType::kQ4_0 ? 2 : 4;
    const uint8_t* b = row + c * kBytes;
    const float d = ldh(b);
    const float m = T == GgmlType::kQ4_1 ? ldh(b + 2) : 0.0f;
    uint8_t q[16];
    ld_bytes<16>(b + kQs, q);
#pragma unroll
    for (int j = 0; j < 16; ++j) {
      if constexpr (T == GgmlType::kQ4_0) {
        v[j] = static_cast<float>((q[j] & 0xF) - 8) * d;
        v[j + 16] = static_cast<float>((q[j] >> 4) - 8) * d;
      } else {
        v[j] = __fadd_rn(__fmul_rn(static_cast<float>(q[j] & 0xF), d), m);
        v[j + 16] = __fadd_rn(__fmul_rn(static_cast<float>(q[j] >> 4), d), m);
      }
    }
  } else if constexpr (T == GgmlType::kQ5_0 || T == GgmlType::kQ5_1) {
    constexpr bool kMin = T == GgmlType::kQ5_1;
    constexpr int kBytes = kMin ? 24 : 22, kQh = kMin ? 4 : 2;
    const uint8_t* b = row + c * kBytes;
    const float d = ldh(b);
    const float m = kMin ? ldh(b + 2) : 0.0f;
    const uint32_t qh = ld16(b + kQh) | (ld16(b + kQh + 2) << 16);
    uint8_t q[16];
    ld_bytes<16>(b + kQh + 4, q);
#pragma unroll
    for (int j = 0; j < 16; ++j) {
      const int lo = (q[j] & 0xF) | static_cast<int>(((qh >> j) & 1u) << 4);
      const int hi = (q[j] >> 4) | static_cast<int>(((qh >> (j + 16)) & 1u) << 4);
      if constexpr (kMin) {
        v[j] = __fadd_rn(__fmul_rn(static_cast<float>(lo), d), m);
        v[j + 16] = __fadd_rn(__fmul_rn(static_cast<float>(hi), d), m);
      } else {
        v[j] = static_cast<float>(lo - 16) * d;
        v[j + 16] = static_cast<float>(hi - 16) * d;
      }
    }
  } else if constexpr (T == GgmlType::kQ8_0) {
    const uint8_t* b = row + c * 34;
    const float d = ldh(b);
    uint8_t q[32];
    ld_bytes<32>(b + 2, q);
#pragma unroll
    for (int j = 0; j < 32; ++j) v[j] = static_cast<float>(static_cast<int8_t>(q[j])) * d;
  } else if constexpr (T == GgmlType::kQ4_K || T == GgmlType::kQ5_K) {
    constexpr bool k5 = T == GgmlType::kQ5_K;
    constexpr int kBytes = k5 ? 176 : 144, kQs = k5 ? 48 : 16;
    const int64_t sb = c / 8;
    const int j = static_cast<int>(c % 8);
    const uint8_t* b = row + sb * kBytes;
    float sc, mn;
    scale_min_k4(j, b + 4, &sc, &mn);
    const float d1 = __fmul_rn(ldh(b), sc), m1 = __fmul_rn(ldh(b + 2), mn);
    uint8_t q[32];
    ld_bytes<32>(b + kQs + 32 * (j / 2), q);
    const int shift = 4 * (j & 1);
    if constexpr (k5) {
      uint8_t h[32];
      ld_bytes<32>(b + 16, h);
#pragma unroll
      for (int l = 0; l < 32; ++l)
        v[l] = __fsub_rn(__fmul_rn(d1, static_cast<float>(((q[l] >> shift) & 0xF) + (((h[l] >> j) & 1) << 4))), m1);
    } else {
#pragma unroll
      for (int l = 0; l < 32; ++l) v[l] = __fsub_rn(__fmul_rn(d1, static_cast<float>((q[l] >> shift) & 0xF)), m1);
    }
  } else {  // Q6_K: chunk s = 4 * half + t of the super-block
    const int64_t sb = c / 8;
    const int s = static_cast<int>(c % 8), half = s >> 2, t = s & 3;
    const uint8_t* b = row + sb * 210;
    const float d = ldh(b + 208);
    uint8_t ql[32], qh[32], sc2[2];
    ld_bytes<32>(b + 64 * half + 32 * (t & 1), ql);
    ld_bytes<32>(b + 128 + 32 * half, qh);
    ld_bytes<2>(b + 192 + 2 * s, sc2);
    const float s0 = __fmul_rn(d, static_cast<float>(static_cast<int8_t>(sc2[0])));
    const float s1 = __fmul_rn(d, static_cast<float>(static_cast<int8_t>(sc2[1])));
#pragma unroll
    for (int l = 0; l < 32; ++l) v[l] = __fmul_rn(l < 16 ? s0 : s1, static_cast<float>(q6_of(ql[l], qh[l], t) - 32));
  }
}

// Exact small integers from bytes without I2F: the byte placed in the mantissa of 2^23 (0x4B0000bb = 8388608 + b)
// by one byte permute, then one exact subtraction.
__device__ __forceinline__ float magic_byte(uint32_t word, uint32_t selector, float bias) {
  return __int_as_float(static_cast<int>(__byte_perm(word, 0x4B000000u, selector))) - bias;
}

// The chunk GEMV's dot products of one 32-value chunk with MT rows of x. Q8_0 sums its codes times x and scales the
// sum once (codes made exact floats by magic_byte); the other types dequantize the chunk first (dequant32).
template <GgmlType T, typename X, int MT>
__device__ __forceinline__ void chunk_dot(const uint8_t* row, int64_t c, const X* __restrict__ x, int64_t k, int64_t m_rows,
                                          float (&acc)[MT]) {
  float v[32];
  float d = 1.0f;
  if constexpr (T == GgmlType::kQ8_0) {
    const uint8_t* b = row + c * 34;
    d = ldh(b);
#pragma unroll
    for (int i = 0; i < 16; ++i) {
      const uint32_t w = ld16(b + 2 + 2 * i) ^ 0x8080u;  // q + 128, two codes
      v[2 * i] = magic_byte(w, 0x7540u, 8388736.0f);
      v[2 * i + 1] = magic_byte(w, 0x7541u, 8388736.0f);
    }
  } else {
    dequant32<T>(row, c, v);
  }
#pragma unroll
  for (int m = 0; m < MT; ++m) {
    if (m < m_rows) {
      float part = 0.0f;
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        float xv[8];
        load8(x + m * k + c * 32 + 8 * e, xv);
#pragma unroll
        for (int q = 0; q < 8; ++q) part = fmaf(v[8 * e + q], xv[q], part);
      }
      if constexpr (T == GgmlType::kQ8_0) acc[m] = fmaf(part, d, acc[m]);
      else acc[m] += part;
    }
  }
}

// The end of every GEMV: each row's lane sums meet in a fixed xor butterfly; lane 0 adds the bias and stores.
template <int MT>
__device__ __forceinline__ void store_gemv_rows(const GgmlMatmulLaunch& p, int64_t n, int lane, const float (&acc)[MT]) {
#pragma unroll
  for (int m = 0; m < MT; ++m) {
    float s = acc[m];
#pragma unroll
    for (int o = 16; o >= 1; o /= 2) s += __shfl_xor_sync(0xffffffffu, s, o);
    if (lane == 0 && m < p.m) {
      if (p.bias) s += load_any(p.bias, p.bias_dtype, n);
      store_any(p.out, p.out_dtype, m * p.n + n, s);
    }
  }
}

template <GgmlType T, typename X, int MT>
__global__ void __launch_bounds__(kGemvWarps * 32) ggml_gemv_kernel(GgmlMatmulLaunch p, const X* __restrict__ x) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t n = static_cast<int64_t>(blockIdx.x) * kGemvWarps + warp;
  if (n >= p.n) return;  // whole warps only: no block-level sync below
  const uint8_t* row = p.w + n * p.row_bytes;
  const int64_t chunks = p.k / 32;
  float acc[MT];
#pragma unroll
  for (int m = 0; m < MT; ++m) acc[m] = 0.0f;
  for (int64_t c = lane; c < chunks; c += 32) chunk_dot<T, X, MT>(row, c, x, p.k, p.m, acc);
  store_gemv_rows<MT>(p, n, lane, acc);
}

// 4 consecutive elements (p 8-byte aligned for 16-bit types, 16-byte for f32).
template <typename T>
__device__ __forceinline__ void load4(const T* p, float (&v)[4]) {
  if constexpr (sizeof(T) == 4) {
    const float4 a = *reinterpret_cast<const float4*>(p);
    v[0] = a.x; v[1] = a.y; v[2] = a.z; v[3] = a.w;
  } else {
    const uint2 raw = *reinterpret_cast<const uint2*>(p);
    const T* e = reinterpret_cast<const T*>(&raw);
#pragma unroll
    for (int i = 0; i < 4; ++i) v[i] = to_f32(e[i]);
  }
}

// The Q4_0 GEMV with the warp's loads coalesced: four lanes share a block (4 bytes, 8 codes each), so a warp pass
// reads 8 consecutive blocks (144 bytes) with 16-bit loads that fall in two cache lines, where the chunk-per-lane GEMV spreads each load over a whole 1 KB stretch
// (its limit: L1 wavefronts, ~1.8 TB/s). Each lane sums its codes' products in order and scales that once per block;
// lane sums meet in a fixed butterfly, so a row's bits depend on K alone, never on M. (The same layout for Q8_0, 8
// lanes a block, measured slower than the chunk GEMV: docs/BENCHMARKS.md.)
template <typename X, int MT>
__global__ void __launch_bounds__(kGemvWarps * 32) ggml_gemv_q4_0_kernel(GgmlMatmulLaunch p, const X* __restrict__ x) {
  constexpr int kBytes = 18, kLanesPerBlock = 4, kBlocksPerPass = 32 / kLanesPerBlock;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t n = static_cast<int64_t>(blockIdx.x) * kGemvWarps + warp;
  if (n >= p.n) return;
  const uint8_t* row = p.w + n * p.row_bytes;
  const int64_t blocks = p.k / 32;
  const int sub = lane % kLanesPerBlock, in_pass = lane / kLanesPerBlock;
  float acc[MT];
#pragma unroll
  for (int m = 0; m < MT; ++m) acc[m] = 0.0f;
  // kUnroll passes at a time (32 blocks a warp), their loads issued before any is used: memory-level parallelism.
  constexpr int kUnroll = 32 / kBlocksPerPass;
  for (int64_t b0 = 0; b0 < blocks; b0 += kBlocksPerPass * kUnroll) {
    float d[kUnroll];
    uint32_t w0[kUnroll], w1[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int64_t bi = b0 + u * kBlocksPerPass + in_pass;
      if (bi < blocks) {
        const uint8_t* b = row + bi * kBytes;
        d[u] = ldh(b);
        w0[u] = ld16(b + 2 + 4 * sub);
        w1[u] = ld16(b + 4 + 4 * sub);
      }
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int64_t bi = b0 + u * kBlocksPerPass + in_pass;
      if (bi >= blocks) break;
      const uint32_t lo0 = w0[u] & 0x0F0Fu, hi0 = (w0[u] >> 4) & 0x0F0Fu;
      const uint32_t lo1 = w1[u] & 0x0F0Fu, hi1 = (w1[u] >> 4) & 0x0F0Fu;
      float v[8];  // values 4 sub .. 4 sub + 3, then 16 + 4 sub .. 16 + 4 sub + 3
      v[0] = magic_byte(lo0, 0x7540u, 8388616.0f);
      v[1] = magic_byte(lo0, 0x7541u, 8388616.0f);
      v[2] = magic_byte(lo1, 0x7540u, 8388616.0f);
      v[3] = magic_byte(lo1, 0x7541u, 8388616.0f);
      v[4] = magic_byte(hi0, 0x7540u, 8388616.0f);
      v[5] = magic_byte(hi0, 0x7541u, 8388616.0f);
      v[6] = magic_byte(hi1, 0x7540u, 8388616.0f);
      v[7] = magic_byte(hi1, 0x7541u, 8388616.0f);
#pragma unroll
      for (int m = 0; m < MT; ++m) {
        if (m < p.m) {
          float xa[4], xb[4];
          load4(x + m * p.k + bi * 32 + 4 * sub, xa);
          load4(x + m * p.k + bi * 32 + 16 + 4 * sub, xb);
          float part = v[0] * xa[0];
#pragma unroll
          for (int q = 1; q < 4; ++q) part = fmaf(v[q], xa[q], part);
#pragma unroll
          for (int q = 0; q < 4; ++q) part = fmaf(v[4 + q], xb[q], part);
          acc[m] = fmaf(part, d[u], acc[m]);
        }
      }
    }
  }
  store_gemv_rows<MT>(p, n, lane, acc);
}

// 32 consecutive values as four store8 (dst aligned as store8 needs).
template <typename X>
__device__ __forceinline__ void store32(X* dst, const float (&v)[32]) {
#pragma unroll
  for (int e = 0; e < 4; ++e) {
    float o[8];
#pragma unroll
    for (int q = 0; q < 8; ++q) o[q] = v[8 * e + q];
    store8(dst + 8 * e, o);
  }
}

// One thread per chunk of 32 values of the weight.
template <GgmlType T, typename X>
__global__ void ggml_dequantize_kernel(GgmlMatmulLaunch p, X* __restrict__ w) {
  const int64_t per_row = p.k / 32, total = p.n * per_row;
  for (int64_t t = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; t < total;
       t += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t n = t / per_row, c = t % per_row;
    float v[32];
    dequant32<T>(p.w + n * p.row_bytes, c, v);
    store32(w + n * p.k + c * 32, v);
  }
}

// One block per token; threads over the row's chunks.
template <GgmlType T>
__global__ void ggml_embedding_kernel(GgmlEmbeddingLaunch p) {
  const int64_t t = blockIdx.x;
  const int32_t id = p.token_ids[t];
  const int64_t chunks = p.hidden / 32;
  if (id < 0 || id >= p.vocab) {
    if (threadIdx.x == 0) atomicOr(p.error_flags, kErrEmbeddingTokenId);
    for (int64_t h = threadIdx.x; h < p.hidden; h += blockDim.x) store_any(p.out, p.out_dtype, t * p.hidden + h, 0.0f);
    return;
  }
  for (int64_t c = threadIdx.x; c < chunks; c += blockDim.x) {
    float v[32];
    dequant32<T>(p.table + id * p.row_bytes, c, v);
#pragma unroll
    for (int q = 0; q < 32; ++q) store_any(p.out, p.out_dtype, t * p.hidden + c * 32 + q, v[q]);
  }
}

// ---- The packed layout (ggml_matmul.cuh) ----

template <GgmlType T> __host__ __device__ constexpr int64_t packed_code_row(int64_t k) {
  return ggml_packed_code_bytes(T, 1, k);
}

// Q6_K: the 6-bit code (0..63) of value l of 32-value chunk j (0..7) of the super-block at b, as dequant32 reads it.
__device__ __forceinline__ uint32_t q6_code(const uint8_t* b, int j, int l) {
  const int half = j >> 2, t = j & 3;
  return static_cast<uint32_t>(q6_of(b[64 * half + 32 * (t & 1) + l], b[128 + 32 * half + l], t));
}

// Q6_K's packed chunk (ggml_matmul.cuh): one thread per row and 128-value chunk (its hi bytes mix two blocks).
__global__ void ggml_pack_q6_k_kernel(const uint8_t* __restrict__ w, int64_t n, int64_t k, int64_t row_bytes,
                                      uint8_t* __restrict__ out) {
  const int64_t per_row = k / 128, total = n * per_row, code_row = k / 4 * 3;
  uint8_t* sc_base = out + n * code_row;
  uint8_t* d_base = sc_base + n * (k / 16);
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t r = i / per_row, c = i % per_row, sb = c / 2;
    const int hc = static_cast<int>(c % 2);
    const uint8_t* blk = w + r * row_bytes + sb * 210;
    uint8_t* codes = out + r * code_row + c * 96;
    for (int t = 0; t < 4; ++t)
      for (int e = 0; e < 4; ++e) {
        uint32_t hi[2] = {0, 0};
        for (int s = 0; s < 4; ++s) {
          const int j = 4 * hc + s;  // the block's chunk index in its super-block
          const uint32_t v0 = q6_code(blk, j, 4 * t + e), v1 = q6_code(blk, j, 16 + 4 * t + e);
          codes[16 * t + 4 * s + e] = static_cast<uint8_t>((v0 & 0xFu) | ((v1 & 0xFu) << 4));
          hi[s / 2] |= ((v0 >> 4) | ((v1 >> 4) << 2)) << (4 * (s % 2));
        }
        codes[64 + 8 * t + e] = static_cast<uint8_t>(hi[0]);
        codes[64 + 8 * t + 4 + e] = static_cast<uint8_t>(hi[1]);
      }
    for (int q = 0; q < 8; ++q) sc_base[r * (k / 16) + 8 * c + q] = blk[192 + 8 * hc + q];
    if (hc == 0) {
      d_base[r * (k / 256) * 2 + 2 * sb] = blk[208];
      d_base[r * (k / 256) * 2 + 2 * sb + 1] = blk[209];
    }
  }
}

// Q6_K from the packed layout: value l of a 32-value block, d * sc * (q - 32) as dequant32 rounds it.
template <typename X>
__global__ void ggml_dequantize_packed_q6_k_kernel(GgmlMatmulLaunch p, X* __restrict__ w) {
  const int64_t k = p.k, per_row = k / 32, total = p.n * per_row, code_row = k / 4 * 3;
  const uint8_t* sc_base = p.w + p.n * code_row;
  const uint8_t* d_base = sc_base + p.n * (k / 16);
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t r = i / per_row, b = i % per_row, c = b / 4;
    const int s = static_cast<int>(b % 4);
    const uint8_t* codes = p.w + r * code_row + c * 96;
    const float d = ldh(d_base + r * (k / 256) * 2 + 2 * (b / 8));
    const float s0 = __fmul_rn(d, static_cast<float>(static_cast<int8_t>(sc_base[r * (k / 16) + 2 * b])));
    const float s1 = __fmul_rn(d, static_cast<float>(static_cast<int8_t>(sc_base[r * (k / 16) + 2 * b + 1])));
    float v[32];
    for (int t = 0; t < 4; ++t)
      for (int e = 0; e < 4; ++e) {
        const uint32_t lo = codes[16 * t + 4 * s + e], hi = codes[64 + 8 * t + 4 * (s / 2) + e] >> (4 * (s % 2));
        const int q0 = static_cast<int>((lo & 0xFu) | ((hi & 3u) << 4));
        const int q1 = static_cast<int>((lo >> 4) | (((hi >> 2) & 3u) << 4));
        v[4 * t + e] = __fmul_rn(s0, static_cast<float>(q0 - 32));
        v[16 + 4 * t + e] = __fmul_rn(s1, static_cast<float>(q1 - 32));
      }
    store32(w + r * k + b * 32, v);
  }
}

// Q5_0 / Q5_K: the 5-bit code (0..31) of value l of block b of a row (Q5_K: sub-block b), as dequant32 reads it.
template <GgmlType T>
__device__ __forceinline__ uint32_t q5_code(const uint8_t* row, int64_t b, int l) {
  if constexpr (T == GgmlType::kQ5_0) {
    const uint8_t* blk = row + b * 22;
    const uint32_t nib = l < 16 ? blk[6 + l] & 0xFu : static_cast<uint32_t>(blk[6 + l - 16] >> 4);
    return nib | ((static_cast<uint32_t>(blk[2 + l / 8]) >> (l % 8)) & 1u) << 4;
  } else {
    const int j = static_cast<int>(b % 8);
    const uint8_t* blk = row + (b / 8) * 176;
    const uint32_t nib = (static_cast<uint32_t>(blk[48 + 32 * (j / 2) + l]) >> (4 * (j & 1))) & 0xFu;
    return nib | ((static_cast<uint32_t>(blk[16 + l]) >> j) & 1u) << 4;
  }
}

// Q5_0 / Q5_K's packed chunk (ggml_matmul.cuh): one thread per row and 128-value chunk (a lane's word of fifth
// bits mixes the chunk's four blocks).
template <GgmlType T>
__global__ void ggml_pack_q5_kernel(const uint8_t* __restrict__ w, int64_t n, int64_t k, int64_t row_bytes,
                                    uint8_t* __restrict__ out) {
  const int64_t per_row = k / 128, total = n * per_row, code_row = packed_code_row<T>(k);
  uint8_t* meta_base = out + n * code_row;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t r = i / per_row, c = i % per_row;
    const uint8_t* row = w + r * row_bytes;
    uint8_t* codes = out + r * code_row + c * 80;
    uint8_t* meta = meta_base + r * (k / 16);
    for (int t = 0; t < 4; ++t) {
      uint32_t hw = 0;
      for (int s = 0; s < 4; ++s)
        for (int e = 0; e < 4; ++e) {
          const uint32_t v0 = q5_code<T>(row, 4 * c + s, 4 * t + e), v1 = q5_code<T>(row, 4 * c + s, 16 + 4 * t + e);
          codes[16 * t + 4 * s + e] = static_cast<uint8_t>((v0 & 0xFu) | ((v1 & 0xFu) << 4));
          hw |= ((v0 >> 4) << (8 * e + s)) | ((v1 >> 4) << (8 * e + 4 + s));
        }
      for (int e = 0; e < 4; ++e) codes[64 + 4 * t + e] = static_cast<uint8_t>(hw >> (8 * e));
    }
    if constexpr (T == GgmlType::kQ5_0) {
      for (int s = 0; s < 4; ++s) {
        meta[2 * (4 * c + s)] = row[(4 * c + s) * 22];
        meta[2 * (4 * c + s) + 1] = row[(4 * c + s) * 22 + 1];
      }
    } else if (c % 2 == 0) {
      for (int e = 0; e < 16; ++e) meta[8 * c + e] = row[(c / 2) * 176 + e];
    }
  }
}

// One thread per 32-value block (Q4_K: sub-block) of a row: its codes to their lane slots, its scale (Q4_K: the
// super-block's first 16 bytes, by the thread of sub-block 0) to the meta region.
template <GgmlType T>
__global__ void ggml_pack_kernel(const uint8_t* __restrict__ w, int64_t n, int64_t k, int64_t row_bytes,
                                 uint8_t* __restrict__ out) {
  const int64_t per_row = k / 32, total = n * per_row, code_row = packed_code_row<T>(k);
  uint8_t* meta_base = out + n * code_row;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t r = i / per_row, b = i % per_row, c = b / 4;
    const int s = static_cast<int>(b % 4);
    const uint8_t* row = w + r * row_bytes;
    uint8_t* codes = out + r * code_row;
    uint8_t* meta = meta_base + r * (k / 16);
    if constexpr (T == GgmlType::kQ8_0) {
      const uint8_t* blk = row + b * 34;
      meta[2 * b] = blk[0];
      meta[2 * b + 1] = blk[1];
      for (int t = 0; t < 4; ++t)
        for (int e = 0; e < 4; ++e) {
          codes[c * 128 + t * 32 + s * 8 + e] = blk[2 + 4 * t + e];
          codes[c * 128 + t * 32 + s * 8 + 4 + e] = blk[2 + 16 + 4 * t + e];
        }
    } else if constexpr (T == GgmlType::kQ4_0) {
      const uint8_t* blk = row + b * 18;
      meta[2 * b] = blk[0];
      meta[2 * b + 1] = blk[1];
      for (int t = 0; t < 4; ++t)
        for (int e = 0; e < 4; ++e) codes[c * 64 + t * 16 + s * 4 + e] = blk[2 + 4 * t + e];
    } else {  // Q4_K: sub-block j of super-block sb; value l is nibble j & 1 of qs[32 (j / 2) + l]
      const int64_t sb = b / 8;
      const int j = static_cast<int>(b % 8), shift = 4 * (j & 1);
      const uint8_t* blk = row + sb * 144;
      if (j == 0)
        for (int e = 0; e < 16; ++e) meta[16 * sb + e] = blk[e];
      const uint8_t* qs = blk + 16 + 32 * (j / 2);
      for (int t = 0; t < 4; ++t)
        for (int e = 0; e < 4; ++e) {
          const int v = 4 * t + e;
          codes[c * 64 + t * 16 + s * 4 + e] =
              static_cast<uint8_t>(((qs[v] >> shift) & 0xF) | (((qs[v + 16] >> shift) & 0xF) << 4));
        }
    }
  }
}

// One thread per block: the file's block rebuilt in registers from the packed layout, then dequant32 (so the
// values are exactly the unpacked path's).
template <GgmlType T, typename X>
__global__ void ggml_dequantize_packed_kernel(GgmlMatmulLaunch p, X* __restrict__ w) {
  const int64_t k = p.k, per_row = k / 32, total = p.n * per_row, code_row = packed_code_row<T>(k);
  const uint8_t* meta_base = p.w + p.n * code_row;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t r = i / per_row, b = i % per_row, c = b / 4;
    const int s = static_cast<int>(b % 4);
    const uint8_t* codes = p.w + r * code_row;
    const uint8_t* meta = meta_base + r * (k / 16);
    float v[32];
    if constexpr (T == GgmlType::kQ8_0) {
      __align__(4) uint8_t blk[36];
      blk[0] = meta[2 * b];
      blk[1] = meta[2 * b + 1];
      for (int t = 0; t < 4; ++t)
        for (int e = 0; e < 4; ++e) {
          blk[2 + 4 * t + e] = codes[c * 128 + t * 32 + s * 8 + e];
          blk[2 + 16 + 4 * t + e] = codes[c * 128 + t * 32 + s * 8 + 4 + e];
        }
      dequant32<T>(blk, 0, v);
    } else if constexpr (T == GgmlType::kQ4_0) {
      __align__(4) uint8_t blk[20];
      blk[0] = meta[2 * b];
      blk[1] = meta[2 * b + 1];
      for (int t = 0; t < 4; ++t)
        for (int e = 0; e < 4; ++e) blk[2 + 4 * t + e] = codes[c * 64 + t * 16 + s * 4 + e];
      dequant32<T>(blk, 0, v);
    } else if constexpr (T == GgmlType::kQ5_0 || T == GgmlType::kQ5_K) {
      // The file's block (Q5_K: a super-block holding this sub-block's scales, nibbles and fifth bits where
      // dequant32 looks for them), the rest zeros.
      constexpr bool k5k = T == GgmlType::kQ5_K;
      const int j = k5k ? static_cast<int>(b % 8) : 0, shift = 4 * (j & 1);
      __align__(4) uint8_t blk[k5k ? 176 : 24] = {};
      const uint8_t* ch = codes + c * 80;
      if constexpr (k5k) {
        for (int e = 0; e < 16; ++e) blk[e] = meta[16 * (b / 8) + e];
      } else {
        blk[0] = meta[2 * b];
        blk[1] = meta[2 * b + 1];
      }
      for (int l = 0; l < 32; ++l) {
        const int t = (l % 16) / 4, e = l % 4, hi = l / 16;
        const uint32_t nib = (static_cast<uint32_t>(ch[16 * t + 4 * s + e]) >> (4 * hi)) & 0xFu;
        const uint32_t bit = (static_cast<uint32_t>(ch[64 + 4 * t + e]) >> (s + 4 * hi)) & 1u;
        if constexpr (k5k) {
          blk[48 + 32 * (j / 2) + l] |= static_cast<uint8_t>(nib << shift);
          blk[16 + l] |= static_cast<uint8_t>(bit << j);
        } else {
          blk[6 + l % 16] |= static_cast<uint8_t>(nib << (4 * hi));
          blk[2 + l / 8] |= static_cast<uint8_t>(bit << (l % 8));
        }
      }
      dequant32<T>(blk, j, v);
    } else {  // a super-block holding this sub-block's scales and its nibbles where dequant32 looks for them
      const int64_t sb = b / 8;
      const int j = static_cast<int>(b % 8), shift = 4 * (j & 1);
      __align__(4) uint8_t blk[144];
      for (int e = 0; e < 16; ++e) blk[e] = meta[16 * sb + e];
      uint8_t* qs = blk + 16 + 32 * (j / 2);
      for (int t = 0; t < 4; ++t)
        for (int e = 0; e < 4; ++e) {
          const uint8_t q = codes[c * 64 + t * 16 + s * 4 + e];
          qs[4 * t + e] = static_cast<uint8_t>((q & 0xF) << shift);
          qs[4 * t + e + 16] = static_cast<uint8_t>((q >> 4) << shift);
        }
      dequant32<T>(blk, j, v);
    }
    store32(w + r * k + b * 32, v);
  }
}

// One warp per (row, 128-value chunk): lane L takes values 4 (L % 8) .. + 3 of block L / 8; the block's amax and
// code sum meet over its 8 lanes.
template <typename X>
__global__ void ggml_quantize_x_kernel(const X* __restrict__ x, int64_t m, int64_t k, GgmlXq out) {
  pdl_wait();  // x is the kernel before's output; the codes may still be read by the matmul before
  pdl_trigger();
  const int64_t chunks = k / 128;
  const int64_t wi = (blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x) / 32;
  if (wi >= m * chunks) return;  // whole warps
  const int lane = threadIdx.x % 32, s = lane / 8, u = lane % 8;
  const int64_t r = wi / chunks, c = wi % chunks;
  float v[4];
  load4(x + r * k + c * 128 + s * 32 + 4 * u, v);
  float amax = fmaxf(fmaxf(fabsf(v[0]), fabsf(v[1])), fmaxf(fabsf(v[2]), fabsf(v[3])));
#pragma unroll
  for (int o = 1; o < 8; o *= 2) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
  const float inv = amax > 0.0f ? 127.0f / amax : 0.0f;
  uint32_t packed = 0;
  int sum = 0;
#pragma unroll
  for (int e = 0; e < 4; ++e) {
    const int q = max(-127, min(127, __float2int_rn(v[e] * inv)));
    sum += q;
    packed |= (static_cast<uint32_t>(q) & 0xffu) << (8 * e);
  }
  int sum16 = sum;  // values 0..15 (lanes u < 4) and 16..31 (u >= 4) of the block
#pragma unroll
  for (int o = 1; o < 4; o *= 2) sum16 += __shfl_xor_sync(0xffffffffu, sum16, o);
  sum = sum16 + __shfl_xor_sync(0xffffffffu, sum16, 4);
  // Values 4t..4t+3 of block s go to lane t's bytes 8s..8s+3, values 16+4t.. to 8s+4..8s+7.
  const int t = u % 4, hi = u / 4;
  *reinterpret_cast<uint32_t*>(out.q + r * k + c * 128 + 32 * t + 8 * s + 4 * hi) = packed;
  if (u == 0) {
    out.d[r * (k / 32) + c * 4 + s] = amax / 127.0f;
    out.sum[r * (k / 32) + c * 4 + s] = sum;
  }
  if (u % 4 == 0) out.sum16[r * (k / 16) + c * 8 + 2 * s + u / 4] = sum16;
}

template <typename Fn>
void dispatch_packable(GgmlType t, Fn&& fn) {
  switch (t) {
    case GgmlType::kQ8_0: fn(std::integral_constant<GgmlType, GgmlType::kQ8_0>{}); return;
    case GgmlType::kQ4_0: fn(std::integral_constant<GgmlType, GgmlType::kQ4_0>{}); return;
    case GgmlType::kQ5_0: fn(std::integral_constant<GgmlType, GgmlType::kQ5_0>{}); return;
    case GgmlType::kQ4_K: fn(std::integral_constant<GgmlType, GgmlType::kQ4_K>{}); return;
    case GgmlType::kQ5_K: fn(std::integral_constant<GgmlType, GgmlType::kQ5_K>{}); return;
    case GgmlType::kQ6_K: fn(std::integral_constant<GgmlType, GgmlType::kQ6_K>{}); return;
    default:
      throw Error(ErrorCode::kUnsupported, "cuda: ggml type " + ggml_type_name(t) + " has no packed layout");
  }
}

template <typename Fn>
void dispatch_ggml(GgmlType t, Fn&& fn) {
  switch (t) {
    case GgmlType::kQ4_0: fn(std::integral_constant<GgmlType, GgmlType::kQ4_0>{}); return;
    case GgmlType::kQ4_1: fn(std::integral_constant<GgmlType, GgmlType::kQ4_1>{}); return;
    case GgmlType::kQ5_0: fn(std::integral_constant<GgmlType, GgmlType::kQ5_0>{}); return;
    case GgmlType::kQ5_1: fn(std::integral_constant<GgmlType, GgmlType::kQ5_1>{}); return;
    case GgmlType::kQ8_0: fn(std::integral_constant<GgmlType, GgmlType::kQ8_0>{}); return;
    case GgmlType::kQ4_K: fn(std::integral_constant<GgmlType, GgmlType::kQ4_K>{}); return;
    case GgmlType::kQ5_K: fn(std::integral_constant<GgmlType, GgmlType::kQ5_K>{}); return;
    case GgmlType::kQ6_K: fn(std::integral_constant<GgmlType, GgmlType::kQ6_K>{}); return;
    default:
      throw Error(ErrorCode::kUnsupported, "cuda: ggml type " + ggml_type_name(t) + " has no kernel");
  }
}

void check_alignment(const void* w, int64_t row_bytes, const char* what) {
  if ((reinterpret_cast<uintptr_t>(w) & 1u) != 0 || row_bytes % 2 != 0)
    throw Error(ErrorCode::kInvalidArgument, std::string("cuda ") + what + ": ggml blocks must be 2-byte aligned");
}

unsigned grid_for(int64_t work, int threads) {
  const int64_t blocks = ceil_div(work, threads);
  return static_cast<unsigned>(blocks > 65536 ? 65536 : (blocks < 1 ? 1 : blocks));
}

}  // namespace

void launch_ggml_gemv(const GgmlMatmulLaunch& l, cudaStream_t stream) {
  if (l.m == 0 || l.n == 0) return;
  check_alignment(l.w, l.row_bytes, "matmul");
  if (!aligned16(l.x)) throw Error(ErrorCode::kInvalidArgument, "cuda matmul: x must be 16-byte aligned");
  const unsigned grid = static_cast<unsigned>(ceil_div(l.n, kGemvWarps));
  dispatch_ggml(l.type, [&](auto type) {
    constexpr GgmlType T = decltype(type)::value;
    dispatch_float(l.x_dtype, [&](auto tag) {
      using X = typename decltype(tag)::type;
      const X* x = static_cast<const X*>(l.x);
      if constexpr (T == GgmlType::kQ4_0) {  // Q8_0 measured faster on the chunk GEMV (docs/BENCHMARKS.md)
        if (l.m <= 1) ggml_gemv_q4_0_kernel<X, 1><<<grid, kGemvWarps * 32, 0, stream>>>(l, x);
        else if (l.m <= 2) ggml_gemv_q4_0_kernel<X, 2><<<grid, kGemvWarps * 32, 0, stream>>>(l, x);
        else if (l.m <= 4) ggml_gemv_q4_0_kernel<X, 4><<<grid, kGemvWarps * 32, 0, stream>>>(l, x);
        else ggml_gemv_q4_0_kernel<X, 8><<<grid, kGemvWarps * 32, 0, stream>>>(l, x);
        return;
      }
      if (l.m <= 1) ggml_gemv_kernel<T, X, 1><<<grid, kGemvWarps * 32, 0, stream>>>(l, x);
      else if (l.m <= 2) ggml_gemv_kernel<T, X, 2><<<grid, kGemvWarps * 32, 0, stream>>>(l, x);
      else if (l.m <= 4) ggml_gemv_kernel<T, X, 4><<<grid, kGemvWarps * 32, 0, stream>>>(l, x);
      else ggml_gemv_kernel<T, X, 8><<<grid, kGemvWarps * 32, 0, stream>>>(l, x);
    });
  });
  PEREGRINE_CUDA_CHECK_LAUNCH();
}

void launch_ggml_dequantize(const GgmlMatmulLaunch& l, void* w_out, cudaStream_t stream) {
  if (l.n == 0 || l.k == 0) return;
  check_alignment(l.w, l.row_bytes, "matmul");
  dispatch_ggml(l.type, [&](auto type) {
    constexpr GgmlType T = decltype(type)::value;
    dispatch_float(l.x_dtype, [&](auto tag) {
      using X = typename decltype(tag)::type;
      ggml_dequantize_kernel<T, X><<<grid_for(l.n * l.k / 32, 256), 256, 0, stream>>>(l, static_cast<X*>(w_out));
    });
  });
  PEREGRINE_CUDA_CHECK_LAUNCH();
}

void launch_ggml_embedding(const GgmlEmbeddingLaunch& l, cudaStream_t stream) {
  if (l.num_tokens == 0) return;
  check_alignment(l.table, l.row_bytes, "embedding");
  dispatch_ggml(l.type, [&](auto type) {
    constexpr GgmlType T = decltype(type)::value;
    ggml_embedding_kernel<T><<<static_cast<unsigned>(l.num_tokens), 128, 0, stream>>>(l);
  });
  PEREGRINE_CUDA_CHECK_LAUNCH();
}

bool ggml_packable(GgmlType t, int64_t k) {
  if (t == GgmlType::kQ8_0 || t == GgmlType::kQ4_0 || t == GgmlType::kQ5_0) return k > 0 && k % 128 == 0;
  if (t == GgmlType::kQ4_K || t == GgmlType::kQ5_K || t == GgmlType::kQ6_K) return k > 0 && k % 256 == 0;
  return false;
}

void launch_ggml_pack(const uint8_t* w, GgmlType t, int64_t n, int64_t k, uint8_t* packed, cudaStream_t stream) {
  if (n == 0 || k == 0) return;
  if (!ggml_packable(t, k))
    throw Error(ErrorCode::kInvalidArgument, "cuda: no packed layout for " + ggml_type_name(t) + " rows of " +
                                                 std::to_string(k) + " values");
  const int64_t row_bytes = static_cast<int64_t>(ggml_row_bytes(t, k));
  dispatch_packable(t, [&](auto type) {
    constexpr GgmlType T = decltype(type)::value;
    if constexpr (T == GgmlType::kQ6_K)
      ggml_pack_q6_k_kernel<<<grid_for(n * k / 128, 256), 256, 0, stream>>>(w, n, k, row_bytes, packed);
    else if constexpr (T == GgmlType::kQ5_0 || T == GgmlType::kQ5_K)
      ggml_pack_q5_kernel<T><<<grid_for(n * k / 128, 256), 256, 0, stream>>>(w, n, k, row_bytes, packed);
    else
      ggml_pack_kernel<T><<<grid_for(n * k / 32, 256), 256, 0, stream>>>(w, n, k, row_bytes, packed);
  });
  PEREGRINE_CUDA_CHECK_LAUNCH();
}

void launch_ggml_dequantize_packed(const GgmlMatmulLaunch& l, void* w_out, cudaStream_t stream) {
  if (l.n == 0 || l.k == 0) return;
  dispatch_packable(l.type, [&](auto type) {
    constexpr GgmlType T = decltype(type)::value;
    dispatch_float(l.x_dtype, [&](auto tag) {
      using X = typename decltype(tag)::type;
      if constexpr (T == GgmlType::kQ6_K)
        ggml_dequantize_packed_q6_k_kernel<X><<<grid_for(l.n * l.k / 32, 256), 256, 0, stream>>>(l, static_cast<X*>(w_out));
      else
        ggml_dequantize_packed_kernel<T, X><<<grid_for(l.n * l.k / 32, 256), 256, 0, stream>>>(l, static_cast<X*>(w_out));
    });
  });
  PEREGRINE_CUDA_CHECK_LAUNCH();
}

void launch_ggml_quantize_x(const void* x, DType x_dtype, int64_t m, int64_t k, const GgmlXq& out, cudaStream_t stream) {
  if (m == 0 || k == 0) return;
  if (k % 128 != 0 || !aligned16(x))
    throw Error(ErrorCode::kInvalidArgument, "cuda: ggml x quantization needs K % 128 == 0 and 16-byte aligned x");
  const int64_t threads = m * (k / 128) * 32;
  dispatch_float(x_dtype, [&](auto tag) {
    using X = typename decltype(tag)::type;
    launch_pdl(ggml_quantize_x_kernel<X>, dim3(static_cast<unsigned>(ceil_div(threads, 256))), dim3(256), 0, stream,
               m, static_cast<const X*>(x), m, k, out);
  });
  PEREGRINE_CUDA_CHECK_LAUNCH();
}

}  // namespace peregrine::cuda
