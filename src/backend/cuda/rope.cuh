// Rotary embedding in place on q and k (ops.h RopeParams): rotate-half pairs (i, i + rotary_dim/2),
// angle = float(pos) * inv_freq[i] in f32, cos/sin scaled by attention_scaling.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "core/dtype.h"

namespace peregrine::cuda {

struct RopeLaunch {
  void* q;                   // [T, num_q_heads, head_dim] act
  void* k;                   // [T, num_kv_heads, head_dim] act
  const int32_t* positions;  // [T]
  const float* inv_freq;     // [rotary_dim / 2]
  DType act;
  int64_t num_tokens;
  int num_q_heads, num_kv_heads, head_dim, rotary_dim;
  float attention_scaling;
};
void launch_rope(const RopeLaunch& p, cudaStream_t stream);

// RoPE and the KV write of one decoder layer in one launch (ops::Backend::rope_kv_write): q and k rotated in place
// as launch_rope does, and the rotated k rows and v's rows stored at slot_mapping[t] of caches in the activation
// dtype ([num_slots, num_kv_heads * head_dim]), as launch_kv_write stores them (-1 skips a token; a slot past
// num_slots sets kErrKvSlot).
struct RopeKvLaunch {
  RopeLaunch rope;
  const void* v;                // [T, num_kv_heads, head_dim] act
  const int32_t* slot_mapping;  // [T]
  void* k_cache;
  void* v_cache;
  int64_t num_slots;
  int* error_flags;
};
void launch_rope_kv_write(const RopeKvLaunch& p, cudaStream_t stream);

}  // namespace peregrine::cuda
