// GPU sampling kernels (see cuda_sampling.h for the contract): penalties, temperature, top-k, top-p,
// min-p, and a Gumbel-max draw from counter-based Philox noise, one 1024-thread block per request.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "core/dtype.h"

namespace peregrine::cuda {

struct SampleLaunch {
  const void* logits;  // [B, V]
  DType logits_dtype;
  int batch, vocab;
  const float* temperature;  // [B]
  const int32_t* top_k;      // [B] or nullptr
  const float* top_p;        // [B] or nullptr
  const float* min_p;        // [B] or nullptr
  const float* repetition_penalty;  // [B] or nullptr
  const float* presence_penalty;    // [B] or nullptr
  const float* frequency_penalty;   // [B] or nullptr
  const int32_t* prompt_tokens;     // [P] or nullptr
  const int32_t* prompt_offsets;    // [B + 1]
  const int32_t* output_tokens;     // [O] or nullptr
  const int32_t* output_offsets;    // [B + 1]
  int64_t num_prompt_tokens, num_output_tokens;
  const int64_t* seeds;    // [B] or nullptr (seed 0)
  const int64_t* offsets;  // [B] or nullptr (offset 0)
  int32_t* out_tokens;     // [B]
  float* out_logprobs;     // [B] or nullptr
  float* scratch_logits;   // [B, V]
  int32_t* scratch_counts; // [B, V], needed when any penalty is given
  int* error_flags;
};

inline bool sample_uses_penalties(const SampleLaunch& p) {
  return p.repetition_penalty || p.presence_penalty || p.frequency_penalty;
}
size_t sample_scratch_logits_bytes(const SampleLaunch& p);
size_t sample_scratch_counts_bytes(const SampleLaunch& p);
void launch_sample(const SampleLaunch& p, cudaStream_t stream);

// Philox4x32-10 (Salmon et al. 2011); exposed for tests.
__host__ __device__ inline void philox4x32_10(uint32_t (&ctr)[4], uint32_t k0, uint32_t k1) {
  constexpr uint32_t kM0 = 0xD2511F53u, kM1 = 0xCD9E8D57u, kW0 = 0x9E3779B9u, kW1 = 0xBB67AE85u;
  for (int round = 0; round < 10; ++round) {
    const uint64_t p0 = static_cast<uint64_t>(kM0) * ctr[0];
    const uint64_t p1 = static_cast<uint64_t>(kM1) * ctr[2];
    const uint32_t hi0 = static_cast<uint32_t>(p0 >> 32), lo0 = static_cast<uint32_t>(p0);
    const uint32_t hi1 = static_cast<uint32_t>(p1 >> 32), lo1 = static_cast<uint32_t>(p1);
    const uint32_t n0 = hi1 ^ ctr[1] ^ k0, n2 = hi0 ^ ctr[3] ^ k1;
    ctr[0] = n0;
    ctr[1] = lo1;
    ctr[2] = n2;
    ctr[3] = lo0;
    k0 += kW0;
    k1 += kW1;
  }
}

}  // namespace peregrine::cuda
