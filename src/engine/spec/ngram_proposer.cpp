// NgramProposer and NgramIndex (see ngram_proposer.h).
#include "engine/spec/ngram_proposer.h"

#include <algorithm>

namespace peregrine::engine {

uint64_t NgramIndex::hash(const int32_t* t, int n) {
  uint64_t h = 0x9e3779b97f4a7c15ull ^ static_cast<uint64_t>(n);
  for (int i = 0; i < n; ++i) {
    h ^= static_cast<uint32_t>(t[i]);
    h *= 0x100000001b3ull;
    h ^= h >> 29;
  }
  return h;
}

void NgramIndex::update(const std::vector<int32_t>& tokens) {
  const int32_t last = static_cast<int32_t>(tokens.size()) - 1;  // the suffix ending here is the query: not indexed
  for (int32_t e = indexed_; e < last; ++e) {
    for (int n = min_n_; n <= max_n_ && n <= e + 1; ++n) {
      maps_[static_cast<size_t>(n - min_n_)][hash(tokens.data() + e - n + 1, n)] = e;
    }
  }
  indexed_ = std::max(indexed_, last);
}

int NgramIndex::propose(const std::vector<int32_t>& tokens, int k, std::vector<int32_t>& out) {
  out.clear();
  const int32_t len = static_cast<int32_t>(tokens.size());
  if (k <= 0) return 0;
  int32_t e = -1;
  int matched = 0;
  // The last proposal's source, moved on by the tokens that arrived since, if they continued it.
  if (src_ >= 0 && len > src_len_) {
    const int32_t at = src_ + (len - src_len_);
    const int n = std::min(max_n_, static_cast<int>(len) - 1);
    if (n >= min_n_ && at < len - 1 && at - n + 1 >= 0 &&
        std::equal(tokens.data() + len - n, tokens.data() + len, tokens.data() + at - n + 1)) {
      e = at;
      matched = n;
    }
  }
  for (int n = std::min(max_n_, len - 1); e < 0 && n >= min_n_; --n) {
    const int32_t* suffix = tokens.data() + len - n;
    const auto& map = maps_[static_cast<size_t>(n - min_n_)];
    auto it = map.find(hash(suffix, n));
    if (it == map.end()) continue;
    if (!std::equal(suffix, suffix + n, tokens.data() + it->second - n + 1)) continue;  // a hash collision
    e = it->second;
    matched = n;
  }
  src_ = e;
  src_len_ = len;
  if (e < 0) return 0;
  // Tokens after the match; past the end of the context the continuation repeats what it proposed.
  for (int i = 0; i < k; ++i) {
    const int32_t at = e + 1 + i;
    out.push_back(at < len ? tokens[static_cast<size_t>(at)] : out[static_cast<size_t>(at - len)]);
  }
  return matched;
}

void NgramProposer::propose(std::span<Sequence* const> seqs, std::span<const int> max_drafts) {
  for (size_t i = 0; i < seqs.size(); ++i) {
    Sequence& seq = *seqs[i];
    seq.draft_tokens.clear();
    seq.draft_parents.clear();
    if (max_drafts[i] <= 0) continue;
    auto it = index_.try_emplace(seq.id, config_.prompt_lookup_min, config_.prompt_lookup_max).first;
    it->second.update(seq.token_ids);
    if (it->second.propose(seq.token_ids, max_drafts[i], scratch_) == 0) continue;
    seq.draft_tokens = scratch_;
    for (size_t j = 0; j < scratch_.size(); ++j) seq.draft_parents.push_back(static_cast<int32_t>(j) - 1);
  }
}

}  // namespace peregrine::engine
