// ModelProposer: drafts with a model, greedily and batched across sequences ("draft_model": a smaller model with
// the same vocabulary and its own paged KV; "self": the target's own first layers, reading and writing the target's
// KV of those layers). Each proposal first brings the drafter's KV up to the sequence's last real token (catch-up,
// one ragged forward for all sequences), then runs one forward per further draft token for all sequences at once.
// Drafts are point masses (argmax), so verification stays exact whatever the drafter is.
#pragma once

#include <memory>
#include <unordered_map>
#include <vector>

#include "engine/kv_cache_manager.h"
#include "engine/model_runner.h"
#include "engine/spec/proposer.h"

namespace peregrine::engine {

class ModelProposer final : public Proposer {
 public:
  // draft_model: `runner` has its own KV cache of num_blocks blocks; the proposer allocates them per sequence.
  ModelProposer(std::unique_ptr<ModelRunner> runner, int num_blocks, int block_size, std::vector<int32_t> eos_ids);
  // self: `runner` runs on a view of the target's KV; blocks for the draft positions come from the target's own
  // block manager (the next step would allocate them anyway).
  ModelProposer(std::unique_ptr<ModelRunner> runner, KvCacheManager& target_kv, std::vector<int32_t> eos_ids);

  void propose(std::span<Sequence* const> seqs, std::span<const int> max_drafts) override;
  void forget(const Sequence& seq) override;

 private:
  // The drafter's view of a sequence: its token ids and how many have KV in the drafter's cache.
  struct Shadow {
    Sequence seq;
  };
  Sequence* draft_side(Sequence& seq);
  void run_rows(std::vector<Sequence*>& batch, std::vector<int>& num_new, std::vector<int32_t>& next_tokens);

  std::unique_ptr<ModelRunner> runner_;
  std::unique_ptr<KvCacheManager> own_kv_;  // draft_model
  KvCacheManager* target_kv_ = nullptr;     // self
  std::vector<int32_t> eos_ids_;
  std::unordered_map<int64_t, Shadow> shadows_;
  std::vector<float> logits_;
  LogitsRows rows_;
};

}  // namespace peregrine::engine
