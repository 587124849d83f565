// ModelProposer: drafts with a model, greedily and batched across sequences ("draft_model": a smaller model with
// the same vocabulary and its own paged KV; "self": the target's own first layers, reading and writing the target's
// KV of those layers). Each proposal first brings the drafter's KV up to the sequence's last real token (catch-up,
// one ragged forward for all sequences), then runs one forward per further draft token for all sequences at once.
// Drafts are point masses (argmax), so verification stays exact whatever the drafter is. With a DraftVocab the
// drafter's runner computes logits over a compact LM head of those tokens only (model::Model::use_logits_subset):
// the proposer counts the tokens of the sequences it sees, rewrites the compact rows that changed before a
// proposal's first forward, and maps each argmax column back to its token.
#pragma once

#include <memory>
#include <optional>
#include <unordered_map>
#include <vector>

#include "engine/kv_cache_manager.h"
#include "engine/model_runner.h"
#include "engine/spec/draft_vocab.h"
#include "engine/spec/proposer.h"

namespace peregrine::engine {

class ModelProposer final : public Proposer {
 public:
  // draft_model: `runner` has its own KV cache of num_blocks blocks; the proposer allocates them per sequence.
  ModelProposer(std::unique_ptr<ModelRunner> runner, int num_blocks, int block_size, std::vector<int32_t> eos_ids);
  // self: `runner` runs on a view of the target's KV; blocks for the draft positions come from the target's own
  // block manager (the next step would allocate them anyway).
  ModelProposer(std::unique_ptr<ModelRunner> runner, KvCacheManager& target_kv, std::vector<int32_t> eos_ids);

  // Drafts over this subset of the vocabulary: the runner's model must have a compact LM head of vocab.rows() rows
  // (use_logits_subset before the runner was built).
  void set_draft_vocab(DraftVocab vocab);
  // draft_model: the drafter's KV of a sequence starts at most `tokens` before its end when it first drafts it
  // (0: at the start). A long prompt then costs the drafter a bounded catch-up; it attends to that window
  // (plus all that follows), at positions counted from the window's start (RoPE's scores depend only on distances).
  void set_context(int tokens) { context_ = tokens; }
  const DraftVocab* draft_vocab() const { return vocab_ ? &*vocab_ : nullptr; }

  void propose(std::span<Sequence* const> seqs, std::span<const int> max_drafts) override;
  void forget(const Sequence& seq) override;
  double backlog_seconds() const override { return backlog_seconds_; }
  void set_catch_up_limit(int sequences) override { catch_up_limit_ = sequences; }

 private:
  // The drafter's view of a sequence: its token ids from the window's start and how many have KV in the drafter's
  // cache.
  struct Shadow {
    Sequence seq;
    int start = -1;  // the sequence's first token the drafter holds (its token 0); -1 before the first draft
  };
  Sequence* draft_side(Sequence& seq);
  void run_rows(std::vector<Sequence*>& batch, std::vector<int>& num_new, std::vector<int32_t>& next_tokens);
  // Counts the sequences' tokens not counted yet and writes the compact head's changed rows.
  void update_vocab(std::span<Sequence* const> seqs);

  std::unique_ptr<ModelRunner> runner_;
  std::unique_ptr<KvCacheManager> own_kv_;  // draft_model
  KvCacheManager* target_kv_ = nullptr;     // self
  std::vector<int32_t> eos_ids_;
  int context_ = 0;
  int catch_up_limit_ = -1;
  double backlog_seconds_ = 0.0;
  std::unordered_map<int64_t, Shadow> shadows_;
  std::vector<float> logits_;
  LogitsRows rows_;
  std::optional<DraftVocab> vocab_;
  std::unordered_map<int64_t, size_t> counted_;  // per sequence: its tokens the vocabulary has seen
};

}  // namespace peregrine::engine
