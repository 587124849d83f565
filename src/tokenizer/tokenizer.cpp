// Tokenizer: loading (tokenizer.json, tokenizer_config.json, generation_config.json), encode and decode.
#include "tokenizer/tokenizer.h"

#include <algorithm>
#include <fstream>
#include <sstream>

#include "core/status.h"
#include "io/gguf.h"
#include "tokenizer/added_tokens.h"
#include "tokenizer/bpe_model.h"
#include "tokenizer/decoders.h"
#include "tokenizer/hash_map.h"
#include "tokenizer/json_reader.h"
#include "tokenizer/json_util.h"
#include "tokenizer/normalizers.h"
#include "tokenizer/post_processors.h"
#include "tokenizer/pre_tokenizers.h"
#include "tokenizer/unicode.h"

namespace peregrine::tokenizer {
namespace {

std::string read_file(const std::filesystem::path& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) throw Error(ErrorCode::kIoError, "cannot read " + path.string());
  std::string data;
  f.seekg(0, std::ios::end);
  data.resize(static_cast<size_t>(f.tellg()));
  f.seekg(0);
  f.read(data.data(), static_cast<std::streamsize>(data.size()));
  if (!f) throw Error(ErrorCode::kIoError, "cannot read " + path.string());
  return data;
}

nlohmann::json parse_config(std::string_view text, std::string_view name) {
  if (text.empty()) return nlohmann::json::object();
  try {
    nlohmann::json j = nlohmann::json::parse(text);
    if (!j.is_object()) throw Error(ErrorCode::kFormatError, std::string(name) + " is not a JSON object");
    return j;
  } catch (const nlohmann::json::exception& e) {
    throw Error(ErrorCode::kFormatError, std::string(name) + " is not valid JSON: " + e.what());
  }
}

// A special-token field of tokenizer_config.json: a string, an AddedToken object {"content": ...}, or null.
std::string special_token_content(const nlohmann::json& config, const char* key) {
  auto it = config.find(key);
  if (it == config.end() || it->is_null()) return "";
  if (it->is_string()) return it->get<std::string>();
  if (it->is_object() && it->contains("content") && (*it)["content"].is_string()) return (*it)["content"].get<std::string>();
  throw Error(ErrorCode::kFormatError, std::string("tokenizer_config.json: '") + key + "' must be a string or an AddedToken");
}

AddedToken parse_added_token(const nlohmann::json& j, int32_t id) {
  AddedToken t;
  t.id = id;
  t.content = json_string(j, "content", "added token");
  t.special = json_value<bool>(j, "special", false);
  t.lstrip = json_value<bool>(j, "lstrip", false);
  t.rstrip = json_value<bool>(j, "rstrip", false);
  t.single_word = json_value<bool>(j, "single_word", false);
  t.normalized = json_value<bool>(j, "normalized", !t.special);
  return t;
}

bool ends_with_byte_level(const nlohmann::json& pre) {
  if (pre.is_null()) return false;
  if (pre.value("type", "") == "ByteLevel") return true;
  if (pre.value("type", "") == "Sequence" && pre.contains("pretokenizers") && pre["pretokenizers"].is_array() &&
      !pre["pretokenizers"].empty())
    return ends_with_byte_level(pre["pretokenizers"].back());
  return false;
}

}  // namespace

std::string clean_up_tokenization(std::string_view text) {
  static constexpr std::pair<std::string_view, std::string_view> kRules[] = {
      {" .", "."}, {" ?", "?"}, {" !", "!"}, {" ,", ","}, {" ' ", "'"},
      {" n't", "n't"}, {" 'm", "'m"}, {" 's", "'s"}, {" 've", "'ve"}, {" 're", "'re"}};
  std::string s(text);
  if (s.find(' ') == std::string::npos) return s;
  for (const auto& [from, to] : kRules) {
    if (s.find(from) == std::string::npos) continue;
    std::string out;
    out.reserve(s.size());
    size_t last = 0, at;
    while ((at = s.find(from, last)) != std::string::npos) {
      out.append(s, last, at - last).append(to);
      last = at + from.size();
    }
    out.append(s, last);
    s.swap(out);
  }
  return s;
}

