// TextCodec: what the engine needs from a tokenizer and chat template (encode, decode, streaming decode,
// rendering chats). The real one wraps src/tokenizer (tokenizer_codec.h); tests use a fake. Implementations
// must be safe to call from several threads at once (const methods); detokenizers belong to one sequence.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "peregrine/engine.h"

namespace peregrine::engine {

// Turns a sequence's generated tokens into text one token at a time; text never splits a UTF-8 sequence
// and the concatenation of all deltas equals decoding the generated tokens in the context of the prompt.
class IncrementalDetokenizer {
 public:
  virtual ~IncrementalDetokenizer() = default;
  virtual std::string push(int32_t token) = 0;
  // Text still held back when the sequence ends (an incomplete UTF-8 sequence becomes U+FFFD).
  virtual std::string flush() { return {}; }
};

class TextCodec {
 public:
  virtual ~TextCodec() = default;
  virtual std::vector<int32_t> encode(std::string_view text, bool add_special_tokens) const = 0;
  virtual std::string decode(std::span<const int32_t> ids, bool skip_special_tokens) const = 0;
  // One token decoded alone, special tokens included.
  virtual std::string token_text(int32_t id) const = 0;
  // The text each of `ids` adds after `context` (the tokens before it), special tokens included: what
  // logprobs report, so that leading spaces survive. The default ignores the context.
  virtual void token_texts_after(std::span<const int32_t> context, std::span<const int32_t> ids,
                                 std::vector<std::string>& out) const {
    (void)context;
    out.clear();
    for (int32_t id : ids) out.push_back(token_text(id));
  }
  // A detokenizer for the output that follows `prompt` (its last tokens give leading-space context).
  virtual std::unique_ptr<IncrementalDetokenizer> make_detokenizer(std::span<const int32_t> prompt,
                                                                   bool skip_special_tokens,
                                                                   bool spaces_between_special_tokens) const = 0;
  // The bytes token `id` adds to the text (may be part of a UTF-8 sequence); empty for special tokens and ids
  // outside the vocabulary. What structured outputs match tokens with.
  virtual std::string token_bytes(int32_t id) const { return token_text(id); }
  // False for an engine started without a tokenizer (text is empty; stop strings cannot match).
  virtual bool has_tokenizer() const { return true; }
  virtual bool has_chat_template() const = 0;
  virtual std::string apply_chat_template(const nlohmann::ordered_json& messages, const ChatTemplateOptions& options) const = 0;
};

}  // namespace peregrine::engine
