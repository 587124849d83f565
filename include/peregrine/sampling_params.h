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

// vLLM's StructuredOutputsParams: a constraint on the output text. Exactly one of json, regex, choice, grammar and
// json_object is set. The engine compiles it (errors are kInvalidArgument naming `field`) and masks every token the
// constraint does not allow before sampling; eos is allowed once the text is complete.
struct StructuredOutputsParams {
  std::optional<std::string> json;                  // a JSON Schema (as JSON text)
  std::optional<std::string> regex;                 // the whole output matches this regular expression
  std::optional<std::vector<std::string>> choice;   // the output is one of these strings
  std::optional<std::string> grammar;               // EBNF (`root ::= ...`) or Lark (`start: ...`)
  bool json_object = false;                         // any JSON object
  // The request field errors are reported under (the server sets e.g. "response_format").
  std::string field = "structured_outputs";

  int num_set() const {
    return (json ? 1 : 0) + (regex ? 1 : 0) + (choice ? 1 : 0) + (grammar ? 1 : 0) + (json_object ? 1 : 0);
  }
};

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
  std::optional<StructuredOutputsParams> structured_outputs;  // constrained decoding (structured outputs)

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
