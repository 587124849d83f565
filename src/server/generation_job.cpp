// GenerationJob: engine deltas to OpenAI completion / chat-completion responses and SSE chunks
// (see generation_job.h). Everything here runs on the engine loop thread except start() and the on_close hook.
#include "server/generation_job.h"

#include <algorithm>

#include "peregrine/error.h"
#include "server/errors.h"

namespace peregrine::server {
namespace {

// JSON has no -inf: clamp like vLLM does.
double clamp_logprob(double lp) { return std::max(lp, -9999.0); }

Json bytes_of(const std::string& s) {
  Json b = Json::array();
  for (unsigned char c : s) b.push_back(static_cast<int>(c));
  return b;
}

// vLLM's prompt_logprobs: null for the first token, then {token_id: {logprob, rank, decoded_token}} per position.
Json prompt_logprobs_json(const std::vector<PositionLogprobs>& lps) {
  Json out = Json::array();
  for (size_t i = 0; i < lps.size(); ++i) {
    if (i == 0) {
      out.push_back(nullptr);
      continue;
    }
    Json pos = Json::object();
    auto add = [&](const TokenLogprob& t) {
      pos[std::to_string(t.token_id)] =
          Json{{"logprob", clamp_logprob(t.logprob)}, {"rank", t.rank}, {"decoded_token", t.text}};
    };
    add(lps[i].chosen);
    for (const TokenLogprob& t : lps[i].top) add(t);
    out.push_back(std::move(pos));
  }
  return out;
}

Json finish_json(FinishReason r) {
  return r == FinishReason::kNone ? Json(nullptr) : Json(finish_reason_name(r));
}

Json stop_reason_json(const std::optional<std::string>& s, const std::optional<int32_t>& t) {
  if (s) return Json(*s);
  if (t) return Json(*t);
  return Json(nullptr);
}

// OpenAI's tool_calls list; streamed deltas carry each call's index.
Json tool_calls_json(const std::vector<ToolCall>& calls, bool with_index) {
  Json out = Json::array();
  for (size_t i = 0; i < calls.size(); ++i) {
    Json call;
    if (with_index) call["index"] = i;
    call["id"] = new_tool_call_id();
    call["type"] = "function";
    call["function"] = Json{{"name", calls[i].name}, {"arguments", calls[i].arguments}};
    out.push_back(std::move(call));
  }
  return out;
}

}  // namespace

GenerationJob::GenerationJob(Engine& engine, std::shared_ptr<ResponseChannel> channel, JobOptions options,
                             std::vector<JobPrompt> prompts)
    : engine_(engine), channel_(std::move(channel)), options_(std::move(options)), prompts_(std::move(prompts)) {
  const size_t n = static_cast<size_t>(options_.sampling.params.n);
  states_.resize(prompts_.size());
  choices_.resize(prompts_.size() * n);
  if (options_.tool_parser && options_.sampling.stream) {
    for (Choice& c : choices_) c.tool_stream.emplace(*options_.tool_parser);
  }
  if (options_.forced_tools == JobOptions::ForcedTools::kRequired && options_.sampling.stream) {
    for (Choice& c : choices_) c.required_stream.emplace();
  }
  remaining_ = prompts_.size();
  Json base = chunk_base();
  std::string head = dump(base);
  head.pop_back();  // the closing brace: choices follow
  chunk_prefix_ = head + ",\"choices\":[{\"index\":";
}

std::string GenerationJob::dump(const Json& j) const {
  return j.dump(-1, ' ', false, Json::error_handler_t::replace);
}

void GenerationJob::begin_stream() {
  if (stream_started_) return;
  stream_started_ = true;
  channel_->start_stream();
  if (options_.endpoint != Endpoint::kChat) return;
  for (size_t i = 0; i < choices_.size(); ++i) {  // the role comes first, once per choice
    Json c = chunk_base();
    Json choice;
    choice["index"] = i;
    // With tools the reply may be calls only, whose content is null (as the non-streamed message says): the role
    // chunk must not make it "".
    const bool tools = options_.forced_tools != JobOptions::ForcedTools::kNone || options_.tool_parser.has_value();
    choice["delta"] = Json{{"role", "assistant"}, {"content", tools ? Json(nullptr) : Json("")}};
    choice["logprobs"] = nullptr;
    choice["finish_reason"] = nullptr;
    c["choices"] = Json::array({choice});
    channel_->send_event(dump(c));
  }
}

void GenerationJob::start() {
  for (size_t i = 0; i < prompts_.size(); ++i) {
    states_[i].engine_id = options_.id + "-" + std::to_string(i);
    states_[i].num_prompt_tokens = static_cast<int>(prompts_[i].token_ids.size());
  }
  std::weak_ptr<GenerationJob> weak = weak_from_this();
  channel_->on_close([weak] {
    if (auto job = weak.lock()) job->abort_all();
  });
  for (size_t i = 0; i < prompts_.size(); ++i) {
    try {
      engine_.add_request(states_[i].engine_id, prompts_[i].token_ids, options_.sampling.params,
                          [self = shared_from_this(), i](RequestOutput&& out) { self->on_output(i, std::move(out)); });
    } catch (const std::exception& e) {
      for (size_t k = 0; k < i; ++k) engine_.abort_request(states_[k].engine_id);
      std::lock_guard<std::mutex> lock(mutex_);
      failed_ = true;
      if (!stream_started_) throw;  // the router answers with the error's status
      channel_->send_event(dump(Json::parse(error_body(400, e.what()))));
      channel_->end_stream();
      return;
    }
  }
}

void GenerationJob::abort_all() {
  for (const PromptState& s : states_) engine_.abort_request(s.engine_id);
}

Json GenerationJob::chunk_base() const {
  Json c;
  c["id"] = options_.id;
  c["object"] = options_.endpoint == Endpoint::kChat ? "chat.completion.chunk" : "text_completion";
  c["created"] = options_.created;
  c["model"] = options_.model;
  return c;
}

Json GenerationJob::usage() const {
  int64_t prompt = 0, completion = 0;
  for (const PromptState& s : states_) prompt += s.num_prompt_tokens;
  for (const Choice& c : choices_) completion += c.num_tokens;
  Json u;
  u["prompt_tokens"] = prompt;
  u["total_tokens"] = prompt + completion;
  u["completion_tokens"] = completion;
  u["prompt_tokens_details"] = nullptr;
  return u;
}

// Logprobs of a run of tokens in the endpoint's shape; completions may prepend the prompt's (echo).
Json GenerationJob::choice_logprobs(Choice& choice, const std::vector<PositionLogprobs>& lps, bool with_prompt,
                                    const std::vector<PositionLogprobs>* prompt_lps) {
  const int k = options_.sampling.top_logprobs;
  if (options_.endpoint == Endpoint::kChat) {
    Json content = Json::array();
    for (const PositionLogprobs& p : lps) {
      Json e;
      e["token"] = p.chosen.text;
      e["logprob"] = clamp_logprob(p.chosen.logprob);
      e["bytes"] = bytes_of(p.chosen.text);
      Json top = Json::array();
      for (size_t r = 0; r < p.top.size() && static_cast<int>(r) < k; ++r) {
        top.push_back(Json{{"token", p.top[r].text},
                           {"logprob", clamp_logprob(p.top[r].logprob)},
                           {"bytes", bytes_of(p.top[r].text)}});
      }
      e["top_logprobs"] = std::move(top);
      content.push_back(std::move(e));
    }
    return Json{{"content", std::move(content)}};
  }
  Json offsets = Json::array(), token_lps = Json::array(), tokens = Json::array(), tops = Json::array();
  auto add = [&](const PositionLogprobs& p, bool first_prompt_token) {
    offsets.push_back(choice.text_offset);
    choice.text_offset += p.chosen.text.size();
    tokens.push_back(p.chosen.text);
    if (first_prompt_token) {
      token_lps.push_back(nullptr);
      tops.push_back(nullptr);
      return;
    }
    token_lps.push_back(clamp_logprob(p.chosen.logprob));
    Json top = Json::object();
    for (size_t r = 0; r < p.top.size() && static_cast<int>(r) < k; ++r) {
      top[p.top[r].text] = clamp_logprob(p.top[r].logprob);
    }
    if (p.chosen.rank <= k) top[p.chosen.text] = clamp_logprob(p.chosen.logprob);
    tops.push_back(std::move(top));
  };
  if (with_prompt && prompt_lps) {
    for (size_t i = 0; i < prompt_lps->size(); ++i) add((*prompt_lps)[i], i == 0);
  }
  for (const PositionLogprobs& p : lps) add(p, false);
  Json j;
  j["text_offset"] = std::move(offsets);
  j["token_logprobs"] = std::move(token_lps);
  j["tokens"] = std::move(tokens);
  j["top_logprobs"] = std::move(tops);
  return j;
}

void GenerationJob::on_output(size_t prompt_index, RequestOutput&& out) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (failed_) return;
  PromptState& state = states_[prompt_index];
  const size_t n = static_cast<size_t>(options_.sampling.params.n);
  const bool chat = options_.endpoint == Endpoint::kChat;
  const bool stream = options_.sampling.stream;
  const bool want_logprobs = options_.sampling.top_logprobs >= 0;
  if (!out.prompt_logprobs.empty()) state.prompt_logprobs = std::move(out.prompt_logprobs);
  if (out.error && !error_) error_ = out.error;
  for (CompletionOutput& c : out.outputs) {
    const size_t index = prompt_index * n + static_cast<size_t>(c.index);
    Choice& choice = choices_[index];
    std::string prefix;
    const bool echo_now = options_.sampling.echo && !choice.echoed;
    if (echo_now) {
      prefix = prompts_[prompt_index].echo_text;
      choice.echoed = true;
    }
    choice.num_tokens = c.num_output_tokens;
    choice.finish_reason = c.finish_reason;
    choice.stop_string = c.stop_string;
    choice.stop_token_id = c.stop_token_id;
    if (stream) {
      begin_stream();
      // Built as a string: this runs once per token per stream, and nlohmann objects cost ten times more.
      std::string chunk = chunk_prefix_;
      chunk += std::to_string(index);
      if (chat && options_.forced_tools != JobOptions::ForcedTools::kNone) {
        Json delta = forced_tools_delta(choice, c.text);
        if (delta.is_null() && !c.finished() && !want_logprobs) continue;
        if (delta.is_null()) delta = Json::object();
        chunk += ",\"delta\":" + dump(delta);
      } else if (chat && choice.tool_stream) {
        // Content is released only where it cannot be part of a call; the calls come with the final chunk.
        std::string content = choice.tool_stream->feed(c.text);
        std::vector<ToolCall> calls;
        if (c.finished()) {
          ParsedToolCalls rest = choice.tool_stream->finish();
          if (rest.content) content += *rest.content;
          calls = std::move(rest.calls);
        }
        if (content.empty() && calls.empty() && !c.finished() && !want_logprobs) continue;
        Json delta = Json::object();
        if (!content.empty()) delta["content"] = content;
        if (!calls.empty()) {
          delta["tool_calls"] = tool_calls_json(calls, true);
          choice.called_tools = true;
        }
        chunk += ",\"delta\":" + dump(delta);
      } else if (chat) {
        chunk += c.text.empty() && c.finished() ? ",\"delta\":{}" : ",\"delta\":{\"content\":" + dump(Json(c.text)) + "}";
      } else {
        chunk += ",\"text\":" + dump(Json(prefix + c.text));
      }
      chunk += ",\"logprobs\":";
      chunk += want_logprobs ? dump(choice_logprobs(choice, c.logprobs, echo_now, &state.prompt_logprobs)) : "null";
      chunk += ",\"finish_reason\":" +
               dump(choice.called_tools && c.finished() ? Json("tool_calls") : finish_json(c.finish_reason));
      chunk += ",\"stop_reason\":" + dump(stop_reason_json(c.stop_string, c.stop_token_id));
      if (options_.sampling.include_usage && options_.sampling.continuous_usage) {
        chunk += "}],\"usage\":" + dump(usage()) + "}";
      } else {
        chunk += options_.sampling.include_usage ? "}],\"usage\":null}" : "}]}";
      }
      channel_->send_event(chunk);
    } else {
      choice.text += prefix + c.text;
      choice.token_ids.insert(choice.token_ids.end(), c.token_ids.begin(), c.token_ids.end());
      for (auto& lp : c.logprobs) choice.logprobs.push_back(std::move(lp));
    }
  }
  if (out.finished && !state.finished) {
    state.finished = true;
    if (--remaining_ == 0) finish();
  }
}

