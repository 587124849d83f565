// Parsing OpenAI/vLLM request bodies: typed field readers whose errors name the field (400), and the sampling
// fields shared by /v1/completions and /v1/chat/completions turned into peregrine::SamplingParams.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "peregrine/sampling_params.h"
#include "server/http_server.h"

namespace peregrine::server {

using Json = nlohmann::ordered_json;

// The request body as a JSON object; 400 when it is not valid JSON or not an object.
Json parse_json_body(const HttpRequest& request);

// Typed access to optional fields of a JSON object. Absent and null fields read as nullopt; a field of the wrong
// type or out of range throws HttpError(400) with the field as `param`.
class Fields {
 public:
  explicit Fields(const Json& object) : object_(object) {}
  const Json& object() const { return object_; }
  const Json* get(const char* name) const;
  std::optional<double> number(const char* name, double lo, double hi) const;
  std::optional<int64_t> integer(const char* name, int64_t lo, int64_t hi) const;
  std::optional<bool> boolean(const char* name) const;
  std::optional<std::string> string(const char* name) const;
  // A string or a list of strings (stop).
  std::vector<std::string> strings(const char* name, size_t max_count) const;
  std::vector<int32_t> int_list(const char* name, size_t max_count) const;

 private:
  const Json& object_;
};

// Which endpoint is parsing, for the fields that differ (max_tokens names and defaults, logprobs shape).
enum class Endpoint { kCompletions, kChat };

struct ParsedSampling {
  SamplingParams params;
  bool stream = false;
  bool include_usage = false;
  bool continuous_usage = false;  // stream_options.continuous_usage_stats: usage in every chunk
  bool echo = false;
  int top_logprobs = -1;  // completions: logprobs; chat: top_logprobs when logprobs is true; -1 = none
  bool max_tokens_given = false;
};

// Reads the sampling fields on top of the engine's defaults (generation_config.json).
ParsedSampling parse_sampling(const Fields& fields, const SamplingParams& defaults, Endpoint endpoint);

// The constraint of a request, from whichever field carries it: `structured_outputs` (vLLM), `response_format`
// (json_object, json_schema; text = none), or the older guided_json / guided_regex / guided_choice /
// guided_grammar. More than one is a 400; a constraint field that cannot be honoured (whitespace patterns,
// structural tags) is a 400 naming it. Called by parse_sampling.
std::optional<StructuredOutputsParams> parse_structured_outputs(const Fields& fields);

// OpenAI's json_schema object ({"name", "schema", "strict", "description"}) as a constraint; `field` names it.
StructuredOutputsParams json_schema_constraint(const Json& json_schema, const std::string& field);

// Chat messages with text-part content flattened to strings (what chat templates expect); 400 naming the field
// (messages[i].content[j].type, ...) for a malformed message or assistant tool_calls.
Json normalize_messages(const Json& messages);

// `tools`: OpenAI function tools, checked as vLLM checks them ({"type": "function", "function": {"name": str,
// "description"?: str, "parameters"?: object, "strict"?: bool}}); 400 naming the field. nullptr: none.
void validate_tools(const Json* tools);

// tool_choice "required" (named empty) or a named function: the constraint on the output. Required: a JSON list
// of {"name": const, "parameters": the tool's schema} (at most one element when parallel is false); named: the
// function's parameters schema. 400 naming tool_choice when the name is not among the tools.
StructuredOutputsParams forced_tools_constraint(const Json& tools, const std::string& named, bool parallel);

// tool_choice as parsed ("none", "auto", "required" or "named" with `named`) checked against the tools (an array;
// empty: none) and the server: "auto" with tools needs a tool-call parser (vLLM's 400); "required" and a named
// function need tools and no other constraint (`conflicting_field` names the request's), and set
// params.structured_outputs to the forced calls. Returns whether calls are forced.
bool apply_tool_choice(const std::string& tool_choice, const std::string& named, const Json& tools, bool parallel,
                       bool have_tool_parser, const std::string& conflicting_field, SamplingParams& params);

// Checks `model` against the served names: 404 "The model `x` does not exist." when it is not one of them.
void check_model(const Fields& fields, const std::vector<std::string>& served_names);

}  // namespace peregrine::server
