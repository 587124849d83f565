// LogitsEdits: the per-request edits applied to a row of logits before sampling (repetition, presence and
// frequency penalties, logit_bias, min_tokens suppression of eos and stop tokens). The edits are sparse and
// undone after sampling, so logprobs are reported from the model's raw distribution, as vLLM does.
#pragma once

#include <cstdint>
#include <span>
#include <utility>
#include <vector>

#include "engine/request_state.h"

namespace peregrine::engine {

class LogitsEdits {
 public:
  // Edits row ([vocab] f32) in place for sequence `seq` of `request`; remembers what it overwrote.
  void apply(float* row, int vocab, const RequestState& request, const SeqState& seq,
             std::span<const int32_t> eos_token_ids);
  // Puts back every value apply() changed.
  void restore(float* row);
  bool empty() const { return saved_.empty(); }

 private:
  void set(float* row, int32_t token, float value);

  std::vector<std::pair<int32_t, float>> saved_;
};

// True when sampling this request needs no edits at all (the common, fast case).
bool needs_logits_edits(const SamplingParams& params);

}  // namespace peregrine::engine
