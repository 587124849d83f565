// RequestState / SeqState: the engine loop's view of a live request: its n sequences with their sampling
// state (random stream, token counts for penalties), streaming text (detokenizer, stop-string hold-back) and
// what has not been sent to the callback yet. Owned by EngineCore and touched only on the loop thread.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <optional>
#include <unordered_map>
#include <vector>

#include "engine/sampler.h"
#include "engine/sequence.h"
#include "engine/stop_matcher.h"
#include "engine/structured/matcher.h"
#include "engine/text_codec.h"
#include "peregrine/engine.h"

namespace peregrine::engine {

struct SeqState {
  explicit SeqState(uint64_t seed_) : seed(seed_), rng(seed_) {}

  Sequence seq;
  uint64_t seed;   // the sequence's sampling seed: the host sampler's stream, and the key of backend sampling
  SamplerRng rng;
  std::unordered_map<int32_t, int> output_counts;  // token -> times generated (penalties)
  std::unique_ptr<IncrementalDetokenizer> detokenizer;

  std::string text;            // output text so far (cut at a stop string when one matched)
  uint32_t stop_state = 0;     // the request's StopMatcher state after `text`
  size_t text_sent = 0;        // text[0, text_sent) was delivered
  size_t tokens_sent = 0;      // output token ids delivered
  std::vector<PositionLogprobs> pending_logprobs;  // logprobs of tokens not delivered yet
  double cumulative_logprob = 0.0;
  double last_token_time = 0.0;
  // Speculative decoding: drafts verified and accepted so far, and the draft length to ask for next.
  int num_draft_tokens = 0;
  int num_accepted_tokens = 0;
  int draft_length = 0;  // 0 = the configured num_speculative_tokens
  int32_t grammar_state = 0;  // structured outputs: the matcher's state after the output so far

  FinishReason finish_reason = FinishReason::kNone;
  std::optional<std::string> stop_string;
  std::optional<int32_t> stop_token_id;
  bool finish_reported = false;  // the final delta went out

  bool finished() const { return finish_reason != FinishReason::kNone; }
};

struct RequestState {
  std::string id;
  SamplingParams params;
  std::vector<int32_t> prompt;
  int max_total_tokens = 0;  // prompt + max_tokens, capped by max_model_len
  OutputCallback callback;
  std::vector<std::unique_ptr<SeqState>> seqs;
  std::vector<int32_t> prompt_unique_tokens;  // sorted, for the repetition penalty (only when it is on)
  std::unique_ptr<StopMatcher> stop_matcher;  // built at the first output text when there are stop strings
  std::shared_ptr<structured::CompiledGrammar> grammar;  // structured outputs (shared by requests with the same one)

  std::vector<PositionLogprobs> prompt_logprobs;  // filled while the prompt is computed (when asked)
  bool prompt_logprobs_done = false;
  bool header_sent = false;  // prompt ids (and prompt logprobs) delivered
  RequestTimings timings;
  bool counted_as_queued = true;  // still counts toward the waiting-queue limit
  int num_finished = 0;
  bool touched = false;  // listed for delivery at the end of this step
  std::optional<std::string> error;  // set when the engine failed it
};

}  // namespace peregrine::engine
