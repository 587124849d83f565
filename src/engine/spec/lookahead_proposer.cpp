// LookaheadProposer: the global suffix cache (see lookahead_proposer.h).
#include "engine/spec/lookahead_proposer.h"

#include <algorithm>
#include <fstream>
#include <queue>
#include <sstream>

#include "core/status.h"

namespace peregrine::engine {

LookaheadProposer::LookaheadProposer(const SpeculativeConfig& config,
                                     const std::function<std::vector<int32_t>(const std::string&)>& tokenize)
    : config_(config), maps_(static_cast<size_t>(config.prompt_lookup_max - config.prompt_lookup_min + 1)) {
  for (const std::string& file : config.warmup_files) {
    std::ifstream in(file, std::ios::binary);
    if (!in) throw Error(ErrorCode::kNotFound, "speculative_config.warmup_files: cannot read " + file);
    std::ostringstream text;
    text << in.rdbuf();
    add_document(tokenize(text.str()));
  }
}

uint64_t LookaheadProposer::hash(const int32_t* t, int n) {
  uint64_t h = 0xcbf29ce484222325ull ^ static_cast<uint64_t>(n);
  for (int i = 0; i < n; ++i) {
    h ^= static_cast<uint32_t>(t[i]);
    h *= 0x100000001b3ull;
    h ^= h >> 31;
  }
  return h;
}

int32_t LookaheadProposer::new_doc(std::vector<int32_t> tokens, bool finished) {
  const int32_t id = static_cast<int32_t>(docs_.size());
  cached_tokens_ += static_cast<int64_t>(tokens.size());
  docs_.push_back({std::move(tokens), 0, true, finished});
  order_.push_back(id);
  ++live_docs_;
  return id;
}

void LookaheadProposer::add_document(std::vector<int32_t> tokens) {
  const int32_t d = new_doc(std::move(tokens), true);
  index(d);
  evict();
}

void LookaheadProposer::index(int32_t doc) {
  Doc& d = docs_[static_cast<size_t>(doc)];
  // The last token's n-grams wait: for the document's own sequence they are the query (nothing follows them yet).
  const int32_t last = static_cast<int32_t>(d.tokens.size()) - 1;
  const int min_n = config_.prompt_lookup_min;
  for (int32_t e = d.indexed; e < last; ++e) {
    for (int n = min_n; n <= config_.prompt_lookup_max && n <= e + 1; ++n) {
      auto& occ = maps_[static_cast<size_t>(n - min_n)][hash(d.tokens.data() + e - n + 1, n)];
      occ.insert(occ.begin(), Occurrence{doc, e});
      if (occ.size() > kOccurrencesPerKey) occ.pop_back();
    }
  }
  d.indexed = std::max(d.indexed, last);
}

void LookaheadProposer::observe(const Sequence& seq) {
  auto it = doc_of_seq_.find(seq.id);
  if (it == doc_of_seq_.end()) {
    it = doc_of_seq_.emplace(seq.id, new_doc(seq.token_ids, false)).first;
  } else {
    Doc& d = docs_[static_cast<size_t>(it->second)];
    const size_t have = d.tokens.size();
    if (seq.token_ids.size() < have || !std::equal(d.tokens.begin(), d.tokens.end(), seq.token_ids.begin())) {
      // The sequence was cut back: index its text again from where they still agree.
      size_t same = 0;
      while (same < std::min(have, seq.token_ids.size()) && d.tokens[same] == seq.token_ids[same]) ++same;
      cached_tokens_ -= static_cast<int64_t>(have - same);
      dropped_tokens_ += static_cast<int64_t>(have - same);
      d.tokens.resize(same);
      d.indexed = std::min<int32_t>(d.indexed, static_cast<int32_t>(same) > 0 ? static_cast<int32_t>(same) - 1 : 0);
    }
    cached_tokens_ += static_cast<int64_t>(seq.token_ids.size() - d.tokens.size());
    d.tokens.insert(d.tokens.end(), seq.token_ids.begin() + static_cast<ptrdiff_t>(d.tokens.size()), seq.token_ids.end());
  }
  index(it->second);
  evict();
}

void LookaheadProposer::forget(const Sequence& seq) {
  auto it = doc_of_seq_.find(seq.id);
  if (it == doc_of_seq_.end()) return;
  Doc& d = docs_[static_cast<size_t>(it->second)];
  d.finished = true;
  // Its last token's n-grams can be indexed now: as history, what follows them is simply unknown.
  doc_of_seq_.erase(it);
}

void LookaheadProposer::evict() {
  while (cached_tokens_ > config_.cache_tokens) {
    auto victim = std::find_if(order_.begin(), order_.end(), [&](int32_t id) { return docs_[static_cast<size_t>(id)].finished; });
    if (victim == order_.end()) break;  // only live sequences: they stay until they end
    Doc& d = docs_[static_cast<size_t>(*victim)];
    cached_tokens_ -= static_cast<int64_t>(d.tokens.size());
    dropped_tokens_ += static_cast<int64_t>(d.tokens.size());
    d.alive = false;
    d.tokens = {};
    --live_docs_;
    order_.erase(victim);
  }
  if (dropped_tokens_ > cached_tokens_ && dropped_tokens_ > (int64_t{1} << 16)) rebuild();
}

void LookaheadProposer::rebuild() {
  for (auto& m : maps_) m.clear();
  dropped_tokens_ = 0;
  for (int32_t id : order_) {
    docs_[static_cast<size_t>(id)].indexed = 0;
    index(id);
  }
}

void LookaheadProposer::propose_for(const std::vector<int32_t>& context, int64_t own_doc, int k,
                                    std::vector<int32_t>& out) {
  std::vector<int32_t> parents;
  propose_tree(context, own_doc, k, out, parents);
}

void LookaheadProposer::propose_tree(const std::vector<int32_t>& context, int64_t own_doc, int k,
                                     std::vector<int32_t>& out, std::vector<int32_t>& parents) {
  out.clear();
  parents.clear();
  const int32_t len = static_cast<int32_t>(context.size());
  const int min_n = config_.prompt_lookup_min;
  if (k <= 0) return;
  for (int n = std::min(config_.prompt_lookup_max, len); n >= min_n; --n) {
    const int32_t* suffix = context.data() + len - n;
    const auto& map = maps_[static_cast<size_t>(n - min_n)];
    auto it = map.find(hash(suffix, n));
    if (it == map.end()) continue;
    // The continuation trie of every valid occurrence, weighted: the sequence's own text first, then newer ones.
    trie_.clear();
    trie_.push_back({-1, 0.0});
    int rank = 0;
    for (const Occurrence& o : it->second) {
      const Doc& d = docs_[static_cast<size_t>(o.doc)];
      if (!d.alive || o.end >= static_cast<int32_t>(d.tokens.size())) continue;
      const bool own = o.doc == own_doc;
      const std::vector<int32_t>& text = own ? context : d.tokens;
      if (own && o.end >= len - 1) continue;
      if (!std::equal(suffix, suffix + n, text.data() + o.end - n + 1)) continue;  // collision or stale
      const double w = (own ? 2.0 : 1.0) / (1.0 + 0.1 * rank++);
      int32_t node = 0;
      const int32_t tlen = static_cast<int32_t>(text.size());
      path_.clear();
      for (int i = 0; i < k; ++i) {
        const int32_t at = o.end + 1 + i;
        int32_t tok;
        if (at < tlen) {
          tok = text[static_cast<size_t>(at)];
        } else if (own) {
          tok = path_[static_cast<size_t>(at - tlen)];  // periodic text: the continuation repeats itself
        } else {
          break;
        }
        path_.push_back(tok);
        int32_t child = trie_[static_cast<size_t>(node)].first_child;
        while (child >= 0 && trie_[static_cast<size_t>(child)].token != tok) child = trie_[static_cast<size_t>(child)].next_sibling;
        if (child < 0) {
          child = static_cast<int32_t>(trie_.size());
          trie_.push_back({tok, 0.0, -1, trie_[static_cast<size_t>(node)].first_child});
          trie_[static_cast<size_t>(node)].first_child = child;
        }
        trie_[static_cast<size_t>(child)].weight += w;
        node = child;
      }
    }
    if (trie_.size() == 1) continue;
    const int tree_nodes =
        config_.max_tree_tokens > 0 && config_.num_branches > 1 ? std::min(config_.max_tree_tokens, node_limit_) : 0;
    if (tree_nodes == 0) {
      // The heaviest path.
      int32_t node = 0;
      while (static_cast<int>(out.size()) < k) {
        int32_t best = -1;
        for (int32_t c = trie_[static_cast<size_t>(node)].first_child; c >= 0; c = trie_[static_cast<size_t>(c)].next_sibling)
          if (best < 0 || trie_[static_cast<size_t>(c)].weight > trie_[static_cast<size_t>(best)].weight) best = c;
        if (best < 0) break;
        out.push_back(trie_[static_cast<size_t>(best)].token);
        parents.push_back(static_cast<int32_t>(out.size()) - 2);
        node = best;
      }
      return;
    }
    // A token tree: best-first over the trie (heaviest nodes first, at most num_branches children per node,
    // depth at most k), so parents come before children and siblings in order of weight.
    struct Open {
      double weight;
      int32_t trie_node, parent, depth;
      bool operator<(const Open& o) const { return weight < o.weight; }
    };
    std::priority_queue<Open> open;
    auto push_children = [&](int32_t tn, int32_t parent, int32_t depth) {
      if (depth > k) return;
      std::vector<std::pair<double, int32_t>> kids;
      for (int32_t c = trie_[static_cast<size_t>(tn)].first_child; c >= 0; c = trie_[static_cast<size_t>(c)].next_sibling)
        kids.emplace_back(trie_[static_cast<size_t>(c)].weight, c);
      std::sort(kids.begin(), kids.end(), [](auto a, auto b) { return a.first > b.first || (a.first == b.first && a.second < b.second); });
      for (size_t i = 0; i < kids.size() && static_cast<int>(i) < config_.num_branches; ++i)
        open.push({kids[i].first, kids[i].second, parent, depth});
    };
    push_children(0, -1, 1);
    while (!open.empty() && static_cast<int>(out.size()) < tree_nodes) {
      const Open best = open.top();
      open.pop();
      out.push_back(trie_[static_cast<size_t>(best.trie_node)].token);
      parents.push_back(best.parent);
      push_children(best.trie_node, static_cast<int32_t>(out.size()) - 1, best.depth + 1);
    }
    return;
  }
}

void LookaheadProposer::propose(std::span<Sequence* const> seqs, std::span<const int> max_drafts) {
  for (size_t i = 0; i < seqs.size(); ++i) {
    Sequence& seq = *seqs[i];
    seq.draft_tokens.clear();
    seq.draft_parents.clear();
    if (max_drafts[i] <= 0) continue;
    observe(seq);
    propose_tree(seq.token_ids, doc_of_seq_[seq.id], max_drafts[i], seq.draft_tokens, seq.draft_parents);
  }
}

}  // namespace peregrine::engine
