// TokenizerCodec: adapter from src/tokenizer to the engine's TextCodec (see tokenizer_codec.h).
#include "engine/tokenizer_codec.h"

#include "core/status.h"
#include "tokenizer/decoders.h"
#include "peregrine/text.h"

namespace peregrine::engine {
namespace {

class StreamingAdapter : public IncrementalDetokenizer {
 public:
  StreamingAdapter(const tokenizer::Tokenizer& tok, const tokenizer::DecodeOptions& options,
                   std::span<const int32_t> prompt)
      : detok_(tok, options, prompt) {}
  std::string push(int32_t token) override { return detok_.push(token); }
  std::string flush() override { return detok_.flush(); }

 private:
  tokenizer::StreamingDetokenizer detok_;
};

}  // namespace

TokenizerCodec::TokenizerCodec(const std::filesystem::path& tokenizer_dir, const std::filesystem::path& model_dir,
                               const std::string& chat_template_override)
    : tokenizer_(tokenizer::Tokenizer::load(tokenizer_dir)), model_dir_(model_dir) {
  try {
    chat_template_ = load_chat_template(model_dir, chat_template_override);
  } catch (const Error& e) {
    // No template in the folder is normal for base models; a bad --chat-template is not.
    if (!chat_template_override.empty() || e.code() != ErrorCode::kNotFound) throw;
    chat_template_error_ = e.message();
  }
  // A model without one (a GGUF file without tokenizer.chat_template) takes the --tokenizer folder's.
  if (!chat_template_ && chat_template_override.empty() && tokenizer_dir != model_dir) {
    try {
      chat_template_ = load_chat_template(tokenizer_dir, {});
    } catch (const Error& e) {
      if (e.code() != ErrorCode::kNotFound) throw;
    }
  }
}

std::vector<int32_t> TokenizerCodec::encode(std::string_view text, bool add_special_tokens) const {
  return tokenizer_->encode(text, add_special_tokens);
}

std::string TokenizerCodec::decode(std::span<const int32_t> ids, bool skip_special_tokens) const {
  return tokenizer_->decode(ids, skip_special_tokens);
}

std::string TokenizerCodec::token_text(int32_t id) const {
  const int32_t one[1] = {id};
  return tokenizer_->decode(std::span<const int32_t>(one, 1), false);
}

std::string TokenizerCodec::token_bytes_of(const tokenizer::Tokenizer& tok, int32_t id) {
  if (id < 0 || id >= tok.vocab_size() || tok.is_special(id)) return {};
  const std::string_view text = tok.token_text(id);
  if (text.empty()) return {};
  if (const tokenizer::PiecewiseDecoder* pw = tok.piecewise_decoder()) return pw->piece(text, tok.is_added(id), false);
  const int32_t one[1] = {id};
  return tok.decode(std::span<const int32_t>(one, 1), false);
}

void TokenizerCodec::token_texts_after(std::span<const int32_t> context, std::span<const int32_t> ids,
                                       std::vector<std::string>& out) const {
  out.clear();
  // A few tokens of context decide spacing (SentencePiece's leading "▁", byte-level merges).
  constexpr size_t kContext = 4;
  if (context.size() > kContext) context = context.subspan(context.size() - kContext);
  std::vector<int32_t> buf(context.begin(), context.end());
  const std::string before = tokenizer_->decode(buf, false);
  buf.push_back(0);
  for (int32_t id : ids) {
    buf.back() = id;
    std::string after = tokenizer_->decode(buf, false);
    if (!context.empty() && after.compare(0, before.size(), before) == 0) {
      out.push_back(after.substr(before.size()));
    } else {
      out.push_back(token_text(id));
    }
  }
}

std::unique_ptr<IncrementalDetokenizer> TokenizerCodec::make_detokenizer(std::span<const int32_t> prompt,
                                                                         bool skip_special_tokens,
                                                                         bool spaces_between_special_tokens) const {
  tokenizer::DecodeOptions options;
  options.skip_special_tokens = skip_special_tokens;
  options.spaces_between_special_tokens = spaces_between_special_tokens;
  // Only the prompt's tail matters for how the first output token is spelled (leading spaces, merges).
  constexpr size_t kContext = 8;
  if (prompt.size() > kContext) prompt = prompt.subspan(prompt.size() - kContext);
  return std::make_unique<StreamingAdapter>(*tokenizer_, options, prompt);
}

std::string TokenizerCodec::apply_chat_template(const nlohmann::ordered_json& messages,
                                                const ChatTemplateOptions& options) const {
  // A template given with the call replaces the engine's for this rendering (parsed each time).
  std::optional<ChatTemplate> given;
  if (!options.chat_template.empty()) given = load_chat_template(model_dir_, options.chat_template);
  const ChatTemplate* chat_template = given ? &*given : chat_template_ ? &*chat_template_ : nullptr;
  if (!chat_template) {
    throw Error(ErrorCode::kInvalidArgument,
                "this model has no chat template (" + chat_template_error_ +
                    "); start the server with --chat-template or use /v1/completions");
  }
  if (options.continue_final_message && options.add_generation_prompt) {
    throw Error(ErrorCode::kInvalidArgument,
                "continue_final_message and add_generation_prompt cannot both be true");
  }
  ChatRenderOptions render;
  render.add_generation_prompt = options.add_generation_prompt;
  if (options.tools && !options.tools->is_null()) render.tools = *options.tools;
  if (options.chat_template_kwargs && options.chat_template_kwargs->is_object()) {
    render.extra_kwargs = *options.chat_template_kwargs;
  }
  std::string rendered = render_chat(*chat_template, messages, render);
  if (options.continue_final_message) cut_after_final_message(rendered, messages);
  return rendered;
}

// Templates commonly trim message content, so the final message is looked for without its surrounding
// whitespace; the prompt ends at its last occurrence (what the template wrote after it is the end-of-turn).
void TokenizerCodec::cut_after_final_message(std::string& rendered, const nlohmann::ordered_json& messages) {
  if (!messages.is_array() || messages.empty()) {
    throw Error(ErrorCode::kInvalidArgument, "continue_final_message needs at least one message");
  }
  // The text of the final message: its string content, or its last text part.
  const nlohmann::ordered_json& last = messages.back();
  std::string_view content;
  if (auto it = last.is_object() ? last.find("content") : last.end(); it != last.end()) {
    if (it->is_string()) {
      content = it->get_ref<const std::string&>();
    } else if (it->is_array()) {
      for (auto part = it->rbegin(); part != it->rend(); ++part) {
        auto text = part->is_object() ? part->find("text") : part->end();
        if (text != part->end() && text->is_string()) {
          content = text->get_ref<const std::string&>();
          break;
        }
      }
    }
  }
  const std::string_view needle = trim_ascii_space(content);
  if (needle.empty()) {
    throw Error(ErrorCode::kInvalidArgument, "continue_final_message: the final message has no text content to continue");
  }
  const size_t at = rendered.rfind(needle);
  if (at == std::string::npos) {
    throw Error(ErrorCode::kInvalidArgument,
                "continue_final_message: the final message does not appear in the prompt the chat template rendered");
  }
  rendered.resize(at + needle.size());
}

}  // namespace peregrine::engine
