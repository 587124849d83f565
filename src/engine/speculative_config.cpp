// SpeculativeConfig::parse / validate (include/peregrine/speculative_config.h): every key checked, every error naming
// it.
#include "peregrine/speculative_config.h"

#include <nlohmann/json.hpp>
#include <set>

#include "peregrine/error.h"

namespace peregrine {
namespace {

[[noreturn]] void bad(const std::string& key, const std::string& problem) {
  throw Error(ErrorCode::kInvalidArgument, "speculative_config." + key + ": " + problem, "speculative_config");
}

int int_in(const nlohmann::json& j, const std::string& key, int lo, int hi) {
  if (!j.is_number_integer()) bad(key, "expected an integer, got " + j.dump());
  const int64_t v = j.get<int64_t>();
  if (v < lo || v > hi) bad(key, "must be in [" + std::to_string(lo) + ", " + std::to_string(hi) + "], got " + j.dump());
  return static_cast<int>(v);
}

}  // namespace

const char* SpeculativeConfig::method_name(Method m) {
  switch (m) {
    case Method::kNone: return "none";
    case Method::kNgram: return "ngram";
    case Method::kLookahead: return "lookahead";
    case Method::kDraftModel: return "draft_model";
    case Method::kSelf: return "self";
  }
  return "none";
}

int SpeculativeConfig::drafter_vocab_rows() const {
  if (method != Method::kDraftModel && method != Method::kSelf) return 0;
  if (!speculative_token_map.empty()) return 0;
  return draft_vocab_size >= 0 ? draft_vocab_size : kDefaultDraftVocabSize;
}

SpeculativeConfig SpeculativeConfig::parse(std::string_view text) {
  SpeculativeConfig c;
  if (text.empty()) return c;
  const nlohmann::json j = nlohmann::json::parse(text, nullptr, false);
  if (j.is_discarded() || !j.is_object()) {
    throw Error(ErrorCode::kInvalidArgument, "speculative_config: expected a JSON object, e.g. "
                                             "{\"method\": \"ngram\", \"num_speculative_tokens\": 4}",
                "speculative_config");
  }
  if (!j.contains("method") || !j["method"].is_string()) bad("method", "a string is required (ngram, lookahead, draft_model, self)");
  const std::string method = j["method"].get<std::string>();
  std::set<std::string> allowed = {"method", "num_speculative_tokens", "disable_by_batch_size", "adaptive"};
  if (method == "ngram") {
    c.method = Method::kNgram;
    allowed.insert({"prompt_lookup_min", "prompt_lookup_max"});
  } else if (method == "lookahead") {
    c.method = Method::kLookahead;
    allowed.insert({"prompt_lookup_min", "prompt_lookup_max", "cache_tokens", "max_tree_tokens", "num_branches",
                    "warmup_files"});
  } else if (method == "draft_model") {
    c.method = Method::kDraftModel;
    allowed.insert({"model", "draft_vocab_size", "speculative_token_map", "draft_context"});
  } else if (method == "self") {
    c.method = Method::kSelf;
    allowed.insert({"draft_layers", "draft_num_layers", "draft_vocab_size", "speculative_token_map"});
  } else {
    bad("method", "unknown method '" + method + "' (known: ngram, lookahead, draft_model, self)");
  }
  for (auto it = j.begin(); it != j.end(); ++it) {
    if (!allowed.count(it.key())) bad(it.key(), "unknown key for method '" + method + "'");
  }
  if (!j.contains("num_speculative_tokens")) bad("num_speculative_tokens", "is required");
  c.num_speculative_tokens = int_in(j["num_speculative_tokens"], "num_speculative_tokens", 1, 64);
  if (j.contains("disable_by_batch_size")) {
    c.disable_by_batch_size = int_in(j["disable_by_batch_size"], "disable_by_batch_size", 0, 1 << 20);
  }
  if (j.contains("adaptive")) {
    if (!j["adaptive"].is_boolean()) bad("adaptive", "expected true or false");
    c.adaptive = j["adaptive"].get<bool>();
  }
  if (j.contains("prompt_lookup_min")) c.prompt_lookup_min = int_in(j["prompt_lookup_min"], "prompt_lookup_min", 1, 64);
  if (j.contains("prompt_lookup_max")) c.prompt_lookup_max = int_in(j["prompt_lookup_max"], "prompt_lookup_max", 1, 64);
  if (j.contains("cache_tokens")) {
    if (!j["cache_tokens"].is_number_integer() || j["cache_tokens"].get<int64_t>() < 1024)
      bad("cache_tokens", "expected an integer >= 1024, got " + j["cache_tokens"].dump());
    c.cache_tokens = j["cache_tokens"].get<int64_t>();
  }
  if (j.contains("max_tree_tokens")) c.max_tree_tokens = int_in(j["max_tree_tokens"], "max_tree_tokens", 1, 256);
  if (j.contains("num_branches")) c.num_branches = int_in(j["num_branches"], "num_branches", 1, 16);
  if (j.contains("warmup_files")) {
    const auto& w = j["warmup_files"];
    if (!w.is_array()) bad("warmup_files", "expected a list of file paths");
    for (const auto& f : w) {
      if (!f.is_string()) bad("warmup_files", "expected a list of file paths");
      c.warmup_files.push_back(f.get<std::string>());
    }
  }
  if (j.contains("model")) {
    if (!j["model"].is_string() || j["model"].get<std::string>().empty()) bad("model", "expected a model folder");
    c.model = j["model"].get<std::string>();
  }
  if (j.contains("draft_context")) c.draft_context = int_in(j["draft_context"], "draft_context", 0, 1 << 24);
  if (j.contains("draft_num_layers")) c.draft_num_layers = int_in(j["draft_num_layers"], "draft_num_layers", 1, 4096);
  if (j.contains("draft_layers")) {
    const auto& l = j["draft_layers"];
    if (!l.is_array() || l.empty()) bad("draft_layers", "expected a non-empty list of layer indices");
    for (const auto& x : l) c.draft_layers.push_back(int_in(x, "draft_layers", 0, 4095));
  }
  if (j.contains("draft_vocab_size")) c.draft_vocab_size = int_in(j["draft_vocab_size"], "draft_vocab_size", 0, 1 << 24);
  if (j.contains("speculative_token_map")) {
    const auto& m = j["speculative_token_map"];
    if (!m.is_string() || m.get<std::string>().empty()) bad("speculative_token_map", "expected the path of a token map file");
    c.speculative_token_map = m.get<std::string>();
  }
  c.validate();
  return c;
}

void SpeculativeConfig::validate() const {
  if (method == Method::kNone) return;
  if (num_speculative_tokens < 1 || num_speculative_tokens > 64) bad("num_speculative_tokens", "must be in [1, 64]");
  if (prompt_lookup_min < 1 || prompt_lookup_max < prompt_lookup_min) {
    bad("prompt_lookup_min", "must be >= 1 and <= prompt_lookup_max (" + std::to_string(prompt_lookup_max) + ")");
  }
  if (method == Method::kLookahead) {
    if (max_tree_tokens != 0 && max_tree_tokens < num_speculative_tokens) {
      bad("max_tree_tokens", "must be at least num_speculative_tokens (" + std::to_string(num_speculative_tokens) + ")");
    }
    if (num_branches > 1 && max_tree_tokens == 0) {
      bad("max_tree_tokens", "is required when num_branches > 1 (the size of the verified token tree)");
    }
  }
  const bool drafter = method == Method::kDraftModel || method == Method::kSelf;
  if (!drafter && (draft_vocab_size > 0 || !speculative_token_map.empty()))
    bad(draft_vocab_size > 0 ? "draft_vocab_size" : "speculative_token_map", "only for methods 'draft_model' and 'self'");
  if (draft_vocab_size < -1) bad("draft_vocab_size", "must be >= 0 (0: the whole vocabulary)");
  if (draft_vocab_size > 0 && !speculative_token_map.empty())
    bad("speculative_token_map", "give draft_vocab_size (a set chosen by frequency) or a token map, not both");
  if (method == Method::kDraftModel && model.empty()) bad("model", "is required for method 'draft_model'");
  if (draft_context < -1) bad("draft_context", "must be >= 0 (0: the whole sequence)");
  if (draft_context >= 0 && method != Method::kDraftModel) bad("draft_context", "only for method 'draft_model'");
  if (method == Method::kSelf) {
    if (draft_layers.empty() == (draft_num_layers == 0)) bad("draft_num_layers", "give exactly one of draft_num_layers or draft_layers");
    for (size_t i = 1; i < draft_layers.size(); ++i) {
      if (draft_layers[i] <= draft_layers[i - 1]) bad("draft_layers", "layer indices must be increasing");
    }
  }
}

}  // namespace peregrine
