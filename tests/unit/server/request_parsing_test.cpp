// Unit tests of the server's request parsing: typed fields naming the offending field, endpoint defaults,
// the nesting limit, model checks and the OpenAI error body.
#include <gtest/gtest.h>

#include "server/errors.h"
#include "server/openai_server.h"
#include "server/request_parsing.h"

namespace peregrine::server {
namespace {

HttpRequest body_of(const std::string& s) {
  HttpRequest r;
  r.body = s;
  return r;
}

// The HttpError a call throws (status 0 when none).
template <typename Fn>
HttpError error_of(Fn fn) {
  try {
    fn();
  } catch (const HttpError& e) {
    return e;
  }
  return HttpError(0, "");
}

ParsedSampling parse(const std::string& json, Endpoint endpoint = Endpoint::kCompletions) {
  const Json body = parse_json_body(body_of(json));
  Fields f(body);
  return parse_sampling(f, SamplingParams{}, endpoint);
}

TEST(RequestParsing, EndpointDefaultsForMaxTokens) {
  EXPECT_EQ(parse("{}").params.max_tokens, 16);
  SamplingParams defaults;
  defaults.max_tokens = std::nullopt;
  const Json body = Json::object();
  Fields f(body);
  EXPECT_FALSE(parse_sampling(f, defaults, Endpoint::kChat).params.max_tokens.has_value());
  EXPECT_EQ(parse(R"({"max_completion_tokens": 7})", Endpoint::kChat).params.max_tokens, 7);
  EXPECT_EQ(parse(R"({"max_tokens": 3.0})").params.max_tokens, 3);  // integral floats are integers
}

TEST(RequestParsing, ReadsSamplingFields) {
  auto p = parse(R"({"n": 2, "temperature": 0.5, "top_p": 0.9, "top_k": 40, "min_p": 0.1, "seed": -1,
                     "stop": "END", "stop_token_ids": [5, 6], "logit_bias": {"17": -100}, "ignore_eos": true,
                     "min_tokens": 2, "stream": true, "stream_options": {"include_usage": true}, "logprobs": 2,
                     "echo": true})");
  EXPECT_EQ(p.params.n, 2);
  EXPECT_FLOAT_EQ(p.params.temperature, 0.5f);
  EXPECT_EQ(p.params.top_k, 40);
  EXPECT_EQ(p.params.seed, static_cast<uint64_t>(-1));
  EXPECT_EQ(p.params.stop, std::vector<std::string>{"END"});
  EXPECT_EQ(p.params.stop_token_ids, (std::vector<int32_t>{5, 6}));
  ASSERT_EQ(p.params.logit_bias.size(), 1u);
  EXPECT_EQ(p.params.logit_bias[0].first, 17);
  EXPECT_TRUE(p.stream && p.include_usage && p.echo);
  EXPECT_EQ(p.params.logprobs, 2);
  EXPECT_EQ(p.params.prompt_logprobs, 2);  // echo with logprobs needs the prompt's
  auto chat = parse(R"({"logprobs": true, "top_logprobs": 3})", Endpoint::kChat);
  EXPECT_EQ(chat.top_logprobs, 3);
  EXPECT_EQ(chat.params.logprobs, 3);
}

TEST(RequestParsing, BadFieldsNameTheField) {
  struct Case {
    const char* json;
    const char* param;
  } cases[] = {
      {R"({"max_tokens": "7"})", "max_tokens"},  {R"({"max_tokens": 0})", "max_tokens"},
      {R"({"temperature": true})", "temperature"}, {R"({"top_p": 0})", "top_p"},
      {R"({"n": 1.5})", "n"},                      {R"({"stop": [1]})", "stop"},
      {R"({"logit_bias": {"x": 1}})", "logit_bias"}, {R"({"stream_options": {}})", "stream_options"},
      {R"({"best_of": 3})", "best_of"},            {R"({"stop_token_ids": [-1]})", "stop_token_ids"},
  };
  for (const Case& c : cases) {
    HttpError e = error_of([&] { parse(c.json); });
    EXPECT_EQ(e.status(), 400) << c.json;
    EXPECT_EQ(e.param().value_or(""), c.param) << c.json;
    EXPECT_NE(e.message().find(c.param), std::string::npos) << e.message();
  }
  HttpError chat = error_of([] { parse(R"({"top_logprobs": 2})", Endpoint::kChat); });
  EXPECT_EQ(chat.param().value_or(""), "top_logprobs");
}

TEST(RequestParsing, BodiesThatAreNotObjectsOrNestTooDeep) {
  EXPECT_EQ(error_of([] { parse_json_body(body_of("")); }).status(), 400);
  EXPECT_EQ(error_of([] { parse_json_body(body_of("{")); }).status(), 400);
  EXPECT_EQ(error_of([] { parse_json_body(body_of("[]")); }).status(), 400);
  const std::string deep = "{\"a\":" + std::string(100, '[') + std::string(100, ']') + "}";
  HttpError e = error_of([&] { parse_json_body(body_of(deep)); });
  EXPECT_EQ(e.status(), 400);
  EXPECT_NE(e.message().find("deeper"), std::string::npos);
  const std::string ok = "{\"a\":" + std::string(30, '[') + std::string(30, ']') + "}";
  EXPECT_NO_THROW(parse_json_body(body_of(ok)));
}

TEST(RequestParsing, UnknownModelIs404) {
  const Json body = Json::parse(R"({"model": "other"})");
  Fields f(body);
  HttpError e = error_of([&] { check_model(f, {"served"}); });
  EXPECT_EQ(e.status(), 404);
  EXPECT_EQ(e.param().value_or(""), "model");
  const Json good = Json::parse(R"({"model": "served"})");
  Fields g(good);
  EXPECT_NO_THROW(check_model(g, {"alias", "served"}));
}

TEST(Errors, OpenAiShapeAndStatusMapping) {
  const Json body = Json::parse(error_body(413, "too big", std::string("prompt")));
  EXPECT_EQ(body["error"]["message"], "too big");
  EXPECT_EQ(body["error"]["type"], "RequestEntityTooLargeError");
  EXPECT_EQ(body["error"]["param"], "prompt");
  EXPECT_EQ(body["error"]["code"], 413);
  EXPECT_TRUE(Json::parse(error_body(400, "x"))["error"]["param"].is_null());
  EXPECT_EQ(http_status_for(ErrorCode::kInvalidArgument), 400);
  EXPECT_EQ(http_status_for(ErrorCode::kUnavailable), 503);
  EXPECT_EQ(http_status_for(ErrorCode::kInternal), 500);
}

// The engine-stall defect: stop strings beyond what the engine bounds are refused up front, naming the field.
TEST(RequestParsing, StopStringsOverTheLimitsAre400) {
  const std::string huge = "\"" + std::string(70000, 'x') + "\"";
  std::string many = "[";
  for (int i = 0; i < 64; ++i) many += (i ? "," : "") + huge;
  many += "]";
  for (const std::string& stop : {many, huge, "[" + std::string(5, ' ') + "\"" + std::string(4097, 'y') + "\"]"}) {
    HttpError e = error_of([&] { parse("{\"stop\": " + stop + ", \"n\": 8}"); });
    EXPECT_EQ(e.status(), 400);
    EXPECT_EQ(e.param().value_or(""), "stop");
  }
  std::string total = "[";
  for (int i = 0; i < 5; ++i) total += (i ? ",\"" : "\"") + std::string(4000, 'z') + "\"";
  total += "]";
  EXPECT_EQ(error_of([&] { parse("{\"stop\": " + total + "}"); }).status(), 400);
  EXPECT_NO_THROW(parse("{\"stop\": [\"" + std::string(4096, 'z') + "\"]}"));
}

// vLLM answers malformed tools with 400; so does this server, naming the field.
TEST(RequestParsing, MalformedToolsAre400) {
  struct Case {
    const char* tools;
    const char* param;
  } cases[] = {
      {R"("calc")", "tools"},
      {R"([1])", "tools[0]"},
      {R"([{"type": "function"}])", "tools[0].function"},
      {R"([{"type": "function", "function": "add"}])", "tools[0].function"},
      {R"([{"type": "function", "function": {}}])", "tools[0].function.name"},
      {R"([{"type": "function", "function": {"name": 7}}])", "tools[0].function.name"},
      {R"([{"type": "function", "function": {"name": ""}}])", "tools[0].function.name"},
      {R"([{"type": "retrieval", "function": {"name": "a"}}])", "tools[0].type"},
      {R"([{"function": {"name": "a", "parameters": "x"}}])", "tools[0].function.parameters"},
      {R"([{"function": {"name": "a", "description": 3}}])", "tools[0].function.description"},
      {R"([{"function": {"name": "a", "strict": "yes"}}])", "tools[0].function.strict"},
  };
  for (const Case& c : cases) {
    const Json tools = Json::parse(c.tools);
    HttpError e = error_of([&] { validate_tools(&tools); });
    EXPECT_EQ(e.status(), 400) << c.tools;
    EXPECT_EQ(e.param().value_or(""), c.param) << c.tools;
  }
  const Json good = Json::parse(R"([{"type": "function", "function": {"name": "add", "description": "adds",
                                     "parameters": {"type": "object"}, "strict": false}}, {"function": {"name": "b"}}])");
  EXPECT_NO_THROW(validate_tools(&good));
  EXPECT_NO_THROW(validate_tools(nullptr));
}