Tokenizer::Tokenizer() = default;
Tokenizer::~Tokenizer() = default;

std::unique_ptr<Tokenizer> Tokenizer::load(const std::filesystem::path& model_dir) {
  if (io::is_gguf_path(model_dir)) return from_gguf(io::GgufFile(model_dir));
  std::filesystem::path tj = model_dir / "tokenizer.json";
  if (!std::filesystem::exists(tj))
    throw Error(ErrorCode::kNotFound, "no tokenizer.json in " + model_dir.string() +
                                          " (only Hugging Face fast tokenizers are supported)");
  std::string tokenizer_json = read_file(tj);
  std::string config, generation;
  if (std::filesystem::exists(model_dir / "tokenizer_config.json")) config = read_file(model_dir / "tokenizer_config.json");
  if (std::filesystem::exists(model_dir / "generation_config.json"))
    generation = read_file(model_dir / "generation_config.json");
  return from_json(tokenizer_json, config, generation);
}

std::unique_ptr<Tokenizer> Tokenizer::from_json(std::string_view tokenizer_json, std::string_view tokenizer_config_json,
                                                std::string_view generation_config_json) {
  std::unique_ptr<Tokenizer> t(new Tokenizer());
  TokenizerJsonParts parts = read_tokenizer_json(tokenizer_json);
  const nlohmann::json& root = parts.rest;
  const nlohmann::json null_json;
  auto field = [&](const char* key) -> const nlohmann::json& {
    auto it = root.find(key);
    return it == root.end() ? null_json : *it;
  };
  if (!root.contains("model") || !root["model"].is_object())
    throw Error(ErrorCode::kFormatError, "tokenizer.json: missing 'model'");
  const nlohmann::json& model = root["model"];
  std::string model_type = model.value("type", "");
  if (model_type.empty() && model.contains("merges")) model_type = "BPE";
  if (model_type.empty() && parts.has_merges) model_type = "BPE";
  if (model_type != "BPE")
    throw Error(ErrorCode::kUnsupported, "tokenizer.json: model type '" + model_type + "' is not supported (BPE only)");

  t->normalizer_ = make_normalizer(field("normalizer"));
  t->pre_tokenizer_ = make_pre_tokenizer(field("pre_tokenizer"));
  bool raw_bytes = ends_with_byte_level(field("pre_tokenizer")) && t->pre_tokenizer_->set_raw_byte_output();
  t->model_ = std::make_unique<BpeModel>(model, parts, raw_bytes);
  t->post_processor_ = make_post_processor(field("post_processor"));
  t->decoder_ = make_decoder(field("decoder"));
  if (auto pd = compile_piecewise_decoder(field("decoder"))) t->piecewise_ = std::make_unique<PiecewiseDecoder>(*pd);

  for (const auto& a : field("added_tokens").is_array() ? field("added_tokens") : nlohmann::json::array()) {
    if (!a.contains("id") || !a["id"].is_number_integer())
      throw Error(ErrorCode::kFormatError, "tokenizer.json: added token without an integer id");
    t->added_tokens_.push_back(parse_added_token(a, a["id"].get<int32_t>()));
  }
  t->apply_config(tokenizer_config_json, generation_config_json);
  return t;
}

