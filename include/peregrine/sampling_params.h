// SamplingParams: how one request is sampled and when it stops, with vLLM's field names and meanings.
// validate() checks every field against the model (vocab size) and names the first offending field.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace peregrine {

struct SamplingParams {
  int n = 1;                      // completions per prompt; they share the prompt's KV blocks
  float temperature = 1.0f;       // 0 = greedy
  float top_p = 1.0f;             // (0, 1]
  int top_k = 0;                  // 0 or -1 = all tokens
  float min_p = 0.0f;             // [0, 1]
  float repetition_penalty = 1.0f;  // > 0; 1 = off (applies to prompt and output tokens)
  float presence_penalty = 0.0f;    // [-2, 2] (output tokens)
  float frequency_penalty = 0.0f;   // [-2, 2] (output tokens)
  std::vector<std::pair<int32_t, float>> logit_bias;  // token id -> added to its logit
  std::optional<uint64_t> seed;   // per-request RNG seed; unset = engine seed stream
  std::vector<std::string> stop;  // stop strings (not included in the output text)
  std::vector<int32_t> stop_token_ids;
  bool include_stop_str_in_output = false;
  bool ignore_eos = false;
  int min_tokens = 0;                 // eos / stop_token_ids / stop strings suppressed before this many tokens
  std::optional<int> max_tokens = 16;  // unset = until the context (max_model_len) is full
  std::optional<int> logprobs;         // top logprobs per output token (0 = only the sampled token)
  std::optional<int> prompt_logprobs;  // top logprobs per prompt token
  bool skip_special_tokens = true;
  bool spaces_between_special_tokens = true;

  static constexpr int kMaxLogprobs = 20;
  static constexpr int kMaxN = 128;
  static constexpr int kMaxStopStrings = 64;
  // Stop strings are matched incrementally (an automaton of about 20 bytes per stop-string byte, built once per
  // request), so these bound the memory and set-up work a request may ask of the engine thread.
  static constexpr size_t kMaxStopStringBytes = 4096;
  static constexpr size_t kMaxStopBytesTotal = 16384;

  bool is_greedy() const { return temperature < 1e-5f; }
  // Throws peregrine::Error(kInvalidArgument) naming the field, e.g. "top_p must be in (0, 1], got 1.5", with
  // Error::field() set. The one validator of sampling values (engine, server, CLI and Python all call it).
  // vocab_size 0 = not known yet (before a model is loaded): token ids are only checked to be non-negative.
  void validate(int vocab_size) const;
};

}  // namespace peregrine
