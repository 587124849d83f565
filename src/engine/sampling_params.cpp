// SamplingParams::validate and EngineConfig::validate: range checks with messages naming the field, and the
// names of finish reasons.
#include <cmath>
#include <string>

#include "core/status.h"
#include "peregrine/engine_config.h"
#include "peregrine/outputs.h"
#include "peregrine/sampling_params.h"

namespace peregrine {
namespace {

[[noreturn]] void fail(const std::string& message) { throw Error(ErrorCode::kInvalidArgument, message); }
// A bad field: the message names it, and so does Error::field() (the server's `param`).
[[noreturn]] void bad(const char* field, const std::string& message) {
  throw Error(ErrorCode::kInvalidArgument, message, field);
}

// Token ids must be in the vocabulary; with vocab_size 0 (not known yet) only non-negative.
void check_token_id(const char* field, int32_t token, int vocab_size) {
  if (vocab_size <= 0) {
    if (token < 0) bad(field, std::string(field) + ": token id " + std::to_string(token) + " is negative");
    return;
  }
  if (token < 0 || token >= vocab_size) {
    bad(field, std::string(field) + ": token id " + std::to_string(token) + " is out of the vocabulary [0, " +
         std::to_string(vocab_size) + ")");
  }
}

std::string num(double v) {
  std::string s = std::to_string(v);
  while (s.size() > 1 && s.back() == '0') s.pop_back();
  if (!s.empty() && s.back() == '.') s.pop_back();
  return s;
}

}  // namespace

const char* finish_reason_name(FinishReason reason) {
  switch (reason) {
    case FinishReason::kNone: return "";
    case FinishReason::kStop: return "stop";
    case FinishReason::kLength: return "length";
    case FinishReason::kAbort: return "abort";
  }
  return "";
}

void SamplingParams::validate(int vocab_size) const {
  if (n < 1 || n > kMaxN) bad("n", "n must be in [1, " + std::to_string(kMaxN) + "], got " + std::to_string(n));
  if (!std::isfinite(temperature) || temperature < 0.0f) bad("temperature", "temperature must be >= 0, got " + num(temperature));
  if (!std::isfinite(top_p) || top_p <= 0.0f || top_p > 1.0f) bad("top_p", "top_p must be in (0, 1], got " + num(top_p));
  if (top_k < -1) bad("top_k", "top_k must be -1 (disable) or at least 1, got " + std::to_string(top_k));
  if (!std::isfinite(min_p) || min_p < 0.0f || min_p > 1.0f) bad("min_p", "min_p must be in [0, 1], got " + num(min_p));
  if (!std::isfinite(repetition_penalty) || repetition_penalty <= 0.0f) {
    bad("repetition_penalty", "repetition_penalty must be > 0, got " + num(repetition_penalty));
  }
  if (!std::isfinite(presence_penalty) || presence_penalty < -2.0f || presence_penalty > 2.0f) {
    bad("presence_penalty", "presence_penalty must be in [-2, 2], got " + num(presence_penalty));
  }
  if (!std::isfinite(frequency_penalty) || frequency_penalty < -2.0f || frequency_penalty > 2.0f) {
    bad("frequency_penalty", "frequency_penalty must be in [-2, 2], got " + num(frequency_penalty));
  }
  for (const auto& [token, bias] : logit_bias) {
    check_token_id("logit_bias", token, vocab_size);
    if (!std::isfinite(bias) || bias < -100.0f || bias > 100.0f) {
      bad("logit_bias", "logit_bias: bias for token " + std::to_string(token) + " must be in [-100, 100], got " + num(bias));
    }
  }
  if (stop.size() > static_cast<size_t>(kMaxStopStrings)) {
    bad("stop", "stop: at most " + std::to_string(kMaxStopStrings) + " stop strings, got " + std::to_string(stop.size()));
  }
  size_t stop_bytes = 0;
  for (const auto& s : stop) {
    if (s.empty()) bad("stop", "stop: stop strings must not be empty");
    if (s.size() > kMaxStopStringBytes) {
      bad("stop", "stop: a stop string may be at most " + std::to_string(kMaxStopStringBytes) + " bytes, got " +
           std::to_string(s.size()));
    }
    stop_bytes += s.size();
  }
  if (stop_bytes > kMaxStopBytesTotal) {
    bad("stop", "stop: the stop strings may total at most " + std::to_string(kMaxStopBytesTotal) + " bytes, got " +
         std::to_string(stop_bytes));
  }
  for (int32_t t : stop_token_ids) check_token_id("stop_token_ids", t, vocab_size);
  if (min_tokens < 0) bad("min_tokens", "min_tokens must be >= 0, got " + std::to_string(min_tokens));
  if (max_tokens && *max_tokens < 1) bad("max_tokens", "max_tokens must be at least 1, got " + std::to_string(*max_tokens));
  if (max_tokens && min_tokens > *max_tokens) {
    bad("min_tokens", "min_tokens must be <= max_tokens, got min_tokens " + std::to_string(min_tokens) + " and max_tokens " +
         std::to_string(*max_tokens));
  }
  if (logprobs && (*logprobs < 0 || *logprobs > kMaxLogprobs)) {
    bad("logprobs", "logprobs must be in [0, " + std::to_string(kMaxLogprobs) + "], got " + std::to_string(*logprobs));
  }
  if (prompt_logprobs && (*prompt_logprobs < 0 || *prompt_logprobs > kMaxLogprobs)) {
    bad("prompt_logprobs", "prompt_logprobs must be in [0, " + std::to_string(kMaxLogprobs) + "], got " +
         std::to_string(*prompt_logprobs));
  }
  if (structured_outputs) {
    const StructuredOutputsParams& so = *structured_outputs;
    const std::string& f = so.field.empty() ? std::string("structured_outputs") : so.field;
    if (so.num_set() != 1) {
      bad(f.c_str(), f + ": exactly one of json, regex, choice, grammar and json_object must be given, got " +
                 std::to_string(so.num_set()));
    }
    if (so.choice) {
      if (so.choice->empty()) bad(f.c_str(), f + ": choice must be a non-empty list of strings");
      if (so.choice->size() > 10000) bad(f.c_str(), f + ": at most 10000 choices are allowed");
    }
    constexpr size_t kMaxSpec = 1 << 20;
    if ((so.json && so.json->size() > kMaxSpec) || (so.regex && so.regex->size() > kMaxSpec) ||
        (so.grammar && so.grammar->size() > kMaxSpec)) {
      bad(f.c_str(), f + ": the constraint is larger than 1 MiB");
    }
  }
}

void EngineConfig::validate() const {
  if (model.empty() && !(random_weights && !config_file.empty())) fail("model: a model folder is required");
  if (max_model_len < 0) fail("max_model_len must be >= 0, got " + std::to_string(max_model_len));
  if (max_num_seqs < 1) fail("max_num_seqs must be >= 1, got " + std::to_string(max_num_seqs));
  if (max_num_batched_tokens < 0) {
    fail("max_num_batched_tokens must be >= 0, got " + std::to_string(max_num_batched_tokens));
  }
  if (block_size < 1 || block_size > 1024 || (block_size & (block_size - 1)) != 0) {
    fail("block_size must be a power of two in [1, 1024], got " + std::to_string(block_size));
  }
  if (!(gpu_memory_utilization > 0.0 && gpu_memory_utilization <= 1.0)) {
    fail("gpu_memory_utilization must be in (0, 1], got " + num(gpu_memory_utilization));
  }
  if (num_kv_blocks_override < 0) fail("num_kv_blocks_override must be >= 0");
  if (max_queued_requests < 1) fail("max_queued_requests must be >= 1, got " + std::to_string(max_queued_requests));
  if (tensor_parallel_size != 1) {
    fail("tensor_parallel_size " + std::to_string(tensor_parallel_size) +
         " is not supported yet: Peregrine runs a model on one device (use 1)");
  }
  if (num_threads < 0) fail("num_threads must be >= 0, got " + std::to_string(num_threads));
  if (!(kv_offloading_size >= 0.0 && kv_offloading_size <= 1 << 20)) {
    fail("kv_offloading_size must be in [0, 1048576] GiB, got " + num(kv_offloading_size));
  }
  if (!kv_cache_dir.empty() && !(kv_offloading_size > 0.0)) {
    fail("kv_cache_dir needs kv_offloading_size > 0: the disk tier keeps what the host tier receives");
  }
  if (!(kv_cache_disk_gb > 0.0 && kv_cache_disk_gb <= 1e9)) {
    fail("kv_cache_disk_gb must be in (0, 1e9], got " + num(kv_cache_disk_gb));
  }
  if (kv_cache_dtype != "auto" && kv_cache_dtype != "fp8" && kv_cache_dtype != "fp8_e4m3" && kv_cache_dtype != "int8") {
    fail("kv_cache_dtype must be auto, fp8, fp8_e4m3 or int8, not '" + kv_cache_dtype + "'");
  }
  speculative.validate();
}

}  // namespace peregrine