TEST(RequestParsing, MessagesAndTheirToolCallsAreChecked) {
  const Json ok = Json::parse(R"([{"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]},
      {"role": "assistant", "content": null, "tool_calls": [{"id": "c1", "type": "function",
        "function": {"name": "add", "arguments": "{\"a\": 1}"}}]},
      {"role": "tool", "tool_call_id": "c1", "content": "2"}])");
  const Json n = normalize_messages(ok);
  EXPECT_EQ(n[0]["content"], "a\nb");
  struct Case {
    const char* messages;
    const char* param;
  } cases[] = {
      {R"([{"role": "assistant", "tool_calls": "x"}])", "messages[0].tool_calls"},
      {R"([{"role": "assistant", "tool_calls": [{"function": {"arguments": "{}"}}]}])", "messages[0].tool_calls[0].function.name"},
      {R"([{"role": "assistant", "tool_calls": [{"function": {"name": "a", "arguments": 5}}]}])",
       "messages[0].tool_calls[0].function.arguments"},
      {R"([{"role": "assistant", "tool_calls": [{"id": 5, "function": {"name": "a", "arguments": "{}"}}]}])",
       "messages[0].tool_calls[0].id"},
      {R"([{"role": "tool", "tool_call_id": 1, "content": "x"}])", "messages[0].tool_call_id"},
      {R"([{"role": "user", "content": [{"type": "image_url"}]}])", "messages[0].content[0].type"},
  };
  for (const Case& c : cases) {
    const Json m = Json::parse(c.messages);
    HttpError e = error_of([&] { normalize_messages(m); });
    EXPECT_EQ(e.status(), 400) << c.messages;
    EXPECT_EQ(e.param().value_or(""), c.param) << c.messages;
  }
}