void Tokenizer::apply_config(std::string_view tokenizer_config_json, std::string_view generation_config_json) {
  nlohmann::json config = parse_config(tokenizer_config_json, "tokenizer_config.json");
  nlohmann::json generation = parse_config(generation_config_json, "generation_config.json");

  // Tokens declared only in tokenizer_config.json's added_tokens_decoder.
  if (auto it = config.find("added_tokens_decoder"); it != config.end() && it->is_object()) {
    for (auto& [key, value] : it->items()) {
      int32_t id = 0;
      try {
        id = std::stoi(key);
      } catch (...) {
        continue;
      }
      bool known = std::any_of(added_tokens_.begin(), added_tokens_.end(), [&](const AddedToken& a) { return a.id == id; });
      if (!known && value.is_object() && value.contains("content")) added_tokens_.push_back(parse_added_token(value, id));
    }
  }

  // Index added tokens, build the matchers.
  int32_t max_id = model_->vocab_size() - 1;
  for (const auto& a : added_tokens_) max_id = std::max(max_id, a.id);
  added_index_by_id_.assign(static_cast<size_t>(max_id + 1), -1);
  special_by_id_.assign(static_cast<size_t>(max_id + 1), false);
  added_by_content_ = std::make_unique<StringIdMap>();
  std::vector<std::string> raw_patterns, norm_patterns;
  std::vector<int32_t> raw_idx, norm_idx;
  for (size_t i = 0; i < added_tokens_.size(); ++i) {
    AddedToken& a = added_tokens_[i];
    if (a.id < 0) throw Error(ErrorCode::kFormatError, "tokenizer.json: negative added token id");
    added_index_by_id_[a.id] = static_cast<int32_t>(i);
    if (added_by_content_->get(a.content) == StringIdMap::kMissing) added_by_content_->set(a.content, static_cast<uint32_t>(i));
    if (a.special) special_by_id_[a.id] = true;
    if (a.normalized && normalizer_) {
      std::string content = a.content;
      normalizer_->normalize(content);
      norm_patterns.push_back(content);
      norm_idx.push_back(static_cast<int32_t>(i));
    } else {
      raw_patterns.push_back(a.content);
      raw_idx.push_back(static_cast<int32_t>(i));
    }
  }
  raw_matcher_ = std::make_unique<AddedTokenMatcher>();
  raw_matcher_->build(added_tokens_, raw_patterns, raw_idx);
  normalized_matcher_ = std::make_unique<AddedTokenMatcher>();
  normalized_matcher_->build(added_tokens_, norm_patterns, norm_idx);

  auto resolve = [&](const std::string& token) -> std::optional<int32_t> {
    if (token.empty()) return std::nullopt;
    return token_to_id(token);
  };
  bos_token_ = special_token_content(config, "bos_token");
  eos_token_ = special_token_content(config, "eos_token");
  bos_id_ = resolve(bos_token_);
  eos_id_ = resolve(eos_token_);
  pad_id_ = resolve(special_token_content(config, "pad_token"));
  unk_id_ = resolve(special_token_content(config, "unk_token"));
  if (!unk_id_) unk_id_ = model_->unk_id();
  auto gen_id = [&](const char* key) -> std::optional<int32_t> {
    auto it = generation.find(key);
    if (it != generation.end() && it->is_number_integer()) return it->get<int32_t>();
    if (it != generation.end() && it->is_array() && !it->empty() && (*it)[0].is_number_integer()) return (*it)[0].get<int32_t>();
    return std::nullopt;
  };
  if (!bos_id_) bos_id_ = gen_id("bos_token_id");
  if (!pad_id_) pad_id_ = gen_id("pad_token_id");
  if (eos_id_) eos_ids_.push_back(*eos_id_);
  if (auto it = generation.find("eos_token_id"); it != generation.end()) {
    auto add = [&](const nlohmann::json& v) {
      if (v.is_number_integer() && std::find(eos_ids_.begin(), eos_ids_.end(), v.get<int32_t>()) == eos_ids_.end())
        eos_ids_.push_back(v.get<int32_t>());
    };
    if (it->is_array())
      for (const auto& v : *it) add(v);
    else
      add(*it);
  }
  if (!eos_id_ && !eos_ids_.empty()) eos_id_ = eos_ids_.front();
  if (bos_token_.empty() && bos_id_) bos_token_ = std::string(token_text(*bos_id_));
  if (eos_token_.empty() && eos_id_) eos_token_ = std::string(token_text(*eos_id_));

  // Everything transformers counts as special is skipped by skip_special_tokens.
  auto mark = [&](std::optional<int32_t> id) {
    if (id && *id >= 0 && static_cast<size_t>(*id) < special_by_id_.size()) special_by_id_[*id] = true;
  };
  mark(bos_id_);
  mark(eos_id_);
  mark(pad_id_);
  if (special_token_content(config, "unk_token").size()) mark(unk_id_);
  if (auto it = config.find("additional_special_tokens"); it != config.end() && it->is_array()) {
    for (const auto& v : *it) {
      std::string content = v.is_string() ? v.get<std::string>() : (v.is_object() ? v.value("content", "") : "");
      mark(resolve(content));
    }
  }

  // transformers' Llama/Gemma tokenizers rebuild the post-processor from add_bos_token / add_eos_token
  // (LlamaTokenizerFast.update_post_processor), whatever tokenizer.json says.
  std::string cls = config.value("tokenizer_class", "");
  static constexpr std::string_view kRebuilding[] = {"LlamaTokenizer", "LlamaTokenizerFast", "CodeLlamaTokenizer",
                                                     "CodeLlamaTokenizerFast", "GemmaTokenizer", "GemmaTokenizerFast"};
  add_bos_ = false;
  if (std::find(std::begin(kRebuilding), std::end(kRebuilding), cls) != std::end(kRebuilding)) {
    bool add_bos = json_value<bool>(config, "add_bos_token", true);
    bool add_eos = json_value<bool>(config, "add_eos_token", false);
    std::vector<int32_t> prefix, suffix;
    if (add_bos) {
      if (!bos_id_) throw Error(ErrorCode::kFormatError, "tokenizer_config.json: add_bos_token is set but there is no bos_token");
      prefix.push_back(*bos_id_);
    }
    if (add_eos) {
      if (!eos_id_) throw Error(ErrorCode::kFormatError, "tokenizer_config.json: add_eos_token is set but there is no eos_token");
      suffix.push_back(*eos_id_);
    }
    post_processor_ = std::make_unique<TemplatePostProcessor>(std::move(prefix), std::move(suffix));
    add_bos_ = add_bos;
  } else if (post_processor_ && bos_id_) {
    std::vector<int32_t> probe;
    post_processor_->process(probe, true);
    add_bos_ = !probe.empty() && probe.front() == *bos_id_;
  }

  clean_up_spaces_ = json_value<bool>(config, "clean_up_tokenization_spaces", false);
  spaces_between_special_ = json_value<bool>(config, "spaces_between_special_tokens", false);
}

