// The first generation path (issue 2): a static batch of prompts run to completion over the paged KV cache,
// with chunked prefill and the Sampler. No scheduler, no preemption: the serving Engine replaces it for
// online use; `peregrine generate`, the fidelity tests and `peregrine bench latency` use it directly.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <vector>

#include "engine/sampler.h"
#include "model/model.h"

namespace peregrine::engine {

struct SimpleGenerateOptions {
  int max_tokens = 16;
  SamplerParams sampler;
  uint64_t seed = 0;
  std::vector<int32_t> eos_token_ids;  // stop at any of these unless ignore_eos
  bool ignore_eos = false;
  int prompt_logprobs = -1;            // k >= 0: top-k logprobs at every prompt position
  int block_size = 16;
  DType kv_dtype = DType::kF32;       // KV cache dtype (the cache is sized for exactly this batch)
  // Called after each step with (sequence index, token) for streaming output.
  std::function<void(size_t, int32_t)> on_token;
};

struct SimpleGenerateResult {
  std::vector<int32_t> prompt_token_ids;
  std::vector<int32_t> token_ids;
  std::vector<SampledToken> samples;                                // one per generated token (logprobs when asked)
  std::vector<std::vector<std::pair<int32_t, float>>> prompt_top;   // per prompt position (prompt_logprobs)
  bool stopped_by_eos = false;
};

// Runs every prompt to completion. Allocates the model's KV cache for exactly what the batch needs.
// Throws Error(kInvalidArgument) on empty prompts or ids out of the vocabulary.
std::vector<SimpleGenerateResult> simple_generate(model::Model& model, const std::vector<std::vector<int32_t>>& prompts,
                                                  const SimpleGenerateOptions& options, int max_num_batched_tokens);

}  // namespace peregrine::engine
