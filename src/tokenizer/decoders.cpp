// Decoder implementations (chain form and piecewise form).
#include "tokenizer/decoders.h"

#include "core/status.h"
#include "tokenizer/byte_level.h"
#include "tokenizer/json_util.h"
#include "tokenizer/normalizers.h"
#include "tokenizer/regex.h"
#include "tokenizer/unicode.h"

namespace peregrine::tokenizer {
namespace {

constexpr const char* kMetaspaceUtf8 = "\xE2\x96\x81";

// "<0xAB>" -> 0xAB, else -1.
int byte_fallback_value(std::string_view t) {
  if (t.size() != 6 || t.substr(0, 3) != "<0x" || t[5] != '>') return -1;
  int v = 0;
  for (int k = 3; k < 5; ++k) {
    char h = t[k];
    v <<= 4;
    if (h >= '0' && h <= '9') v |= h - '0';
    else if (h >= 'a' && h <= 'f') v |= h - 'a' + 10;
    else if (h >= 'A' && h <= 'F') v |= h - 'A' + 10;
    else return -1;
  }
  return v;
}

void append_byte_level(std::string_view token, std::string& bytes) {
  size_t mark = bytes.size();
  if (!byte_level_to_bytes(token, bytes)) {
    bytes.resize(mark);
    bytes.append(token);  // not a byte-level string: its own UTF-8
  }
}

std::string replace_literal(std::string_view text, std::string_view from, std::string_view to) {
  if (from.empty()) return std::string(text);
  std::string out;
  size_t last = 0, at;
  while ((at = text.find(from, last)) != std::string_view::npos) {
    out.append(text.substr(last, at - last)).append(to);
    last = at + from.size();
  }
  out.append(text.substr(last));
  return out;
}

class ByteLevelDecoder final : public Decoder {
 public:
  void decode_chain(std::vector<DecodeToken>& tokens) const override {
    std::vector<DecodeToken> out;
    std::string bytes;
    bool have = false;
    for (auto& t : tokens) {
      if (t.added) {
        if (have) out.push_back({utf8_lossy(bytes), false});
        bytes.clear();
        have = false;
        out.push_back(std::move(t));
        continue;
      }
      append_byte_level(t.text, bytes);
      have = true;
    }
    if (have) out.push_back({utf8_lossy(bytes), false});
    tokens.swap(out);
  }
};

class MetaspaceDecoder final : public Decoder {
 public:
  MetaspaceDecoder(std::string replacement, bool strip_first) : replacement_(std::move(replacement)), strip_first_(strip_first) {}
  void decode_chain(std::vector<DecodeToken>& tokens) const override {
    for (size_t i = 0; i < tokens.size(); ++i) {
      std::string s = replace_literal(tokens[i].text, replacement_, " ");
      if (i == 0 && strip_first_ && !s.empty() && s[0] == ' ') s.erase(0, 1);
      tokens[i].text = std::move(s);
    }
  }

 private:
  std::string replacement_;
  bool strip_first_;
};

class ByteFallbackDecoder final : public Decoder {
 public:
  void decode_chain(std::vector<DecodeToken>& tokens) const override {
    std::vector<DecodeToken> out;
    std::string run;
    bool in_run = false;
    for (auto& t : tokens) {
      int v = byte_fallback_value(t.text);
      if (v >= 0) {
        run.push_back(static_cast<char>(v));
        in_run = true;
        continue;
      }
      if (in_run) out.push_back({utf8_lossy(run), false});
      run.clear();
      in_run = false;
      out.push_back(std::move(t));
    }
    if (in_run) out.push_back({utf8_lossy(run), false});
    tokens.swap(out);
  }
};

class FuseDecoder final : public Decoder {
 public:
  void decode_chain(std::vector<DecodeToken>& tokens) const override {
    std::string all;
    for (auto& t : tokens) all.append(t.text);
    tokens.assign(1, DecodeToken{std::move(all), false});
  }
};

class StripDecoder final : public Decoder {
 public:
  StripDecoder(uint32_t content, int start, int stop) : content_(content), start_(start), stop_(stop) {}
  void decode_chain(std::vector<DecodeToken>& tokens) const override {
    for (auto& t : tokens) {
      std::vector<size_t> starts;  // byte offset of each char
      for (size_t i = 0; i < t.text.size();) {
        starts.push_back(i);
        next_code_point(t.text, i);
      }
      auto cp_at = [&](size_t k) {
        size_t i = starts[k];
        return next_code_point(t.text, i);
      };
      size_t n = starts.size(), start_cut = 0, stop_cut = n;
      for (size_t k = 0; k < static_cast<size_t>(start_) && k < n; ++k) {
        if (cp_at(k) != content_) break;
        start_cut = k + 1;
      }
      for (size_t k = 0; k < static_cast<size_t>(stop_) && k < n; ++k) {
        size_t idx = n - k - 1;
        if (cp_at(idx) != content_) break;
        stop_cut = idx;
      }
      if (start_cut >= stop_cut) {
        t.text.clear();
        continue;
      }
      size_t b = starts[start_cut], e = stop_cut < n ? starts[stop_cut] : t.text.size();
      t.text = t.text.substr(b, e - b);
    }
  }