std::vector<int32_t> Tokenizer::encode(std::string_view text, bool add_special_tokens) const {
  std::vector<int32_t> ids;
  ids.reserve(text.size() / 3 + 4);
  encode_into(text, add_special_tokens, ids);
  return ids;
}

void Tokenizer::encode_into(std::string_view text, bool add_special_tokens, std::vector<int32_t>& out) const {
  if (!out.empty()) {  // the post-processor must see only this text's ids
    std::vector<int32_t> ids;
    encode_into(text, add_special_tokens, ids);
    out.insert(out.end(), ids.begin(), ids.end());
    return;
  }
  check_utf8(text);
  std::vector<AddedTokenPiece> pieces;
  if (raw_matcher_->split(text, pieces)) {
    for (const auto& p : pieces) {
      if (p.token >= 0) out.push_back(added_tokens_[p.token].id);
      else encode_section(text.substr(p.begin, p.end - p.begin), p.begin == 0, out);
    }
  } else {
    encode_section(text, true, out);
  }
  if (post_processor_) post_processor_->process(out, add_special_tokens);
}

void Tokenizer::encode_section(std::string_view text, bool at_origin, std::vector<int32_t>& out) const {
  if (text.empty()) return;
  std::string normalized(text);
  if (normalizer_) normalizer_->normalize(normalized);
  if (normalized.empty()) return;
  std::vector<AddedTokenPiece> pieces;
  if (normalized_matcher_->split(normalized, pieces)) {
    for (const auto& p : pieces) {
      if (p.token >= 0) out.push_back(added_tokens_[p.token].id);
      else model_section(std::string_view(normalized).substr(p.begin, p.end - p.begin), at_origin && p.begin == 0, out);
    }
    return;
  }
  model_section(normalized, at_origin, out);
}

