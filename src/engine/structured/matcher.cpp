// GrammarAutomaton (lazy DFA over interned parse stacks), TokenVocab (depth-first token trie) and CompiledGrammar
// (masks per state, cached); see matcher.h.
#include "engine/structured/matcher.h"

#include <algorithm>
#include <cstring>
#include <numeric>
#include <unordered_map>
#include <unordered_set>

#include "peregrine/error.h"

namespace peregrine::engine::structured {
namespace {

constexpr int32_t kUnknown = GrammarAutomaton::kUnknownTransition;


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
  const NodeKey key{(static_cast<uint64_t>(static_cast<uint32_t>(rule)) << 32) | static_cast<uint32_t>(alt),
                    (static_cast<uint64_t>(static_cast<uint32_t>(pos)) << 32) | static_cast<uint32_t>(parent)};
  auto [it, inserted] = node_index_.try_emplace(key, static_cast<int32_t>(nodes_.size()));
  if (!inserted) return it->second;
  const int32_t depth = nodes_[static_cast<size_t>(parent)].depth + 1;
  nodes_.push_back(Frame{rule, alt, pos, parent, depth});
  visit_mark_.push_back(0);
  return it->second;
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

// The whole row of `state` at once: bytes that the same stacks accept (the same signature) lead to the same state,
// so each group's closure is computed once (a string's ~200 plain bytes are one group).
int32_t GrammarAutomaton::next_slow(int32_t state, uint8_t byte) {
  const std::vector<int32_t> set = sets_[static_cast<size_t>(state)];  // copy: interning may grow sets_
  std::vector<int32_t> ready;                                          // stacks that read a byte next
  std::vector<const ByteSet*> classes;
  for (int32_t n : set) {
    if (n == 0) continue;
    const Frame& f = nodes_[static_cast<size_t>(n)];
    const Element e = g_.rules[static_cast<size_t>(f.rule)].alts[static_cast<size_t>(f.alt)][static_cast<size_t>(f.pos)];
    ready.push_back(n);
    classes.push_back(&g_.classes[static_cast<size_t>(e.cls)]);
  }
  const size_t words = (ready.size() + 63) / 64;
  std::vector<uint64_t> sig(256 * words, 0);  // per byte: which of `ready` accept it
  for (size_t k = 0; k < ready.size(); ++k) {
    const ByteSet& c = *classes[k];
    for (int b = 0; b < 256; ++b) {
      if (c.test(b)) sig[static_cast<size_t>(b) * words + k / 64] |= uint64_t{1} << (k % 64);
    }
  }
  std::vector<char> done(256, 0);
  std::vector<int32_t> out, visited;
  for (int b = 0; b < 256; ++b) {
    if (done[static_cast<size_t>(b)]) continue;
    const uint64_t* mine = &sig[static_cast<size_t>(b) * words];
    bool any = false;
    for (size_t w = 0; w < words; ++w) any = any || mine[w] != 0;
    int32_t t = kDead;
    if (any) {
      out.clear();
      ++visit_epoch_;
      for (size_t k = 0; k < ready.size(); ++k) {
        if (!((mine[k / 64] >> (k % 64)) & 1)) continue;
        const Frame f = nodes_[static_cast<size_t>(ready[k])];
        settle(intern_node(f.rule, f.alt, f.pos + 1, f.parent), out, visited);
      }
      std::sort(out.begin(), out.end());
      out.erase(std::unique(out.begin(), out.end()), out.end());
      t = out.empty() || out.size() > kMaxStacksPerState ? kDead : intern_state(out);
    }
    for (int b2 = b; b2 < 256; ++b2) {
      if (done[static_cast<size_t>(b2)]) continue;
      if (std::equal(mine, mine + words, &sig[static_cast<size_t>(b2) * words])) {
        done[static_cast<size_t>(b2)] = 1;
        trans_[static_cast<size_t>(state)][static_cast<size_t>(b2)] = t;
      }
    }
  }
  return trans_[static_cast<size_t>(state)][byte];
}

bool GrammarAutomaton::explore(size_t max_states, std::chrono::steady_clock::time_point deadline) {
  for (; explored_ < sets_.size(); ++explored_) {
    if (sets_.size() >= max_states || (explored_ % 16 == 0 && std::chrono::steady_clock::now() >= deadline)) return false;
    const auto s = static_cast<int32_t>(explored_);
    for (int b = 0; b < 256; ++b) (void)next(s, static_cast<uint8_t>(b));  // the first unknown entry builds the row
  }
  return true;
}

int32_t GrammarAutomaton::run(int32_t state, std::string_view bytes) {
  for (char c : bytes) {
    if (state < 0) return kDead;
    state = next(state, static_cast<uint8_t>(c));
  }
  return state;
}

int TokenVocab::plain_chars(std::string_view b) {
  if (b.empty()) return 0;
  int chars = 0;
  for (size_t i = 0; i < b.size();) {
    const unsigned char c = static_cast<unsigned char>(b[i]);
    if (c < 0x80) {
      if (c < 0x20 || c == '"' || c == '\\') return 0;
      ++i;
      ++chars;
      continue;
    }
    int len = 0;
    unsigned char lo = 0x80, hi = 0xBF;  // the range of the second byte
    if (c >= 0xC2 && c <= 0xDF) len = 2;
    else if (c == 0xE0) { len = 3; lo = 0xA0; }
    else if ((c >= 0xE1 && c <= 0xEC) || c == 0xEE || c == 0xEF) len = 3;
    else if (c == 0xED) { len = 3; hi = 0x9F; }
    else if (c == 0xF0) { len = 4; lo = 0x90; }
    else if (c >= 0xF1 && c <= 0xF3) len = 4;
    else if (c == 0xF4) { len = 4; hi = 0x8F; }
    else return 0;
    if (i + static_cast<size_t>(len) > b.size()) return 0;
    const unsigned char c1 = static_cast<unsigned char>(b[i + 1]);
    if (c1 < lo || c1 > hi) return 0;
    for (int k = 2; k < len; ++k) {
      const unsigned char ck = static_cast<unsigned char>(b[i + static_cast<size_t>(k)]);
      if (ck < 0x80 || ck > 0xBF) return 0;
    }
    i += static_cast<size_t>(len);
    ++chars;
  }
  return chars <= kMaxPlainChars ? chars : 0;
}

TokenVocab::Trie TokenVocab::build(std::vector<int32_t> ids) const {
  Trie t;
  t.sorted = std::move(ids);
  std::sort(t.sorted.begin(), t.sorted.end(), [&](int32_t a, int32_t b) {
    const int c = bytes_[static_cast<size_t>(a)].compare(bytes_[static_cast<size_t>(b)]);
    return c != 0 ? c < 0 : a < b;
  });
  std::vector<int32_t> path;
  const std::string* prev = nullptr;
  for (size_t k = 0; k < t.sorted.size(); ++k) {
    const std::string& s = bytes_[static_cast<size_t>(t.sorted[k])];
    if (s.size() > 65535) throw Error(ErrorCode::kInvalidArgument, "a token longer than 65535 bytes");
    size_t lcp = 0;
    if (prev) {
      while (lcp < s.size() && lcp < prev->size() && s[lcp] == (*prev)[lcp]) ++lcp;
    }
    if (prev && lcp == s.size() && lcp == prev->size()) {
      t.tok_end[static_cast<size_t>(path.back())] = static_cast<int32_t>(k + 1);  // same bytes as the previous
      continue;
    }
    path.resize(lcp);
    for (size_t d = lcp; d < s.size(); ++d) {
      t.byte.push_back(static_cast<uint8_t>(s[d]));
      t.depth.push_back(static_cast<uint16_t>(d + 1));
      t.tok_begin.push_back(0);
      t.tok_end.push_back(0);
      path.push_back(static_cast<int32_t>(t.byte.size() - 1));
    }
    t.tok_begin[static_cast<size_t>(path.back())] = static_cast<int32_t>(k);
    t.tok_end[static_cast<size_t>(path.back())] = static_cast<int32_t>(k + 1);
    t.max_depth = std::max<uint16_t>(t.max_depth, static_cast<uint16_t>(s.size()));
    prev = &s;
  }
  const int32_t n = static_cast<int32_t>(t.byte.size());
  t.skip.assign(static_cast<size_t>(n), n);
  std::vector<int32_t> stack;
  for (int32_t i = 0; i < n; ++i) {
    while (!stack.empty() && t.depth[static_cast<size_t>(stack.back())] >= t.depth[static_cast<size_t>(i)]) {
      t.skip[static_cast<size_t>(stack.back())] = i;
      stack.pop_back();
    }
    stack.push_back(i);
  }
  return t;
}

TokenVocab::TokenVocab(std::vector<std::string> bytes, std::vector<int32_t> eos_ids)
    : bytes_(std::move(bytes)), eos_(std::move(eos_ids)) {
  for (int32_t e : eos_) bytes_.at(static_cast<size_t>(e)).clear();  // eos is never text
  std::vector<int32_t> all, rest;
  plain_upto_.assign(kMaxPlainChars + 1, std::vector<uint64_t>(mask_words(), 0));
  for (size_t i = 0; i < bytes_.size(); ++i) {
    if (bytes_[i].empty()) continue;
    all.push_back(static_cast<int32_t>(i));
    if (const int c = plain_chars(bytes_[i]); c > 0) {
      plain_upto_[static_cast<size_t>(c)][i >> 6] |= uint64_t{1} << (i & 63);
    } else {
      rest.push_back(static_cast<int32_t>(i));
    }
  }
  for (size_t c = 1; c < plain_upto_.size(); ++c) {
    for (size_t w = 0; w < mask_words(); ++w) plain_upto_[c][w] |= plain_upto_[c - 1][w];
  }
  all_ = build(std::move(all));
  rest_ = build(std::move(rest));
}

CompiledGrammar::CompiledGrammar(Grammar g, std::shared_ptr<const TokenVocab> vocab, size_t precompute_states)
    : automaton_(std::move(g)), vocab_(std::move(vocab)) {
  walk_states_.resize(static_cast<size_t>(vocab_->all_.max_depth) + 1);
  if (precompute_states > 0) {
    const auto deadline = std::chrono::steady_clock::now() +
                          std::chrono::duration_cast<std::chrono::steady_clock::duration>(std::chrono::duration<double>(kPrecomputeSeconds));
    fully_precomputed_ = automaton_.explore(precompute_states, deadline);
  }
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

int32_t CompiledGrammar::plain_successor(int32_t state) {
  const size_t u = static_cast<size_t>(state);
  if (plain_succ_.size() <= u) plain_succ_.resize(u + 1, GrammarAutomaton::kUnknownTransition);
  if (plain_succ_[u] != GrammarAutomaton::kUnknownTransition) return plain_succ_[u];
  // UTF-8 automaton over plain characters: 0 = between characters; 1, 2, 3 = that many continuation bytes to go;
  // 4 = after E0 (A0-BF next), 5 = after ED (80-9F), 6 = after F0 (90-BF), 7 = after F4 (80-8F).
  auto step = [](int q, int b) -> int {
    switch (q) {
      case 0:
        if (b < 0x80) return b < 0x20 || b == '"' || b == '\\' ? -1 : 0;
        if (b >= 0xC2 && b <= 0xDF) return 1;
        if (b == 0xE0) return 4;
        if ((b >= 0xE1 && b <= 0xEC) || b == 0xEE || b == 0xEF) return 2;
        if (b == 0xED) return 5;
        if (b == 0xF0) return 6;
        if (b >= 0xF1 && b <= 0xF3) return 3;
        if (b == 0xF4) return 7;
        return -1;
      case 1: case 2: case 3: return b >= 0x80 && b <= 0xBF ? q - 1 : -1;
      case 4: return b >= 0xA0 && b <= 0xBF ? 1 : -1;
      case 5: return b >= 0x80 && b <= 0x9F ? 1 : -1;
      case 6: return b >= 0x90 && b <= 0xBF ? 2 : -1;
      case 7: return b >= 0x80 && b <= 0x8F ? 2 : -1;
    }
    return -1;
  };
  // The bytes each UTF-8 state can take (plain ASCII without '"' and '\\', then the lead bytes; continuations).
  struct Range {
    int lo, hi;
  };
  static const std::vector<Range> kRanges[8] = {
      {{0x20, 0x21}, {0x23, 0x5B}, {0x5D, 0x7E}, {0xC2, 0xF4}}, {{0x80, 0xBF}}, {{0x80, 0xBF}}, {{0x80, 0xBF}},
      {{0xA0, 0xBF}}, {{0x80, 0x9F}}, {{0x90, 0xBF}}, {{0x80, 0x8F}}};
  std::vector<std::pair<int32_t, int>> todo{{state, 0}};
  std::vector<uint64_t> seen{static_cast<uint64_t>(static_cast<uint32_t>(state)) << 3};  // (state, q) pairs met
  std::unordered_set<uint64_t> seen_set;  // used once seen grows past a few dozen pairs
  auto first_visit = [&](uint64_t key) {
    if (seen_set.empty() && seen.size() < 64) {
      if (std::find(seen.begin(), seen.end(), key) != seen.end()) return false;
      seen.push_back(key);
      return true;
    }
    if (seen_set.empty()) seen_set.insert(seen.begin(), seen.end());
    return seen_set.insert(key).second;
  };
  size_t pairs = 1;
  bool ok = true;
  int32_t target = GrammarAutomaton::kUnknownTransition;  // where complete characters lead (one state, or kDead)
  while (ok && !todo.empty()) {
    auto [s, q] = todo.back();
    todo.pop_back();
    uint64_t last = ~uint64_t{0};  // consecutive bytes mostly go the same way: looked at once
    for (const Range& r : kRanges[q]) {
      for (int b = r.lo; b <= r.hi && ok; ++b) {
        const int q2 = step(q, b);
        if (q2 < 0) continue;
        const int32_t s2 = automaton_.next(s, static_cast<uint8_t>(b));
        const uint64_t key = (static_cast<uint64_t>(static_cast<uint32_t>(s2)) << 3) | static_cast<uint64_t>(q2);
        if (key == last) continue;
        last = key;
        if (s2 < 0 || q2 == 0) {
          // A character ends here (or dies part-way, which counts as dying): all must end in the same place.
          const int32_t end = s2 < 0 ? GrammarAutomaton::kDead : s2;
          if (target == GrammarAutomaton::kUnknownTransition) target = end;
          if (end != target) ok = false;
          continue;
        }
        if (first_visit(key)) {
          if (++pairs > 4096) ok = false;  // not a simple loop: walk the whole trie instead
          todo.emplace_back(s2, q2);
        }
      }
    }
  }
  if (target == GrammarAutomaton::kUnknownTransition) target = GrammarAutomaton::kDead;
  const int32_t answer = ok ? target : kNoChain;
  plain_succ_[static_cast<size_t>(state)] = answer;
  return answer;
}

int CompiledGrammar::plain_chain_length(int32_t state) {
  std::vector<int32_t> chain{state};
  for (int c = 0; c < TokenVocab::kMaxPlainChars; ++c) {
    const int32_t next = plain_successor(chain.back());
    if (next == kNoChain) return -1;
    if (next == GrammarAutomaton::kDead) return c;  // c characters pass, the next one dies whatever it is
    if (std::find(chain.begin(), chain.end(), next) != chain.end()) return TokenVocab::kMaxPlainChars;  // a loop
    chain.push_back(next);
  }
  return TokenVocab::kMaxPlainChars;
}

int CompiledGrammar::stacks_chain_length(int32_t state) {
  const size_t u = static_cast<size_t>(state);
  if (stacks_chain_.size() <= u) stacks_chain_.resize(u + 1, -2);
  if (stacks_chain_[u] != -2) return stacks_chain_[u];
  // The first bytes of plain characters: printable ASCII but '"' and '\\', and the UTF-8 lead bytes.
  static const ByteSet kPlainFirst = [] {
    ByteSet b;
    for (int c = 0x20; c < 0x7F; ++c) {
      if (c != '"' && c != '\\') b.set(c);
    }
    b.set_range(0xC2, 0xF4);
    return b;
  }();
  std::vector<int32_t> wide;  // stacks that read every plain first byte
  bool every = true;
  int longest = -1;
  for (int32_t n : automaton_.stacks(state)) {
    if (n == 0) continue;  // the root returned: reads nothing more
    const ByteSet& c = automaton_.top_class(n);
    bool all = true, none = true;
    for (size_t w = 0; w < 4; ++w) {
      all = all && (c.bits[w] & kPlainFirst.bits[w]) == kPlainFirst.bits[w];
      none = none && (c.bits[w] & kPlainFirst.bits[w]) == 0;
    }
    if (all) {
      wide.push_back(n);
    } else if (none) {
      longest = std::max(longest, 0);  // every plain character dies on this stack
    } else {
      every = false;  // some plain characters live, others die: no chain
    }
  }
  int answer = -1;
  for (int32_t n : wide) {
    const int len = plain_chain_length(automaton_.single_stack_state(n));
    if (len == TokenVocab::kMaxPlainChars) {
      answer = len;
      break;
    }
    every = every && len >= 0;
    longest = std::max(longest, len);
  }
  if (answer < 0 && every && longest >= 0) answer = longest;
  stacks_chain_[u] = static_cast<int16_t>(answer);
  return answer;
}

void CompiledGrammar::walk(const TokenVocab::Trie& trie, int32_t state, std::vector<uint64_t>& out) {
  const int32_t n = static_cast<int32_t>(trie.byte.size());
  const uint8_t* bytes = trie.byte.data();
  const uint16_t* depth = trie.depth.data();
  const int32_t* skip = trie.skip.data();
  const int32_t* tb = trie.tok_begin.data();
  const int32_t* te = trie.tok_end.data();
  const int32_t* sorted = trie.sorted.data();
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

void CompiledGrammar::compute_mask(int32_t state, std::vector<uint64_t>& out) {
  const TokenVocab& v = *vocab_;
  out.assign(v.mask_words(), 0);
  masks_computed_.fetch_add(1, std::memory_order_relaxed);
  if (state >= 0 && automaton_.can_continue(state)) {
    int len = plain_chain_length(state);
    if (len < 0) len = stacks_chain_length(state);
    if (len >= 0) {
      out = v.plain_upto_[static_cast<size_t>(len)];  // the plain tokens that fit; the others are walked
      walk(v.rest_, state, out);
    } else {
      walk(v.all_, state, out);
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
