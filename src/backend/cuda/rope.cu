// RoPE kernel: a block per (token, 8 heads); each thread owns a pair index i, computes its angle once and rotates
// x[i], x[i + half] of its heads. With the KV write (launch_rope_kv_write), v's heads follow k's as more heads to
// copy, and k's rotated pairs go to the cache as they are stored.
// Uses the accurate sincosf (full range reduction) since positions reach 10^5 radians.
#include "backend/cuda/cuda_common.cuh"
#include "backend/cuda/rope.cuh"
#include "core/status.h"

#include <algorithm>

namespace peregrine::cuda {
namespace {

// Blocks of (token, group of kHeadsPerBlock heads); a thread owns one pair index i for some of the group's heads,
// so each (token, i) angle's sincos is computed once per block rather than once per head.
constexpr int kHeadsPerBlock = 8;

// kKv: the KV write too (RopeKvLaunch): the block's k heads store their rotated pairs at the token's slot as well,
// and after the rotation its threads copy the rest (k's dims past rotary_dim, v's heads, which count as heads
// num_q_heads + num_kv_heads ..).
template <typename T, bool kKv>
__global__ void rope_kernel(RopeLaunch p, RopeKvLaunch kv, int head_groups) {
  const int64_t t = blockIdx.x / head_groups;
  const int group = static_cast<int>(blockIdx.x % head_groups);
  const int half = p.rotary_dim / 2;
  const int rot_heads = p.num_q_heads + p.num_kv_heads;
  const int heads = rot_heads + (kKv ? p.num_kv_heads : 0);
  const int h_begin = group * kHeadsPerBlock, h_end = min(heads, h_begin + kHeadsPerBlock);
  // The step's inputs (slot, position, frequencies) and this thread's first angle before the wait for the kernel
  // before (launch_pdl), which wrote q, k and v only.
  [[maybe_unused]] int64_t slot = -1;
  if constexpr (kKv) slot = kv.slot_mapping[t];
  const float pos = static_cast<float>(p.positions[t]);
  const int i0 = static_cast<int>(threadIdx.x) % half;
  float s0, c0;
  sincosf(pos * p.inv_freq[i0], &s0, &c0);
  pdl_wait();
  pdl_trigger();
  if constexpr (kKv) {
    if (slot >= kv.num_slots) {
      if (threadIdx.x == 0) atomicOr(kv.error_flags, kErrKvSlot);
      slot = -1;
    }
  }
  const int64_t kv_row = static_cast<int64_t>(p.num_kv_heads) * p.head_dim;
  const int lanes_per_pair = max(1, static_cast<int>(blockDim.x) / half);  // heads side by side in the block
  const int rot_end = min(h_end, rot_heads);
  const int h0 = h_begin + static_cast<int>(threadIdx.x / half);
  for (int i = i0; i < half; i += blockDim.x) {
    float s = s0, c = c0;
    if (i != i0) sincosf(pos * p.inv_freq[i], &s, &c);
    c *= p.attention_scaling;
    s *= p.attention_scaling;
    // Every head's pair is loaded before any is stored (one round trip to memory, not one a head).
    float a[kHeadsPerBlock], b[kHeadsPerBlock];
#pragma unroll
    for (int j = 0; j < kHeadsPerBlock; ++j) {
      const int h = h0 + j * lanes_per_pair;
      if (h < rot_end) {
        const T* base = h < p.num_q_heads ? static_cast<const T*>(p.q) + (t * p.num_q_heads + h) * p.head_dim
                                          : static_cast<const T*>(p.k) + (t * p.num_kv_heads + (h - p.num_q_heads)) * p.head_dim;
        a[j] = to_f32(base[i]);
        b[j] = to_f32(base[i + half]);
      }
    }
#pragma unroll
    for (int j = 0; j < kHeadsPerBlock; ++j) {
      const int h = h0 + j * lanes_per_pair;
      if (h < rot_end) {
        T* base = h < p.num_q_heads ? static_cast<T*>(p.q) + (t * p.num_q_heads + h) * p.head_dim
                                    : static_cast<T*>(p.k) + (t * p.num_kv_heads + (h - p.num_q_heads)) * p.head_dim;
        const T ra = from_f32<T>(a[j] * c - b[j] * s), rb = from_f32<T>(b[j] * c + a[j] * s);
        base[i] = ra;
        base[i + half] = rb;
        if constexpr (kKv) {
          if (h >= p.num_q_heads && slot >= 0) {
            T* dst = static_cast<T*>(kv.k_cache) + slot * kv_row + static_cast<int64_t>(h - p.num_q_heads) * p.head_dim;
            dst[i] = ra;
            dst[i + half] = rb;
          }
        }
      }
    }
  }
  if constexpr (kKv) {
    if (slot < 0) return;
    // The rest of the token's cache row (k's dims past rotary_dim, v's heads): (head, dim) pairs spread over the
    // block, eight loads a thread before their stores.
    const int c_begin = max(h_begin, p.num_q_heads);
    const int k_rest = p.head_dim - p.rotary_dim;
    auto width = [&](int h) { return h >= rot_heads ? p.head_dim : k_rest; };
    int total = 0;
    for (int h = c_begin; h < h_end; ++h) total += width(h);
    constexpr int kBatch = 8;
    for (int base = 0; base < total; base += kBatch * static_cast<int>(blockDim.x)) {
      T v[kBatch];
      const T* src[kBatch];
      T* dst[kBatch];
#pragma unroll
      for (int j = 0; j < kBatch; ++j) {
        src[j] = nullptr;
        int idx = base + j * static_cast<int>(blockDim.x) + static_cast<int>(threadIdx.x);
        if (idx >= total) continue;
        int h = c_begin;
        while (idx >= width(h)) idx -= width(h++);
        const bool is_v = h >= rot_heads;
        const int64_t off = static_cast<int64_t>(is_v ? h - rot_heads : h - p.num_q_heads) * p.head_dim +
                            (is_v ? 0 : p.rotary_dim) + idx;
        src[j] = static_cast<const T*>(is_v ? kv.v : p.k) + t * kv_row + off;
        dst[j] = static_cast<T*>(is_v ? kv.v_cache : kv.k_cache) + slot * kv_row + off;
        v[j] = *src[j];
      }
#pragma unroll
      for (int j = 0; j < kBatch; ++j)
        if (src[j]) *dst[j] = v[j];
    }
  }
}

}  // namespace

namespace {

// Blocks and threads for heads rotated (and copied) per token.
struct RopeGrid {
  int head_groups, threads;
};
RopeGrid rope_grid(const RopeLaunch& p, int heads) {
  const int half = p.rotary_dim / 2;
  // half threads per pair row, times as many heads as fit in 256 threads (a thread loops when half > 256).
  const int per_head = half > 256 ? 256 : half;
  const int rows = std::max(1, std::min(kHeadsPerBlock, 256 / per_head));
  return {static_cast<int>(ceil_div(heads, kHeadsPerBlock)), half > 256 ? 256 : per_head * rows};
}

}  // namespace

void launch_rope(const RopeLaunch& p, cudaStream_t stream) {
  if (p.num_tokens == 0 || p.rotary_dim < 2) return;
  const RopeGrid g = rope_grid(p, p.num_q_heads + p.num_kv_heads);
  dispatch_float(p.act, [&](auto tag) {
    using T = typename decltype(tag)::type;
    launch_pdl(rope_kernel<T, false>, static_cast<unsigned>(p.num_tokens * g.head_groups), g.threads, 0, stream,
               p.num_tokens, p, RopeKvLaunch{}, g.head_groups);
  });
  PEREGRINE_CUDA_CHECK_LAUNCH();
}

void launch_rope_kv_write(const RopeKvLaunch& l, cudaStream_t stream) {
  const RopeLaunch& p = l.rope;
  if (p.num_tokens == 0) return;
  PEREGRINE_CHECK(p.rotary_dim >= 2, "rope_kv_write: rotary_dim < 2");
  const RopeGrid g = rope_grid(p, p.num_q_heads + 2 * p.num_kv_heads);
  dispatch_float(p.act, [&](auto tag) {
    using T = typename decltype(tag)::type;
    launch_pdl(rope_kernel<T, true>, static_cast<unsigned>(p.num_tokens * g.head_groups), g.threads, 0, stream,
               p.num_tokens, p, l, g.head_groups);
  });
  PEREGRINE_CUDA_CHECK_LAUNCH();
}

}  // namespace peregrine::cuda
