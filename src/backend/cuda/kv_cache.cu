// kv_write kernel: one block per token; 16-byte copies when the dtypes match, converting loads otherwise.
#include <cuda_fp8.h>

#include <algorithm>

#include "backend/cuda/cuda_common.cuh"
#include "backend/cuda/kv_cache.cuh"

namespace peregrine::cuda {
namespace {

__global__ void kv_write_kernel(KvWriteLaunch p, int64_t act_row_bytes, bool vec_copy) {
  const int64_t t = blockIdx.x;
  const int32_t slot = p.slot_mapping[t];
  if (slot < 0) return;
  if (slot >= p.num_slots) {
    if (threadIdx.x == 0) atomicOr(p.error_flags, kErrKvSlot);
    return;
  }
  if (vec_copy) {
    const int64_t n = act_row_bytes / 16;
    const uint4* ks = reinterpret_cast<const uint4*>(static_cast<const char*>(p.k) + t * act_row_bytes);
    const uint4* vs = reinterpret_cast<const uint4*>(static_cast<const char*>(p.v) + t * act_row_bytes);
    uint4* kd = reinterpret_cast<uint4*>(static_cast<char*>(p.k_cache) + slot * act_row_bytes);
    uint4* vd = reinterpret_cast<uint4*>(static_cast<char*>(p.v_cache) + slot * act_row_bytes);
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
      kd[i] = ks[i];
      vd[i] = vs[i];
    }
    return;
  }
  for (int64_t i = threadIdx.x; i < p.row; i += blockDim.x) {
    store_any(p.k_cache, p.cache, slot * p.row + i, load_any(p.k, p.act, t * p.row + i));
    store_any(p.v_cache, p.cache, slot * p.row + i, load_any(p.v, p.act, t * p.row + i));
  }
}

// Quantized caches: a warp per (token, KV head, K or V): amax over the head (fmaxf, order-free), then the codes
// with the float32 operations of ops::quantize_act_int8 / quantize_act_fp8.
template <typename T, bool kFp8>
__global__ void kv_write_quant_kernel(KvWriteLaunch p) {
  const int64_t t = blockIdx.x;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t heads = p.row / p.head_dim;
  const int32_t slot = p.slot_mapping[t];
  if (slot < 0) return;
  if (slot >= p.num_slots) {
    if (threadIdx.x == 0) atomicOr(p.error_flags, kErrKvSlot);
    return;
  }
  for (int64_t job = warp; job < 2 * heads; job += blockDim.x / 32) {
    const bool is_v = job >= heads;
    const int64_t h = is_v ? job - heads : job;
    const T* src = static_cast<const T*>(is_v ? p.v : p.k) + t * p.row + h * p.head_dim;
    uint8_t* dst = static_cast<uint8_t*>(is_v ? p.v_cache : p.k_cache) + slot * p.row + h * p.head_dim;
    float amax = 0.0f;
    for (int64_t d = lane; d < p.head_dim; d += 32) amax = fmaxf(amax, fabsf(to_f32(src[d])));
    for (int o = 16; o > 0; o >>= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
    float s;
    if constexpr (kFp8) {
      s = fmaxf(amax / 448.0f, 1.0f / (448.0f * 512.0f));
      for (int64_t d = lane; d < p.head_dim; d += 32) {
        const float v = fminf(fmaxf(__fdiv_rn(to_f32(src[d]), s), -448.0f), 448.0f);
        dst[d] = static_cast<uint8_t>(__nv_cvt_float_to_fp8(v, __NV_SATFINITE, __NV_E4M3));
      }
    } else {
      const float inv = 127.0f / amax;
      s = amax == 0.0f ? 0.0f : amax / 127.0f;
      for (int64_t d = lane; d < p.head_dim; d += 32) {
        const float r = amax == 0.0f ? 0.0f : fminf(fmaxf(rintf(to_f32(src[d]) * inv), -128.0f), 127.0f);
        dst[d] = static_cast<uint8_t>(static_cast<int8_t>(r));
      }
    }
    if (lane == 0) (is_v ? p.v_scales : p.k_scales)[slot * heads + h] = s;
  }
}

struct CopyRegionBatch {
  int count;
  CopyRegionDesc regions[kMaxCopyRegions];
};
static_assert(sizeof(CopyRegionBatch) < 32764, "kernel parameters are limited to 32,764 bytes");

// One block per region (grid-stride over the regions), its threads over the region's bytes.
__global__ void __launch_bounds__(256) copy_regions_kernel(const __grid_constant__ CopyRegionBatch b) {
  for (int i = blockIdx.x; i < b.count; i += gridDim.x) {
    const CopyRegionDesc r = b.regions[i];
    auto* dst = static_cast<unsigned char*>(r.dst);
    const auto* src = static_cast<const unsigned char*>(r.src);
    uint64_t done = 0;
    if (((reinterpret_cast<uintptr_t>(dst) | reinterpret_cast<uintptr_t>(src)) & 15) == 0) {
      const uint64_t vecs = r.bytes / 16;
      auto* d16 = reinterpret_cast<uint4*>(dst);
      const auto* s16 = reinterpret_cast<const uint4*>(src);
      for (uint64_t k = threadIdx.x; k < vecs; k += blockDim.x) d16[k] = s16[k];
      done = vecs * 16;
    }
    for (uint64_t k = done + threadIdx.x; k < r.bytes; k += blockDim.x) dst[k] = src[k];
  }
}

}  // namespace

void launch_copy_regions(const CopyRegionDesc* regions, int count, cudaStream_t stream) {
  for (int first = 0; first < count; first += kMaxCopyRegions) {
    CopyRegionBatch b;
    b.count = std::min(kMaxCopyRegions, count - first);
    for (int i = 0; i < b.count; ++i) b.regions[i] = regions[first + i];
    const unsigned grid = static_cast<unsigned>(std::min(b.count, 528));
    copy_regions_kernel<<<grid, 256, 0, stream>>>(b);
    PEREGRINE_CUDA_CHECK_LAUNCH();
  }
}

void launch_kv_write(const KvWriteLaunch& p, cudaStream_t stream) {
  if (p.num_tokens == 0) return;
  if (p.cache == DType::kI8 || p.cache == DType::kF8E4M3) {
    dispatch_float(p.act, [&](auto tag) {
      using T = typename decltype(tag)::type;
      if (p.cache == DType::kF8E4M3) kv_write_quant_kernel<T, true><<<static_cast<unsigned>(p.num_tokens), 256, 0, stream>>>(p);
      else kv_write_quant_kernel<T, false><<<static_cast<unsigned>(p.num_tokens), 256, 0, stream>>>(p);
    });
    PEREGRINE_CUDA_CHECK_LAUNCH();
    return;
  }
  int64_t act_row_bytes = static_cast<int64_t>(dtype_bytes(p.act, static_cast<size_t>(p.row)));
  bool vec = p.act == p.cache && act_row_bytes % 16 == 0 && aligned16(p.k) && aligned16(p.v) &&
             aligned16(p.k_cache) && aligned16(p.v_cache);
  kv_write_kernel<<<static_cast<unsigned>(p.num_tokens), 128, 0, stream>>>(p, act_row_bytes, vec);
  PEREGRINE_CUDA_CHECK_LAUNCH();
}

}  // namespace peregrine::cuda
