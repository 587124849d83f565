// DraftVocab: the token ids a drafter's compact LM head covers (speculative decoding with a reduced draft
// vocabulary, as FR-Spec and SGLang's speculative_token_map do). A drafter that computes its argmax over a few
// thousand tokens instead of the whole vocabulary reads a fraction of the LM head, which on small drafters is most
// of a forward's weights. Drafts are only guesses verified by the target, so the subset never changes the output: a
// token outside it just cannot be drafted.
//
// Row j of the compact head holds token token(j). The set is either fixed (a token map) or chosen by frequency
// over what the engine sees (requests' prompts and outputs), updated so that rewriting the compact head costs a
// bounded, amortised amount:
//  - EOS ids are pinned in the first rows (a draft can end where the target would);
//  - append-only while rows are free: a token seen for the first time takes the next free row at once, so early on
//    every prompt token of an active request is in;
//  - once full, a token outside the set is a miss; after at least period() tokens observed since the last re-rank,
//    a miss triggers a re-rank: the rows go to the pinned ids, then the tokens seen since the last re-rank (the
//    active requests' prompts and recent outputs), then by score (counts halved at every re-rank, so old traffic
//    fades). Tokens that stay keep their rows; only rows whose token changed are rewritten.
// So a re-rank is O(vocab) on the host and rewrites at most rows() compact rows, at most once per period() = max(256,
// rows / 4) observed tokens: at most 4 row copies per observed token, amortised.
// NOTE: rows past the chosen tokens (free rows) hold a copy of the filler token's row (the first pinned id, else 0)
// and token(j) says so, so every column's argmax maps to the token whose logit it is.
#pragma once

#include <cstdint>
#include <filesystem>
#include <span>
#include <utility>
#include <vector>

namespace peregrine::engine {

class DraftVocab {
 public:
  // A frequency-chosen set of `rows` token ids (rounded up to a multiple of 64 for the kernels' tiles, at most
  // vocab) over a vocabulary of `vocab` tokens; `pinned` ids (EOS) are always in.
  DraftVocab(int rows, int vocab, std::span<const int32_t> pinned);
  // A fixed set (speculative_token_map): ids, deduplicated, then the pinned ids it lacks; rows rounded up as above.
  static DraftVocab fixed(std::span<const int32_t> ids, int vocab, std::span<const int32_t> pinned);

  // Tokens seen in a request (prompt or output): counted; placed or re-ranked as above (nothing for a fixed set).
  void observe(std::span<const int32_t> tokens);
  // The rows whose token changed since the last call, as [first, end) (first == end: none); all rows at first.
  std::pair<int, int> take_dirty();

  int rows() const { return static_cast<int>(ids_.size()); }
  int32_t token(int row) const { return ids_[static_cast<size_t>(row)]; }
  const std::vector<int32_t>& tokens() const { return ids_; }
  // Whether t holds a row of its own (the filler token is in too).
  bool contains(int32_t t) const { return t >= 0 && t < static_cast<int32_t>(row_of_.size()) && row_of_[static_cast<size_t>(t)] >= 0; }
  int used() const { return used_; }  // rows holding a chosen token
  int period() const { return period_; }
  int64_t reranks() const { return window_; }

 private:
  DraftVocab() = default;
  void place(int32_t t, int row);
  void mark(int row);
  void rerank();

  std::vector<int32_t> ids_;     // [rows] row -> token
  std::vector<int32_t> row_of_;  // [vocab] token -> row, -1 when not in
  std::vector<float> score_;     // [vocab] counts, halved at each re-rank
  std::vector<int64_t> seen_;    // [vocab] the re-rank window a token was last seen in (-1: never)
  std::vector<char> pinned_;     // [vocab]
  int used_ = 0;
  bool fixed_ = false;
  int period_ = 256;
  int64_t window_ = 0;  // re-ranks so far: the current window's index
  int64_t since_ = 0;   // tokens observed since the last re-rank
  int64_t misses_ = 0;  // of them, outside the set while it was full
  int dirty_lo_ = 0, dirty_hi_ = 0;
};

// The ids of a token map file: a JSON list of ids, or ids separated by whitespace. Throws Error(kInvalidArgument)
// naming speculative_config.speculative_token_map and the file for an unreadable file, bad content, no ids or an
// id outside [0, vocab).
std::vector<int32_t> read_token_map(const std::filesystem::path& file, int vocab);

}  // namespace peregrine::engine
