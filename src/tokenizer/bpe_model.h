// The BPE model of tokenizer.json: byte-level (GPT-2, Llama-3, Qwen, DeepSeek) and SentencePiece-style with
// byte fallback (Llama-2, Mistral, Gemma). Supports ignore_merges, fuse_unk, byte_fallback,
// continuing_subword_prefix and end_of_word_suffix.
//
// NOTE: when the pre-tokenizer ends with ByteLevel, the model works on raw bytes: its lookup vocabulary is stored
// with byte-level characters mapped back to bytes, so no byte->character rewrite happens while encoding.
// Merges are keyed on (left id, right id) pairs; words seen before come from a per-thread cache.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "tokenizer/hash_map.h"
#include "tokenizer/json_reader.h"

namespace peregrine::tokenizer {

class BpeModel {
 public:
  // `parts` supplies the vocabulary and merges (its arena is taken over). `raw_bytes`: see the NOTE above.
  BpeModel(const nlohmann::json& model, TokenizerJsonParts& parts, bool raw_bytes);

  // Appends the ids of one pre-token.
  void tokenize(std::string_view word, std::vector<int32_t>& out) const;

  std::optional<int32_t> token_to_id(std::string_view token) const;  // by the token's tokenizer.json spelling
  std::string_view id_to_token(int32_t id) const;                     // "" when the id is not in the vocabulary
  int32_t vocab_size() const { return static_cast<int32_t>(tokens_.size()); }
  std::optional<int32_t> unk_id() const { return unk_id_ >= 0 ? std::optional<int32_t>(unk_id_) : std::nullopt; }
  bool raw_bytes() const { return raw_bytes_; }
  // SentencePiece's score-driven merging as llama.cpp's SPM tokenizer does it (GGUF "llama" vocabularies): a
  // word's characters are merged pairwise, always the adjacent pair whose concatenation is the vocabulary token
  // with the highest score (ties: the leftmost pair), until no pair forms a token; what is left unmatched
  // becomes its bytes' <0xXX> tokens (or unk). scores[id] for every id; replaces the merges.
  void use_spm_scores(std::vector<float> scores) { spm_scores_ = std::move(scores); }
  bool byte_fallback() const { return byte_fallback_; }

 private:
  struct MergeValue {
    uint32_t rank;
    uint32_t new_id;
  };
  static uint64_t pair_key(int32_t a, int32_t b) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
  }
  int32_t lookup(std::string_view internal) const {
    uint32_t v = vocab_.get(internal);
    return v == StringIdMap::kMissing ? -1 : static_cast<int32_t>(v);
  }
  void tokenize_chunk(std::string_view word, std::vector<int32_t>& out) const;
  void tokenize_uncached(std::string_view word, std::vector<int32_t>& out) const;
  void word_to_symbols(std::string_view word, std::vector<int32_t>& syms) const;
  void merge_small(std::vector<int32_t>& syms) const;
  void tokenize_spm(std::string_view word, std::vector<int32_t>& out) const;
  void merge_large(std::vector<int32_t>& syms) const;

  std::string arena_;                    // token spellings from tokenizer.json
  std::vector<ArenaString> tokens_;      // id -> spelling (length 0xFFFFFFFF marks a hole)
  StringIdMap vocab_;                    // lookup form (raw bytes in raw-byte mode) -> id
  StringIdMap unmappable_;               // raw-byte mode: spellings that are not byte-level strings
  U64Map<MergeValue> merges_;
  std::vector<int32_t> char_ids_;        // code point < 0x10000 -> id of the one-character token, or -1
  int32_t byte_ids_[256];                // raw-byte mode: byte -> id of its one-character token
  int32_t byte_fallback_ids_[256];       // byte -> id of "<0xXX>", or -1
  bool has_all_byte_fallback_ = false;
  int32_t unk_id_ = -1;
  std::string continuing_subword_prefix_, end_of_word_suffix_;
  bool fuse_unk_ = false, byte_fallback_ = false, ignore_merges_ = false, raw_bytes_ = false;
  // SentencePiece-style words may be split before U+2581 when no token spans such a boundary (see .cpp).
  bool split_before_metaspace_ = false;
  std::vector<uint32_t> metaspace_blocking_prev_;  // code points that may precede U+2581 inside a token
  uint64_t instance_id_;
  std::vector<float> spm_scores_;  // non-empty: SPM merging (use_spm_scores)
};

}  // namespace peregrine::tokenizer
