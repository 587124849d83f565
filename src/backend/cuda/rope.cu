// RoPE kernels. Few tokens (decode): a block per (token, 8 heads); each thread owns a pair index i, computes its
// angle once and rotates x[i], x[i + half] of its heads. With the KV write (launch_rope_kv_write), v's heads follow
// k's as more heads to copy, and k's rotated pairs go to the cache as they are stored. Many tokens:
// rope_rows_kernel, 16-byte accesses over a few tokens a block (the per-(token, heads) blocks ran at a tenth of the
// memory bandwidth on an 8K prefill).
// Uses the accurate sincosf (full range reduction) since positions reach 10^5 radians.
#include "backend/cuda/cuda_common.cuh"
#include "backend/cuda/rope.cuh"
#include "core/status.h"

#include <algorithm>
#include <cstdlib>
#include <string_view>

namespace peregrine::cuda {
namespace {

// Blocks of (token, group of kHeadsPerBlock heads); a thread owns one pair index i for some of the group's heads,
// so each (token, i) angle's sincos is computed once per block rather than once per head.
constexpr int kHeadsPerBlock = 8;

// Launches of at least this many tokens take rope_rows_kernel where its shapes allow (rope_rows_takes); both
// kernels give the same bits (the same sincosf, scaling and rotate()), so a token's q, k and cache rows do not
// depend on the step it is in.
constexpr int64_t kRowsFrom = 16;
constexpr int kRowTokens = 4;      // tokens a block of rope_rows_kernel
constexpr int kRowThreads = 256;

// One pair rotated with the rounding pinned (no contraction left to the compiler), so both kernels agree.
__device__ __forceinline__ void rotate(float a, float b, float c, float s, float& ra, float& rb) {
  ra = __fmaf_rn(a, c, -__fmul_rn(b, s));
  rb = __fmaf_rn(b, c, __fmul_rn(a, s));
}

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
  sincosf(__fmul_rn(pos, p.inv_freq[i0]), &s0, &c0);
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
    if (i != i0) sincosf(__fmul_rn(pos, p.inv_freq[i]), &s, &c);
    c = __fmul_rn(c, p.attention_scaling);
    s = __fmul_rn(s, p.attention_scaling);
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
        float fa, fb;
        rotate(a[j], b[j], c, s, fa, fb);
        const T ra = from_f32<T>(fa), rb = from_f32<T>(fb);
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

// Many tokens (prefill chunks, large batches): kRowTokens tokens a block, every access 16 bytes. The block's angles
// go to shared memory first (one sincosf per token and pair index, before the wait for the kernel before); then
// each thread takes units in turn: a unit rotates kVec pairs of one head (the two 16-byte pieces i.. and
// i + half..), or, with the KV write, copies 16 bytes of the cache row that is not rotated (v's heads, k's dims past
// rotary_dim). rope_rows_takes says where the shapes and pointers allow it.
template <typename T, bool kKv>
__global__ void __launch_bounds__(kRowThreads) rope_rows_kernel(RopeLaunch p, RopeKvLaunch kv) {
  constexpr int kVec = 16 / static_cast<int>(sizeof(T));
  extern __shared__ float2 cos_sin[];  // [kRowTokens][half]
  const int half = p.rotary_dim / 2;
  const int64_t t0 = static_cast<int64_t>(blockIdx.x) * kRowTokens;
  const int tokens = static_cast<int>(min(static_cast<int64_t>(kRowTokens), p.num_tokens - t0));
  for (int idx = threadIdx.x; idx < tokens * half; idx += blockDim.x) {
    const int tt = idx / half, i = idx - tt * half;
    float s, c;
    sincosf(__fmul_rn(static_cast<float>(p.positions[t0 + tt]), p.inv_freq[i]), &s, &c);
    cos_sin[idx] = make_float2(__fmul_rn(c, p.attention_scaling), __fmul_rn(s, p.attention_scaling));
  }
  pdl_wait();
  pdl_trigger();
  __syncthreads();
  const int hd = p.head_dim, nq = p.num_q_heads, nkv = p.num_kv_heads;
  const int chunks = half / kVec;                      // 16-byte pieces of a half row
  const int rot_units = (nq + nkv) * chunks;           // a token's rotations
  const int k_rest = (hd - p.rotary_dim) / kVec;       // k's pieces past rotary_dim, a head
  const int row_pieces = nkv * hd / kVec;              // a cache row's pieces (one of k, one of v)
  const int units = rot_units + (kKv ? nkv * k_rest + row_pieces : 0);
  const int64_t kv_row = static_cast<int64_t>(nkv) * hd;
  for (int u = threadIdx.x; u < tokens * units; u += blockDim.x) {
    const int tt = u / units, w = u - tt * units;
    const int64_t t = t0 + tt;
    [[maybe_unused]] int64_t slot = -1;
    if constexpr (kKv) {
      slot = kv.slot_mapping[t];
      if (slot >= kv.num_slots) {
        if (w == 0) atomicOr(kv.error_flags, kErrKvSlot);
        slot = -1;
      }
    }
    if (w < rot_units) {
      const int h = w / chunks, piece = w - h * chunks;
      const bool is_k = h >= nq;
      T* base = is_k ? static_cast<T*>(p.k) + (t * nkv + (h - nq)) * hd : static_cast<T*>(p.q) + (t * nq + h) * hd;
      const int i = piece * kVec;
      uint4 va = *reinterpret_cast<const uint4*>(base + i), vb = *reinterpret_cast<const uint4*>(base + half + i);
      T* ea = reinterpret_cast<T*>(&va);
      T* eb = reinterpret_cast<T*>(&vb);
      const float2* cs = cos_sin + tt * half + i;
#pragma unroll
      for (int e = 0; e < kVec; ++e) {
        float fa, fb;
        rotate(to_f32(ea[e]), to_f32(eb[e]), cs[e].x, cs[e].y, fa, fb);
        ea[e] = from_f32<T>(fa);
        eb[e] = from_f32<T>(fb);
      }
      *reinterpret_cast<uint4*>(base + i) = va;
      *reinterpret_cast<uint4*>(base + half + i) = vb;
      if constexpr (kKv) {
        if (is_k && slot >= 0) {
          T* dst = static_cast<T*>(kv.k_cache) + slot * kv_row + static_cast<int64_t>(h - nq) * hd;
          *reinterpret_cast<uint4*>(dst + i) = va;
          *reinterpret_cast<uint4*>(dst + half + i) = vb;
        }
      }
    } else if constexpr (kKv) {
      if (slot < 0) continue;
      int r = w - rot_units;
      int64_t off;  // into the token's row of k (past rotary_dim) or v
      const T* src;
      T* dst;
      if (r < nkv * k_rest) {
        const int h = r / k_rest;
        off = static_cast<int64_t>(h) * hd + p.rotary_dim + (r - h * k_rest) * kVec;
        src = static_cast<const T*>(p.k);
        dst = static_cast<T*>(kv.k_cache);
      } else {
        r -= nkv * k_rest;
        off = static_cast<int64_t>(r) * kVec;
        src = static_cast<const T*>(kv.v);
        dst = static_cast<T*>(kv.v_cache);
      }
      *reinterpret_cast<uint4*>(dst + slot * kv_row + off) = *reinterpret_cast<const uint4*>(src + t * kv_row + off);
    }
  }
}

size_t rope_rows_smem(const RopeLaunch& p) { return sizeof(float2) * kRowTokens * static_cast<size_t>(p.rotary_dim / 2); }

// Whether rope_rows_kernel takes a launch: enough tokens, 16-byte pieces that tile half a rotary row and a head,
// 16-byte aligned tensors, and the block's angles within the default shared memory.
bool rope_rows_takes(const RopeLaunch& p, const RopeKvLaunch* kv) {
  static const bool on = [] {
    const char* env = std::getenv("PEREGRINE_ROPE_ROWS");
    return !(env && std::string_view(env) == "0");
  }();
  const int vec = 16 / static_cast<int>(dtype_bytes(p.act, 1));
  if (!on || p.num_tokens < kRowsFrom || (p.rotary_dim / 2) % vec != 0 || p.head_dim % vec != 0) return false;
  if (rope_rows_smem(p) > 48 * 1024 || !aligned16(p.q) || !aligned16(p.k)) return false;
  return !kv || (aligned16(kv->v) && aligned16(kv->k_cache) && aligned16(kv->v_cache));
}

template <bool kKv>
void launch_rope_rows(const RopeLaunch& p, const RopeKvLaunch& kv, cudaStream_t stream) {
  const unsigned blocks = static_cast<unsigned>(ceil_div(p.num_tokens, int64_t{kRowTokens}));
  const size_t smem = rope_rows_smem(p);
  dispatch_float(p.act, [&](auto tag) {
    using T = typename decltype(tag)::type;
    launch_pdl(rope_rows_kernel<T, kKv>, blocks, kRowThreads, smem, stream, p.num_tokens, p, kv);
  });
  PEREGRINE_CUDA_CHECK_LAUNCH();
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
  if (rope_rows_takes(p, nullptr)) return launch_rope_rows<false>(p, RopeKvLaunch{}, stream);
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
  if (rope_rows_takes(p, &l)) return launch_rope_rows<true>(p, l, stream);
  const RopeGrid g = rope_grid(p, p.num_q_heads + 2 * p.num_kv_heads);
  dispatch_float(p.act, [&](auto tag) {
    using T = typename decltype(tag)::type;
    launch_pdl(rope_kernel<T, true>, static_cast<unsigned>(p.num_tokens * g.head_groups), g.threads, 0, stream,
               p.num_tokens, p, l, g.head_groups);
  });
  PEREGRINE_CUDA_CHECK_LAUNCH();
}

}  // namespace peregrine::cuda