Json GenerationJob::forced_tools_delta(Choice& choice, const std::string& text) {
  Json calls = Json::array();
  auto header = [&](size_t index, const std::string& name) {
    while (choice.call_ids.size() <= index) choice.call_ids.push_back(new_tool_call_id());
    return Json{{"index", index}, {"id", choice.call_ids[index]}, {"type", "function"},
                {"function", Json{{"name", name}, {"arguments", ""}}}};
  };
  if (options_.forced_tools == JobOptions::ForcedTools::kNamed) {
    if (choice.call_ids.empty()) {
      Json h = header(0, options_.named_tool);
      h["function"]["arguments"] = text;
      calls.push_back(std::move(h));
    } else if (!text.empty()) {
      calls.push_back(Json{{"index", 0}, {"function", Json{{"arguments", text}}}});
    }
  } else {
    for (ToolCallDelta& d : choice.required_stream->feed(text)) {
      if (d.name) {
        Json h = header(d.index, *d.name);
        h["function"]["arguments"] = d.arguments;
        calls.push_back(std::move(h));
        choice.called_tools = true;
      } else if (!d.arguments.empty()) {
        calls.push_back(Json{{"index", d.index}, {"function", Json{{"arguments", d.arguments}}}});
      }
    }
  }
  if (calls.empty()) return nullptr;
  return Json{{"tool_calls", std::move(calls)}};
}

