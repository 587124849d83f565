// GrammarAutomaton (lazy DFA over interned parse stacks), TokenVocab (depth-first token trie) and CompiledGrammar
// (masks per state, cached); see matcher.h.
#include "engine/structured/matcher.h"

#include <algorithm>
#include <cstring>
#include <numeric>

#include "peregrine/error.h"

namespace peregrine::engine::structured {
namespace {

constexpr int32_t kUnknown = GrammarAutomaton::kUnknownTransition;

uint64_t node_hash(int32_t rule, int32_t alt, int32_t pos, int32_t parent) {
  uint64_t h = static_cast<uint32_t>(rule);
  h = h * 0x9E3779B97F4A7C15ull ^ static_cast<uint32_t>(alt);
  h = h * 0x9E3779B97F4A7C15ull ^ static_cast<uint32_t>(pos);
  h = h * 0x9E3779B97F4A7C15ull ^ static_cast<uint32_t>(parent);
  return h ^ (h >> 29);
}

}  // namespace

GrammarAutomaton::GrammarAutomaton(Grammar g) : g_(std::move(g)) {
  nodes_.push_back(Frame{-1, -1, -1, -1, 0});
  visit_mark_.push_back(0);
  std::vector<int32_t> out, visited;
  ++visit_epoch_;
  const auto& root = g_.rules[static_cast<size_t>(g_.root)];
  for (size_t a = 0; a < root.alts.size(); ++a) {
    settle(intern_node(g_.root, static_cast<int32_t>(a), 0, 0), out, visited);
  }
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  intern_state(std::move(out));  // state 0 (possibly an empty set: a grammar matching nothing)
}

int32_t GrammarAutomaton::intern_node(int32_t rule, int32_t alt, int32_t pos, int32_t parent) {
  const uint64_t h = node_hash(rule, alt, pos, parent);
  auto& bucket = node_index_[h];
  for (int32_t id : bucket) {
    const Frame& f = nodes_[static_cast<size_t>(id)];
    if (f.rule == rule && f.alt == alt && f.pos == pos && f.parent == parent) return id;
  }
  const int32_t depth = nodes_[static_cast<size_t>(parent)].depth + 1;
  nodes_.push_back(Frame{rule, alt, pos, parent, depth});
  visit_mark_.push_back(0);
  const int32_t id = static_cast<int32_t>(nodes_.size() - 1);
  bucket.push_back(id);
  return id;
}

// Closure: from a stack whose top may be at the end of its alternative or before a rule call, every stack whose
// top reads a byte class next (or 0 once the root has returned).
void GrammarAutomaton::settle(int32_t node, std::vector<int32_t>& out, std::vector<int32_t>& visited) {
  if (visit_mark_[static_cast<size_t>(node)] == visit_epoch_) return;
  visit_mark_[static_cast<size_t>(node)] = visit_epoch_;
  (void)visited;
  if (node == 0) {
    out.push_back(0);
    return;
  }
  const Frame f = nodes_[static_cast<size_t>(node)];
  if (f.depth > kMaxStackDepth) return;  // nesting beyond the limit is refused
  const Sequence& s = g_.rules[static_cast<size_t>(f.rule)].alts[static_cast<size_t>(f.alt)];
  if (f.pos == static_cast<int32_t>(s.size())) {
    settle(f.parent, out, visited);
    return;
  }
  const Element e = s[static_cast<size_t>(f.pos)];
  if (e.cls >= 0) {
    out.push_back(node);
    return;
  }
  // A call in tail position returns straight to the caller's caller.
  const int32_t cont = f.pos + 1 == static_cast<int32_t>(s.size()) ? f.parent : intern_node(f.rule, f.alt, f.pos + 1, f.parent);
  const size_t num_alts = g_.rules[static_cast<size_t>(e.rule)].alts.size();
  for (size_t a = 0; a < num_alts; ++a) settle(intern_node(e.rule, static_cast<int32_t>(a), 0, cont), out, visited);
}

int32_t GrammarAutomaton::intern_state(std::vector<int32_t> set) {
  std::string key(reinterpret_cast<const char*>(set.data()), set.size() * sizeof(int32_t));
  auto it = set_index_.find(key);
  if (it != set_index_.end()) return it->second;
  const int32_t id = static_cast<int32_t>(sets_.size());
  bool acc = false, cont = false;
  for (int32_t n : set) (n == 0 ? acc : cont) = true;
  accepting_.push_back(acc ? 1 : 0);
  continues_.push_back(cont ? 1 : 0);
  sets_.push_back(std::move(set));
  std::array<int32_t, 256> row;
  row.fill(kUnknown);
  trans_.push_back(row);
  set_index_.emplace(std::move(key), id);
  return id;
}

int32_t GrammarAutomaton::next_slow(int32_t state, uint8_t byte) {
  int32_t t = kUnknown;
  std::vector<int32_t> out, visited;
  ++visit_epoch_;
  const std::vector<int32_t> set = sets_[static_cast<size_t>(state)];  // copy: interning may grow sets_
  for (int32_t n : set) {
    if (n == 0) continue;
    const Frame f = nodes_[static_cast<size_t>(n)];
    const Element e = g_.rules[static_cast<size_t>(f.rule)].alts[static_cast<size_t>(f.alt)][static_cast<size_t>(f.pos)];
    if (!g_.classes[static_cast<size_t>(e.cls)].test(byte)) continue;
    settle(intern_node(f.rule, f.alt, f.pos + 1, f.parent), out, visited);
  }
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  t = out.empty() || out.size() > kMaxStacksPerState ? kDead : intern_state(std::move(out));
  trans_[static_cast<size_t>(state)][byte] = t;
  return t;
}

int32_t GrammarAutomaton::run(int32_t state, std::string_view bytes) {
  for (char c : bytes) {
    if (state < 0) return kDead;
    state = next(state, static_cast<uint8_t>(c));
  }
  return state;
}

TokenVocab::TokenVocab(std::vector<std::string> bytes, std::vector<int32_t> eos_ids)
    : bytes_(std::move(bytes)), eos_(std::move(eos_ids)) {
  for (int32_t e : eos_) bytes_.at(static_cast<size_t>(e)).clear();  // eos is never text
  for (size_t i = 0; i < bytes_.size(); ++i) {
    if (!bytes_[i].empty()) sorted_.push_back(static_cast<int32_t>(i));
  }
  std::sort(sorted_.begin(), sorted_.end(), [&](int32_t a, int32_t b) {
    const int c = bytes_[static_cast<size_t>(a)].compare(bytes_[static_cast<size_t>(b)]);
    return c != 0 ? c < 0 : a < b;
  });
  std::vector<int32_t> path;
  const std::string* prev = nullptr;
  for (size_t k = 0; k < sorted_.size(); ++k) {
    const std::string& s = bytes_[static_cast<size_t>(sorted_[k])];
    if (s.size() > 65535) throw Error(ErrorCode::kInvalidArgument, "a token longer than 65535 bytes");
    size_t lcp = 0;
    if (prev) {
      while (lcp < s.size() && lcp < prev->size() && s[lcp] == (*prev)[lcp]) ++lcp;
    }
    if (prev && lcp == s.size() && lcp == prev->size()) {
      node_tok_end_[static_cast<size_t>(path.back())] = static_cast<int32_t>(k + 1);  // same bytes as the previous
      continue;
    }
    path.resize(lcp);
    for (size_t d = lcp; d < s.size(); ++d) {
      node_byte_.push_back(static_cast<uint8_t>(s[d]));
      node_depth_.push_back(static_cast<uint16_t>(d + 1));
      node_tok_begin_.push_back(0);
      node_tok_end_.push_back(0);
      path.push_back(static_cast<int32_t>(node_byte_.size() - 1));
    }
    node_tok_begin_[static_cast<size_t>(path.back())] = static_cast<int32_t>(k);
    node_tok_end_[static_cast<size_t>(path.back())] = static_cast<int32_t>(k + 1);
    max_depth_ = std::max<uint16_t>(max_depth_, static_cast<uint16_t>(s.size()));
    prev = &s;
  }
  const int32_t n = static_cast<int32_t>(node_byte_.size());
  node_skip_.assign(static_cast<size_t>(n), n);
  std::vector<int32_t> stack;
  for (int32_t i = 0; i < n; ++i) {
    while (!stack.empty() && node_depth_[static_cast<size_t>(stack.back())] >= node_depth_[static_cast<size_t>(i)]) {
      node_skip_[static_cast<size_t>(stack.back())] = i;
      stack.pop_back();
    }
    stack.push_back(i);
  }
}

CompiledGrammar::CompiledGrammar(Grammar g, std::shared_ptr<const TokenVocab> vocab)
    : automaton_(std::move(g)), vocab_(std::move(vocab)) {
  walk_states_.resize(static_cast<size_t>(vocab_->max_depth_) + 1);
}

size_t CompiledGrammar::num_states() {
  std::lock_guard<std::mutex> lock(mutex_);
  return automaton_.num_states();
}

bool CompiledGrammar::accepting(int32_t state) {
  if (state < 0) return state == kDone;
  std::lock_guard<std::mutex> lock(mutex_);
  return automaton_.accepting(state);
}

void CompiledGrammar::compute_mask(int32_t state, std::vector<uint64_t>& out) {
  const TokenVocab& v = *vocab_;
  out.assign(v.mask_words(), 0);
  masks_computed_.fetch_add(1, std::memory_order_relaxed);
  if (state >= 0 && automaton_.can_continue(state)) {
    const int32_t n = static_cast<int32_t>(v.node_byte_.size());
    const uint8_t* bytes = v.node_byte_.data();
    const uint16_t* depth = v.node_depth_.data();
    const int32_t* skip = v.node_skip_.data();
    const int32_t* tb = v.node_tok_begin_.data();
    const int32_t* te = v.node_tok_end_.data();
    const int32_t* sorted = v.sorted_.data();
    int32_t* st = walk_states_.data();
    st[0] = state;
    for (int32_t i = 0; i < n;) {
      const int32_t s = automaton_.next(st[depth[i] - 1], bytes[i]);
      if (s < 0) {
        i = skip[i];
        continue;
      }
      st[depth[i]] = s;
      for (int32_t k = tb[i]; k < te[i]; ++k) {
        const int32_t t = sorted[k];
        out[static_cast<size_t>(t) >> 6] |= uint64_t{1} << (t & 63);
      }
      ++i;
    }
  }
  const bool acc = state == kDone || (state >= 0 && automaton_.accepting(state));
  bool any = false;
  for (uint64_t w : out) any = any || w != 0;
  // Eos once the sentence is complete; and where nothing can follow at all, eos rather than an empty mask.
  if (acc || !any) {
    for (int32_t e : v.eos_ids()) out[static_cast<size_t>(e) >> 6] |= uint64_t{1} << (e & 63);
  }
}

const std::vector<uint64_t>& CompiledGrammar::mask_locked(int32_t state) {
  const size_t key = state < 0 ? (state == kDone ? 0 : 1) : static_cast<size_t>(state) + 2;
  if (masks_.size() <= key) masks_.resize(key + 1);
  if (!masks_[key]) {
    if (cached_masks_ >= kMaxCachedMasks) {
      for (auto& m : masks_) m.reset();
      cached_masks_ = 0;
    }
    auto m = std::make_unique<std::vector<uint64_t>>();
    compute_mask(state, *m);
    masks_[key] = std::move(m);
    ++cached_masks_;
  }
  return *masks_[key];
}

void CompiledGrammar::fill_mask(int32_t state, uint64_t* out) {
  std::lock_guard<std::mutex> lock(mutex_);
  const std::vector<uint64_t>& m = mask_locked(state);
  std::memcpy(out, m.data(), m.size() * sizeof(uint64_t));
}

void CompiledGrammar::drop_masks() {
  std::lock_guard<std::mutex> lock(mutex_);
  for (auto& m : masks_) m.reset();
  cached_masks_ = 0;
}

void CompiledGrammar::warm(int32_t state) {
  std::lock_guard<std::mutex> lock(mutex_);
  (void)mask_locked(state);
}

int32_t CompiledGrammar::advance(int32_t state, int32_t token) {
  if (state < 0) return state == kDone ? kDone : GrammarAutomaton::kDead;
  std::lock_guard<std::mutex> lock(mutex_);
  for (int32_t e : vocab_->eos_ids()) {
    if (e == token) return automaton_.accepting(state) ? kDone : GrammarAutomaton::kDead;
  }
  if (token < 0 || token >= vocab_->size()) return GrammarAutomaton::kDead;
  const std::string& b = vocab_->bytes(token);
  if (b.empty()) return GrammarAutomaton::kDead;
  return automaton_.run(state, b);
}

std::vector<uint64_t> CompiledGrammar::reference_mask(int32_t state) {
  std::lock_guard<std::mutex> lock(mutex_);
  const TokenVocab& v = *vocab_;
  std::vector<uint64_t> out(v.mask_words(), 0);
  bool any = false;
  if (state >= 0) {
    for (int32_t t = 0; t < v.size(); ++t) {
      const std::string& b = v.bytes(t);
      if (b.empty()) continue;
      if (automaton_.run(state, b) >= 0) {
        out[static_cast<size_t>(t) >> 6] |= uint64_t{1} << (t & 63);
        any = true;
      }
    }
  }
  const bool acc = state == kDone || (state >= 0 && automaton_.accepting(state));
  if (acc || !any) {
    for (int32_t e : v.eos_ids()) out[static_cast<size_t>(e) >> 6] |= uint64_t{1} << (e & 63);
  }
  return out;
}

}  // namespace peregrine::engine::structured
