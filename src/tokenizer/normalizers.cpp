// Normalizer implementations.
#include "tokenizer/normalizers.h"

#include <vector>

#include "core/status.h"
#include "tokenizer/json_util.h"
#include "tokenizer/regex.h"
#include "tokenizer/unicode.h"

namespace peregrine::tokenizer {

std::string replace_all(const Pattern& pattern, std::string_view text, std::string_view content) {
  std::string out;
  out.reserve(text.size());
  size_t last = 0;
  pattern.for_each_match(text, [&](size_t b, size_t e) {
    out.append(text.substr(last, b - last));
    out.append(content);
    last = e;
  });
  out.append(text.substr(last));
  return out;
}

namespace {

class SequenceNormalizer final : public Normalizer {
 public:
  explicit SequenceNormalizer(std::vector<std::unique_ptr<Normalizer>> steps) : steps_(std::move(steps)) {}
  void normalize(std::string& text) const override {
    for (const auto& s : steps_)
      if (s) s->normalize(text);
  }

 private:
  std::vector<std::unique_ptr<Normalizer>> steps_;
};

class UnicodeNormalizer final : public Normalizer {
 public:
  explicit UnicodeNormalizer(NormalForm form) : form_(form) {}
  void normalize(std::string& text) const override {
    if (!is_unicode_normalized(text, form_)) text = unicode_normalize(text, form_);
  }

 private:
  NormalForm form_;
};

class PrependNormalizer final : public Normalizer {
 public:
  explicit PrependNormalizer(std::string prepend) : prepend_(std::move(prepend)) {}
  void normalize(std::string& text) const override {
    if (!text.empty()) text.insert(0, prepend_);
  }

 private:
  std::string prepend_;
};

class ReplaceNormalizer final : public Normalizer {
 public:
  ReplaceNormalizer(Pattern pattern, std::string content) : pattern_(std::move(pattern)), content_(std::move(content)) {}
  void normalize(std::string& text) const override {
    if (pattern_.is_literal() && text.find(pattern_.literal_text()) == std::string::npos) return;
    text = replace_all(pattern_, text, content_);
  }

 private:
  Pattern pattern_;
  std::string content_;
};

class StripNormalizer final : public Normalizer {
 public:
  StripNormalizer(bool left, bool right) : left_(left), right_(right) {}
  void normalize(std::string& text) const override {
    size_t begin = 0, end = text.size();
    if (left_) {
      while (begin < end) {
        size_t i = begin;
        if (!is_white_space(next_code_point(text, i))) break;
        begin = i;
      }
    }
    if (right_) {
      while (end > begin) {
        size_t start = end - 1;
        while (start > begin && (static_cast<unsigned char>(text[start]) & 0xC0) == 0x80) --start;
        size_t i = start;
        if (!is_white_space(next_code_point(text, i))) break;
        end = start;
      }
    }
    if (begin != 0 || end != text.size()) text = text.substr(begin, end - begin);
  }

 private:
  bool left_, right_;
};

class LowercaseNormalizer final : public Normalizer {
 public:
  void normalize(std::string& text) const override { text = unicode_lowercase(text); }
};

class StripAccentsNormalizer final : public Normalizer {
 public:
  void normalize(std::string& text) const override { text = remove_nonspacing_marks(text); }
};

}  // namespace

std::unique_ptr<Normalizer> make_normalizer(const nlohmann::json& config) {
  if (config.is_null()) return nullptr;
  std::string type = json_string(config, "type", "normalizer");
  if (type == "Sequence") {
    std::vector<std::unique_ptr<Normalizer>> steps;
    for (const auto& c : json_array(config, "normalizers", "normalizer Sequence")) steps.push_back(make_normalizer(c));
    return std::make_unique<SequenceNormalizer>(std::move(steps));
  }
  if (type == "NFC") return std::make_unique<UnicodeNormalizer>(NormalForm::kNFC);
  if (type == "NFKC") return std::make_unique<UnicodeNormalizer>(NormalForm::kNFKC);
  if (type == "NFD") return std::make_unique<UnicodeNormalizer>(NormalForm::kNFD);
  if (type == "NFKD") return std::make_unique<UnicodeNormalizer>(NormalForm::kNFKD);
  if (type == "Prepend") return std::make_unique<PrependNormalizer>(json_string(config, "prepend", "Prepend normalizer"));
  if (type == "Replace")
    return std::make_unique<ReplaceNormalizer>(make_pattern(config, "Replace normalizer"),
                                               json_string(config, "content", "Replace normalizer"));
  if (type == "Strip")
    return std::make_unique<StripNormalizer>(config.value("strip_left", true), config.value("strip_right", true));
  if (type == "Lowercase") return std::make_unique<LowercaseNormalizer>();
  if (type == "StripAccents") return std::make_unique<StripAccentsNormalizer>();
  throw Error(ErrorCode::kUnsupported, "tokenizer.json: unsupported normalizer type '" + type + "'");
}

}  // namespace peregrine::tokenizer
