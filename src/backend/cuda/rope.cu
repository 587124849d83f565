// RoPE kernel: a block per (token, 8 heads); each thread owns a pair index i, computes its angle once and rotates
// x[i], x[i + half] of its heads.
// Uses the accurate sincosf (full range reduction) since positions reach 10^5 radians.
#include "backend/cuda/cuda_common.cuh"
#include "backend/cuda/rope.cuh"

#include <algorithm>

namespace peregrine::cuda {
namespace {

// Blocks of (token, group of kHeadsPerBlock heads); a thread owns one pair index i for some of the group's heads,
// so each (token, i) angle's sincos is computed once per block rather than once per head.
constexpr int kHeadsPerBlock = 8;

template <typename T>
__global__ void rope_kernel(RopeLaunch p, int head_groups) {
  const int64_t t = blockIdx.x / head_groups;
  const int group = static_cast<int>(blockIdx.x % head_groups);
  const int half = p.rotary_dim / 2;
  const int heads = p.num_q_heads + p.num_kv_heads;
  const int h_begin = group * kHeadsPerBlock, h_end = min(heads, h_begin + kHeadsPerBlock);
  const float pos = static_cast<float>(p.positions[t]);
  const int lanes_per_pair = max(1, static_cast<int>(blockDim.x) / half);  // heads side by side in the block
  for (int i = threadIdx.x % half; i < half; i += blockDim.x) {
    float s, c;
    sincosf(pos * p.inv_freq[i], &s, &c);
    c *= p.attention_scaling;
    s *= p.attention_scaling;
    for (int h = h_begin + static_cast<int>(threadIdx.x / half); h < h_end; h += lanes_per_pair) {
      T* base = h < p.num_q_heads
                    ? static_cast<T*>(p.q) + (t * p.num_q_heads + h) * p.head_dim
                    : static_cast<T*>(p.k) + (t * p.num_kv_heads + (h - p.num_q_heads)) * p.head_dim;
      const float a = to_f32(base[i]), b = to_f32(base[i + half]);
      base[i] = from_f32<T>(a * c - b * s);
      base[i + half] = from_f32<T>(b * c + a * s);
    }
  }
}

}  // namespace

void launch_rope(const RopeLaunch& p, cudaStream_t stream) {
  if (p.num_tokens == 0 || p.rotary_dim < 2) return;
  const int half = p.rotary_dim / 2, heads = p.num_q_heads + p.num_kv_heads;
  const int head_groups = static_cast<int>(ceil_div(heads, kHeadsPerBlock));
  // half threads per pair row, times as many heads as fit in 256 threads (a thread loops when half > 256).
  const int per_head = half > 256 ? 256 : half;
  const int rows = std::max(1, std::min(kHeadsPerBlock, 256 / per_head));
  const int threads = half > 256 ? 256 : per_head * rows;
  dispatch_float(p.act, [&](auto tag) {
    using T = typename decltype(tag)::type;
    rope_kernel<T><<<static_cast<unsigned>(p.num_tokens * head_groups), threads, 0, stream>>>(p, head_groups);
  });
  PEREGRINE_CUDA_CHECK_LAUNCH();
}

}  // namespace peregrine::cuda
