// The byte-level pushdown matcher and the token mask.
//
// GrammarAutomaton runs a Grammar (grammar.h) over bytes. A parse position is a stack of frames (rule, alternative,
// position, parent), interned so that a whole stack is one integer and equal stacks are equal integers; a rule in
// tail position replaces its caller's frame, so loops never deepen the stack. A matcher state is the set of stacks
// whose top frame is about to read a byte class (plus "accept" once the root rule can end). Such sets are interned
// as states of a lazily built DFA: next(state, byte) is computed once (closure over calls and returns) and then
// read from a 256-entry row, so after warm-up a byte costs one table load.
//
// TokenVocab holds every token's bytes in a trie laid out in depth-first order (each node knows where its subtree
// ends). The mask of a state walks that array once, following next() byte by byte and skipping a whole subtree at
// the first byte the grammar refuses; masks are cached per DFA state, so a state seen before (every position inside
// a string, every repeated key of an array of objects) costs a copy. Masks can be warmed ahead (while the forward
// runs). CompiledGrammar is shared by every request with the same constraint; its methods lock, so any thread may
// call them.
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "engine/structured/grammar.h"

namespace peregrine::engine::structured {

class GrammarAutomaton {
 public:
  static constexpr int32_t kDead = -1;
  explicit GrammarAutomaton(Grammar g);

  int32_t initial() const { return 0; }
  // The state after `byte`, or kDead. Not thread-safe (CompiledGrammar locks). The fast path (a table load) is
  // inline; a transition seen for the first time is computed by next_slow.
  int32_t next(int32_t state, uint8_t byte) {
    const int32_t t = trans_[static_cast<size_t>(state)][byte];
    return t != kUnknownTransition ? t : next_slow(state, byte);
  }
  static constexpr int32_t kUnknownTransition = -3;
  // True when the text so far is a complete sentence of the grammar.
  bool accepting(int32_t state) const { return accepting_[static_cast<size_t>(state)] != 0; }
  // True when some byte can follow (false: only the end may come).
  bool can_continue(int32_t state) const { return continues_[static_cast<size_t>(state)] != 0; }
  // Matches a whole byte string (tests, reference checks); kDead when refused.
  int32_t run(int32_t state, std::string_view bytes);
  // Builds the rows of the states reachable from the initial one, breadth first, until every reachable state has
  // its row, max_states states exist, or the deadline passes; returns true when the whole reachable DFA is built.
  // Later calls continue where the last one stopped. Lookups of built rows are then table loads.
  bool explore(size_t max_states, std::chrono::steady_clock::time_point deadline);
  size_t explored() const { return explored_; }
  // The stacks of a state (sorted node ids; 0 = the root returned), and the state made of one stack alone: a state's
  // texts are the union of its stacks' (each stack parses on its own), which the mask uses (CompiledGrammar).
  const std::vector<int32_t>& stacks(int32_t state) const { return sets_[static_cast<size_t>(state)]; }
  int32_t single_stack_state(int32_t node) { return intern_state({node}); }
  // The byte class the top frame of a stack (node != 0) reads next.
  const ByteSet& top_class(int32_t node) const {
    const Frame& f = nodes_[static_cast<size_t>(node)];
    return g_.classes[static_cast<size_t>(g_.rules[static_cast<size_t>(f.rule)].alts[static_cast<size_t>(f.alt)][static_cast<size_t>(f.pos)].cls)];
  }
  size_t num_states() const { return sets_.size(); }
  const Grammar& grammar() const { return g_; }

  static constexpr size_t kMaxStacksPerState = 4096;
  static constexpr int32_t kMaxStackDepth = 2048;

 private:
  struct Frame {
    int32_t rule, alt, pos, parent, depth;
  };
  int32_t next_slow(int32_t state, uint8_t byte);
  int32_t intern_node(int32_t rule, int32_t alt, int32_t pos, int32_t parent);
  void settle(int32_t node, std::vector<int32_t>& out, std::vector<int32_t>& visited_list);
  int32_t intern_state(std::vector<int32_t> set);

  Grammar g_;
  std::vector<Frame> nodes_;  // node 0: the empty stack (the root rule returned)
  struct NodeKey {
    uint64_t a, b;  // (rule, alt), (pos, parent)
    bool operator==(const NodeKey& o) const { return a == o.a && b == o.b; }
  };
  struct NodeKeyHash {
    size_t operator()(const NodeKey& k) const {
      const uint64_t h = (k.a * 0x9E3779B97F4A7C15ull) ^ (k.b + 0x632BE59BD9B4E019ull + (k.a << 6));
      return static_cast<size_t>(h ^ (h >> 31));
    }
  };
  std::unordered_map<NodeKey, int32_t, NodeKeyHash> node_index_;
  std::vector<std::vector<int32_t>> sets_;
  std::unordered_map<std::string, int32_t> set_index_;
  std::vector<std::array<int32_t, 256>> trans_;
  std::vector<char> accepting_, continues_;
  std::vector<uint32_t> visit_mark_;  // per node: the closure pass that last visited it
  uint32_t visit_epoch_ = 0;
  size_t explored_ = 0;  // states [0, explored_) have every row entry built
};

// The tokens of a vocabulary as bytes, in a depth-first trie (see above). Tokens that are plain text (1 to 16 complete
// UTF-8 characters, none of them '"', '\\' or a control character) are also kept as bitmasks by their length in
// characters, and the other tokens in a trie of their own: where every plain character moves a state along one
// chain of states (inside a JSON string: the state itself, or the next count of a maxLength), the plain tokens
// allowed are those up to the chain's length, one bitmask copy, and only the small trie is walked.
class TokenVocab {
 public:
  // bytes[id]: what token id adds to the text; empty = never allowed by a constraint (special tokens). eos ids are
  // the tokens that end a sentence (allowed once the grammar accepts).
  TokenVocab(std::vector<std::string> bytes, std::vector<int32_t> eos_ids);
  int32_t size() const { return static_cast<int32_t>(bytes_.size()); }
  const std::string& bytes(int32_t id) const { return bytes_[static_cast<size_t>(id)]; }
  std::span<const int32_t> eos_ids() const { return eos_; }
  size_t num_nodes() const { return all_.byte.size(); }
  size_t num_rest_nodes() const { return rest_.byte.size(); }
  size_t mask_words() const { return (bytes_.size() + 63) / 64; }
  // The number of characters of a plain-text token (see above); 0 when it is not one.
  static int plain_chars(std::string_view bytes);
  static constexpr int kMaxPlainChars = 16;

