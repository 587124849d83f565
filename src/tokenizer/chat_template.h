// Chat templates of Hugging Face model folders: finding them (tokenizer_config.json `chat_template` as a string
// or a list of named templates, chat_template.jinja, or an override), and rendering a conversation the way
// transformers' apply_chat_template does, with the in-house Jinja subset (src/tokenizer/jinja/).
#pragma once

#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/jinja/template.h"

namespace peregrine {

struct ChatTemplate {
  struct Named {
    std::string name;  // "default", "tool_use", ... ("default" for a single template)
    jinja::Template source;
  };
  std::vector<Named> templates;
  std::optional<std::string> bos_token;  // tokenizer_config.json bos_token (a string or an AddedToken's content)
  std::optional<std::string> eos_token;
  std::string origin;  // where the templates came from, for messages ("…/tokenizer_config.json")

  // Picks the template to render: `name` when given; otherwise "tool_use" when tools are passed and the model
  // has one, then "default", then the only template. Throws Error(kInvalidArgument) when none fits.
  const jinja::Template& select(std::string_view name, bool has_tools) const;
};

// Loads the chat template of a model folder. `override_template` (the server's --chat-template) is a file path
// or, when no such file exists and it contains "{{" or "{%", the template text itself; it replaces the
// folder's templates but keeps its bos/eos tokens. Without an override: chat_template.jinja (plus named ones
// in additional_chat_templates/*.jinja), else tokenizer_config.json's chat_template, else chat_template.json.
// Throws Error: kNotFound (no template anywhere, missing override file), kFormatError (malformed JSON),
// kInvalidArgument/kUnsupported (template syntax, with line and column).
ChatTemplate load_chat_template(const std::filesystem::path& model_dir, std::string_view override_template = {});

// A chat template from text, for tests and for templates given without a model folder.
ChatTemplate make_chat_template(std::string source, std::optional<std::string> bos_token = std::nullopt,
                                std::optional<std::string> eos_token = std::nullopt);

struct ChatRenderOptions {
  nlohmann::ordered_json tools = nullptr;  // a list of tool schemas, or null
  bool add_generation_prompt = false;
  // Extra template variables, e.g. {"enable_thinking": false}; may override bos_token/eos_token but not
  // messages, tools or add_generation_prompt.
  nlohmann::ordered_json extra_kwargs = nlohmann::ordered_json::object();
  std::string template_name;  // force a named template
  jinja::RenderOptions limits;
};

// Renders messages (a JSON array of {role, content, ...}) with the variables transformers passes: messages,
// tools (null when absent), add_generation_prompt, bos_token/eos_token (when the model has them) and
// extra_kwargs. Throws Error(kInvalidArgument) for bad input and template errors (raise_exception included).
std::string render_chat(const ChatTemplate& chat_template, const nlohmann::ordered_json& messages,
                        const ChatRenderOptions& options = {});

}  // namespace peregrine
