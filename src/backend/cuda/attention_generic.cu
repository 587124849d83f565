// Generic paged attention: any head_dim up to 512 and any dtype mix (f32 activations or cache). One warp
// per (query row, query head), f32 online softmax over the row's visible keys in order. Simple and slow:
// the path for f32 parity runs and odd shapes, not for serving speed.
#include "backend/cuda/attention.cuh"
#include "backend/cuda/cuda_common.cuh"

#include <cuda_fp8.h>

namespace peregrine::cuda {
namespace {

// Element i of a KV cache as f32: float caches as they are, int8 / fp8 codes times their (slot, head) scale.
__device__ __forceinline__ float load_kv(const void* cache, DType t, const float* scales, int64_t i, int head_dim) {
  if (t == DType::kI8) return static_cast<float>(static_cast<const int8_t*>(cache)[i]) * scales[i / head_dim];
  if (t == DType::kF8E4M3) {
    __nv_fp8_e4m3 v;
    v.__x = static_cast<const uint8_t*>(cache)[i];
    return static_cast<float>(v) * scales[i / head_dim];
  }
  return load_any(cache, t, i);
}

constexpr int kMaxPerLane = 16;  // head_dim <= 512
constexpr int kWarpsPerBlock = 4;

__global__ void __launch_bounds__(128) attention_generic_kernel(const AttentionLaunch p) {
  const int lane = threadIdx.x % 32;
  const int64_t item = static_cast<int64_t>(blockIdx.x) * kWarpsPerBlock + threadIdx.x / 32;
  if (item >= p.num_tokens * p.num_q_heads) return;
  const int64_t t = item / p.num_q_heads;
  const int h = static_cast<int>(item % p.num_q_heads);
  int lo = 0, hi = p.num_seqs - 1;  // the last sequence whose start is <= t
  while (lo < hi) {
    const int mid = (lo + hi + 1) / 2;
    if (p.query_start_loc[mid] <= t) lo = mid; else hi = mid - 1;
  }
  const int s = lo;
  const int q_len = p.query_start_loc[s + 1] - p.query_start_loc[s];
  const int i = static_cast<int>(t - p.query_start_loc[s]);
  const int pos = p.seq_lens[s] - q_len + i;
  const int first = p.sliding_window > 0 ? max(0, pos - p.sliding_window + 1) : 0;
  const int kvh = h / (p.num_q_heads / p.num_kv_heads);
  const int D = p.head_dim;
  const int32_t* table = table_row(p, s);
  const bool tailed = p.tail_from && p.tail_from[s] < p.seq_lens[s];
  const int tail_from = tailed ? p.tail_from[s] : 0x7fffffff;
  const int32_t* tail = tailed ? p.tail + p.tail_offset[s] : nullptr;

  float qv[kMaxPerLane], acc[kMaxPerLane];
#pragma unroll
  for (int k = 0; k < kMaxPerLane; ++k) {
    const int d = lane + 32 * k;
    qv[k] = d < D ? load_any(p.q, p.act, (t * p.num_q_heads + h) * D + d) : 0.f;
    acc[k] = 0.f;
  }
  float m = -INFINITY, l = 0.f;
  for (int j = first; j <= pos; ++j) {
    const int slot = j >= tail_from ? tail[j - tail_from] : j;
    const int64_t block = table[slot / p.block_size];
    const int64_t base = ((block * p.block_size + slot % p.block_size) * p.num_kv_heads + kvh) * D;
    float dot = 0.f;
#pragma unroll
    for (int k = 0; k < kMaxPerLane; ++k) {
      const int d = lane + 32 * k;
      if (d < D) dot += qv[k] * load_kv(p.k_cache, p.cache, p.k_scales, base + d, D);
    }
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) dot += __shfl_xor_sync(0xffffffffu, dot, off);
    const float score = dot * p.scale;
    const float m_new = fmaxf(m, score);
    const float alpha = expf(m - m_new);
    const float w = expf(score - m_new);
    l = l * alpha + w;
#pragma unroll
    for (int k = 0; k < kMaxPerLane; ++k) {
      const int d = lane + 32 * k;
      if (d < D) acc[k] = acc[k] * alpha + w * load_kv(p.v_cache, p.cache, p.v_scales, base + d, D);
    }
    m = m_new;
  }
#pragma unroll
  for (int k = 0; k < kMaxPerLane; ++k) {
    const int d = lane + 32 * k;
    if (d < D) store_any(p.out, p.act, (t * p.num_q_heads + h) * D + d, acc[k] / l);
  }
}

}  // namespace

void launch_attention_generic(const AttentionLaunch& p, cudaStream_t stream) {
  if (p.head_dim > 32 * kMaxPerLane)
    throw Error(ErrorCode::kUnsupported, "attention: head_dim " + std::to_string(p.head_dim) + " > 512 on cuda");
  const int64_t items = p.num_tokens * p.num_q_heads;
  attention_generic_kernel<<<static_cast<unsigned>(ceil_div(items, kWarpsPerBlock)), 32 * kWarpsPerBlock, 0,
                             stream>>>(p);
  PEREGRINE_CUDA_CHECK_LAUNCH();
}

}  // namespace peregrine::cuda
