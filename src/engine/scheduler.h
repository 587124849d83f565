// Scheduler: a token-budget scheduler with no prefill or decode phase. Each step it hands out up to
// max_num_batched_tokens tokens: running decodes first, then running prompt chunks, then waiting sequences
// (FCFS, chunked to the budget, starting from their prefix-cache hit). When KV blocks run out it preempts the
// newest running sequence, which later recomputes, so a valid request never fails for lack of KV memory.
#pragma once

#include <cstdint>
#include <deque>
#include <vector>

#include "engine/kv_cache_manager.h"
#include "engine/sequence.h"

namespace peregrine::engine {

struct SchedulerConfig {
  // Draft tokens one step may verify over all sequences (0 = no speculation).
  int max_draft_tokens_per_step = 0;
  int max_num_seqs = 256;
  int max_num_batched_tokens = 2048;
  int max_model_len = 4096;
  int block_size = 16;
  int num_blocks = 0;
  bool enable_prefix_caching = true;
};

// One sequence's share of a step: compute tokens [num_computed_tokens, num_computed_tokens + num_new_tokens).
struct ScheduledSeq {
  Sequence* seq = nullptr;
  int num_new_tokens = 0;
  // This chunk reaches the sequence's last token, so the step samples its next token.
  bool samples = false;
  // Of num_new_tokens, the last num_draft_tokens are the sequence's draft tokens (positions num_tokens() on), to be
  // verified; their KV counts as computed only once accepted (Scheduler::accept_drafts).
  int num_draft_tokens = 0;
};

// The scheduler's decision for one step: the batch rows in order (decodes, then prefill chunks).
struct SchedulerOutput {
  std::vector<ScheduledSeq> seqs;
  int num_batched_tokens = 0;
  int num_decodes = 0;           // sequences computing exactly their last token
  std::vector<Sequence*> preempted;  // sent back to waiting in this step (their KV is gone)
  bool empty() const { return seqs.empty(); }
};

class Scheduler {
 public:
  explicit Scheduler(const SchedulerConfig& config);

  const SchedulerConfig& config() const { return config_; }
  KvCacheManager& kv() { return kv_; }
  const KvCacheManager& kv() const { return kv_; }

  // Queues a new sequence at the tail of the waiting queue. The caller keeps ownership.
  void add(Sequence* seq);
  SchedulerOutput schedule();
  // After the step's forward: advances num_computed_tokens, caches newly full blocks, forks siblings
  // whose leader just finished its prompt. Call before appending sampled tokens.
  void on_step_computed(const SchedulerOutput& output);
  // Removes a sequence (finished or aborted) wherever it is and frees its blocks.
  void finish(Sequence* seq);
  // After verification: the first `accepted` scheduled drafts of seq were accepted (and are now part of its
  // token_ids), so their KV counts as computed; KV blocks past what the sequence now needs are released.
  void accept_drafts(Sequence* seq, int accepted);

  bool has_unfinished() const { return !running_.empty() || !waiting_.empty(); }
  int num_running() const { return static_cast<int>(running_.size()); }
  int num_waiting() const { return static_cast<int>(waiting_.size()); }
  uint64_t num_preemptions() const { return num_preemptions_; }
  const std::vector<Sequence*>& running() const { return running_; }
  const std::deque<Sequence*>& waiting() const { return waiting_; }

 private:
  // Frees blocks until `needed` blocks can be allocated for `for_seq`: preempts the newest running sequence
  // (never for_seq), then drops blocks pinned by waiting sequences. Returns false when for_seq must yield.
  bool make_room(int needed, Sequence* for_seq, SchedulerOutput& out, int& budget);
  void preempt(Sequence* victim, SchedulerOutput& out, int& budget);
  bool schedule_running(Sequence* seq, SchedulerOutput& out, int& budget);
  void admit_waiting(SchedulerOutput& out, int& budget);

  SchedulerConfig config_;
  KvCacheManager kv_;
  std::vector<Sequence*> running_;  // admission order
  std::deque<Sequence*> waiting_;   // preempted sequences go to the front
  uint64_t num_preemptions_ = 0;
  int draft_budget_ = 0;  // draft tokens still allowed in the step being scheduled
};

}  // namespace peregrine::engine
