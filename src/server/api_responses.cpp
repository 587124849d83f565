// /v1/responses (OpenAI's Responses API as vLLM serves it): `input` as text or a list of items (messages with
// text parts, function_call, function_call_output), `instructions`, `max_output_tokens`, function tools with
// tool_choice, `text.format` (json_schema, json_object), `previous_response_id` (responses kept in memory for the
// server's lifetime unless `store` is false), streaming with the Responses event types. GET /v1/responses/{id}
// returns a stored response.
#include <chrono>
#include <deque>
#include <mutex>
#include <unordered_map>

#include "server/errors.h"
#include "server/generation_job.h"
#include "server/openai_server.h"

namespace peregrine::server {
namespace {

int64_t unix_now() {
  return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
}

std::string dump(const Json& j) { return j.dump(-1, ' ', false, Json::error_handler_t::replace); }

std::string at(const std::string& field, size_t i) { return field + "[" + std::to_string(i) + "]"; }

// Text of a message's content: a string or a list of input_text / output_text / text parts.
std::string content_text(const Json& content, const std::string& field) {
  if (content.is_string()) return content.get<std::string>();
  if (content.is_null()) return {};
  if (!content.is_array()) throw_bad_field(field, "expected a string or a list of content parts");
  std::string text;
  for (size_t j = 0; j < content.size(); ++j) {
    const Json& part = content[j];
    const std::string pname = at(field, j);
    if (!part.is_object()) throw_bad_field(pname, "each content part must be an object");
    const std::string type = part.value("type", std::string());
    if (type != "input_text" && type != "output_text" && type != "text") {
      throw_bad_field(pname + ".type", "content type '" + quote_input(type) + "' is not supported (text only)");
    }
    auto t = part.find("text");
    if (t == part.end() || !t->is_string()) throw_bad_field(pname + ".text", "a string text is required");
    if (!text.empty()) text += "\n";
    text += t->get<std::string>();
  }
  return text;
}

}  // namespace

// The state of one /v1/responses request in flight (engine thread callbacks).
class ResponsesJob : public std::enable_shared_from_this<ResponsesJob> {
 public:
  struct Options {
    std::string id, model, engine_id;
    int64_t created = 0;
    bool stream = false;
    bool store = true;
    Json echo;  // request fields echoed in the response object
    std::optional<ToolParserKind> tool_parser;
    JobOptions::ForcedTools forced = JobOptions::ForcedTools::kNone;
    std::string named_tool;
    Json conversation;  // the messages so far (for previous_response_id)
    std::function<void(const std::string&, Json, Json)> store_fn;  // id, response, conversation
  };

  ResponsesJob(Engine& engine, std::shared_ptr<ResponseChannel> channel, Options o, std::vector<int32_t> prompt,
               SamplingParams params)
      : engine_(engine), channel_(std::move(channel)), o_(std::move(o)), prompt_(std::move(prompt)), params_(std::move(params)) {}

  void start() {
    std::weak_ptr<ResponsesJob> weak = weak_from_this();
    channel_->on_close([weak] {
      if (auto job = weak.lock()) job->engine_.abort_request(job->o_.engine_id);
    });
    engine_.add_request(o_.engine_id, prompt_, params_,
                        [self = shared_from_this()](RequestOutput&& out) { self->on_output(std::move(out)); });
  }

 private:
  Json response_object(const std::string& status, const Json& output) const {
    Json r = o_.echo;
    r["id"] = o_.id;
    r["object"] = "response";
    r["created_at"] = o_.created;
    r["status"] = status;
    r["model"] = o_.model;
    r["output"] = output;
    r["error"] = nullptr;
    r["incomplete_details"] = nullptr;
    if (status == "completed" || status == "incomplete") {
      r["usage"] = Json{{"input_tokens", prompt_.size()},
                        {"input_tokens_details", Json{{"cached_tokens", 0}}},
                        {"output_tokens", num_tokens_},
                        {"output_tokens_details", Json{{"reasoning_tokens", 0}}},
                        {"total_tokens", prompt_.size() + static_cast<size_t>(num_tokens_)}};
    } else {
      r["usage"] = nullptr;
    }
    if (status == "incomplete") r["incomplete_details"] = Json{{"reason", "max_output_tokens"}};
    return r;
  }