 private:
  friend class CompiledGrammar;
  struct Trie {
    std::vector<uint8_t> byte;
    std::vector<uint16_t> depth;  // 1 = a first byte
    std::vector<int32_t> skip;    // the first node after this node's subtree
    std::vector<int32_t> tok_begin, tok_end;  // tokens ending here: sorted[begin, end)
    std::vector<int32_t> sorted;
    uint16_t max_depth = 0;
  };
  Trie build(std::vector<int32_t> ids) const;
  std::vector<std::string> bytes_;
  std::vector<int32_t> eos_;
  Trie all_, rest_;
  std::vector<std::vector<uint64_t>> plain_upto_;  // [c]: bitmask of the plain tokens of at most c characters
};

class CompiledGrammar {
 public:
  static constexpr int32_t kDone = -2;  // an eos token was taken in an accepting state
  // Compiling also builds the grammar's DFA ahead (GrammarAutomaton::explore, within kPrecomputeStates states and
  // kPrecomputeSeconds), so that masks of states met later walk the trie over built rows; precompute_states 0 skips
  // it (benchmarks of the lazy path).
  static constexpr size_t kPrecomputeStates = 8000;
  static constexpr double kPrecomputeSeconds = 0.030;
  CompiledGrammar(Grammar g, std::shared_ptr<const TokenVocab> vocab, size_t precompute_states = kPrecomputeStates);
  // Whether compiling built every reachable state (benchmarks, tests).
  bool fully_precomputed() const { return fully_precomputed_; }

  int32_t initial() const { return 0; }
  // The allowed tokens after `state` as a bitmask of vocab().mask_words() words (bit t%64 of word t/64). Eos tokens
  // are allowed in accepting states; a state from which nothing can follow allows only eos.
  void fill_mask(int32_t state, uint64_t* out);
  // Computes and caches the mask of `state` (no copy): what the engine runs while the forward runs.
  void warm(int32_t state);
  // The state after `token` (kDead when the grammar refuses it; kDone for eos in an accepting state).
  int32_t advance(int32_t state, int32_t token);
  bool accepting(int32_t state);
  // The mask computed without the trie or the cache: every token tried byte by byte (the reference for tests).
  std::vector<uint64_t> reference_mask(int32_t state);
  const TokenVocab& vocab() const { return *vocab_; }
  size_t num_states();
  // Masks cached at most (each vocab/8 bytes); the cache is dropped and refilled when full.
  static constexpr size_t kMaxCachedMasks = 512;
  // Drops the cached masks (the DFA stays): benchmarks time the trie walk alone this way.
  void drop_masks();
  // Counters for benchmarks.
  uint64_t masks_computed() const { return masks_computed_.load(); }

 private:
  const std::vector<uint64_t>& mask_locked(int32_t state);
  void compute_mask(int32_t state, std::vector<uint64_t>& out);
  void walk(const TokenVocab::Trie& trie, int32_t state, std::vector<uint64_t>& out);
  // Plain characters (see TokenVocab) from `state`: the one state every one of them leads to through live states
  // (kChainAll), kDead when every one of them dies, or kNoChain (they lead to different states). Found by walking
  // the state paired with a UTF-8 automaton; cached per state.
  static constexpr int32_t kNoChain = -5;
  int32_t plain_successor(int32_t state);
  // The number of plain characters every sequence of which `state` accepts while no longer one is accepted
  // (kMaxPlainChars when unbounded), or -1 when plain characters do not move it along one chain.
  int plain_chain_length(int32_t state);
  // The same for a state whose stacks go different ways on plain text (a free string beside the names of an
  // object's properties, an enum beside a string): its plain tokens are the union of its stacks', so when every
  // stack has a chain, or one takes plain text without bound, they are the plain tokens up to the longest chain;
  // -1 otherwise. A stack's top byte class decides most stacks at once (it reads every first byte of a plain
  // character: maybe a chain, worked out on the stack alone; none of them: a chain of 0; some: none). Cached.
  int stacks_chain_length(int32_t state);
  std::vector<int32_t> plain_succ_;  // per state: kUnknownTransition, or plain_successor's answer
  std::vector<int16_t> stacks_chain_;  // per state: -2 unknown, else stacks_chain_length's answer

  std::mutex mutex_;
  GrammarAutomaton automaton_;
  std::shared_ptr<const TokenVocab> vocab_;
  std::vector<std::unique_ptr<std::vector<uint64_t>>> masks_;  // per DFA state
  size_t cached_masks_ = 0;
  std::vector<int32_t> walk_states_;
  std::atomic<uint64_t> masks_computed_{0};
  bool fully_precomputed_ = false;
};

}  // namespace peregrine::engine::structured
