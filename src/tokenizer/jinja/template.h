// The public face of the Jinja subset: parse a template once, render it many times with a JSON context.
// Rendering matches @huggingface/jinja (with transformers' trim_blocks and lstrip_blocks) for the chat templates
// we support; see docs/architecture/jinja.md for the supported language and the known differences.
#pragma once

#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "tokenizer/jinja/interpreter.h"

namespace peregrine::jinja {

class Template {
 public:
  // Parses source. Throws peregrine::Error (kInvalidArgument: syntax; kUnsupported: a feature we lack), with the
  // line and column of the problem. Templates larger than kMaxTemplateBytes are rejected.
  explicit Template(std::string source);

  // Renders with the variables of `context` (a JSON object, or null for none) plus the globals range, namespace,
  // raise_exception and strftime_now. Thread-safe: a Template may be rendered concurrently.
  // Throws peregrine::Error naming the line and column of the failing expression.
  std::string render(const nlohmann::ordered_json& context, const RenderOptions& options = {}) const;

  const std::string& source() const;

  static constexpr size_t kMaxTemplateBytes = 4u << 20;

 private:
  struct Compiled;
  std::shared_ptr<const Compiled> compiled_;
};

}  // namespace peregrine::jinja