  void event(const char* type, Json data) {
    data["type"] = type;
    data["sequence_number"] = seq_++;
    // The type first, as OpenAI sends it.
    Json ordered{{"type", type}};
    for (auto it = data.begin(); it != data.end(); ++it) {
      if (it.key() != "type") ordered[it.key()] = it.value();
    }
    channel_->send_event(dump(ordered), type);
  }

  void begin_stream() {
    if (started_) return;
    started_ = true;
    channel_->start_stream();
    event("response.created", Json{{"response", response_object("in_progress", Json::array())}});
    event("response.in_progress", Json{{"response", response_object("in_progress", Json::array())}});
  }

  // Plain text streams as it comes; with tools the output is decided at the end (calls or text).
  bool streams_text() const { return o_.forced == JobOptions::ForcedTools::kNone && !o_.tool_parser; }

  void start_message() {
    if (message_started_) return;
    message_started_ = true;
    msg_id_ = "msg_" + o_.id.substr(5);
    event("response.output_item.added",
          Json{{"output_index", 0},
               {"item", Json{{"id", msg_id_}, {"type", "message"}, {"status", "in_progress"}, {"role", "assistant"},
                             {"content", Json::array()}}}});
    event("response.content_part.added",
          Json{{"item_id", msg_id_}, {"output_index", 0}, {"content_index", 0},
               {"part", Json{{"type", "output_text"}, {"text", ""}, {"annotations", Json::array()}}}});
  }

  void on_output(RequestOutput&& out) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (out.error && !error_) error_ = out.error;
    for (CompletionOutput& c : out.outputs) {
      text_ += c.text;
      num_tokens_ = c.num_output_tokens;
      finish_ = c.finish_reason;
      if (o_.stream) {
        begin_stream();
        if (o_.forced != JobOptions::ForcedTools::kNone) stream_calls(c.text);
        if (streams_text() && !c.text.empty()) {
          start_message();
          event("response.output_text.delta",
                Json{{"item_id", msg_id_}, {"output_index", 0}, {"content_index", 0}, {"delta", c.text}, {"logprobs", Json::array()}});
        }
      }
    }
    if (out.finished) finish();
  }

  // Forced tool calls (named, or required: constrained output) stream as they are written: each call's
  // output_item.added once its name is known, then its arguments as function_call_arguments.delta events, whose
  // concatenation is the call's arguments in the final response.
  struct StreamedCall {
    std::string call_id, item_id, name, arguments;
  };
  static StreamedCall new_call(const std::string& name) {
    StreamedCall c;
    c.call_id = "call_" + new_tool_call_id().substr(14);
    c.item_id = "fc_" + c.call_id.substr(5);
    c.name = name;
    return c;
  }
  static Json call_item(const StreamedCall& c, const char* status) {
    return Json{{"id", c.item_id}, {"type", "function_call"}, {"status", status}, {"call_id", c.call_id},
                {"name", c.name}, {"arguments", c.arguments}};
  }
  void stream_calls(const std::string& text) {
    std::vector<ToolCallDelta> deltas;
    if (o_.forced == JobOptions::ForcedTools::kNamed) {
      ToolCallDelta d;
      if (streamed_.empty()) d.name = o_.named_tool;
      d.arguments = text;
      deltas.push_back(std::move(d));
    } else {
      deltas = required_stream_.feed(text);
    }
    for (ToolCallDelta& d : deltas) {
      if (d.name) {
        streamed_.push_back(new_call(*d.name));
        event("response.output_item.added",
              Json{{"output_index", streamed_.size() - 1}, {"item", call_item(streamed_.back(), "in_progress")}});
      }
      if (d.arguments.empty() || d.index >= streamed_.size()) continue;
      StreamedCall& c = streamed_[d.index];
      c.arguments += d.arguments;
      event("response.function_call_arguments.delta",
            Json{{"item_id", c.item_id}, {"output_index", d.index}, {"delta", d.arguments}});
    }
  }

