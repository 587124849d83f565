// Typed request-field parsing and the shared sampling fields (see request_parsing.h).
#include "server/request_parsing.h"

#include <cmath>

#include "server/errors.h"

namespace peregrine::server {
namespace {

std::string type_name(const Json& v) {
  if (v.is_string()) return "a string";
  if (v.is_boolean()) return "a boolean";
  if (v.is_number_integer() || v.is_number_unsigned()) return "an integer";
  if (v.is_number()) return "a number";
  if (v.is_array()) return "an array";
  if (v.is_object()) return "an object";
  return "null";
}

std::string fmt(double v) {
  std::string s = std::to_string(v);
  while (s.size() > 1 && s.back() == '0') s.pop_back();
  if (!s.empty() && s.back() == '.') s.pop_back();
  return s;
}

}  // namespace

Json parse_json_body(const HttpRequest& request) {
  if (request.body.empty()) throw HttpError(400, "the request body is empty; expected a JSON object");
  // NOTE: copying, dumping and rendering JSON recurse, so nesting is bounded while parsing.
  constexpr int kMaxDepth = 64;
  Json::parser_callback_t limit_depth = [](int depth, nlohmann::json::parse_event_t, Json&) {
    if (depth > kMaxDepth) {
      throw HttpError(400, "the request body nests JSON deeper than " + std::to_string(kMaxDepth) + " levels");
    }
    return true;
  };
  Json body = Json::parse(request.body, limit_depth, /*allow_exceptions=*/false);
  if (body.is_discarded()) throw HttpError(400, "the request body is not valid JSON");
  if (!body.is_object()) throw HttpError(400, "the request body must be a JSON object, got " + type_name(body));
  return body;
}

const Json* Fields::get(const char* name) const {
  auto it = object_.find(name);
  if (it == object_.end() || it->is_null()) return nullptr;
  return &*it;
}

std::optional<double> Fields::number(const char* name, double lo, double hi) const {
  const Json* v = get(name);
  if (!v) return std::nullopt;
  if (!v->is_number()) throw_bad_field(name, "expected a number, got " + type_name(*v));
  const double d = v->get<double>();
  if (!std::isfinite(d) || d < lo || d > hi) {
    throw_bad_field(name, "must be in [" + fmt(lo) + ", " + fmt(hi) + "], got " + fmt(d));
  }
  return d;
}

std::optional<int64_t> Fields::integer(const char* name, int64_t lo, int64_t hi) const {
  const Json* v = get(name);
  if (!v) return std::nullopt;
  int64_t i = 0;
  if (v->is_number_integer()) {
    i = v->get<int64_t>();
  } else if (v->is_number_unsigned()) {
    const uint64_t u = v->get<uint64_t>();
    if (u > static_cast<uint64_t>(INT64_MAX)) throw_bad_field(name, "integer out of range");
    i = static_cast<int64_t>(u);
  } else if (v->is_number_float() && std::isfinite(v->get<double>()) && std::floor(v->get<double>()) == v->get<double>() &&
             std::fabs(v->get<double>()) < 9.0e15) {
    i = static_cast<int64_t>(v->get<double>());  // 3.0 is accepted as 3, like pydantic
  } else {
    throw_bad_field(name, "expected an integer, got " + type_name(*v));
  }
  if (i < lo || i > hi) {
    throw_bad_field(name, "must be in [" + std::to_string(lo) + ", " + std::to_string(hi) + "], got " + std::to_string(i));
  }
  return i;
}

std::optional<bool> Fields::boolean(const char* name) const {
  const Json* v = get(name);
  if (!v) return std::nullopt;
  if (!v->is_boolean()) throw_bad_field(name, "expected a boolean, got " + type_name(*v));
  return v->get<bool>();
}

std::optional<std::string> Fields::string(const char* name) const {
  const Json* v = get(name);
  if (!v) return std::nullopt;
  if (!v->is_string()) throw_bad_field(name, "expected a string, got " + type_name(*v));
  return v->get<std::string>();
}

std::vector<std::string> Fields::strings(const char* name, size_t max_count) const {
  std::vector<std::string> out;
  const Json* v = get(name);
  if (!v) return out;
  if (v->is_string()) {
    out.push_back(v->get<std::string>());
  } else if (v->is_array()) {
    if (v->size() > max_count) throw_bad_field(name, "at most " + std::to_string(max_count) + " entries allowed");
    for (const Json& e : *v) {
      if (!e.is_string()) throw_bad_field(name, "expected strings in the list, got " + type_name(e));
      out.push_back(e.get<std::string>());
    }
  } else {
    throw_bad_field(name, "expected a string or a list of strings, got " + type_name(*v));
  }
  for (const auto& s : out) {
    if (s.empty()) throw_bad_field(name, "empty strings are not allowed");
  }
  return out;
}

std::vector<int32_t> Fields::int_list(const char* name, size_t max_count) const {
  std::vector<int32_t> out;
  const Json* v = get(name);
  if (!v) return out;
  if (!v->is_array()) throw_bad_field(name, "expected a list of integers, got " + type_name(*v));
  if (v->size() > max_count) throw_bad_field(name, "at most " + std::to_string(max_count) + " entries allowed");
  for (const Json& e : *v) {
    if (!e.is_number_integer() && !e.is_number_unsigned()) {
      throw_bad_field(name, "expected integers in the list, got " + type_name(e));
    }
    const int64_t i = e.get<int64_t>();
    if (i < 0 || i > INT32_MAX) throw_bad_field(name, "token id " + std::to_string(i) + " is out of range");
    out.push_back(static_cast<int32_t>(i));
  }
  return out;
}

namespace {

std::string at(const std::string& field, size_t i) { return field + "[" + std::to_string(i) + "]"; }

// Assistant tool_calls: [{"id"?: str, "type"?: "function", "function": {"name": str, "arguments": str | object}}].
void validate_tool_calls(const Json& calls, const std::string& name) {
  if (!calls.is_array()) throw_bad_field(name, "expected a list of tool calls");
  for (size_t i = 0; i < calls.size(); ++i) {
    const Json& c = calls[i];
    const std::string cname = at(name, i);
    if (!c.is_object()) throw_bad_field(cname, "each tool call must be an object");
    if (auto id = c.find("id"); id != c.end() && !id->is_string() && !id->is_null()) {
      throw_bad_field(cname + ".id", "expected a string");
    }
    if (auto type = c.find("type"); type != c.end() && !type->is_null() && *type != "function") {
      throw_bad_field(cname + ".type", "expected \"function\"");
    }
    auto fn = c.find("function");
    if (fn == c.end() || !fn->is_object()) throw_bad_field(cname + ".function", "an object with name and arguments is required");
    auto fname = fn->find("name");
    if (fname == fn->end() || !fname->is_string()) throw_bad_field(cname + ".function.name", "a string name is required");
    auto args = fn->find("arguments");
    if (args == fn->end() || !(args->is_string() || args->is_object())) {
      throw_bad_field(cname + ".function.arguments", "expected a JSON string (or an object)");
    }
  }
}

}  // namespace

Json normalize_messages(const Json& messages) {
  if (!messages.is_array()) throw_bad_field("messages", "expected a list of messages");
  if (messages.empty()) throw_bad_field("messages", "at least one message is required");
  if (messages.size() > 100000) throw_bad_field("messages", "too many messages");
  Json out = Json::array();
  for (size_t i = 0; i < messages.size(); ++i) {
    const Json& m = messages[i];
    const std::string name = at("messages", i);
    if (!m.is_object()) throw_bad_field(name, "each message must be an object");
    auto role = m.find("role");
    if (role == m.end() || !role->is_string()) throw_bad_field(name + ".role", "a string role is required");
    Json msg = m;
    auto content = m.find("content");
    if (content != m.end() && content->is_array()) {
      std::string text;
      for (size_t j = 0; j < content->size(); ++j) {
        const Json& part = (*content)[j];
        const std::string pname = at(name + ".content", j);
        if (!part.is_object()) throw_bad_field(pname, "each content part must be an object");
        auto type = part.find("type");
        if (type == part.end() || !type->is_string()) throw_bad_field(pname + ".type", "a string type is required");
        if (*type != "text") {
          throw_bad_field(pname + ".type",
                          "content type '" + quote_input(type->get<std::string>()) + "' is not supported (text only)");
        }
        auto t = part.find("text");
        if (t == part.end() || !t->is_string()) throw_bad_field(pname + ".text", "a string text is required");
        if (!text.empty()) text += "\n";
        text += t->get<std::string>();
      }
      msg["content"] = text;
    } else if (content != m.end() && !content->is_string() && !content->is_null()) {
      throw_bad_field(name + ".content", "expected a string, a list of content parts or null");
    }
    if (auto calls = m.find("tool_calls"); calls != m.end() && !calls->is_null()) {
      validate_tool_calls(*calls, name + ".tool_calls");
    }
    if (auto id = m.find("tool_call_id"); id != m.end() && !id->is_string() && !id->is_null()) {
      throw_bad_field(name + ".tool_call_id", "expected a string");
    }
    if (auto n = m.find("name"); n != m.end() && !n->is_string() && !n->is_null()) {
      throw_bad_field(name + ".name", "expected a string");
    }
    out.push_back(std::move(msg));
  }
  return out;
}

void validate_tools(const Json* tools) {
  if (!tools) return;
  if (!tools->is_array()) throw_bad_field("tools", "expected a list of tools");
  if (tools->size() > 1024) throw_bad_field("tools", "at most 1024 tools allowed");
  for (size_t i = 0; i < tools->size(); ++i) {
    const Json& t = (*tools)[i];
    const std::string name = at("tools", i);
    if (!t.is_object()) throw_bad_field(name, "each tool must be an object");
    if (auto type = t.find("type"); type != t.end() && *type != "function") {
      throw_bad_field(name + ".type", "only \"function\" tools are supported");
    }
    auto fn = t.find("function");
    if (fn == t.end() || !fn->is_object()) throw_bad_field(name + ".function", "an object with the function's name is required");
    auto fname = fn->find("name");
    if (fname == fn->end() || !fname->is_string() || fname->get_ref<const std::string&>().empty()) {
      throw_bad_field(name + ".function.name", "a non-empty string name is required");
    }
    if (auto d = fn->find("description"); d != fn->end() && !d->is_string() && !d->is_null()) {
      throw_bad_field(name + ".function.description", "expected a string");
    }
    if (auto p = fn->find("parameters"); p != fn->end() && !p->is_object() && !p->is_null()) {
      throw_bad_field(name + ".function.parameters", "expected a JSON Schema object");
    }
    if (auto st = fn->find("strict"); st != fn->end() && !st->is_boolean() && !st->is_null()) {
      throw_bad_field(name + ".function.strict", "expected a boolean");
    }
  }
}

namespace {

// Local references of a schema moved under #/$defs/<prefix>.
void rebase_refs(Json& j, const std::string& prefix) {
  if (j.is_object()) {
    for (auto it = j.begin(); it != j.end(); ++it) {
      if (it.key() == "$ref" && it->is_string()) {
        const std::string r = it->get<std::string>();
        if (!r.empty() && r[0] == '#') *it = "#/$defs/" + prefix + r.substr(1);
      } else {
        rebase_refs(*it, prefix);
      }
    }
  } else if (j.is_array()) {
    for (Json& e : j) rebase_refs(e, prefix);
  }
}

}  // namespace

bool apply_tool_choice(const std::string& tool_choice, const std::string& named, const Json& tools, bool parallel,
                       bool have_tool_parser, const std::string& conflicting_field, SamplingParams& params) {
  const bool have_tools = tools.is_array() && !tools.empty();
  if (have_tools && tool_choice == "auto" && !have_tool_parser) {
    throw HttpError(400, "\"auto\" tool choice requires --enable-auto-tool-choice and --tool-call-parser to be set");
  }
  if (tool_choice != "required" && tool_choice != "named") return false;
  if (!have_tools) throw_bad_field("tool_choice", "\"" + tool_choice + "\" needs a non-empty list of tools");
  if (params.structured_outputs) throw_bad_field("tool_choice", "cannot be combined with " + conflicting_field);
  params.structured_outputs = forced_tools_constraint(tools, named, parallel);
  return true;
}

StructuredOutputsParams forced_tools_constraint(const Json& tools, const std::string& named, bool parallel) {
  StructuredOutputsParams so;
  auto params_of = [](const Json& tool) {
    const Json& fn = tool["function"];
    auto p = fn.find("parameters");
    if (p == fn.end() || p->is_null()) return Json{{"type", "object"}, {"properties", Json::object()}};
    return *p;
  };
  if (!named.empty()) {
    for (size_t i = 0; i < tools.size(); ++i) {
      if (tools[i]["function"]["name"] == named) {
        so.json = params_of(tools[i]).dump();
        so.field = "tools[" + std::to_string(i) + "].function.parameters";
        return so;
      }
    }
    throw_bad_field("tool_choice.function.name", "'" + quote_input(named) + "' is not one of the tools");
  }
  Json defs = Json::object();
  Json any_of = Json::array();
  for (size_t i = 0; i < tools.size(); ++i) {
    const std::string key = "tool_" + std::to_string(i);
    Json p = params_of(tools[i]);
    rebase_refs(p, key);
    defs[key] = std::move(p);
    any_of.push_back(Json{{"type", "object"},
                          {"properties", Json{{"name", Json{{"const", tools[i]["function"]["name"]}}},
                                              {"parameters", Json{{"$ref", "#/$defs/" + key}}}}},
                          {"required", Json::array({"name", "parameters"})}});
  }
  Json schema{{"type", "array"}, {"minItems", 1}, {"items", Json{{"anyOf", std::move(any_of)}}}, {"$defs", std::move(defs)}};
  if (!parallel) schema["maxItems"] = 1;
  so.json = schema.dump();
  so.field = "tools";
  return so;
}

void check_model(const Fields& fields, const std::vector<std::string>& served_names) {
  const auto model = fields.string("model");
  if (!model) return;
  for (const auto& name : served_names) {
    if (*model == name) return;
  }
  throw HttpError(404, "The model `" + quote_input(*model) + "` does not exist.", std::string("model"));
}

StructuredOutputsParams json_schema_constraint(const Json& js, const std::string& field) {
  if (!js.is_object()) throw_bad_field(field, "expected an object with name and schema");
  StructuredOutputsParams so;
  if (auto n = js.find("name"); n != js.end() && !n->is_string() && !n->is_null()) throw_bad_field(field + ".name", "expected a string");
  if (auto st = js.find("strict"); st != js.end() && !st->is_boolean() && !st->is_null()) {
    throw_bad_field(field + ".strict", "expected a boolean");
  }
  auto schema = js.find("schema");
  if (schema == js.end() || schema->is_null()) {
    so.json = "{}";  // no schema: any JSON value
  } else if (schema->is_object() || schema->is_boolean()) {
    so.json = schema->dump();
  } else {
    throw_bad_field(field + ".schema", "expected a JSON Schema object");
  }
  so.field = field + ".schema";
  return so;
}

std::optional<StructuredOutputsParams> parse_structured_outputs(const Fields& f) {
  std::optional<StructuredOutputsParams> out;
  std::string from;
  auto set = [&](StructuredOutputsParams so, const std::string& field) {
    if (out) throw_bad_field(field, "only one constraint may be given, but " + from + " is given too");
    if (so.field.empty() || so.field == "structured_outputs") so.field = field;  // guided_*: their own name
    out = std::move(so);
    from = field;
  };
  auto schema_text = [](const Json& v, const std::string& field) {
    if (v.is_string()) return v.get<std::string>();
    if (v.is_object() || v.is_boolean()) return v.dump();
    throw_bad_field(field, "expected a JSON Schema (an object or its JSON text)");
  };
  if (const Json* so = f.get("structured_outputs")) {
    if (!so->is_object()) throw_bad_field("structured_outputs", "expected an object");
    for (auto it = so->begin(); it != so->end(); ++it) {
      const std::string& k = it.key();
      const std::string field = "structured_outputs." + k;
      const Json& v = it.value();
      if (v.is_null()) continue;
      StructuredOutputsParams p;
      p.field = field;
      if (k == "json") {
        p.json = schema_text(v, field);
      } else if (k == "regex") {
        if (!v.is_string()) throw_bad_field(field, "expected a string");
        p.regex = v.get<std::string>();
      } else if (k == "choice") {
        if (!v.is_array()) throw_bad_field(field, "expected a list of strings");
        std::vector<std::string> c;
        for (const Json& e : v) {
          if (!e.is_string()) throw_bad_field(field, "expected a list of strings");
          c.push_back(e.get<std::string>());
        }
        p.choice = std::move(c);
      } else if (k == "grammar") {
        if (!v.is_string()) throw_bad_field(field, "expected a string");
        p.grammar = v.get<std::string>();
      } else if (k == "json_object") {
        if (!v.is_boolean()) throw_bad_field(field, "expected a boolean");
        if (!v.get<bool>()) continue;
        p.json_object = true;
      } else if (k == "disable_fallback" || k == "disable_any_whitespace" || k == "disable_additional_properties") {
        if (!v.is_boolean()) throw_bad_field(field, "expected a boolean");
        continue;  // our engine never falls back, writes no free whitespace and adds no unlisted properties
      } else if (k == "whitespace_pattern" || k == "structural_tag") {
        throw_bad_field(field, "is not supported");
      } else {
        throw_bad_field(field, "unknown field of structured_outputs");
      }
      set(std::move(p), field);
    }
    if (!out) throw_bad_field("structured_outputs", "one of json, regex, choice, grammar or json_object is required");
  }
  if (const Json* rf = f.get("response_format")) {
    if (!rf->is_object()) throw_bad_field("response_format", "expected an object with a type");
    auto type = rf->find("type");
    if (type == rf->end() || !type->is_string()) throw_bad_field("response_format.type", "a string type is required");
    const std::string t = type->get<std::string>();
    if (t == "json_object") {
      StructuredOutputsParams p;
      p.json_object = true;
      set(std::move(p), "response_format");
    } else if (t == "json_schema") {
      auto js = rf->find("json_schema");
      if (js == rf->end() || js->is_null()) throw_bad_field("response_format.json_schema", "is required for type json_schema");
      set(json_schema_constraint(*js, "response_format.json_schema"), "response_format");
    } else if (t != "text") {
      throw_bad_field("response_format.type", "expected \"text\", \"json_object\" or \"json_schema\", got '" + quote_input(t) + "'");
    }
  }
  if (const Json* g = f.get("guided_json")) {
    StructuredOutputsParams p;
    p.json = schema_text(*g, "guided_json");
    set(std::move(p), "guided_json");
  }
  if (auto r = f.string("guided_regex")) {
    StructuredOutputsParams p;
    p.regex = *r;
    set(std::move(p), "guided_regex");
  }
  if (const Json* c = f.get("guided_choice")) {
    if (!c->is_array()) throw_bad_field("guided_choice", "expected a list of strings");
    std::vector<std::string> list;
    for (const Json& e : *c) {
      if (!e.is_string()) throw_bad_field("guided_choice", "expected a list of strings");
      list.push_back(e.get<std::string>());
    }
    StructuredOutputsParams p;
    p.choice = std::move(list);
    set(std::move(p), "guided_choice");
  }
  if (auto g = f.string("guided_grammar")) {
    StructuredOutputsParams p;
    p.grammar = *g;
    set(std::move(p), "guided_grammar");
  }
  if (f.get("guided_whitespace_pattern")) throw_bad_field("guided_whitespace_pattern", "is not supported");
  if (auto b = f.string("guided_decoding_backend")) {
    (void)b;  // one engine: any backend name is served by it
  }
  return out;
}

ParsedSampling parse_sampling(const Fields& f, const SamplingParams& defaults, Endpoint endpoint) {
  ParsedSampling out;
  SamplingParams& p = out.params;
  p = defaults;
  // Completions default to 16 tokens (OpenAI); chat to the rest of the context, unless generation_config says.
  p.max_tokens = endpoint == Endpoint::kCompletions ? defaults.max_tokens.value_or(16) : defaults.max_tokens;
  constexpr int64_t kMaxTokens = int64_t{1} << 30;
  std::optional<int64_t> max_tokens = f.integer("max_tokens", 1, kMaxTokens);
  if (endpoint == Endpoint::kChat) {
    if (auto mct = f.integer("max_completion_tokens", 1, kMaxTokens)) max_tokens = mct;
  }
  if (max_tokens) {
    p.max_tokens = static_cast<int>(*max_tokens);
    out.max_tokens_given = true;
  }
  // Types here; value ranges are SamplingParams::validate's (called at the end, once, as for every caller).
  constexpr int64_t kInt32 = INT32_MAX;
  if (auto v = f.integer("n", INT32_MIN, kInt32)) p.n = static_cast<int>(*v);
  if (auto best_of = f.integer("best_of", INT32_MIN, kInt32); best_of && *best_of != p.n) {
    throw_bad_field("best_of", "only best_of equal to n is supported");
  }
  constexpr double kAny = 3.0e38;  // finite floats; ranges below are the engine's
  // The OpenAI API caps temperature at 2 (an API contract, beside the engine's >= 0).
  if (auto v = f.number("temperature", -kAny, 2.0)) p.temperature = static_cast<float>(*v);
  if (auto v = f.number("top_p", -kAny, kAny)) p.top_p = static_cast<float>(*v);
  if (auto v = f.integer("top_k", INT32_MIN, kInt32)) p.top_k = static_cast<int>(*v);
  if (auto v = f.number("min_p", -kAny, kAny)) p.min_p = static_cast<float>(*v);
  if (auto v = f.number("presence_penalty", -kAny, kAny)) p.presence_penalty = static_cast<float>(*v);
  if (auto v = f.number("frequency_penalty", -kAny, kAny)) p.frequency_penalty = static_cast<float>(*v);
  if (auto v = f.number("repetition_penalty", -kAny, kAny)) p.repetition_penalty = static_cast<float>(*v);
  if (auto v = f.integer("seed", INT64_MIN, INT64_MAX)) p.seed = static_cast<uint64_t>(*v);
  if (const Json* bias = f.get("logit_bias")) {
    if (!bias->is_object()) throw_bad_field("logit_bias", "expected an object of token id -> bias");
    if (bias->size() > 4096) throw_bad_field("logit_bias", "at most 4096 entries allowed");
    for (auto it = bias->begin(); it != bias->end(); ++it) {
      const std::string& key = it.key();
      char* end = nullptr;
      const long long id = std::strtoll(key.c_str(), &end, 10);
      if (key.empty() || *end != '\0' || id < 0 || id > INT32_MAX) {
        throw_bad_field("logit_bias", "keys must be token ids, got '" + quote_input(key) + "'");
      }
      if (!it.value().is_number() || !std::isfinite(it.value().get<double>())) {
        throw_bad_field("logit_bias", "the bias of token " + key + " must be a number");
      }
      p.logit_bias.emplace_back(static_cast<int32_t>(id), it.value().get<float>());
    }
  }
  p.stop = f.strings("stop", SamplingParams::kMaxStopStrings);  // the count bounds parsing work; sizes: validate
  p.stop_token_ids = f.int_list("stop_token_ids", 1024);
  if (auto v = f.boolean("include_stop_str_in_output")) p.include_stop_str_in_output = *v;
  if (auto v = f.boolean("ignore_eos")) p.ignore_eos = *v;
  if (auto v = f.integer("min_tokens", INT32_MIN, kInt32)) p.min_tokens = static_cast<int>(*v);
  if (auto v = f.boolean("skip_special_tokens")) p.skip_special_tokens = *v;
  if (auto v = f.boolean("spaces_between_special_tokens")) p.spaces_between_special_tokens = *v;
  if (auto v = f.integer("prompt_logprobs", INT32_MIN, kInt32)) p.prompt_logprobs = static_cast<int>(*v);

  if (endpoint == Endpoint::kCompletions) {
    if (auto v = f.integer("logprobs", 0, SamplingParams::kMaxLogprobs)) out.top_logprobs = static_cast<int>(*v);
    if (auto v = f.boolean("echo")) out.echo = *v;
    if (out.echo && out.top_logprobs >= 0 && !p.prompt_logprobs) p.prompt_logprobs = out.top_logprobs;
  } else {
    const bool logprobs = f.boolean("logprobs").value_or(false);
    const auto top = f.integer("top_logprobs", 0, SamplingParams::kMaxLogprobs);
    if (top && !logprobs) throw_bad_field("top_logprobs", "requires logprobs to be true");
    if (logprobs) out.top_logprobs = static_cast<int>(top.value_or(0));
  }
  if (out.top_logprobs >= 0) p.logprobs = out.top_logprobs;

  out.stream = f.boolean("stream").value_or(false);
  if (const Json* so = f.get("stream_options")) {
    if (!out.stream) throw_bad_field("stream_options", "only allowed when stream is true");
    if (!so->is_object()) throw_bad_field("stream_options", "expected an object");
    Fields sf(*so);
    out.include_usage = sf.boolean("include_usage").value_or(false);
    out.continuous_usage = sf.boolean("continuous_usage_stats").value_or(false);
  }
  p.structured_outputs = parse_structured_outputs(f);
  // The one validator of sampling values; the vocabulary-dependent checks run when the engine takes the request.
  try {
    p.validate(0);
  } catch (const Error& e) {
    throw HttpError(400, e.message(), e.field().empty() ? std::nullopt : std::optional<std::string>(e.field()));
  }
  return out;
}

}  // namespace peregrine::server
