// Hugging Face-compatible tokenizer: loads tokenizer.json + tokenizer_config.json (+ generation_config.json) and
// turns text into exactly the ids `tokenizers`/transformers produce, and ids back into text.
//
// Pipeline (encode): validate UTF-8 -> split out added tokens (raw) -> normalize each section -> split out
// normalized added tokens -> pre-tokenize -> BPE model -> post-process (special tokens).
// Thread safety: a loaded Tokenizer is immutable; encode/decode may run concurrently from many threads.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace peregrine::io {
class GgufFile;
}

namespace peregrine::tokenizer {

class Normalizer;
class PreTokenizer;
class BpeModel;
class PostProcessor;
class Decoder;
class AddedTokenMatcher;
class StringIdMap;
struct AddedToken;
struct PiecewiseDecoder;

struct DecodeOptions {
  bool skip_special_tokens = true;
  // Slow-tokenizer spacing around kept special tokens ("<s> Hello"). Non-special added tokens are never spaced.
  // Unset: the tokenizer_config.json value (false when absent).
  std::optional<bool> spaces_between_special_tokens;
  std::optional<bool> clean_up_tokenization_spaces;
};

class Tokenizer {
 public:
  // Loads tokenizer.json + tokenizer_config.json (+ generation_config.json for eos lists) from a model folder.
  // Throws Error(kNotFound) for a missing tokenizer.json, kFormatError/kUnsupported for bad or unknown content.
  // A GGUF file (io/gguf.h) instead of a folder: the tokenizer it carries (from_gguf).
  static std::unique_ptr<Tokenizer> load(const std::filesystem::path& model_dir);
  // The tokenizer of a GGUF file's tokenizer.ggml.* metadata ("llama" SentencePiece vocabularies tokenized as
  // llama.cpp does, "gpt2" byte-level BPE); errors name the file and key (gguf_tokenizer.cpp).
  static std::unique_ptr<Tokenizer> from_gguf(const io::GgufFile& file);
  // tokenizer_config_json and generation_config_json may be empty.
  static std::unique_ptr<Tokenizer> from_json(std::string_view tokenizer_json, std::string_view tokenizer_config_json,
                                              std::string_view generation_config_json = {});
  ~Tokenizer();
  Tokenizer(const Tokenizer&) = delete;
  Tokenizer& operator=(const Tokenizer&) = delete;

  // Throws Error(kInvalidArgument) naming the byte offset when `text` is not valid UTF-8.
  std::vector<int32_t> encode(std::string_view text, bool add_special_tokens = true) const;
  // Appends to `out` (no allocation of a fresh vector per call).
  void encode_into(std::string_view text, bool add_special_tokens, std::vector<int32_t>& out) const;
  // Ids outside the vocabulary are skipped. Invalid UTF-8 produced by byte tokens becomes U+FFFD.
  std::string decode(std::span<const int32_t> ids, bool skip_special_tokens = true) const;
  std::string decode(std::span<const int32_t> ids, const DecodeOptions& options) const;

  int32_t vocab_size() const;  // 1 + the largest id of the vocabulary and added tokens
  std::optional<int32_t> token_to_id(std::string_view token) const;
  std::string id_to_token(int32_t id) const;  // "" for an unknown id
  bool is_special(int32_t id) const;
  std::optional<int32_t> bos_id() const { return bos_id_; }
  std::optional<int32_t> eos_id() const { return eos_id_; }
  std::optional<int32_t> pad_id() const { return pad_id_; }
  std::optional<int32_t> unk_id() const { return unk_id_; }
  std::string bos_token() const { return bos_token_; }  // "" when none
  std::string eos_token() const { return eos_token_; }
  std::vector<int32_t> eos_ids() const { return eos_ids_; }  // all eos ids (config + generation_config)
  bool add_bos_token() const { return add_bos_; }

  // For the streaming detokenizer and tools.
  bool is_added(int32_t id) const;
  std::string_view token_text(int32_t id) const;  // added-token content or vocabulary spelling; "" if unknown
  const PiecewiseDecoder* piecewise_decoder() const { return piecewise_.get(); }
  // Decode without clean-up of tokenization spaces (ids already filtered by the caller or not).
  std::string decode_raw(std::span<const int32_t> ids, bool skip_special_tokens, bool spaces_between_special_tokens) const;
  bool clean_up_tokenization_spaces() const { return clean_up_spaces_; }
  bool spaces_between_special_tokens() const { return spaces_between_special_; }

 private:
  Tokenizer();
  void encode_section(std::string_view text, bool at_origin, std::vector<int32_t>& out) const;
  void model_section(std::string_view normalized, bool at_origin, std::vector<int32_t>& out) const;
  void apply_config(std::string_view tokenizer_config_json, std::string_view generation_config_json);

  std::unique_ptr<Normalizer> normalizer_;
  std::unique_ptr<PreTokenizer> pre_tokenizer_;
  std::unique_ptr<BpeModel> model_;
  std::unique_ptr<PostProcessor> post_processor_;
  std::unique_ptr<Decoder> decoder_;
  std::unique_ptr<PiecewiseDecoder> piecewise_;
  std::vector<AddedToken> added_tokens_;
  std::vector<int32_t> added_index_by_id_;  // id -> index into added_tokens_, or -1
  std::unique_ptr<StringIdMap> added_by_content_;  // content -> index into added_tokens_
  std::vector<bool> special_by_id_;
  std::unique_ptr<AddedTokenMatcher> raw_matcher_, normalized_matcher_;

  std::optional<int32_t> bos_id_, eos_id_, pad_id_, unk_id_;
  std::string bos_token_, eos_token_;
  std::vector<int32_t> eos_ids_;
  bool add_bos_ = false;
  bool clean_up_spaces_ = false;
  bool spaces_between_special_ = false;
};

// transformers' clean_up_tokenization: " ." -> "." and friends, applied in order.
std::string clean_up_tokenization(std::string_view text);

class StreamingDetokenizer {  // one per request
 public:
  // prompt_ids: the text continues after these (they are decoded for context, never emitted).
  StreamingDetokenizer(const Tokenizer& tok, bool skip_special_tokens = true, std::span<const int32_t> prompt_ids = {});
  StreamingDetokenizer(const Tokenizer& tok, const DecodeOptions& options, std::span<const int32_t> prompt_ids = {});
  ~StreamingDetokenizer();
  StreamingDetokenizer(StreamingDetokenizer&&) noexcept;
  // Returns the new text (may be empty while a UTF-8 sequence is incomplete). Never splits a UTF-8 sequence.
  std::string push(int32_t id);
  // Whatever is left at the end (held-back text; U+FFFD for a dangling incomplete sequence).
  std::string flush();

 private:
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace peregrine::tokenizer