  void finish() {
    if (error_) {
      if (o_.stream) {
        begin_stream();
        event("error", Json{{"code", "server_error"}, {"message", *error_}, {"param", nullptr}});
        channel_->end_stream();
      } else {
        channel_->send_json(500, error_body(500, *error_));
      }
      return;
    }
    if (finish_ == FinishReason::kAbort) {
      if (!o_.stream) channel_->send_json(503, error_body(503, "the request was aborted before it finished"), {{"Retry-After", "1"}});
      else channel_->end_stream();
      return;
    }
    // The output items: tool calls (forced, or parsed with the tool parser) or one message.
    std::vector<ToolCall> calls;
    std::optional<std::string> content = text_;
    if (!streamed_.empty()) {  // forced calls already streamed: they are the output
      for (const StreamedCall& c : streamed_) calls.push_back(ToolCall{c.name, c.arguments});
      content.reset();
    } else if (o_.forced == JobOptions::ForcedTools::kNamed) {
      calls = {ToolCall{o_.named_tool, text_}};
      content.reset();
    } else if (o_.forced == JobOptions::ForcedTools::kRequired) {
      calls = parse_required_tool_calls(text_);
      if (!calls.empty()) content.reset();
    } else if (o_.tool_parser) {
      ParsedToolCalls parsed = parse_tool_calls(*o_.tool_parser, text_);
      if (!parsed.calls.empty()) {
        calls = std::move(parsed.calls);
        content = parsed.content;
      }
    }
    const bool incomplete = finish_ == FinishReason::kLength;
    const std::string item_status = incomplete ? "incomplete" : "completed";
    Json output = Json::array();
    Json assistant_msg{{"role", "assistant"}, {"content", content ? Json(*content) : Json(nullptr)}};
    if (content && (!content->empty() || calls.empty())) {
      if (msg_id_.empty()) msg_id_ = "msg_" + o_.id.substr(5);
      output.push_back(Json{{"id", msg_id_}, {"type", "message"}, {"status", item_status}, {"role", "assistant"},
                            {"content", Json::array({Json{{"type", "output_text"}, {"text", *content},
                                                          {"annotations", Json::array()}, {"logprobs", Json::array()}}})}});
    }
    Json tool_calls = Json::array();
    for (size_t i = 0; i < calls.size(); ++i) {
      StreamedCall c = i < streamed_.size() ? streamed_[i] : new_call(calls[i].name);
      c.arguments = calls[i].arguments;
      output.push_back(call_item(c, "completed"));
      tool_calls.push_back(Json{{"id", c.call_id}, {"type", "function"},
                                {"function", Json{{"name", c.name}, {"arguments", c.arguments}}}});
    }
    if (!tool_calls.empty()) assistant_msg["tool_calls"] = tool_calls;
    const Json response = response_object(incomplete ? "incomplete" : "completed", output);
    if (o_.store && o_.store_fn) {
      Json conv = o_.conversation;
      conv.push_back(assistant_msg);
      o_.store_fn(o_.id, response, std::move(conv));
    }
    if (!o_.stream) {
      channel_->send_json(200, dump(response));
      return;
    }
    begin_stream();
    for (size_t i = 0; i < output.size(); ++i) {
      const Json& item = output[i];
      if (item["type"] == "message") {
        if (!streams_text()) {
          start_message();
          event("response.output_text.delta", Json{{"item_id", msg_id_}, {"output_index", i}, {"content_index", 0},
                                                   {"delta", item["content"][0]["text"]}, {"logprobs", Json::array()}});
        } else {
          start_message();
        }
        event("response.output_text.done", Json{{"item_id", msg_id_}, {"output_index", i}, {"content_index", 0},
                                                {"text", item["content"][0]["text"]}, {"logprobs", Json::array()}});
        event("response.content_part.done",
              Json{{"item_id", msg_id_}, {"output_index", i}, {"content_index", 0}, {"part", item["content"][0]}});
        event("response.output_item.done", Json{{"output_index", i}, {"item", item}});
      } else {
        if (i >= streamed_.size()) {  // calls found at the end (the tool parser's): sent whole
          Json added = item;
          added["arguments"] = "";
          added["status"] = "in_progress";
          event("response.output_item.added", Json{{"output_index", i}, {"item", added}});
          event("response.function_call_arguments.delta",
                Json{{"item_id", item["id"]}, {"output_index", i}, {"delta", item["arguments"]}});
        }
        event("response.function_call_arguments.done",
              Json{{"item_id", item["id"]}, {"output_index", i}, {"arguments", item["arguments"]}});
        event("response.output_item.done", Json{{"output_index", i}, {"item", item}});
      }
    }
    event(incomplete ? "response.incomplete" : "response.completed", Json{{"response", response}});
    channel_->end_stream();
  }

