// Proposers of draft tokens for speculative decoding: after each step, for every sequence about to decode, a
// proposer fills Sequence::draft_tokens (and draft_parents) with tokens it guesses will follow; the next step
// verifies them in one forward (EngineCore), accepting the longest prefix the target model agrees with.
// Proposers only guess: correctness never depends on them.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "engine/sequence.h"
#include "peregrine/speculative_config.h"

namespace peregrine::engine {

class Proposer {
 public:
  virtual ~Proposer() = default;
  // Fills seqs[i]->draft_tokens / draft_parents with at most max_drafts[i] tokens (none when it has no guess).
  virtual void propose(std::span<Sequence* const> seqs, std::span<const int> max_drafts) = 0;
  // seq's token_ids grew (prompt admitted, tokens accepted): caches that learn from text see the new tokens.
  virtual void observe(const Sequence& seq) { (void)seq; }
  // Token trees of the next propose() calls have at most this many nodes (the engine's controller lowers it where
  // verifying big trees costs more than they gain); chains are limited by max_drafts alone.
  virtual void set_tree_node_limit(int nodes) { (void)nodes; }
  // The next propose() calls catch up at most this many sequences that are more than one verify step behind (a
  // drafter with a backlog: ModelProposer); the others draft nothing in that step. -1: every one. The engine sets 1
  // for the controller's trials of drafting while it runs none, so a trial measures acceptance on one sequence
  // instead of catching up every sequence's backlog.
  virtual void set_catch_up_limit(int sequences) { (void)sequences; }
  // seq ended (finished or aborted): per-sequence state can go.
  virtual void forget(const Sequence& seq) { (void)seq; }
  // Seconds of the last propose() that went to catching up a backlog — tokens beyond what one verify step can add
  // (a new prompt's window, or what accumulated while the controller ran steps without drafts): a cost of starting
  // to draft, not of each drafting step, so the controller leaves it out of its per-step costs.
  virtual double backlog_seconds() const { return 0.0; }
};

// The proposer for a config's method (ngram, lookahead); draft_model and self are built by Engine::create, which
// has the models. tokenize reads warm-up files. Throws Error(kUnsupported) for a method this function does not build.
std::unique_ptr<Proposer> make_text_proposer(const SpeculativeConfig& config,
                                             const std::function<std::vector<int32_t>(const std::string&)>& tokenize);

}  // namespace peregrine::engine
