// LogitsEdits: sparse, undoable edits of a logits row (see logits_processor.h).
#include "engine/logits_processor.h"

#include <algorithm>
#include <limits>

namespace peregrine::engine {

bool needs_logits_edits(const SamplingParams& p) {
  return p.repetition_penalty != 1.0f || p.presence_penalty != 0.0f || p.frequency_penalty != 0.0f ||
         !p.logit_bias.empty() || p.min_tokens > 0;
}

void LogitsEdits::set(float* row, int32_t token, float value) {
  saved_.emplace_back(token, row[token]);
  row[token] = value;
}

void LogitsEdits::apply(float* row, int vocab, const RequestState& request, const SeqState& seq,
                        std::span<const int32_t> eos_token_ids) {
  const SamplingParams& p = request.params;
  // Repetition penalty over prompt and output tokens: positive logits are divided, negative multiplied.
  if (p.repetition_penalty != 1.0f) {
    auto penalize = [&](int32_t t) {
      const float v = row[t];
      set(row, t, v > 0 ? v / p.repetition_penalty : v * p.repetition_penalty);
    };
    for (int32_t t : request.prompt_unique_tokens) penalize(t);
    for (const auto& [t, count] : seq.output_counts) {
      if (!std::binary_search(request.prompt_unique_tokens.begin(), request.prompt_unique_tokens.end(), t)) {
        penalize(t);
      }
    }
  }
  if (p.presence_penalty != 0.0f || p.frequency_penalty != 0.0f) {
    for (const auto& [t, count] : seq.output_counts) {
      set(row, t, row[t] - p.frequency_penalty * static_cast<float>(count) - p.presence_penalty);
    }
  }
  for (const auto& [t, bias] : p.logit_bias) {
    if (t >= 0 && t < vocab) set(row, t, row[t] + bias);
  }
  // min_tokens: neither eos nor a stop token may end the output before it has min_tokens tokens.
  if (seq.seq.num_output_tokens() < p.min_tokens) {
    constexpr float kNegInf = -std::numeric_limits<float>::infinity();
    if (!p.ignore_eos) {
      for (int32_t t : eos_token_ids) {
        if (t >= 0 && t < vocab) set(row, t, kNegInf);
      }
    }
    for (int32_t t : p.stop_token_ids) set(row, t, kNegInf);
  }
}

void LogitsEdits::restore(float* row) {
  for (auto it = saved_.rbegin(); it != saved_.rend(); ++it) row[it->first] = it->second;
  saved_.clear();
}

}  // namespace peregrine::engine
