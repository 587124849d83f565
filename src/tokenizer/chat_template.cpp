// Chat templates of model folders (see chat_template.h): locating and parsing them, choosing among named
// templates, and building the render context transformers would build.
#include "tokenizer/chat_template.h"

#include <algorithm>
#include <fstream>
#include <sstream>

#include "core/status.h"
#include "io/gguf.h"

namespace peregrine {
namespace fs = std::filesystem;

namespace {

std::string read_text_file(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(ErrorCode::kIoError, "cannot read " + path.string());
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

nlohmann::ordered_json read_json_file(const fs::path& path) {
  const std::string text = read_text_file(path);
  try {
    return nlohmann::ordered_json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    throw Error(ErrorCode::kFormatError, path.string() + ": malformed JSON: " + e.what());
  }
}

// A special token in tokenizer_config.json: a string, an AddedToken object ({"content": ...}) or null.
std::optional<std::string> special_token(const nlohmann::ordered_json& config, const char* key) {
  const auto it = config.find(key);
  if (it == config.end() || it->is_null()) return std::nullopt;
  if (it->is_string()) return it->get<std::string>();
  if (it->is_object()) {
    const auto content = it->find("content");
    if (content != it->end() && content->is_string()) return content->get<std::string>();
  }
  throw Error(ErrorCode::kFormatError,
              std::string("tokenizer_config.json: '") + key + "' must be a string or an object with 'content'");
}

ChatTemplate::Named compile(const std::string& name, std::string source, const std::string& origin) {
  try {
    return ChatTemplate::Named{name, jinja::Template(std::move(source))};
  } catch (const Error& e) {
    throw Error(e.code(), origin + (name == "default" ? "" : " ('" + name + "')") + ": " + e.message());
  }
}

bool looks_like_template(std::string_view text) {
  return text.find("{{") != std::string_view::npos || text.find("{%") != std::string_view::npos ||
         text.find("{#") != std::string_view::npos;
}

}  // namespace

const jinja::Template& ChatTemplate::select(std::string_view name, bool has_tools) const {
  const auto find = [&](std::string_view wanted) -> const jinja::Template* {
    for (const Named& t : templates) {
      if (t.name == wanted) return &t.source;
    }
    return nullptr;
  };
  std::string available;
  for (const Named& t : templates) available += (available.empty() ? "" : ", ") + t.name;
  if (!name.empty()) {
    if (const jinja::Template* t = find(name)) return *t;
    throw Error(ErrorCode::kInvalidArgument,
                "no chat template named '" + std::string(name) + "' in " + origin + " (available: " + available + ")");
  }
  if (has_tools) {
    if (const jinja::Template* t = find("tool_use")) return *t;
  }
  if (const jinja::Template* t = find("default")) return *t;
  if (templates.size() == 1) return templates[0].source;
  throw Error(ErrorCode::kInvalidArgument,
              origin + " has several chat templates and none named 'default' (available: " + available + ")");
}

ChatTemplate make_chat_template(std::string source, std::optional<std::string> bos_token,
                                std::optional<std::string> eos_token) {
  ChatTemplate result;
  result.origin = "chat template";
  result.templates.push_back(compile("default", std::move(source), result.origin));
  result.bos_token = std::move(bos_token);
  result.eos_token = std::move(eos_token);
  return result;
}

namespace {

// A GGUF file's template: tokenizer.chat_template (+ tokenizer.chat_template.<name> for named ones); bos/eos
// tokens from the special ids.
ChatTemplate load_gguf_chat_template(const fs::path& path, std::string_view override_template) {
  const io::GgufFile f(path);
  ChatTemplate result;
  const io::GgufValue* tokens = f.array("tokenizer.ggml.tokens", io::GgufType::kString);
  auto token = [&](const char* key) -> std::optional<std::string> {
    auto id = f.int_opt(key);
    if (!tokens || !id || *id < 0 || static_cast<size_t>(*id) >= tokens->strings.size()) return std::nullopt;
    return std::string(tokens->strings[static_cast<size_t>(*id)]);
  };
  result.bos_token = token("tokenizer.ggml.bos_token_id");
  result.eos_token = token("tokenizer.ggml.eos_token_id");
  if (!override_template.empty()) {
    ChatTemplate o = load_chat_template(fs::path(), override_template);
    o.bos_token = result.bos_token;
    o.eos_token = result.eos_token;
    return o;
  }
  const auto main = f.string_opt("tokenizer.chat_template");
  if (!main) f.fail(ErrorCode::kNotFound, "no chat template (key 'tokenizer.chat_template' is absent)");
  result.origin = path.string() + ": tokenizer.chat_template";
  result.templates.push_back(compile("default", *main, result.origin));
  static const std::string kNamed = "tokenizer.chat_template.";
  for (const auto& [key, value] : f.metadata()) {
    if (key.rfind(kNamed, 0) != 0 || value.type != io::GgufType::kString) continue;
    result.templates.push_back(compile(key.substr(kNamed.size()), std::string(value.str), path.string() + ": " + key));
  }
  return result;
}

}  // namespace

ChatTemplate load_chat_template(const fs::path& model_dir, std::string_view override_template) {
  if (!model_dir.empty() && io::is_gguf_path(model_dir)) return load_gguf_chat_template(model_dir, override_template);
  ChatTemplate result;
  const fs::path config_path = model_dir / "tokenizer_config.json";
  nlohmann::ordered_json config = nlohmann::ordered_json::object();
  if (!model_dir.empty() && fs::exists(config_path)) {
    config = read_json_file(config_path);
    if (!config.is_object()) throw Error(ErrorCode::kFormatError, config_path.string() + ": expected a JSON object");
    result.bos_token = special_token(config, "bos_token");
    result.eos_token = special_token(config, "eos_token");
  }

  if (!override_template.empty()) {
    const fs::path path(override_template);
    std::error_code ec;
    if (fs::is_regular_file(path, ec)) {
      result.origin = path.string();
      result.templates.push_back(compile("default", read_text_file(path), result.origin));
    } else if (looks_like_template(override_template)) {
      result.origin = "--chat-template";
      result.templates.push_back(compile("default", std::string(override_template), result.origin));
    } else {
      throw Error(ErrorCode::kNotFound, "--chat-template: no such file: " + std::string(override_template));
    }
    return result;
  }

  const fs::path jinja_path = model_dir / "chat_template.jinja";
  if (fs::exists(jinja_path)) {
    result.origin = jinja_path.string();
    result.templates.push_back(compile("default", read_text_file(jinja_path), result.origin));
    const fs::path extra_dir = model_dir / "additional_chat_templates";
    if (fs::is_directory(extra_dir)) {
      std::vector<fs::path> files;
      for (const auto& entry : fs::directory_iterator(extra_dir)) {
        if (entry.path().extension() == ".jinja") files.push_back(entry.path());
      }
      std::sort(files.begin(), files.end());
      for (const fs::path& file : files) {
        result.templates.push_back(compile(file.stem().string(), read_text_file(file), file.string()));
      }
    }
    return result;
  }

  const auto field = config.find("chat_template");
  if (field != config.end() && !field->is_null()) {
    result.origin = config_path.string();
    if (field->is_string()) {
      result.templates.push_back(compile("default", field->get<std::string>(), result.origin));
      return result;
    }
    if (field->is_array()) {
      for (const auto& item : *field) {
        const auto name = item.find("name");
        const auto text = item.find("template");
        if (!item.is_object() || name == item.end() || text == item.end() || !name->is_string() ||
            !text->is_string()) {
          throw Error(ErrorCode::kFormatError,
                      result.origin + ": chat_template list entries must be {\"name\": ..., \"template\": ...}");
        }
        result.templates.push_back(compile(name->get<std::string>(), text->get<std::string>(), result.origin));
      }
      if (!result.templates.empty()) return result;
    }
    throw Error(ErrorCode::kFormatError, result.origin + ": chat_template must be a string or a list of templates");
  }

  const fs::path processor_path = model_dir / "chat_template.json";
  if (fs::exists(processor_path)) {
    const nlohmann::ordered_json processor = read_json_file(processor_path);
    const auto text = processor.is_object() ? processor.find("chat_template") : processor.end();
    if (text != processor.end() && text->is_string()) {
      result.origin = processor_path.string();
      result.templates.push_back(compile("default", text->get<std::string>(), result.origin));
      return result;
    }
  }
  throw Error(ErrorCode::kNotFound, "model folder " + model_dir.string() +
                                        " has no chat template (looked for chat_template.jinja, the chat_template of "
                                        "tokenizer_config.json and chat_template.json); pass --chat-template");
}

std::string render_chat(const ChatTemplate& chat_template, const nlohmann::ordered_json& messages,
                        const ChatRenderOptions& options) {
  if (!messages.is_array()) throw Error(ErrorCode::kInvalidArgument, "messages must be a JSON array");
  if (!options.tools.is_null() && !options.tools.is_array()) {
    throw Error(ErrorCode::kInvalidArgument, "tools must be a JSON array or null");
  }
  if (!options.extra_kwargs.is_object()) {
    throw Error(ErrorCode::kInvalidArgument, "chat template kwargs must be a JSON object");
  }
  nlohmann::ordered_json context = nlohmann::ordered_json::object();
  if (chat_template.bos_token) context["bos_token"] = *chat_template.bos_token;
  if (chat_template.eos_token) context["eos_token"] = *chat_template.eos_token;
  for (auto it = options.extra_kwargs.begin(); it != options.extra_kwargs.end(); ++it) {
    if (it.key() == "messages" || it.key() == "tools" || it.key() == "add_generation_prompt") {
      throw Error(ErrorCode::kInvalidArgument, "chat template kwarg '" + it.key() + "' is reserved");
    }
    context[it.key()] = it.value();
  }
  context["messages"] = messages;
  context["tools"] = options.tools;
  context["add_generation_prompt"] = options.add_generation_prompt;
  const bool has_tools = options.tools.is_array() && !options.tools.empty();
  return chat_template.select(options.template_name, has_tools).render(context, options.limits);
}

}  // namespace peregrine
