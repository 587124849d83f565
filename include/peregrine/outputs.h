// RequestOutput / CompletionOutput: what the engine reports for a request, vLLM-like. Streams receive deltas
// (only what is new since the previous callback); offline generate() returns the accumulated outputs.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace peregrine {

// One token with its log-probability and its rank in the model's distribution (1 = most likely).
struct TokenLogprob {
  int32_t token_id = 0;
  float logprob = 0.0f;
  int32_t rank = 0;
  std::string text;  // the token decoded alone (may be a partial UTF-8 sequence shown as bytes)
};

// Logprobs at one position: the chosen (sampled or prompt) token and the top-k alternatives, best first.
struct PositionLogprobs {
  TokenLogprob chosen;
  std::vector<TokenLogprob> top;
};

enum class FinishReason { kNone, kStop, kLength, kAbort };
const char* finish_reason_name(FinishReason reason);  // "", "stop", "length", "abort"

struct CompletionOutput {
  int index = 0;                   // which of the n completions
  std::string text;                // delta text (streams) or the whole text (generate)
  std::vector<int32_t> token_ids;  // delta or whole, like text
  double cumulative_logprob = 0.0;  // over all tokens so far (only with logprobs)
  std::vector<PositionLogprobs> logprobs;  // one per token in token_ids when logprobs were asked for
  FinishReason finish_reason = FinishReason::kNone;
  // The stop string or stop token id that ended it (unset when eos, length or abort).
  std::optional<std::string> stop_string;
  std::optional<int32_t> stop_token_id;
  int num_output_tokens = 0;  // total generated so far (not the delta)
  // Speculative decoding: draft tokens verified for this completion and how many were accepted (totals).
  int num_draft_tokens = 0;
  int num_accepted_tokens = 0;

  bool finished() const { return finish_reason != FinishReason::kNone; }
};

// Timing of one request (seconds since the engine's clock epoch).
struct RequestTimings {
  double arrival = 0.0;
  double first_scheduled = 0.0;
  double first_token = 0.0;
  double finished = 0.0;
};

struct RequestOutput {
  std::string request_id;
  std::vector<int32_t> prompt_token_ids;  // set on the first delta and in generate() results
  // One per prompt token when prompt_logprobs was asked for; the first token has none (logprob 0, rank 0).
  std::vector<PositionLogprobs> prompt_logprobs;
  std::vector<CompletionOutput> outputs;  // deltas: only completions that changed
  bool finished = false;                  // every completion finished; this is the last callback
  int num_prompt_tokens = 0;
  int num_cached_tokens = 0;  // prompt tokens served from the prefix cache
  RequestTimings timings;
  // Set when the request failed inside the engine (the outputs then finish with kAbort).
  std::optional<std::string> error;
};

}  // namespace peregrine
