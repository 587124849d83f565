// Tool-call parsers: whole outputs (hermes, llama3_json, mistral in both formats), text that must stay content,
// and the streaming splitter fed one character at a time (content released early, never part of a call).
#include "server/tool_calls.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

namespace peregrine::server {
namespace {

using Json = nlohmann::json;

void expect_call(const ToolCall& call, const std::string& name, const Json& args) {
  EXPECT_EQ(call.name, name);
  EXPECT_EQ(Json::parse(call.arguments), args) << call.arguments;
}

TEST(ToolCalls, ParserNames) {
  EXPECT_EQ(tool_parser_from_name("hermes"), ToolParserKind::kHermes);
  EXPECT_EQ(tool_parser_from_name("llama3_json"), ToolParserKind::kLlama3Json);
  EXPECT_EQ(tool_parser_from_name("mistral"), ToolParserKind::kMistral);
  EXPECT_FALSE(tool_parser_from_name("pythonic_x").has_value());
  const std::string id = new_tool_call_id();
  EXPECT_EQ(id.rfind("chatcmpl-tool-", 0), 0u);
  EXPECT_EQ(id.size(), 14u + 32u);
  EXPECT_NE(id, new_tool_call_id());
}

TEST(ToolCalls, Hermes) {
  auto p = parse_tool_calls(ToolParserKind::kHermes,
                            "Let me check.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", "
                            "\"unit\": \"c\"}}\n</tool_call>\n<tool_call>\n{\"name\": \"get_time\", \"arguments\": {}}\n"
                            "</tool_call>");
  ASSERT_EQ(p.calls.size(), 2u);
  expect_call(p.calls[0], "get_weather", {{"city", "Paris"}, {"unit", "c"}});
  expect_call(p.calls[1], "get_time", Json::object());
  EXPECT_EQ(p.content, "Let me check.\n");
  // Only calls: no content. An unterminated call (cut at </tool_call> by a stop string) still parses.
  p = parse_tool_calls(ToolParserKind::kHermes, "\n<tool_call>\n{\"name\": \"f\", \"arguments\": {\"x\": [1, \"}\"]}}\n");
  ASSERT_EQ(p.calls.size(), 1u);
  expect_call(p.calls[0], "f", {{"x", {1, "}"}}});
  EXPECT_FALSE(p.content.has_value());
  // Arguments written as a JSON string are unwrapped.
  p = parse_tool_calls(ToolParserKind::kHermes, "<tool_call>{\"name\": \"f\", \"arguments\": \"{\\\"a\\\": 1}\"}</tool_call>");
  ASSERT_EQ(p.calls.size(), 1u);
  expect_call(p.calls[0], "f", {{"a", 1}});
}

TEST(ToolCalls, TextThatIsNotACallStaysContent) {
  for (const char* text : {"def f():\n    return 1\n", "<tool_call>not json</tool_call>",
                           "<tool_call>{\"arguments\": {}}</tool_call>", "<tool_call>{\"name\": 3}</tool_call>", ""}) {
    auto p = parse_tool_calls(ToolParserKind::kHermes, text);
    EXPECT_TRUE(p.calls.empty()) << text;
    EXPECT_EQ(p.content.value_or(""), text);
  }
  for (const char* text : {"Sure: {\"name\": \"f\"}", "{\"name\": \"f\", \"parameters\": {}} and more", "{\"answer\": 42}",
                           "{\"name\": \"f\", \"parameters\": {"}) {
    auto p = parse_tool_calls(ToolParserKind::kLlama3Json, text);
    EXPECT_TRUE(p.calls.empty()) << text;
    EXPECT_EQ(p.content.value_or(""), text);
  }
  for (const char* text : {"no calls here", "[TOOL_CALLS]not json", "[TOOL_CALLS][{\"arguments\": {}}]"}) {
    auto p = parse_tool_calls(ToolParserKind::kMistral, text);
    EXPECT_TRUE(p.calls.empty()) << text;
    EXPECT_EQ(p.content.value_or(""), text);
  }
}

TEST(ToolCalls, Llama3Json) {
  auto p = parse_tool_calls(ToolParserKind::kLlama3Json,
                            " {\"name\": \"search\", \"parameters\": {\"q\": \"a;b {x}\"}}; {\"name\": \"now\", "
                            "\"parameters\": {}}");
  ASSERT_EQ(p.calls.size(), 2u);
  expect_call(p.calls[0], "search", {{"q", "a;b {x}"}});
  expect_call(p.calls[1], "now", Json::object());
  EXPECT_FALSE(p.content.has_value());
  p = parse_tool_calls(ToolParserKind::kLlama3Json, "<|python_tag|>{\"name\": \"f\", \"arguments\": {\"n\": 2}}");
  ASSERT_EQ(p.calls.size(), 1u);
  expect_call(p.calls[0], "f", {{"n", 2}});
}

TEST(ToolCalls, MistralBothFormats) {
  auto p = parse_tool_calls(ToolParserKind::kMistral,
                            "[TOOL_CALLS] [{\"name\": \"add\", \"arguments\": {\"a\": 1, \"b\": 2}}, {\"name\": \"neg\", "
                            "\"arguments\": {\"a\": 3}}]");
  ASSERT_EQ(p.calls.size(), 2u);
  expect_call(p.calls[0], "add", {{"a", 1}, {"b", 2}});
  expect_call(p.calls[1], "neg", {{"a", 3}});
  EXPECT_FALSE(p.content.has_value());
  p = parse_tool_calls(ToolParserKind::kMistral,
                       "Calling.[TOOL_CALLS]add[ARGS]{\"a\": 1, \"b\": 2}[TOOL_CALLS]neg[ARGS]{\"a\": 3}");
  ASSERT_EQ(p.calls.size(), 2u);
  expect_call(p.calls[0], "add", {{"a", 1}, {"b", 2}});
  expect_call(p.calls[1], "neg", {{"a", 3}});
  EXPECT_EQ(p.content, "Calling.");
  p = parse_tool_calls(ToolParserKind::kMistral, "[TOOL_CALLS]add[CALL_ID]a1B2c3D4e[ARGS]{\"a\": 5}");
  ASSERT_EQ(p.calls.size(), 1u);
  expect_call(p.calls[0], "add", {{"a", 5}});
}

// Feeds `text` one byte at a time; returns the content released while streaming and the final result.
std::pair<std::string, ParsedToolCalls> stream(ToolParserKind kind, const std::string& text, size_t* released_before = nullptr,
                                               size_t probe = 0) {
  ToolCallStream s(kind);
  std::string content;
  for (size_t i = 0; i < text.size(); ++i) {
    content += s.feed(text.substr(i, 1));
    if (released_before && i + 1 == probe) *released_before = content.size();
  }
  ParsedToolCalls end = s.finish();
  return {content, std::move(end)};
}

TEST(ToolCalls, StreamingReleasesContentBeforeTheCallAndHoldsTheCall) {
  const std::string text =
      "Checking <tool the weather.<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Oslo\"}}\n</tool_call>";
  size_t released = 0;
  auto [content, end] = stream(ToolParserKind::kHermes, text, &released, 14);
  EXPECT_EQ(released, 9u);  // "<tool" is held while it could still become "<tool_call>" (released at the space)
  EXPECT_EQ(content, "Checking <tool the weather.");
  ASSERT_EQ(end.calls.size(), 1u);
  expect_call(end.calls[0], "get_weather", {{"city", "Oslo"}});
  EXPECT_FALSE(end.content.has_value());

  // Plain text: everything comes out, nothing is lost, even a trailing partial marker.
  auto [c2, e2] = stream(ToolParserKind::kHermes, "x = 1\n<tool_ca");
  EXPECT_EQ(c2 + e2.content.value_or(""), "x = 1\n<tool_ca");
  EXPECT_TRUE(e2.calls.empty());
  // A marker followed by garbage falls back to content at the end.
  auto [c3, e3] = stream(ToolParserKind::kHermes, "a<tool_call>oops");
  EXPECT_EQ(c3, "a");
  EXPECT_EQ(e3.content, "<tool_call>oops");
  EXPECT_TRUE(e3.calls.empty());
}

TEST(ToolCalls, StreamingLlama3DecidesOnTheFirstCharacters) {
  auto [c1, e1] = stream(ToolParserKind::kLlama3Json, "  {\"name\": \"f\", \"parameters\": {\"a\": 1}}");
  EXPECT_EQ(c1, "");
  ASSERT_EQ(e1.calls.size(), 1u);
  expect_call(e1.calls[0], "f", {{"a", 1}});
  size_t released = 0;
  auto [c2, e2] = stream(ToolParserKind::kLlama3Json, "  The answer is 4.", &released, 3);
  EXPECT_EQ(released, 3u);  // released as soon as 'T' shows it is not a call
  EXPECT_EQ(c2 + e2.content.value_or(""), "  The answer is 4.");
  EXPECT_TRUE(e2.calls.empty());
  auto [c3, e3] = stream(ToolParserKind::kLlama3Json, "{\"answer\": 4}");
  EXPECT_EQ(c3 + e3.content.value_or(""), "{\"answer\": 4}");
  EXPECT_TRUE(e3.calls.empty());
}

TEST(ToolCalls, StreamingMistral) {
  auto [c, e] = stream(ToolParserKind::kMistral, "ok[TOOL_CALLS][{\"name\": \"f\", \"arguments\": {}}]");
  EXPECT_EQ(c, "ok");
  ASSERT_EQ(e.calls.size(), 1u);
  expect_call(e.calls[0], "f", Json::object());
}

}  // namespace
}  // namespace peregrine::server