  Engine& engine_;
  std::shared_ptr<ResponseChannel> channel_;
  Options o_;
  std::vector<int32_t> prompt_;
  SamplingParams params_;
  std::mutex mutex_;
  std::string text_;
  int num_tokens_ = 0;
  FinishReason finish_ = FinishReason::kNone;
  std::optional<std::string> error_;
  bool started_ = false, message_started_ = false;
  std::string msg_id_;
  RequiredToolCallStream required_stream_;
  std::vector<StreamedCall> streamed_;
  int64_t seq_ = 0;
};

// Stored responses (previous_response_id, GET /v1/responses/{id}): the newest kept, oldest dropped.
struct ResponseStore {
  static constexpr size_t kMax = 2048;
  std::mutex mutex;
  std::unordered_map<std::string, std::pair<Json, Json>> items;  // id -> (response, conversation)
  std::deque<std::string> order;

  void put(const std::string& id, Json response, Json conversation) {
    std::lock_guard<std::mutex> lock(mutex);
    items[id] = {std::move(response), std::move(conversation)};
    order.push_back(id);
    while (order.size() > kMax) {
      items.erase(order.front());
      order.pop_front();
    }
  }
  std::optional<std::pair<Json, Json>> get(const std::string& id) {
    std::lock_guard<std::mutex> lock(mutex);
    auto it = items.find(id);
    if (it == items.end()) return std::nullopt;
    return it->second;
  }
};

std::shared_ptr<ResponseStore> make_response_store() { return std::make_shared<ResponseStore>(); }

void OpenAiServer::handle_response_get(const std::string& id, const std::shared_ptr<ResponseChannel>& channel) {
  auto item = response_store_->get(id);
  if (!item) throw HttpError(404, "Response with id '" + quote_input(id) + "' not found.", std::string("response_id"));
  channel->send_json(200, dump(item->first));
}

