// Tokenizer::from_gguf: the tokenizer a GGUF file carries (tokenizer.ggml.*), assembled from the same parts as a
// tokenizer.json: the file's vocabulary becomes a BPE model's, its token types the added tokens, its special ids
// and add_bos/add_eos a tokenizer_config.
//   "llama" (SentencePiece): spaces to U+2581 with a leading one (add_space_prefix), the vocabulary merged by
//           score as llama.cpp's SPM tokenizer does (BpeModel::use_spm_scores), byte fallback <0xXX>;
//   "gpt2"  (byte-level BPE): tokens and merges, the `pre` name mapped to the split regex it stands for.
#include <algorithm>
#include <nlohmann/json.hpp>

#include "core/status.h"
#include "io/gguf.h"
#include "tokenizer/bpe_model.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/unicode.h"

namespace peregrine::tokenizer {
namespace {

using nlohmann::json;

// The split regex of a llama.cpp pre-tokenizer name (those whose regexes this tokenizer implements).
std::optional<std::string> pre_regex(const std::string& pre) {
  static const char* kLlama3 =
      R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
  static const char* kQwen2 =
      R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
  if (pre == "llama-bpe" || pre == "llama3" || pre == "llama-v3" || pre == "dbrx" || pre == "smaug-bpe") return kLlama3;
  if (pre == "qwen2" || pre == "deepseek-r1-qwen") return kQwen2;
  return std::nullopt;
}

}  // namespace

std::unique_ptr<Tokenizer> Tokenizer::from_gguf(const io::GgufFile& f) {
  const std::string model = f.string_opt("tokenizer.ggml.model").value_or("");
  if (model.empty()) f.fail(ErrorCode::kNotFound, "key 'tokenizer.ggml.model' is missing: the file carries no tokenizer (use --tokenizer DIR)");
  if (model != "llama" && model != "gpt2")
    f.fail(ErrorCode::kUnsupported, "key 'tokenizer.ggml.model' is '" + model + "'; supported: llama, gpt2 (or use --tokenizer DIR)");
  const io::GgufValue* tokens = f.array("tokenizer.ggml.tokens", io::GgufType::kString);
  if (!tokens || tokens->strings.empty()) f.fail(ErrorCode::kNotFound, "key 'tokenizer.ggml.tokens' is missing or empty");
  const size_t n = tokens->strings.size();
  std::vector<float> scores = f.f32_array("tokenizer.ggml.scores");
  std::vector<int64_t> types = f.int_array("tokenizer.ggml.token_type");
  if (!scores.empty() && scores.size() != n)
    f.fail(ErrorCode::kFormatError, "key 'tokenizer.ggml.scores' has " + std::to_string(scores.size()) + " entries for " +
                                        std::to_string(n) + " tokens");
  if (!types.empty() && types.size() != n)
    f.fail(ErrorCode::kFormatError, "key 'tokenizer.ggml.token_type' has " + std::to_string(types.size()) + " entries for " +
                                        std::to_string(n) + " tokens");
  if (scores.empty()) scores.assign(n, 0.0f);
  if (types.empty()) types.assign(n, 1);

  enum : int64_t { kNormal = 1, kUnknown = 2, kControl = 3, kUserDefined = 4, kUnused = 5, kByte = 6 };
  json vocab = json::object();
  json added = json::array();
  for (size_t id = 0; id < n; ++id) {
    const std::string text(tokens->strings[id]);
    if (const size_t bad = find_invalid_utf8(text); bad != std::string::npos)  // GGUF strings are UTF-8
      f.fail(ErrorCode::kFormatError, "key 'tokenizer.ggml.tokens': token " + std::to_string(id) +
                                          " is not valid UTF-8 (byte " + std::to_string(bad) + ")");
    if (text.empty() || vocab.contains(text)) continue;  // holes: such ids never come out of encoding
    vocab[text] = id;
    const int64_t t = types[id];
    if (t == kControl || t == kUserDefined || t == kUnknown)
      added.push_back({{"id", id}, {"content", text}, {"special", t != kUserDefined}, {"lstrip", false},
                       {"rstrip", false}, {"single_word", false}, {"normalized", false}});
  }
  auto special = [&](const char* key) -> std::string {
    auto v = f.int_opt(key);
    if (!v || *v < 0 || static_cast<size_t>(*v) >= n) return "";
    return std::string(tokens->strings[static_cast<size_t>(*v)]);
  };

  json tj;
  tj["version"] = "1.0";
  tj["added_tokens"] = added;
  json bpe = {{"type", "BPE"}, {"vocab", vocab}, {"dropout", nullptr}, {"fuse_unk", false}};
  if (model == "llama") {
    const bool space_prefix = f.bool_opt("tokenizer.ggml.add_space_prefix").value_or(true);
    json norm = json::array();
    if (space_prefix) norm.push_back({{"type", "Prepend"}, {"prepend", "\u2581"}});
    norm.push_back({{"type", "Replace"}, {"pattern", {{"String", " "}}}, {"content", "\u2581"}});
    tj["normalizer"] = {{"type", "Sequence"}, {"normalizers", norm}};
    tj["pre_tokenizer"] = nullptr;
    bpe["byte_fallback"] = true;
    bpe["merges"] = json::array();
    if (!special("tokenizer.ggml.unknown_token_id").empty()) bpe["unk_token"] = special("tokenizer.ggml.unknown_token_id");
    json dec = json::array({{{"type", "Replace"}, {"pattern", {{"String", "\u2581"}}}, {"content", " "}},
                            {{"type", "ByteFallback"}}, {{"type", "Fuse"}}});
    if (space_prefix) dec.push_back({{"type", "Strip"}, {"content", " "}, {"start", 1}, {"stop", 0}});
    tj["decoder"] = {{"type", "Sequence"}, {"decoders", dec}};
  } else {
    const std::string pre = f.string_opt("tokenizer.ggml.pre").value_or("default");
    const io::GgufValue* merges = f.array("tokenizer.ggml.merges", io::GgufType::kString);
    if (!merges) f.fail(ErrorCode::kNotFound, "key 'tokenizer.ggml.merges' is missing (a gpt2 tokenizer needs merges)");
    json m = json::array();
    for (size_t i = 0; i < merges->strings.size(); ++i) {
      const std::string_view s = merges->strings[i];
      if (find_invalid_utf8(s) != std::string::npos)
        f.fail(ErrorCode::kFormatError, "key 'tokenizer.ggml.merges': merge " + std::to_string(i) + " is not valid UTF-8");
      m.push_back(std::string(s));
    }
    bpe["merges"] = std::move(m);
    bpe["byte_fallback"] = false;
    tj["normalizer"] = nullptr;
    if (pre == "default" || pre == "gpt2" || pre == "gpt-2") {
      tj["pre_tokenizer"] = {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true}, {"use_regex", true}};
    } else if (auto regex = pre_regex(pre)) {
      tj["pre_tokenizer"] = {{"type", "Sequence"},
                             {"pretokenizers",
                              json::array({{{"type", "Split"}, {"pattern", {{"Regex", *regex}}}, {"behavior", "Isolated"}, {"invert", false}},
                                           {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true}, {"use_regex", false}}})}};
      bpe["ignore_merges"] = pre != "qwen2" && pre != "deepseek-r1-qwen";  // Llama 3 looks whole words up first
    } else {
      f.fail(ErrorCode::kUnsupported, "key 'tokenizer.ggml.pre' is '" + pre +
                                          "'; supported: default, gpt2, llama-bpe, llama3, dbrx, smaug-bpe, qwen2, "
                                          "deepseek-r1-qwen (or use --tokenizer DIR)");
    }
    tj["decoder"] = {{"type", "ByteLevel"}, {"add_prefix_space", true}, {"trim_offsets", true}, {"use_regex", true}};
  }
  tj["model"] = std::move(bpe);
  tj["post_processor"] = nullptr;

  json config = {{"tokenizer_class", "LlamaTokenizerFast"}, {"clean_up_tokenization_spaces", false}};
  const std::string bos = special("tokenizer.ggml.bos_token_id"), eos = special("tokenizer.ggml.eos_token_id");
  if (!bos.empty()) config["bos_token"] = bos;
  if (!eos.empty()) config["eos_token"] = eos;
  if (auto s = special("tokenizer.ggml.unknown_token_id"); !s.empty()) config["unk_token"] = s;
  if (auto s = special("tokenizer.ggml.padding_token_id"); !s.empty()) config["pad_token"] = s;
  config["add_bos_token"] = f.bool_opt("tokenizer.ggml.add_bos_token").value_or(model == "llama") && !bos.empty();
  config["add_eos_token"] = f.bool_opt("tokenizer.ggml.add_eos_token").value_or(false) && !eos.empty();
  json generation = json::object();
  std::vector<int64_t> eos_ids;
  for (const char* key : {"tokenizer.ggml.eos_token_id", "tokenizer.ggml.eot_token_id", "tokenizer.ggml.eom_token_id"})
    if (auto v = f.int_opt(key); v && *v >= 0 && static_cast<size_t>(*v) < n &&
                                 std::find(eos_ids.begin(), eos_ids.end(), *v) == eos_ids.end())
      eos_ids.push_back(*v);
  if (!eos_ids.empty()) generation["eos_token_id"] = eos_ids;

  std::unique_ptr<Tokenizer> t;
  try {
    t = from_json(tj.dump(), config.dump(), generation.dump());
  } catch (const Error& e) {
    f.fail(e.code(), "tokenizer.ggml.*: " + e.message());
  }
  if (model == "llama") {
    std::vector<float> by_id(static_cast<size_t>(t->model_->vocab_size()), -1e30f);
    for (size_t id = 0; id < n && id < by_id.size(); ++id) by_id[id] = scores[id];
    t->model_->use_spm_scores(std::move(by_id));
  }
  return t;
}

}  // namespace peregrine::tokenizer