 private:
  uint32_t content_;
  int start_, stop_;
};

class ReplaceDecoder final : public Decoder {
 public:
  ReplaceDecoder(Pattern pattern, std::string content) : pattern_(std::move(pattern)), content_(std::move(content)) {}
  void decode_chain(std::vector<DecodeToken>& tokens) const override {
    for (auto& t : tokens) t.text = replace_all(pattern_, t.text, content_);
  }

 private:
  Pattern pattern_;
  std::string content_;
};

class BpeSuffixDecoder final : public Decoder {
 public:
  explicit BpeSuffixDecoder(std::string suffix) : suffix_(std::move(suffix)) {}
  void decode_chain(std::vector<DecodeToken>& tokens) const override {
    for (size_t i = 0; i < tokens.size(); ++i)
      tokens[i].text = replace_literal(tokens[i].text, suffix_, i + 1 == tokens.size() ? "" : " ");
  }

 private:
  std::string suffix_;
};

class SequenceDecoder final : public Decoder {
 public:
  explicit SequenceDecoder(std::vector<std::unique_ptr<Decoder>> steps) : steps_(std::move(steps)) {}
  void decode_chain(std::vector<DecodeToken>& tokens) const override {
    for (const auto& s : steps_)
      if (s) s->decode_chain(tokens);
  }

