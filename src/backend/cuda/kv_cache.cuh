// Paged KV write (ops.h KvWriteParams): row t of k/v goes to cache slot slot_mapping[t]; -1 skips the row.
// Any float activation dtype into an f32/bf16/f16 cache, or into an int8 / fp8 e4m3 cache with one scale per
// (token, KV head) written to k_scales / v_scales (ops.h: the W8A8 activation quantizer on each head's vector).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "core/dtype.h"

namespace peregrine::cuda {

struct KvWriteLaunch {
  const void* k;                // [T, row] act
  const void* v;                // [T, row] act
  const int32_t* slot_mapping;  // [T]
  void* k_cache;                // [num_slots, row]
  void* v_cache;                // [num_slots, row]
  DType act, cache;
  int64_t num_tokens, num_slots, row;  // row = num_kv_heads * head_dim
  int* error_flags;
  float* k_scales;              // quantized caches: [num_slots, num_kv_heads]; else null
  float* v_scales;
  int64_t head_dim;
};
void launch_kv_write(const KvWriteLaunch& p, cudaStream_t stream);

// Gathers or scatters many small regions in one launch (the KV tiers' staging: a block's 2 x layers pages copied
// into one contiguous run, so the DMA to or from pinned host memory moves large runs). The descriptors travel as the
// kernel's parameter (at most kMaxCopyRegions per launch: no device buffer, nothing to keep alive). Any pointers
// and sizes; 16-byte aligned regions are copied 16 bytes at a time. Device memory only (device pointers).
struct CopyRegionDesc {
  void* dst;
  const void* src;
  uint64_t bytes;
};
inline constexpr int kMaxCopyRegions = 1024;
void launch_copy_regions(const CopyRegionDesc* regions, int count, cudaStream_t stream);

}  // namespace peregrine::cuda
