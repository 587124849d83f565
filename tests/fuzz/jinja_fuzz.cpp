// libFuzzer target for chat template parsing and rendering (clang only, not part of CI; see jinja_fuzz.sh).
// The input is a template; bytes after a NUL, when they are a JSON object, replace the default variables.
// Any peregrine::Error is an accepted outcome; crashes, hangs, sanitizer reports and other exceptions are bugs.
#include <cstddef>
#include <cstdint>
#include <string>

#include "core/status.h"
#include "tokenizer/jinja/template.h"

namespace {

const nlohmann::ordered_json& default_context() {
  static const nlohmann::ordered_json context = nlohmann::ordered_json::parse(R"({
    "bos_token": "<s>", "eos_token": "</s>", "add_generation_prompt": true, "enable_thinking": false,
    "messages": [
      {"role": "system", "content": "You are helpful."},
      {"role": "user", "content": "Hi \u00e9\ud83d\ude00 {{ x }}"},
      {"role": "assistant", "content": "<think>\nhm\n</think>\n\nHello", "reasoning_content": "r",
       "tool_calls": [{"id": "abc123def", "type": "function",
                       "function": {"name": "f", "arguments": {"a": [1, 2.5, null, true], "b": "s"}}}]},
      {"role": "tool", "tool_call_id": "abc123def", "content": {"ok": 1}},
      {"role": "user", "content": ["part", {"type": "text", "text": "t"}]}],
    "tools": [{"type": "function", "function": {"name": "f", "description": "d",
               "parameters": {"type": "object", "properties": {"a": {"type": "array"}}, "required": ["a"]}}}]
  })");
  return context;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string input(reinterpret_cast<const char*>(data), size);
  const size_t nul = input.find('\0');
  const std::string source = input.substr(0, nul);
  nlohmann::ordered_json context = default_context();
  if (nul != std::string::npos) {
    const nlohmann::ordered_json parsed = nlohmann::ordered_json::parse(input.substr(nul + 1), nullptr, false);
    if (parsed.is_object()) context = parsed;
  }
  peregrine::jinja::RenderOptions options;
  options.max_steps = 200000;
  options.max_output_bytes = 1 << 20;
  try {
    const peregrine::jinja::Template tmpl(source);
    tmpl.render(context, options);
  } catch (const peregrine::Error&) {
    // Malformed or failing templates are expected to be rejected with an error.
  }
  return 0;
}