 private:
  std::vector<std::unique_ptr<Decoder>> steps_;
};

uint32_t single_code_point(const std::string& s, std::string_view where) {
  size_t i = 0;
  if (s.empty()) throw Error(ErrorCode::kFormatError, "tokenizer.json: " + std::string(where) + " needs one character");
  uint32_t cp = next_code_point(s, i);
  if (i != s.size()) throw Error(ErrorCode::kFormatError, "tokenizer.json: " + std::string(where) + " needs one character");
  return cp;
}

bool metaspace_strips_first(const nlohmann::json& config) {
  if (config.contains("prepend_scheme") && config["prepend_scheme"].is_string())
    return config["prepend_scheme"].get<std::string>() != "never";
  return json_value<bool>(config, "add_prefix_space", true);
}

void flatten(const nlohmann::json& config, std::vector<const nlohmann::json*>& out) {
  if (config.is_null()) return;
  if (config.value("type", "") == "Sequence") {
    for (const auto& c : json_array(config, "decoders", "decoder Sequence")) flatten(c, out);
    return;
  }
  out.push_back(&config);
}

}  // namespace

std::unique_ptr<Decoder> make_decoder(const nlohmann::json& config) {
  if (config.is_null()) return nullptr;
  std::string type = json_string(config, "type", "decoder");
  if (type == "ByteLevel") return std::make_unique<ByteLevelDecoder>();
  if (type == "Metaspace")
    return std::make_unique<MetaspaceDecoder>(json_value<std::string>(config, "replacement", kMetaspaceUtf8),
                                              metaspace_strips_first(config));
  if (type == "ByteFallback") return std::make_unique<ByteFallbackDecoder>();
  if (type == "Fuse") return std::make_unique<FuseDecoder>();
  if (type == "Strip")
    return std::make_unique<StripDecoder>(single_code_point(json_string(config, "content", "Strip decoder"), "Strip decoder"),
                                          json_value<int>(config, "start", 0), json_value<int>(config, "stop", 0));
  if (type == "Replace")
    return std::make_unique<ReplaceDecoder>(make_pattern(config, "Replace decoder"), json_string(config, "content", "Replace decoder"));
  if (type == "BPEDecoder") return std::make_unique<BpeSuffixDecoder>(json_value<std::string>(config, "suffix", "</w>"));
  if (type == "Sequence") {
    std::vector<std::unique_ptr<Decoder>> steps;
    for (const auto& c : json_array(config, "decoders", "decoder Sequence")) steps.push_back(make_decoder(c));
    return std::make_unique<SequenceDecoder>(std::move(steps));
  }
  throw Error(ErrorCode::kUnsupported, "tokenizer.json: unsupported decoder type '" + type + "'");
}

std::string run_decoder(const Decoder* decoder, std::vector<DecodeToken> tokens) {
  std::string out;
  if (decoder == nullptr) {
    for (size_t i = 0; i < tokens.size(); ++i) {
      if (i) out.push_back(' ');
      out.append(tokens[i].text);
    }
    return out;
  }
  decoder->decode_chain(tokens);
  for (auto& t : tokens) out.append(t.text);
  return out;
}

std::string PiecewiseDecoder::piece(std::string_view text, bool added, bool first_token) const {
  std::string s(text);
  for (const Op& op : ops) {
    switch (op.kind) {
      case OpKind::kByteLevel:
        if (!added) {
          std::string bytes;
          append_byte_level(s, bytes);
          s.swap(bytes);
        }
        break;
      case OpKind::kByteFallback: {
        int v = byte_fallback_value(s);
        if (v >= 0) s.assign(1, static_cast<char>(v));
        break;
      }
      case OpKind::kReplace:
        s = replace_literal(s, op.from, op.to);
        break;
      case OpKind::kMetaspace:
        s = replace_literal(s, op.from, " ");
        if (first_token && first_token_strip_space && !s.empty() && s[0] == ' ') s.erase(0, 1);
        break;
    }
  }
  return s;
}

std::optional<PiecewiseDecoder> compile_piecewise_decoder(const nlohmann::json& config) {
  std::vector<const nlohmann::json*> chain;
  flatten(config, chain);
  PiecewiseDecoder pd;
  bool fused = false, after_byte_fallback = false, after_metaspace = false, has_byte_level = false;
  for (const nlohmann::json* c : chain) {
    std::string type = c->value("type", "");
    if (fused) {
      if (type != "Strip" || pd.strip_start || pd.strip_stop) return std::nullopt;
      pd.strip_char = single_code_point(json_string(*c, "content", "Strip decoder"), "Strip decoder");
      pd.strip_start = json_value<int>(*c, "start", 0);
      pd.strip_stop = json_value<int>(*c, "stop", 0);
      continue;
    }
    if (type == "Fuse") {
      fused = true;
    } else if (type == "ByteLevel") {
      if (!pd.ops.empty()) return std::nullopt;
      pd.ops.push_back({PiecewiseDecoder::OpKind::kByteLevel, "", ""});
      has_byte_level = true;
    } else if (type == "ByteFallback") {
      if (has_byte_level) return std::nullopt;
      pd.ops.push_back({PiecewiseDecoder::OpKind::kByteFallback, "", ""});
      after_byte_fallback = true;
    } else if (type == "Replace") {
      if (has_byte_level || after_byte_fallback || after_metaspace) return std::nullopt;
      const auto& pat = (*c)["pattern"];
      if (!pat.is_object() || !pat.contains("String")) return std::nullopt;
      pd.ops.push_back({PiecewiseDecoder::OpKind::kReplace, pat["String"].get<std::string>(),
                        json_string(*c, "content", "Replace decoder")});
    } else if (type == "Metaspace") {
      if (has_byte_level || after_byte_fallback || after_metaspace) return std::nullopt;
      pd.ops.push_back({PiecewiseDecoder::OpKind::kMetaspace, json_value<std::string>(*c, "replacement", kMetaspaceUtf8), ""});
      pd.first_token_strip_space = metaspace_strips_first(*c);
      after_metaspace = true;
    } else {
      return std::nullopt;
    }
    if (has_byte_level && pd.ops.size() > 1) return std::nullopt;
  }
  return pd;
}

}  // namespace peregrine::tokenizer