TEST(Errors, UserInputIsQuotedOnlyTruncated) {
  EXPECT_EQ(quote_input("short"), "short");
  const std::string cut = quote_input(std::string(1000, 'a'));
  EXPECT_EQ(cut, std::string(64, 'a') + "...");
  // Never in the middle of a UTF-8 character.
  std::string utf8 = std::string(63, 'a') + "\xc3\xa9" + std::string(100, 'b');
  EXPECT_EQ(quote_input(utf8), std::string(63, 'a') + "...");
  // The unknown model is quoted, not echoed whole.
  const Json body = Json{{"model", std::string(100000, 'm')}};
  Fields f(body);
  HttpError e = error_of([&] { check_model(f, {"served"}); });
  EXPECT_LT(e.message().size(), 200u);
  // Any message is cut in the body at the last.
  const Json err = Json::parse(error_body(400, std::string(50000, 'e')));
  EXPECT_LE(err["error"]["message"].get<std::string>().size(), 1100u);
}

TEST(ApiKey, BearerSchemeInAnyCaseAndExactKey) {
  const std::string key = "sekrit-key";
  const std::string bearer = "Bearer sekrit-key", lower = "bearer sekrit-key", upper = "BEARER  sekrit-key";
  EXPECT_TRUE(api_key_matches(&bearer, key));
  EXPECT_TRUE(api_key_matches(&lower, key));
  EXPECT_TRUE(api_key_matches(&upper, key));
  for (const std::string bad : {"Bearer sekrit-ke", "Bearer sekrit-keyy", "Basic sekrit-key", "sekrit-key",
                                "Bearer", "Bearer ", "Bearersekrit-key", "Bearer SEKRIT-KEY", ""}) {
    EXPECT_FALSE(api_key_matches(&bad, key)) << bad;
  }
  EXPECT_FALSE(api_key_matches(nullptr, key));
  const std::string empty_token = "Bearer x";
  EXPECT_FALSE(api_key_matches(&empty_token, ""));
}

}  // namespace
}  // namespace peregrine::server