void OpenAiServer::handle_responses(const HttpRequest& request, const std::shared_ptr<ResponseChannel>& channel) {
  const Json body = parse_json_body(request);
  Fields f(body);
  check_model(f, options_.served_model_names);
  // The sampling fields under the Responses API's names.
  Json sampling_body = Json::object();
  for (const char* k : {"temperature", "top_p", "top_k", "min_p", "seed", "stream", "repetition_penalty",
                        "presence_penalty", "frequency_penalty"}) {
    if (const Json* v = f.get(k)) sampling_body[k] = *v;
  }
  if (const Json* v = f.get("max_output_tokens")) sampling_body["max_tokens"] = *v;
  for (const char* k : {"n", "logprobs", "stop", "response_format", "structured_outputs", "guided_json", "messages"}) {
    if (f.get(k)) throw_bad_field(k, "is not a field of /v1/responses");
  }
  for (const char* k : {"background"}) {
    if (auto b = f.boolean(k); b && *b) throw_bad_field(k, "is not supported");
  }
  Fields sf(sampling_body);
  ParsedSampling sampling;
  try {
    sampling = parse_sampling(sf, engine_.default_sampling_params(), Endpoint::kChat);
  } catch (const HttpError& e) {
    if (e.param() && *e.param() == "max_tokens") throw_bad_field("max_output_tokens", e.message());
    throw;
  }
  // text.format
  Json text_echo = Json{{"format", Json{{"type", "text"}}}};
  if (const Json* text = f.get("text")) {
    if (!text->is_object()) throw_bad_field("text", "expected an object");
    if (auto fmt = text->find("format"); fmt != text->end() && !fmt->is_null()) {
      if (!fmt->is_object()) throw_bad_field("text.format", "expected an object");
      const std::string type = fmt->value("type", std::string());
      if (type == "json_schema") {
        sampling.params.structured_outputs = json_schema_constraint(*fmt, "text.format");
      } else if (type == "json_object") {
        StructuredOutputsParams so;
        so.json_object = true;
        so.field = "text.format";
        sampling.params.structured_outputs = so;
      } else if (type != "text") {
        throw_bad_field("text.format.type", "expected \"text\", \"json_object\" or \"json_schema\"");
      }
      text_echo["format"] = *fmt;
    }
  }
  // Tools: {"type": "function", "name", "description", "parameters", "strict"} -> chat tools.
  Json chat_tools = Json::array();
  if (const Json* tools = f.get("tools")) {
    if (!tools->is_array()) throw_bad_field("tools", "expected a list of tools");
    for (size_t i = 0; i < tools->size(); ++i) {
      const Json& t = (*tools)[i];
      if (!t.is_object() || t.value("type", std::string()) != "function") {
        throw_bad_field(at("tools", i) + ".type", "only function tools are supported");
      }
      Json fn = Json::object();
      for (const char* k : {"name", "description", "parameters", "strict"}) {
        if (t.contains(k)) fn[k] = t[k];
      }
      chat_tools.push_back(Json{{"type", "function"}, {"function", std::move(fn)}});
    }
    validate_tools(&chat_tools);
  }
  const bool have_tools = !chat_tools.empty();
  std::string tool_choice = have_tools ? "auto" : "none";
  std::string named;
  if (const Json* tc = f.get("tool_choice")) {
    if (tc->is_string()) {
      tool_choice = tc->get<std::string>();
      if (tool_choice != "none" && tool_choice != "auto" && tool_choice != "required") {
        throw_bad_field("tool_choice", "expected \"none\", \"auto\", \"required\" or a function");
      }
    } else if (tc->is_object() && tc->value("type", std::string()) == "function" && tc->contains("name") &&
               (*tc)["name"].is_string()) {
      named = (*tc)["name"].get<std::string>();
      tool_choice = "named";
    } else {
      throw_bad_field("tool_choice", "expected a string or {\"type\": \"function\", \"name\": ...}");
    }
  }
  JobOptions::ForcedTools forced = JobOptions::ForcedTools::kNone;
  if (apply_tool_choice(tool_choice, named, chat_tools, f.boolean("parallel_tool_calls").value_or(true),
                        options_.tool_parser.has_value(), "text.format", sampling.params)) {
    forced = tool_choice == "named" ? JobOptions::ForcedTools::kNamed : JobOptions::ForcedTools::kRequired;
  }
  // The conversation: the previous response's, then instructions (not carried over), then the input.
  Json conversation = Json::array();
  std::optional<std::string> previous = f.string("previous_response_id");
  if (previous) {
    auto item = response_store_->get(*previous);
    if (!item) {
      throw HttpError(404, "Previous response with id '" + quote_input(*previous) + "' not found.",
                      std::string("previous_response_id"));
    }
    conversation = item->second;
  }
  const Json* input = f.get("input");
  if (!input) throw_bad_field("input", "an input (text or a list of items) is required");
  if (input->is_string()) {
    conversation.push_back(Json{{"role", "user"}, {"content", input->get<std::string>()}});
  } else if (input->is_array()) {
    for (size_t i = 0; i < input->size(); ++i) {
      const Json& it = (*input)[i];
      const std::string name = at("input", i);
      if (!it.is_object()) throw_bad_field(name, "each input item must be an object");
      const std::string type = it.value("type", std::string(it.contains("role") ? "message" : ""));
      if (type == "message") {
        auto role = it.find("role");
        if (role == it.end() || !role->is_string()) throw_bad_field(name + ".role", "a string role is required");
        std::string r = role->get<std::string>();
        if (r == "developer") r = "system";
        if (r != "system" && r != "user" && r != "assistant") throw_bad_field(name + ".role", "unknown role '" + quote_input(r) + "'");
        conversation.push_back(Json{{"role", r}, {"content", content_text(it.value("content", Json()), name + ".content")}});
      } else if (type == "function_call") {
        for (const char* k : {"call_id", "name", "arguments"}) {
          if (!it.contains(k) || !it[k].is_string()) throw_bad_field(name + "." + k, "a string is required");
        }
        Json call{{"id", it["call_id"]}, {"type", "function"},
                  {"function", Json{{"name", it["name"]}, {"arguments", it["arguments"]}}}};
        // Consecutive calls belong to one assistant turn.
        if (!conversation.empty() && conversation.back()["role"] == "assistant" && conversation.back().contains("tool_calls")) {
          conversation.back()["tool_calls"].push_back(std::move(call));
        } else {
          conversation.push_back(Json{{"role", "assistant"}, {"content", nullptr}, {"tool_calls", Json::array({call})}});
        }
      } else if (type == "function_call_output") {
        if (!it.contains("call_id") || !it["call_id"].is_string()) throw_bad_field(name + ".call_id", "a string is required");
        const Json out = it.value("output", Json(""));
        conversation.push_back(Json{{"role", "tool"}, {"tool_call_id", it["call_id"]},
                                    {"content", out.is_string() ? out.get<std::string>() : content_text(out, name + ".output")}});
      } else {
        throw_bad_field(name + ".type", "input item type '" + quote_input(type) + "' is not supported");
      }
    }
  } else {
    throw_bad_field("input", "expected a string or a list of input items");
  }
  Json messages = Json::array();
  const std::optional<std::string> instructions = f.string("instructions");
  if (instructions) messages.push_back(Json{{"role", "system"}, {"content", *instructions}});
  for (const Json& m : conversation) messages.push_back(m);
  const Json normalized = normalize_messages(messages);
  ChatTemplateOptions topts;
  topts.add_generation_prompt = true;
  if (have_tools) topts.tools = &chat_tools;
  const std::string prompt_text = engine_.apply_chat_template(normalized, topts);
  std::vector<int32_t> prompt = engine_.tokenize(prompt_text, false);

  ResponsesJob::Options o;
  o.id = new_id("resp_");
  o.engine_id = o.id;
  o.model = f.string("model").value_or(options_.served_model_names.front());
  o.created = unix_now();
  o.stream = sampling.stream;
  o.store = f.boolean("store").value_or(true);
  o.forced = forced;
  o.named_tool = named;
  if (have_tools && tool_choice == "auto") o.tool_parser = options_.tool_parser;
  o.conversation = conversation;
  ResponseStore* store = response_store_.get();
  o.store_fn = [store](const std::string& id, Json r, Json c) { store->put(id, std::move(r), std::move(c)); };
  Json echo;
  echo["instructions"] = instructions ? Json(*instructions) : Json(nullptr);
  echo["max_output_tokens"] = f.get("max_output_tokens") ? *f.get("max_output_tokens") : Json(nullptr);
  echo["metadata"] = f.get("metadata") ? *f.get("metadata") : Json::object();
  echo["parallel_tool_calls"] = f.boolean("parallel_tool_calls").value_or(true);
  echo["previous_response_id"] = previous ? Json(*previous) : Json(nullptr);
  echo["store"] = o.store;
  echo["temperature"] = sampling.params.temperature;
  echo["top_p"] = sampling.params.top_p;
  echo["text"] = text_echo;
  echo["tool_choice"] = f.get("tool_choice") ? *f.get("tool_choice") : Json("auto");
  echo["tools"] = f.get("tools") ? *f.get("tools") : Json::array();
  echo["truncation"] = "disabled";
  o.echo = std::move(echo);
  auto job = std::make_shared<ResponsesJob>(engine_, channel, std::move(o), std::move(prompt), sampling.params);
  job->start();
}

}  // namespace peregrine::server
