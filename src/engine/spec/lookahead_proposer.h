// LookaheadProposer ("lookahead", Peregrine's own): a suffix cache over the prompts and outputs of all requests,
// live and finished, plus optional warm-up files (a codebase an assistant works on). Every n-gram (n in
// [prompt_lookup_min, prompt_lookup_max]) of every cached document points at its latest occurrences; a sequence's
// longest matching suffix gathers the continuations that followed it anywhere, and the proposal follows the
// continuation trie by frequency (its own latest occurrence weighted first, then recency). The cache is bounded
// (`cache_tokens`): when it is full the oldest finished documents go first, and the index is rebuilt once most of
// it points at dropped text.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <string>
#include <unordered_map>
#include <vector>

#include "engine/spec/proposer.h"

namespace peregrine::engine {

class LookaheadProposer final : public Proposer {
 public:
  // tokenize turns warm-up file text into token ids (the model's tokenizer).
  LookaheadProposer(const SpeculativeConfig& config,
                    const std::function<std::vector<int32_t>(const std::string&)>& tokenize);

  void propose(std::span<Sequence* const> seqs, std::span<const int> max_drafts) override;
  void observe(const Sequence& seq) override;
  void forget(const Sequence& seq) override;
  void set_tree_node_limit(int nodes) override { node_limit_ = nodes; }

  // For tests and stats.
  int64_t cached_tokens() const { return cached_tokens_; }
  size_t num_documents() const { return live_docs_; }
  // The proposal for a context, as propose() makes it (tests).
  void propose_for(const std::vector<int32_t>& context, int64_t own_doc, int k, std::vector<int32_t>& out);
  // The same as a token tree when max_tree_tokens and num_branches ask for one (parents[i] < i, -1 = the last
  // real token), else a chain.
  void propose_tree(const std::vector<int32_t>& context, int64_t own_doc, int k, std::vector<int32_t>& out,
                    std::vector<int32_t>& parents);
  // Adds a finished document (warm-up files; tests).
  void add_document(std::vector<int32_t> tokens);

 private:
  struct Doc {
    std::vector<int32_t> tokens;
    int32_t indexed = 0;  // n-grams ending before this position are indexed
    bool alive = true;
    bool finished = false;
  };
  struct Occurrence {
    int32_t doc;
    int32_t end;  // the n-gram is tokens[end-n+1 .. end]
  };
  static constexpr int kOccurrencesPerKey = 8;
  static uint64_t hash(const int32_t* t, int n);
  int32_t new_doc(std::vector<int32_t> tokens, bool finished);
  void index(int32_t doc);
  void evict();
  void rebuild();

  SpeculativeConfig config_;
  std::vector<Doc> docs_;
  std::deque<int32_t> order_;  // documents in arrival order (eviction order once finished)
  std::unordered_map<int64_t, int32_t> doc_of_seq_;
  // [n - min_n]: n-gram hash -> latest occurrences, newest first.
  std::vector<std::unordered_map<uint64_t, std::vector<Occurrence>>> maps_;
  int64_t cached_tokens_ = 0;
  int64_t dropped_tokens_ = 0;
  size_t live_docs_ = 0;
  // Scratch of a proposal.
  struct Node {
    int32_t token;
    double weight;
    int32_t first_child = -1, next_sibling = -1;
  };
  std::vector<Node> trie_;
  std::vector<int32_t> path_;
  int node_limit_ = 1 << 30;  // the engine's cap on a tree's nodes
};

}  // namespace peregrine::engine
