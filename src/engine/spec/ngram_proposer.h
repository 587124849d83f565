// NgramProposer ("ngram", vLLM's prompt lookup): the longest n-gram (n from prompt_lookup_max down to
// prompt_lookup_min) that ends the sequence and occurred earlier in its own prompt or output proposes the tokens
// that followed its most recent earlier occurrence -- or, while the tokens since the last proposal continue that
// proposal's source, what follows in the source. An index per sequence (n-gram hash -> latest end position) is
// kept up to date as tokens arrive, so a proposal costs O(max n) and not a scan of the context.
#pragma once

#include <cstdint>
#include <unordered_map>
#include <vector>

#include "engine/spec/proposer.h"

namespace peregrine::engine {

// The per-sequence index, also used by the lookahead cache for the sequence's own context.
class NgramIndex {
 public:
  NgramIndex(int min_n, int max_n) : min_n_(min_n), max_n_(max_n), maps_(static_cast<size_t>(max_n - min_n + 1)) {}
  // Brings the index up to date with tokens (n-grams ending before the last token are indexed).
  void update(const std::vector<int32_t>& tokens);
  // Up to k tokens predicted to follow `tokens` (the continuation of the latest earlier match of the longest
  // suffix; a continuation that reaches the end repeats itself, following periodic text). Returns the n matched
  // (0 = none). The match keeps following its source while the tokens that arrived since the last proposal are the
  // source's own continuation (the last max_n tokens equal the source's there): text copied from the context goes on
  // being copied from the same place, not from the latest other occurrence of its last few tokens.
  int propose(const std::vector<int32_t>& tokens, int k, std::vector<int32_t>& out);

 private:
  static uint64_t hash(const int32_t* t, int n);
  int min_n_, max_n_;
  std::vector<std::unordered_map<uint64_t, int32_t>> maps_;  // [n - min_n]: hash of tokens[e-n+1..e] -> latest e
  int32_t indexed_ = 0;  // n-grams ending at positions < indexed_ are in the maps
  int32_t src_ = -1;      // the last proposal's source: the match ended at src_ ...
  int32_t src_len_ = 0;   // ... when the context was src_len_ tokens long
};

class NgramProposer final : public Proposer {
 public:
  explicit NgramProposer(const SpeculativeConfig& config) : config_(config) {}
  void propose(std::span<Sequence* const> seqs, std::span<const int> max_drafts) override;
  void forget(const Sequence& seq) override { index_.erase(seq.id); }

 private:
  SpeculativeConfig config_;
  std::unordered_map<int64_t, NgramIndex> index_;  // by sequence id
  std::vector<int32_t> scratch_;
};

}  // namespace peregrine::engine
