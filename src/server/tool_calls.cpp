// Tool-call parsers (see tool_calls.h).
#include "server/tool_calls.h"

#include "peregrine/text.h"

#include <nlohmann/json.hpp>
#include <random>

namespace peregrine::server {
namespace {

using Json = nlohmann::ordered_json;

constexpr std::string_view kHermesOpen = "<tool_call>";
constexpr std::string_view kHermesClose = "</tool_call>";
constexpr std::string_view kMistralCalls = "[TOOL_CALLS]";
constexpr std::string_view kMistralArgs = "[ARGS]";
constexpr std::string_view kMistralCallId = "[CALL_ID]";
constexpr std::string_view kPythonTag = "<|python_tag|>";

std::optional<std::string> content_of(std::string_view before) {
  if (trim_ascii_space(before).empty()) return std::nullopt;
  return std::string(before);
}

ParsedToolCalls plain(std::string_view text) {
  ParsedToolCalls p;
  if (!text.empty()) p.content = std::string(text);
  return p;
}

// A call from a JSON object with a string "name" and its arguments under one of `keys` (an object, or a string
// holding JSON text, as some models write; absent means no arguments).
std::optional<ToolCall> call_from_object(const Json& obj, std::initializer_list<const char*> keys) {
  if (!obj.is_object()) return std::nullopt;
  auto name = obj.find("name");
  if (name == obj.end() || !name->is_string() || name->get<std::string>().empty()) return std::nullopt;
  ToolCall call;
  call.name = name->get<std::string>();
  call.arguments = "{}";
  for (const char* key : keys) {
    auto args = obj.find(key);
    if (args == obj.end()) continue;
    if (args->is_string()) {
      const Json inner = Json::parse(args->get<std::string>(), nullptr, false);
      if (inner.is_discarded()) return std::nullopt;
      call.arguments = inner.dump();
    } else if (args->is_object()) {
      call.arguments = args->dump(-1, ' ', false, Json::error_handler_t::replace);
    } else if (!args->is_null()) {
      return std::nullopt;
    }
    break;
  }
  return call;
}

std::optional<ToolCall> call_from_text(std::string_view body, std::initializer_list<const char*> keys) {
  const Json obj = Json::parse(trim_ascii_space(body), nullptr, false);
  if (obj.is_discarded()) return std::nullopt;
  return call_from_object(obj, keys);
}

// End (one past) of the JSON object starting at s[0] == '{', strings and escapes respected; npos if unterminated.
size_t object_end(std::string_view s) {
  int depth = 0;
  bool in_string = false, escaped = false;
  for (size_t i = 0; i < s.size(); ++i) {
    const char c = s[i];
    if (in_string) {
      if (escaped) escaped = false;
      else if (c == '\\') escaped = true;
      else if (c == '"') in_string = false;
      continue;
    }
    if (c == '"') in_string = true;
    else if (c == '{' || c == '[') ++depth;
    else if (c == '}' || c == ']') {
      if (--depth == 0) return i + 1;
    }
  }
  return std::string_view::npos;
}

ParsedToolCalls parse_hermes(std::string_view text) {
  const size_t first = text.find(kHermesOpen);
  if (first == std::string_view::npos) return plain(text);
  ParsedToolCalls out;
  size_t pos = first;
  while (pos != std::string_view::npos) {
    const size_t body = pos + kHermesOpen.size();
    const size_t close = text.find(kHermesClose, body);
    // An unterminated last call (the output hit max_tokens or the model stopped at </tool_call>) runs to the end.
    const std::string_view inner = close == std::string_view::npos ? text.substr(body) : text.substr(body, close - body);
    auto call = call_from_text(inner, {"arguments", "parameters"});
    if (!call) return plain(text);
    out.calls.push_back(std::move(*call));
    if (close == std::string_view::npos) break;
    pos = text.find(kHermesOpen, close + kHermesClose.size());
  }
  out.content = content_of(text.substr(0, first));
  return out;
}

ParsedToolCalls parse_llama3_json(std::string_view text) {
  std::string_view rest = trim_ascii_space(text);
  if (rest.substr(0, kPythonTag.size()) == kPythonTag) rest = trim_ascii_space(rest.substr(kPythonTag.size()));
  if (rest.empty() || rest.front() != '{') return plain(text);
  ParsedToolCalls out;
  while (!rest.empty()) {
    const size_t end = object_end(rest);
    if (end == std::string_view::npos) return plain(text);
    auto call = call_from_text(rest.substr(0, end), {"parameters", "arguments"});
    if (!call) return plain(text);
    out.calls.push_back(std::move(*call));
    rest = trim_ascii_space(rest.substr(end));
    if (!rest.empty() && rest.front() == ';') rest = trim_ascii_space(rest.substr(1));
    if (!rest.empty() && rest.front() != '{') return plain(text);
  }
  return out;
}

ParsedToolCalls parse_mistral(std::string_view text) {
  const size_t marker = text.find(kMistralCalls);
  if (marker == std::string_view::npos) return plain(text);
  ParsedToolCalls out;
  const std::string_view rest = trim_ascii_space(text.substr(marker + kMistralCalls.size()));
  if (!rest.empty() && (rest.front() == '[' || rest.front() == '{')) {
    // [TOOL_CALLS][{"name": ..., "arguments": {...}}, ...] (a lone object is accepted too).
    const Json calls = Json::parse(rest, nullptr, false);
    if (calls.is_discarded()) return plain(text);
    const Json list = calls.is_array() ? calls : Json::array({calls});
    for (const Json& c : list) {
      auto call = call_from_object(c, {"arguments", "parameters"});
      if (!call) return plain(text);
      out.calls.push_back(std::move(*call));
    }
  } else {
    // [TOOL_CALLS]name[ARGS]{...}, repeated with [TOOL_CALLS] before each further call.
    std::string_view remaining = rest;
    while (!remaining.empty()) {
      const size_t next = remaining.find(kMistralCalls);
      const std::string_view one = remaining.substr(0, next);
      const size_t args = one.find(kMistralArgs);
      if (args == std::string_view::npos) return plain(text);
      ToolCall call;
      std::string_view name = one.substr(0, args);
      // Newer templates put the call's id between the name and its arguments: name[CALL_ID]id[ARGS]{...}.
      if (const size_t id = name.find(kMistralCallId); id != std::string_view::npos) name = name.substr(0, id);
      call.name = std::string(trim_ascii_space(name));
      const Json parsed = Json::parse(trim_ascii_space(one.substr(args + kMistralArgs.size())), nullptr, false);
      if (call.name.empty() || parsed.is_discarded() || !parsed.is_object()) return plain(text);
      call.arguments = parsed.dump();
      out.calls.push_back(std::move(call));
      remaining = next == std::string_view::npos ? std::string_view() : trim_ascii_space(remaining.substr(next + kMistralCalls.size()));
    }
  }
  if (out.calls.empty()) return plain(text);
  out.content = content_of(text.substr(0, marker));
  return out;
}

// Length of the longest proper prefix of `marker` that `text` ends with.
size_t partial_marker_suffix(std::string_view text, std::string_view marker) {
  for (size_t k = std::min(marker.size() - 1, text.size()); k > 0; --k) {
    if (text.substr(text.size() - k) == marker.substr(0, k)) return k;
  }
  return 0;
}

}  // namespace

std::optional<ToolParserKind> tool_parser_from_name(std::string_view name) {
  if (name == "hermes") return ToolParserKind::kHermes;
  if (name == "llama3_json") return ToolParserKind::kLlama3Json;
  if (name == "mistral") return ToolParserKind::kMistral;
  return std::nullopt;
}

std::string tool_parser_names() { return "hermes, llama3_json, mistral"; }

std::string new_tool_call_id() {
  thread_local std::mt19937_64 rng{std::random_device{}()};
  static constexpr char kHex[] = "0123456789abcdef";
  std::string id = "chatcmpl-tool-";
  for (int half = 0; half < 2; ++half) {
    uint64_t bits = rng();
    for (int i = 0; i < 16; ++i, bits >>= 4) id += kHex[bits & 15];
  }
  return id;
}

ParsedToolCalls parse_tool_calls(ToolParserKind kind, std::string_view text) {
  switch (kind) {
    case ToolParserKind::kHermes:
      return parse_hermes(text);
    case ToolParserKind::kLlama3Json:
      return parse_llama3_json(text);
    case ToolParserKind::kMistral:
      return parse_mistral(text);
  }
  return plain(text);
}

std::string ToolCallStream::feed(std::string_view delta) {
  text_.append(delta);
  if (holding_) return {};
  if (!plain_ && kind_ == ToolParserKind::kLlama3Json) {
    // A call is the whole output: decide on the first non-space characters.
    // Resumes where the last delta's scan stopped: leading whitespace is not rescanned per token.
    while (scanned_ < text_.size() && is_ascii_space(text_[scanned_])) ++scanned_;
    const std::string_view rest = std::string_view(text_).substr(scanned_);
    if (rest.empty()) return {};
    if (rest.front() == '{' || rest.substr(0, kPythonTag.size()) == kPythonTag) {
      holding_ = true;
      return {};
    }
    if (rest.size() < kPythonTag.size() && kPythonTag.substr(0, rest.size()) == rest) return {};
    plain_ = true;
  }
  if (plain_) {
    std::string out = text_.substr(sent_);
    sent_ = text_.size();
    return out;
  }
  const std::string_view marker = kind_ == ToolParserKind::kHermes ? kHermesOpen : kMistralCalls;
  // Nothing released so far can be part of a marker, so one can only start at or after sent_.
  const size_t m = text_.find(marker, sent_);
  size_t until;
  if (m != std::string::npos) {
    holding_ = true;
    until = m;
  } else {
    until = text_.size() - partial_marker_suffix(std::string_view(text_).substr(sent_), marker);
  }
  std::string out = text_.substr(sent_, until - sent_);
  sent_ = until;
  return out;
}

ParsedToolCalls ToolCallStream::finish() {
  if (holding_) {
    ParsedToolCalls parsed = parse_tool_calls(kind_, text_);
    if (!parsed.calls.empty()) {
      parsed.content.reset();  // the text before the first call was released already
      return parsed;
    }
  }
  ParsedToolCalls out;
  if (sent_ < text_.size()) out.content = text_.substr(sent_);
  sent_ = text_.size();
  return out;
}

}  // namespace peregrine::server

