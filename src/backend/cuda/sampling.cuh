// GPU sampling kernels (see cuda_sampling.h for the contract): penalties, temperature, top-k, top-p,
// min-p, and a Gumbel-max draw from counter-based Philox noise, one 1024-thread block per request.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "core/dtype.h"
#include "core/philox.h"

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
  const uint32_t* allowed_tokens;  // [M, allowed_words] or nullptr
  const int32_t* allowed_index;    // [B] or nullptr
  int64_t allowed_rows, allowed_words;
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

using peregrine::philox4x32_10;  // core/philox.h; exposed for tests

}  // namespace peregrine::cuda
