// TokenizerCodec: the engine's TextCodec over the real Hugging Face tokenizer (src/tokenizer) and the model's
// chat template (src/tokenizer/chat_template.h). Immutable after construction, so safe from any thread.
#pragma once

#include <filesystem>
#include <memory>
#include <optional>
#include <string>

#include "engine/text_codec.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"

namespace peregrine::engine {

class TokenizerCodec : public TextCodec {
 public:
  // Loads tokenizer.json from tokenizer_dir and the chat template from model_dir (or chat_template_override,
  // a path or inline template). A model without a template is fine until a chat is rendered.
  TokenizerCodec(const std::filesystem::path& tokenizer_dir, const std::filesystem::path& model_dir,
                 const std::string& chat_template_override);

  const tokenizer::Tokenizer& tokenizer() const { return *tokenizer_; }
  std::vector<int32_t> encode(std::string_view text, bool add_special_tokens) const override;
  std::string decode(std::span<const int32_t> ids, bool skip_special_tokens) const override;
  std::string token_text(int32_t id) const override;
  std::string token_bytes(int32_t id) const override { return token_bytes_of(*tokenizer_, id); }
  // A token's raw bytes (byte-level and byte-fallback pieces undone); empty for special tokens.
  static std::string token_bytes_of(const tokenizer::Tokenizer& tok, int32_t id);
  void token_texts_after(std::span<const int32_t> context, std::span<const int32_t> ids,
                         std::vector<std::string>& out) const override;
  std::unique_ptr<IncrementalDetokenizer> make_detokenizer(std::span<const int32_t> prompt, bool skip_special_tokens,
                                                           bool spaces_between_special_tokens) const override;
  bool has_chat_template() const override { return chat_template_.has_value(); }
  std::string apply_chat_template(const nlohmann::ordered_json& messages,
                                  const ChatTemplateOptions& options) const override;

 private:
  static void cut_after_final_message(std::string& rendered, const nlohmann::ordered_json& messages);

  std::unique_ptr<tokenizer::Tokenizer> tokenizer_;
  std::filesystem::path model_dir_;  // bos/eos tokens for templates given per call
  std::optional<ChatTemplate> chat_template_;
  std::string chat_template_error_;  // why there is none
};

}  // namespace peregrine::engine
