// Tool-call parsers for chat completions (`--enable-auto-tool-choice --tool-call-parser NAME`, as in vLLM): they
// find the calls a model wrote in its own format and turn them into OpenAI `tool_calls`.
//   hermes      <tool_call>{"name": ..., "arguments": {...}}</tool_call> (Qwen2.5/Qwen3, Hermes), any number
//   llama3_json {"name": ..., "parameters": {...}} as the whole output, optionally after <|python_tag|>, several
//               separated by ';' (Llama-3.1/3.2/3.3 JSON tool calling)
//   mistral     [TOOL_CALLS][{"name": ..., "arguments": {...}}, ...]  or  [TOOL_CALLS]name[ARGS]{...}, with an
//               optional [CALL_ID]id before [ARGS] (Mistral, by tokenizer version)
// Output that does not parse as calls stays ordinary content. With calls, the content is the text before the first
// call (nullopt when only whitespace), as in vLLM.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace peregrine::server {

enum class ToolParserKind { kHermes, kLlama3Json, kMistral };

// Parser by its vLLM name; nullopt for an unknown name.
std::optional<ToolParserKind> tool_parser_from_name(std::string_view name);
// "hermes, llama3_json, mistral" (for help and error messages).
std::string tool_parser_names();

struct ToolCall {
  std::string name;
  std::string arguments;  // JSON text of the arguments object
};

struct ParsedToolCalls {
  std::optional<std::string> content;  // text outside the calls; nullopt where there is none
  std::vector<ToolCall> calls;         // empty: the output is plain content
};

// A fresh OpenAI-style call id ("chatcmpl-tool-" and 32 hex digits).
std::string new_tool_call_id();

// Parses a whole model output.
ParsedToolCalls parse_tool_calls(ToolParserKind kind, std::string_view text);

// Streaming: text deltas in, content deltas out. Content is released as soon as it cannot be the start of a
// tool call; from the first call marker on, text is held back and parsed at the end.
class ToolCallStream {
 public:
  explicit ToolCallStream(ToolParserKind kind) : kind_(kind) {}
  // Adds a delta of model output; returns the content that can be sent now (possibly empty).
  std::string feed(std::string_view delta);
  // At the end of the output: the content not yet sent (nullopt when none) and the calls.
  ParsedToolCalls finish();

 private:
  ToolParserKind kind_;
  std::string text_;
  size_t sent_ = 0;       // bytes of text_ already released as content
  size_t scanned_ = 0;    // llama3_json: leading whitespace already skipped
  bool holding_ = false;  // a call marker was seen: everything from here waits for finish()
  bool plain_ = false;    // llama3_json: the output does not start a call, so all of it is content
};

}  // namespace peregrine::server

namespace peregrine::server {

// tool_choice "required": the output is constrained to a JSON list [{"name": ..., "parameters": {...}}, ...]
// (vLLM's form). parse_required_tool_calls reads the whole list (empty when it does not parse);
// RequiredToolCallStream turns output deltas into streamed tool-call deltas: a call's header (index, name) once its
// name is complete, then its arguments as they come, so the concatenated arguments are each call's JSON.
std::vector<ToolCall> parse_required_tool_calls(std::string_view text);

struct ToolCallDelta {
  size_t index = 0;
  std::optional<std::string> name;  // set on the call's first delta
  std::string arguments;
};

class RequiredToolCallStream {
 public:
  std::vector<ToolCallDelta> feed(std::string_view delta);

 private:
  int depth_ = 0;
  bool in_string_ = false, escape_ = false;
  bool in_args_ = false;
  bool args_started_ = false;
  int args_depth_ = 0;    // depth at which the arguments value started
  std::string element_;   // the current element's text before its arguments
  size_t index_ = 0;
  bool started_ = false;  // the current element's header was sent
};

}  // namespace peregrine::server