void Tokenizer::model_section(std::string_view normalized, bool at_origin, std::vector<int32_t>& out) const {
  if (normalized.empty()) return;
  thread_local PreTokens pt;
  pt.text.assign(normalized);
  pt.spans.assign(1, Span{0, static_cast<uint32_t>(normalized.size()), at_origin});
  if (pre_tokenizer_) pre_tokenizer_->pre_tokenize(pt);
  for (const Span& s : pt.spans) model_->tokenize(pt.view(s), out);
}

bool Tokenizer::is_added(int32_t id) const {
  return id >= 0 && static_cast<size_t>(id) < added_index_by_id_.size() && added_index_by_id_[id] >= 0;
}

std::string_view Tokenizer::token_text(int32_t id) const {
  if (is_added(id)) return added_tokens_[added_index_by_id_[id]].content;
  return model_->id_to_token(id);
}

std::string Tokenizer::decode(std::span<const int32_t> ids, bool skip_special_tokens) const {
  DecodeOptions o;
  o.skip_special_tokens = skip_special_tokens;
  return decode(ids, o);
}

std::string Tokenizer::decode(std::span<const int32_t> ids, const DecodeOptions& options) const {
  std::string text = decode_raw(ids, options.skip_special_tokens,
                                options.spaces_between_special_tokens.value_or(spaces_between_special_));
  if (options.clean_up_tokenization_spaces.value_or(clean_up_spaces_)) text = clean_up_tokenization(text);
  return text;
}

std::string Tokenizer::decode_raw(std::span<const int32_t> ids, bool skip_special_tokens,
                                  bool spaces_between_special_tokens) const {
  std::vector<DecodeToken> tokens;
  tokens.reserve(ids.size());
  if (!spaces_between_special_tokens) {
    for (int32_t id : ids) {
      if (skip_special_tokens && is_special(id)) continue;
      std::string_view t = token_text(id);
      if (t.empty()) continue;
      tokens.push_back(DecodeToken{std::string(t), is_added(id)});
    }
    return run_decoder(decoder_.get(), std::move(tokens));
  }
  // Slow-tokenizer semantics, limited to special tokens: runs of other tokens decoded separately, special tokens
  // verbatim, all joined by " ". NOTE: non-special added tokens (Qwen's <think>, <tool_call>) stay inside runs, so
  // the default spaces_between_special_tokens=true of the OpenAI-style API never adds spaces around them (vLLM
  // ignores the flag for fast tokenizers altogether).
  std::vector<std::string> sub_texts;
  auto flush_run = [&] {
    if (tokens.empty()) return;
    std::string s = run_decoder(decoder_.get(), std::move(tokens));
    tokens.clear();
    if (!s.empty()) sub_texts.push_back(std::move(s));
  };
  for (int32_t id : ids) {
    if (skip_special_tokens && is_special(id)) continue;
    std::string_view t = token_text(id);
    if (t.empty()) continue;
    if (is_special(id)) {
      flush_run();
      sub_texts.emplace_back(t);
    } else {
      tokens.push_back(DecodeToken{std::string(t), is_added(id)});
    }
  }
  flush_run();
  std::string out;
  for (size_t i = 0; i < sub_texts.size(); ++i) {
    if (i) out.push_back(' ');
    out.append(sub_texts[i]);
  }
  return out;
}

int32_t Tokenizer::vocab_size() const { return static_cast<int32_t>(added_index_by_id_.size()); }

std::optional<int32_t> Tokenizer::token_to_id(std::string_view token) const {
  if (added_by_content_) {
    uint32_t i = added_by_content_->get(token);
    if (i != StringIdMap::kMissing) return added_tokens_[i].id;
  }
  return model_->token_to_id(token);
}

std::string Tokenizer::id_to_token(int32_t id) const { return std::string(token_text(id)); }

bool Tokenizer::is_special(int32_t id) const {
  return id >= 0 && static_cast<size_t>(id) < special_by_id_.size() && special_by_id_[id];
}

}  // namespace peregrine::tokenizer
