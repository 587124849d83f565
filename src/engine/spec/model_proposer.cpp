// ModelProposer: catch-up and greedy drafting with a model (see model_proposer.h).
#include "engine/spec/model_proposer.h"

#include <algorithm>
#include <chrono>

#include "core/status.h"
#include "engine/sampler.h"

namespace peregrine::engine {

ModelProposer::ModelProposer(std::unique_ptr<ModelRunner> runner, int num_blocks, int block_size,
                             std::vector<int32_t> eos_ids)
    : runner_(std::move(runner)),
      own_kv_(std::make_unique<KvCacheManager>(num_blocks, block_size, /*enable_prefix_caching=*/false)),
      eos_ids_(std::move(eos_ids)) {}

ModelProposer::ModelProposer(std::unique_ptr<ModelRunner> runner, KvCacheManager& target_kv, std::vector<int32_t> eos_ids)
    : runner_(std::move(runner)), target_kv_(&target_kv), eos_ids_(std::move(eos_ids)) {}

Sequence* ModelProposer::draft_side(Sequence& seq) {
  if (target_kv_) return &seq;  // self: the sequence's own blocks and KV
  Shadow& sh = shadows_[seq.id];
  Sequence& s = sh.seq;
  if (sh.start > seq.num_tokens()) {  // never expected (tokens only grow); start over rather than misalign
    own_kv_->free(s);
    s = Sequence{};
    sh.start = -1;
  }
  if (sh.start < 0) sh.start = context_ > 0 ? std::max(0, seq.num_tokens() - context_) : 0;
  const size_t start = static_cast<size_t>(sh.start);
  // The drafter's KV holds real tokens only up to where both still agree.
  const size_t common = std::min(s.token_ids.size(), seq.token_ids.size() - start);
  size_t same = 0;
  while (same < common && s.token_ids[same] == seq.token_ids[start + same]) ++same;
  s.num_computed_tokens = std::min<int>(s.num_computed_tokens, static_cast<int>(same));
  s.token_ids.assign(seq.token_ids.begin() + static_cast<std::ptrdiff_t>(start), seq.token_ids.end());
  s.num_prompt_tokens = std::max(0, seq.num_prompt_tokens - sh.start);
  s.id = seq.id;
  return &s;
}

void ModelProposer::set_draft_vocab(DraftVocab vocab) {
  PEREGRINE_CHECK(runner_->logits_width() == vocab.rows(), "the drafter's compact LM head and the draft vocabulary differ");
  vocab_ = std::move(vocab);
}

void ModelProposer::update_vocab(std::span<Sequence* const> seqs) {
  for (const Sequence* seq : seqs) {
    size_t& done = counted_[seq->id];
    done = std::min(done, seq->token_ids.size());
    vocab_->observe(std::span(seq->token_ids).subspan(done));
    done = seq->token_ids.size();
  }
  // Only the rows whose token changed are copied again (appends, a re-rank's newcomers): bounded per DraftVocab.
  const auto [first, end] = vocab_->take_dirty();
  if (first < end) {
    const std::span<const int32_t> changed(vocab_->tokens().data() + first, static_cast<size_t>(end - first));
    runner_->model().set_logits_tokens(changed, first);
  }
}

void ModelProposer::forget(const Sequence& seq) {
  counted_.erase(seq.id);
  auto it = shadows_.find(seq.id);
  if (it == shadows_.end()) return;
  own_kv_->free(it->second.seq);
  shadows_.erase(it);
}

// One forward over batch[i] computing num_new[i] tokens each (their last row sampled greedily into next_tokens).
void ModelProposer::run_rows(std::vector<Sequence*>& batch, std::vector<int>& num_new, std::vector<int32_t>& next_tokens) {
  SchedulerOutput out;
  for (size_t i = 0; i < batch.size(); ++i) out.seqs.push_back({batch[i], num_new[i], true, 0});
  runner_->prepare(out, {}, rows_);
  runner_->execute(logits_);
  const int width = runner_->logits_width();
  next_tokens.resize(batch.size());
  for (size_t i = 0; i < batch.size(); ++i) {
    const int32_t col = Sampler::argmax(logits_.data() + static_cast<size_t>(rows_.sample_row[i]) * width, width);
    next_tokens[i] = vocab_ ? vocab_->token(col) : col;  // a compact head's column is its row's token
    batch[i]->num_computed_tokens += num_new[i];
  }
}

void ModelProposer::propose(std::span<Sequence* const> seqs, std::span<const int> max_drafts) {
  const int budget = runner_->options().max_num_batched_tokens;
  const int max_seqs = runner_->options().max_num_seqs;
  const int bs = runner_->kv_cache().block_size();
  KvCacheManager& kv = target_kv_ ? *target_kv_ : *own_kv_;
  backlog_seconds_ = 0.0;
  // A step without drafts (the controller's limit 0) leaves the vocabulary's counting to the next drafting step:
  // counted_ keeps each sequence's place, so that step observes the tokens since (the same counts). Counting and
  // re-ranking every step cost ~0.25 ms of a 5 ms c 8 step on the CPU, 5% of the steps that pay nothing.
  if (std::none_of(max_drafts.begin(), max_drafts.end(), [](int m) { return m > 0; })) {
    for (Sequence* seq : seqs) {
      seq->draft_tokens.clear();
      seq->draft_parents.clear();
    }
    return;
  }
  using Clock = std::chrono::steady_clock;
  const auto t0 = Clock::now();
  if (vocab_) update_vocab(seqs);
  // Catch-up: each drafting sequence computes its tokens from where the drafter's KV ends to its last real token.
  std::vector<Sequence*> batch;
  std::vector<Sequence*> real;
  std::vector<int> num_new, want;
  int tokens = 0, behind = 0;
  for (size_t i = 0; i < seqs.size(); ++i) {
    Sequence& seq = *seqs[i];
    seq.draft_tokens.clear();
    seq.draft_parents.clear();
    if (max_drafts[i] <= 0 || static_cast<int>(batch.size()) >= max_seqs) continue;
    Sequence* d = draft_side(seq);
    const int len = d->num_tokens();  // counted from the drafter's window
    const int n = len - d->num_computed_tokens;
    if (n <= 0 || tokens >= budget) continue;
    if (n > max_drafts[i] + 1) {  // a backlog: within the catch-up limit, if any
      if (catch_up_limit_ >= 0 && behind >= catch_up_limit_) continue;
      ++behind;
    }
    if (tokens + n > budget) {
      // A long catch-up (a new prompt) goes in budget-sized chunks; the sequence drafts once it is done.
      if (target_kv_) continue;
      const int part = budget - tokens;
      if (kv.num_blocks_to_allocate(*d, part, {}) > 0 && !kv.allocate_slots(*d, part, {})) continue;
      batch.push_back(d);
      real.push_back(nullptr);
      num_new.push_back(part);
      want.push_back(0);
      tokens += part;
      continue;
    }
    // Blocks for the last real token and every draft position, all or nothing.
    const int slots = n + max_drafts[i];
    if (kv.num_blocks_to_allocate(*d, slots, {}) > 0 && !kv.allocate_slots(*d, slots, {})) continue;
    PEREGRINE_CHECK(static_cast<int>(d->block_table.size()) * bs >= len + max_drafts[i], "draft blocks");
    batch.push_back(d);
    real.push_back(&seq);
    num_new.push_back(n);
    want.push_back(max_drafts[i]);
    tokens += n;
  }
  if (batch.empty()) return;
  std::vector<int32_t> next;
  run_rows(batch, num_new, next);
  // The backlog's share of counting and the catch-up forward: the tokens beyond what a verify step adds (its
  // accepted drafts and one more, at most want + 1) over all the forward computed.
  int total = 0, excess = 0;
  for (size_t i = 0; i < batch.size(); ++i) {
    total += num_new[i];
    excess += real[i] ? std::max(0, num_new[i] - (want[i] + 1)) : num_new[i];
  }
  if (excess > 0)
    backlog_seconds_ = std::chrono::duration<double>(Clock::now() - t0).count() * excess / std::max(1, total);
  // Then one token per forward for every sequence still drafting.
  std::vector<Sequence*> active;
  std::vector<size_t> which;
  for (size_t i = 0; i < batch.size(); ++i) {
    if (!real[i]) continue;  // catching up only
    real[i]->draft_tokens.push_back(next[i]);
    real[i]->draft_parents.push_back(-1);
  }
  for (int depth = 1;; ++depth) {
    active.clear();
    which.clear();
    for (size_t i = 0; i < batch.size(); ++i) {
      if (!real[i]) continue;
      const int32_t last = real[i]->draft_tokens.back();
      const bool eos = std::find(eos_ids_.begin(), eos_ids_.end(), last) != eos_ids_.end();
      if (depth < want[i] && static_cast<int>(real[i]->draft_tokens.size()) == depth && !eos) {
        batch[i]->token_ids.push_back(last);  // the draft-side sequence holds its drafts as tokens
        active.push_back(batch[i]);
        which.push_back(i);
      }
    }
    if (active.empty()) break;
    std::vector<int> ones(active.size(), 1);
    run_rows(active, ones, next);
    for (size_t j = 0; j < active.size(); ++j) {
      Sequence& r = *real[which[j]];
      r.draft_tokens.push_back(next[j]);
      r.draft_parents.push_back(static_cast<int32_t>(r.draft_tokens.size()) - 2);
    }
  }
  // The drafter's KV is valid for the real tokens only: drafts may be rejected.
  for (size_t i = 0; i < batch.size(); ++i) {
    if (!real[i]) continue;
    Sequence* d = batch[i];
    const int real_len = static_cast<int>(d->token_ids.size()) - (static_cast<int>(real[i]->draft_tokens.size()) - 1);
    d->token_ids.resize(static_cast<size_t>(real_len));
    // self: the target computes (and owns) the last real token's KV next step; draft_model: the drafter has it.
    d->num_computed_tokens = target_kv_ ? real_len - 1 : real_len;
  }
}

}  // namespace peregrine::engine