namespace peregrine::server {

std::vector<ToolCall> parse_required_tool_calls(std::string_view text) {
  std::vector<ToolCall> calls;
  const nlohmann::json list = nlohmann::json::parse(text, nullptr, false);
  if (list.is_discarded() || !list.is_array()) return calls;
  for (const auto& e : list) {
    if (!e.is_object() || !e.contains("name") || !e["name"].is_string()) return {};
    ToolCall c;
    c.name = e["name"].get<std::string>();
    c.arguments = e.contains("parameters") ? e["parameters"].dump() : "{}";
    calls.push_back(std::move(c));
  }
  return calls;
}

std::vector<ToolCallDelta> RequiredToolCallStream::feed(std::string_view delta) {
  std::vector<ToolCallDelta> out;
  auto args_out = [&](char c) {
    if (out.empty() || out.back().index != index_) {
      ToolCallDelta d;
      d.index = index_;
      out.push_back(std::move(d));
    }
    out.back().arguments += c;
  };
  for (char c : delta) {
    if (in_args_) {
      if (!args_started_ && c == ' ') continue;  // the optional space after "parameters":
      args_started_ = true;
      args_out(c);
      if (in_string_) {
        if (escape_) escape_ = false;
        else if (c == '\\') escape_ = true;
        else if (c == '"') in_string_ = false;
        continue;
      }
      if (c == '"') in_string_ = true;
      else if (c == '{' || c == '[') ++depth_;
      else if (c == '}' || c == ']') {
        --depth_;
        if (depth_ < args_depth_) in_args_ = false;  // the arguments value closed
      }
      continue;
    }
    // Outside arguments: track the list and each element's "name" / "parameters" keys.
    if (depth_ == 2) element_ += c;
    if (in_string_) {
      if (escape_) escape_ = false;
      else if (c == '\\') escape_ = true;
      else if (c == '"') in_string_ = false;
      continue;
    }
    if (c == '"') {
      in_string_ = true;
    } else if (c == '{' || c == '[') {
      ++depth_;
      if (depth_ == 2) {
        element_ = "{";
        started_ = false;
      }
    } else if (c == '}' || c == ']') {
      if (depth_ == 2) ++index_;
      --depth_;
    } else if (c == ':' && depth_ == 2) {
      // "parameters": starts the arguments at the next value.
      const std::string probe = element_ + "null}";
      const nlohmann::json e = nlohmann::json::parse(probe, nullptr, false);
      if (!e.is_discarded() && e.is_object() && e.contains("parameters") && e["parameters"].is_null()) {
        if (!started_ && e.contains("name") && e["name"].is_string()) {
          ToolCallDelta d;
          d.index = index_;
          d.name = e["name"].get<std::string>();
          out.push_back(std::move(d));
          started_ = true;
        }
        in_args_ = true;
        args_started_ = false;
        args_depth_ = depth_ + 1;
      }
    }
  }
  return out;
}

}  // namespace peregrine::server
