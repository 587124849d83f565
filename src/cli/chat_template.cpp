// `peregrine chat-template`: renders a conversation with a model's chat template and prints the prompt exactly
// (no trailing newline added), for checking templates against transformers / @huggingface/jinja.
#include <iostream>

#include "cli/commands.h"
#include "cli/files.h"
#include "peregrine/error.h"
#include "peregrine/tokenizer.h"

namespace peregrine::cli {
namespace {

struct ChatTemplateArgs {
  std::string model_dir;
  std::string messages_file;
  std::string tools_file;
  std::string chat_template;
  std::string kwargs;
  std::string template_name;
  bool add_generation_prompt = false;
};

nlohmann::ordered_json read_json(const std::string& path, const char* flag) {
  const std::string text = read_file(path, flag);
  try {
    return nlohmann::ordered_json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    throw Error(ErrorCode::kFormatError, std::string(flag) + ": " + path + ": malformed JSON: " + e.what());
  }
}

void run_chat_template(const ChatTemplateArgs& args) {
  if (args.model_dir.empty() && args.chat_template.empty()) {
    throw Error(ErrorCode::kInvalidArgument, "chat-template: give --model DIR or --chat-template FILE");
  }
  nlohmann::ordered_json messages = read_json(args.messages_file, "--messages");
  ChatRenderParams params;
  // A messages file may be a list of messages or an object {"messages": [...], "tools": [...]}.
  if (messages.is_object()) {
    if (messages.contains("tools")) params.tools = messages["tools"];
    nlohmann::ordered_json inner = messages.value("messages", nlohmann::ordered_json());
    messages = std::move(inner);
  }
  if (!args.tools_file.empty()) params.tools = read_json(args.tools_file, "--tools");
  if (!args.kwargs.empty()) {
    try {
      params.kwargs = nlohmann::ordered_json::parse(args.kwargs);
    } catch (const nlohmann::json::exception& e) {
      throw Error(ErrorCode::kInvalidArgument, std::string("--kwargs: malformed JSON: ") + e.what());
    }
  }
  params.add_generation_prompt = args.add_generation_prompt;
  params.template_name = args.template_name;
  const std::string prompt = render_chat_template(args.model_dir, args.chat_template, messages, params);
  std::cout.write(prompt.data(), static_cast<std::streamsize>(prompt.size()));
  std::cout.flush();
}

}  // namespace

void register_chat_template(CLI::App& app) {
  auto args = std::make_shared<ChatTemplateArgs>();
  CLI::App* cmd = app.add_subcommand("chat-template", "Render a conversation with a model's chat template");
  cmd->add_option("--model", args->model_dir, "Model folder (tokenizer_config.json, chat_template.jinja)");
  cmd->add_option("--messages", args->messages_file, "JSON file: a list of messages, or {messages, tools}")
      ->required();
  cmd->add_flag("--add-generation-prompt", args->add_generation_prompt, "Append the assistant turn's header");
  cmd->add_option("--tools", args->tools_file, "JSON file with a list of tool schemas");
  cmd->add_option("--chat-template", args->chat_template, "Template file (or inline template) replacing the model's");
  cmd->add_option("--kwargs", args->kwargs, "Extra template variables as a JSON object, e.g. '{\"enable_thinking\": false}'");
  cmd->add_option("--template-name", args->template_name, "Use this named template (e.g. tool_use)");
  cmd->callback([args] { run_chat_template(*args); });
}

}  // namespace peregrine::cli