void GenerationJob::finish() {
  const bool chat = options_.endpoint == Endpoint::kChat;
  if (options_.sampling.stream) {
    begin_stream();
    if (error_) {
      channel_->send_event(dump(Json::parse(error_body(500, *error_))));
    } else if (options_.sampling.include_usage) {
      Json chunk = chunk_base();
      chunk["choices"] = Json::array();
      chunk["usage"] = usage();
      channel_->send_event(dump(chunk));
    }
    channel_->end_stream();
    return;
  }
  if (error_) {
    channel_->send_json(500, error_body(500, *error_));
    return;
  }
  // An abort ends a request only when its client left (then nobody reads this) or when the server shuts down:
  // a cut text is not a result, so it gets an error status rather than a 200.
  for (const Choice& c : choices_) {
    if (c.finish_reason == FinishReason::kAbort) {
      channel_->send_json(503, error_body(503, "the request was aborted before it finished: the server is shutting down"),
                          {{"Retry-After", "1"}});
      return;
    }
  }
  Json body;
  body["id"] = options_.id;
  body["object"] = chat ? "chat.completion" : "text_completion";
  body["created"] = options_.created;
  body["model"] = options_.model;
  Json choices = Json::array();
  const size_t n = static_cast<size_t>(options_.sampling.params.n);
  for (size_t i = 0; i < choices_.size(); ++i) {
    Choice& c = choices_[i];
    Json ch;
    ch["index"] = i;
    const bool want_logprobs = options_.sampling.top_logprobs >= 0;
    if (chat) {
      ParsedToolCalls parsed;
      if (options_.tool_parser) parsed = parse_tool_calls(*options_.tool_parser, c.text);
      if (options_.forced_tools == JobOptions::ForcedTools::kNamed) {
        parsed.calls = {ToolCall{options_.named_tool, c.text}};
        parsed.content.reset();
      } else if (options_.forced_tools == JobOptions::ForcedTools::kRequired) {
        parsed.calls = parse_required_tool_calls(c.text);
        parsed.content.reset();
      }
      if (!parsed.calls.empty()) {
        ch["message"] = Json{{"role", "assistant"},
                             {"content", parsed.content ? Json(*parsed.content) : Json(nullptr)},
                             {"tool_calls", tool_calls_json(parsed.calls, false)}};
        // A named function's call ends as a plain stop (vLLM); "required" calls report tool_calls.
        c.called_tools = options_.forced_tools != JobOptions::ForcedTools::kNamed;
      } else {
        ch["message"] = Json{{"role", "assistant"}, {"content", c.text}, {"tool_calls", Json::array()}};
      }
      ch["logprobs"] = want_logprobs ? choice_logprobs(c, c.logprobs, false, nullptr) : Json(nullptr);
    } else {
      ch["text"] = c.text;
      ch["logprobs"] = want_logprobs ? choice_logprobs(c, c.logprobs, options_.sampling.echo,
                                                       &states_[i / n].prompt_logprobs)
                                     : Json(nullptr);
    }
    ch["finish_reason"] = c.called_tools ? Json("tool_calls") : finish_json(c.finish_reason);
    ch["stop_reason"] = stop_reason_json(c.stop_string, c.stop_token_id);
    if (options_.sampling.params.prompt_logprobs && !options_.sampling.echo) {
      ch["prompt_logprobs"] = prompt_logprobs_json(states_[i / n].prompt_logprobs);
    }
    choices.push_back(std::move(ch));
  }
  body["choices"] = std::move(choices);
  body["usage"] = usage();
  channel_->send_json(200, dump(body));
}

}  // namespace peregrine::server
