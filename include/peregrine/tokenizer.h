// Tokenizers and chat templates of Hugging Face model folders, without an engine: what `peregrine tokenize`,
// `detokenize` and `chat-template` use, and what an application needs to prepare prompts. The engine uses the
// same code (Engine::tokenize, Engine::apply_chat_template give the same results for its model).
#pragma once

#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace peregrine {

namespace tokenizer {
class Tokenizer;
}

// tokenizer.json + tokenizer_config.json of a model folder. Immutable, safe from any thread.
class Tokenizer {
 public:
  // Throws Error naming the file and field at fault.
  static std::unique_ptr<Tokenizer> load(const std::string& model_dir);
  ~Tokenizer();
  Tokenizer(const Tokenizer&) = delete;
  Tokenizer& operator=(const Tokenizer&) = delete;

  std::vector<int32_t> encode(std::string_view text, bool add_special_tokens = true) const;
  // Appends to out (reuses its memory in batch loops).
  void encode_into(std::string_view text, bool add_special_tokens, std::vector<int32_t>& out) const;
  std::string decode(std::span<const int32_t> ids, bool skip_special_tokens = true) const;

  // Streaming detokenization as servers stream text: push() returns the text a token adds (empty while a UTF-8
  // sequence is incomplete, never a split character); flush() what is held back at the end.
  class Stream {
   public:
    virtual ~Stream() = default;
    virtual std::string push(int32_t id) = 0;
    virtual std::string flush() = 0;
  };
  std::unique_ptr<Stream> stream(bool skip_special_tokens = true) const;

 private:
  explicit Tokenizer(std::unique_ptr<tokenizer::Tokenizer> impl);
  std::unique_ptr<tokenizer::Tokenizer> impl_;
};

struct ChatRenderParams {
  nlohmann::ordered_json tools = nullptr;  // a list of tool schemas, or null
  bool add_generation_prompt = false;
  // Extra template variables, e.g. {"enable_thinking": false}.
  nlohmann::ordered_json kwargs = nlohmann::ordered_json::object();
  std::string template_name;  // force one of the model's named templates ("tool_use", ...)
};

// Renders messages (a JSON array of {role, content, ...}) with a model folder's chat template as transformers'
// apply_chat_template does. chat_template, when not empty, is a template file or the template text itself and
// replaces the folder's (model_dir may then be empty). Throws Error naming what is wrong (no template, bad JSON,
// template syntax with line and column, raise_exception).
std::string render_chat_template(const std::string& model_dir, const std::string& chat_template,
                                 const nlohmann::ordered_json& messages, const ChatRenderParams& params);

}  // namespace peregrine
