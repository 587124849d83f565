// The generation endpoints: /v1/completions (prompt as string, list of strings, token ids or lists of them)
// and /v1/chat/completions (messages with string or text-part content, the chat template, tools). Both parse
// and validate on the I/O thread, then hand a GenerationJob to the engine.
#include <chrono>

#include "server/errors.h"
#include "server/generation_job.h"
#include "server/openai_server.h"

namespace peregrine::server {
namespace {

int64_t unix_now() {
  return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
}

std::string at(const std::string& field, size_t i) { return field + "[" + std::to_string(i) + "]"; }

bool is_token_list(const Json& v) {
  if (!v.is_array() || v.empty()) return false;
  for (const Json& e : v) {
    if (!e.is_number_integer() && !e.is_number_unsigned()) return false;
  }
  return true;
}

std::vector<int32_t> to_ids(const Json& v, const std::string& field, int vocab) {
  std::vector<int32_t> ids;
  ids.reserve(v.size());
  for (const Json& e : v) {
    const int64_t id = e.get<int64_t>();
    if (id < 0 || id >= vocab) {
      throw_bad_field(field, "token id " + std::to_string(id) + " is out of the vocabulary [0, " + std::to_string(vocab) + ")");
    }
    ids.push_back(static_cast<int32_t>(id));
  }
  return ids;
}

}  // namespace

std::string OpenAiServer::render_messages(const Fields& f, bool default_add_generation_prompt) const {
  const Json* messages = f.get("messages");
  if (!messages) throw_bad_field("messages", "a list of messages is required");
  const Json normalized = normalize_messages(*messages);
  ChatTemplateOptions options;
  options.continue_final_message = f.boolean("continue_final_message").value_or(false);
  // Continuing the final message implies no generation prompt unless the client asks for both (an error).
  options.add_generation_prompt =
      f.boolean("add_generation_prompt").value_or(options.continue_final_message ? false : default_add_generation_prompt);
  if (options.continue_final_message && options.add_generation_prompt) {
    throw_bad_field("continue_final_message", "cannot be true together with add_generation_prompt");
  }
  const Json* tools = f.get("tools");
  validate_tools(tools);
  options.tools = tools;
  const Json* kwargs = f.get("chat_template_kwargs");
  if (kwargs && !kwargs->is_object()) throw_bad_field("chat_template_kwargs", "expected an object");
  options.chat_template_kwargs = kwargs;
  if (f.get("chat_template")) throw_bad_field("chat_template", "per-request templates are not supported; use --chat-template");
  return engine_.apply_chat_template(normalized, options);
}

void OpenAiServer::handle_completions(const HttpRequest& request, const std::shared_ptr<ResponseChannel>& channel) {
  const Json body = parse_json_body(request);
  Fields f(body);
  check_model(f, options_.served_model_names);
  if (f.get("suffix")) throw_bad_field("suffix", "is not supported");
  ParsedSampling sampling = parse_sampling(f, engine_.default_sampling_params(), Endpoint::kCompletions);
  const bool add_special = f.boolean("add_special_tokens").value_or(true);
  const int vocab = engine_.info().vocab_size;

  const Json* prompt = f.get("prompt");
  if (!prompt) throw_bad_field("prompt", "a prompt is required");
  std::vector<JobPrompt> prompts;
  auto add_text = [&](const std::string& text) {
    JobPrompt p;
    p.token_ids = engine_.tokenize(text, add_special);
    p.echo_text = text;
    prompts.push_back(std::move(p));
  };
  auto add_ids = [&](const Json& v, const std::string& field) {
    JobPrompt p;
    p.token_ids = to_ids(v, field, vocab);
    if (sampling.echo) p.echo_text = engine_.detokenize(p.token_ids, true);
    prompts.push_back(std::move(p));
  };
  if (prompt->is_string()) {
    add_text(prompt->get<std::string>());
  } else if (is_token_list(*prompt)) {
    add_ids(*prompt, "prompt");
  } else if (prompt->is_array() && !prompt->empty()) {
    if (prompt->size() > static_cast<size_t>(options_.max_prompts_per_request)) {
      throw_bad_field("prompt", "at most " + std::to_string(options_.max_prompts_per_request) + " prompts per request");
    }
    for (size_t i = 0; i < prompt->size(); ++i) {
      const Json& e = (*prompt)[i];
      if (e.is_string()) add_text(e.get<std::string>());
      else if (is_token_list(e)) add_ids(e, at("prompt", i));
      else throw_bad_field(at("prompt", i), "expected a string or a non-empty list of token ids");
    }
  } else {
    throw_bad_field("prompt", "expected a string, a list of strings, or (lists of) token ids");
  }
  if (prompts.size() * static_cast<size_t>(sampling.params.n) > 4096) {
    throw_bad_field("n", "prompts times n must not exceed 4096");
  }
  JobOptions options;
  options.endpoint = Endpoint::kCompletions;
  options.id = new_id("cmpl-");
  options.model = f.string("model").value_or(options_.served_model_names.front());
  options.created = unix_now();
  options.sampling = std::move(sampling);
  auto job = std::make_shared<GenerationJob>(engine_, channel, std::move(options), std::move(prompts));
  job->start();
}

void OpenAiServer::handle_chat(const HttpRequest& request, const std::shared_ptr<ResponseChannel>& channel) {
  const Json body = parse_json_body(request);
  Fields f(body);
  check_model(f, options_.served_model_names);
  ParsedSampling sampling = parse_sampling(f, engine_.default_sampling_params(), Endpoint::kChat);
  const Json* tools = f.get("tools");
  validate_tools(tools);
  const bool have_tools = tools && tools->is_array() && !tools->empty();
  // tool_choice: "none", "auto" (the default with tools), "required", or {"type": "function", "function": {"name"}}.
  std::string tool_choice = have_tools ? "auto" : "none";
  std::string named;
  if (const Json* tc = f.get("tool_choice")) {
    if (tc->is_string()) {
      tool_choice = tc->get<std::string>();
      if (tool_choice != "none" && tool_choice != "auto" && tool_choice != "required") {
        throw_bad_field("tool_choice", "expected \"none\", \"auto\", \"required\" or a named function, got '" +
                                           quote_input(tool_choice) + "'");
      }
    } else if (tc->is_object()) {
      if (tc->value("type", std::string()) != "function") throw_bad_field("tool_choice.type", "expected \"function\"");
      auto fn = tc->find("function");
      if (fn == tc->end() || !fn->is_object() || !fn->contains("name") || !(*fn)["name"].is_string()) {
        throw_bad_field("tool_choice.function.name", "a function name is required");
      }
      named = (*fn)["name"].get<std::string>();
      tool_choice = "named";
    } else {
      throw_bad_field("tool_choice", "expected a string or an object");
    }
  }
  JobOptions::ForcedTools forced = JobOptions::ForcedTools::kNone;
  const std::string conflicting = sampling.params.structured_outputs ? sampling.params.structured_outputs->field : "";
  static const Json kNoTools = Json::array();
  if (apply_tool_choice(tool_choice, named, have_tools ? *tools : kNoTools, f.boolean("parallel_tool_calls").value_or(true),
                        options_.tool_parser.has_value(), conflicting, sampling.params)) {
    forced = tool_choice == "named" ? JobOptions::ForcedTools::kNamed : JobOptions::ForcedTools::kRequired;
  }
  const bool parse_tools = options_.tool_parser && have_tools && tool_choice == "auto";
  if (parse_tools && *options_.tool_parser == ToolParserKind::kMistral) {
    sampling.params.skip_special_tokens = false;  // [TOOL_CALLS] is a special token
  }
  const std::string text = render_messages(f, true);
  JobPrompt prompt;
  prompt.token_ids = engine_.tokenize(text, f.boolean("add_special_tokens").value_or(false));
  JobOptions options;
  options.endpoint = Endpoint::kChat;
  options.id = new_id("chatcmpl-");
  options.model = f.string("model").value_or(options_.served_model_names.front());
  options.created = unix_now();
  sampling.echo = false;
  options.sampling = std::move(sampling);
  if (parse_tools) options.tool_parser = options_.tool_parser;
  options.forced_tools = forced;
  options.named_tool = named;
  std::vector<JobPrompt> prompts;
  prompts.push_back(std::move(prompt));
  auto job = std::make_shared<GenerationJob>(engine_, channel, std::move(options), std::move(prompts));
  job->start();
}

}  // namespace peregrine::server
