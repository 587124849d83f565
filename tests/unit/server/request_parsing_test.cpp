// Unit tests of the server's request parsing: typed fields naming the offending field, endpoint defaults,
// the nesting limit, model checks and the OpenAI error body.
#include <gtest/gtest.h>

#include "server/errors.h"
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

}  // namespace
}  // namespace peregrine::server
