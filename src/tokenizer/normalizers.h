// Normalizers of tokenizer.json: NFC, NFKC, NFD, NFKD, Prepend, Replace, Strip, StripAccents, Lowercase and
// Sequence. A normalizer rewrites one section of input text (the text between added tokens) in place.
#pragma once

#include <memory>
#include <string>

#include <nlohmann/json.hpp>

namespace peregrine::tokenizer {

class Normalizer {
 public:
  virtual ~Normalizer() = default;
  virtual void normalize(std::string& text) const = 0;
};

// Builds the normalizer described by `config`; nullptr for JSON null. Throws Error(kUnsupported) for an unknown
// type and Error(kFormatError) for a malformed one.
std::unique_ptr<Normalizer> make_normalizer(const nlohmann::json& config);

// Replaces every match of `pattern` in `text` by `content`.
class Pattern;
std::string replace_all(const Pattern& pattern, std::string_view text, std::string_view content);

}  // namespace peregrine::tokenizer
