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

}  // namespace peregrine::cuda
