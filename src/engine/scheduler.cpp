// Scheduler: token budget, decodes first, chunked prefill, preemption of the newest (see scheduler.h).
#include "engine/scheduler.h"

#include <algorithm>
#include <string>

#include "core/status.h"

namespace peregrine::engine {

Scheduler::Scheduler(const SchedulerConfig& config)
    : config_(config), kv_(config.num_blocks, config.block_size, config.enable_prefix_caching) {
  if (config.max_num_seqs <= 0 || config.max_num_batched_tokens <= 0 || config.block_size <= 0) {
    throw Error(ErrorCode::kInvalidArgument, "scheduler limits must be positive (max_num_seqs " +
                                                 std::to_string(config.max_num_seqs) + ", max_num_batched_tokens " +
                                                 std::to_string(config.max_num_batched_tokens) + ")");
  }
}

void Scheduler::add(Sequence* seq) {
  seq->status = SeqStatus::kWaiting;
  waiting_.push_back(seq);
}

SchedulerOutput Scheduler::schedule() {
  SchedulerOutput out;
  int budget = config_.max_num_batched_tokens;
  draft_budget_ = config_.max_draft_tokens_per_step;
  kv_.poll_loads();  // blocks whose lower-tier loads finished join the cache

  // Running sequences: decodes first, then the next chunks of prompts being prefilled.
  std::vector<Sequence*> decodes;
  std::vector<Sequence*> prefills;
  for (Sequence* seq : running_) {
    (seq->num_tokens() - seq->num_computed_tokens == 1 ? decodes : prefills).push_back(seq);
  }
  for (auto* group : {&decodes, &prefills}) {
    for (Sequence* seq : *group) {
      if (budget <= 0) break;
      if (seq->status != SeqStatus::kRunning) continue;  // preempted earlier in this step
      schedule_running(seq, out, budget);
    }
  }

  // Waiting sequences, FCFS, only when nothing had to be preempted this step.
  if (out.preempted.empty()) {
    admit_waiting(out, budget);
    // Blocks pinned by waiting forks can starve an idle engine; give them back and try again.
    if (out.seqs.empty() && running_.empty() && !waiting_.empty()) {
      for (Sequence* w : waiting_) kv_.free(*w);
      admit_waiting(out, budget);
    }
  }
  return out;
}

void Scheduler::admit_waiting(SchedulerOutput& out, int& budget) {
  size_t i = 0;
  while (i < waiting_.size() && budget > 0 && static_cast<int>(running_.size()) < config_.max_num_seqs) {
    Sequence* seq = waiting_[i];
    if (seq->fork_leader != nullptr) {  // waits for its leader's prompt blocks
      ++i;
      continue;
    }
    const bool fresh = seq->block_table.empty();
    std::vector<int> hits = fresh ? kv_.find_cached_prefix(*seq) : std::vector<int>{};
    // Its cached blocks are still coming up from the host tier: it waits (FCFS) while others run; when nothing
    // else would run, the device waits for the copy instead, so the step is enqueued meanwhile.
    if (!kv_.hits_ready(hits) && !(running_.empty() && out.seqs.empty() && kv_.order_hits_on_device(hits))) break;
    const int computed = seq->num_computed_tokens + static_cast<int>(hits.size()) * config_.block_size;
    const int num_new = std::min(seq->num_tokens() - computed, budget);
    PEREGRINE_CHECK(num_new > 0, "waiting sequence with nothing to compute");
    if (!kv_.allocate_slots(*seq, num_new, hits)) break;  // keep FCFS order: wait for blocks
    if (fresh) {
      const int hit_tokens = static_cast<int>(hits.size()) * config_.block_size;
      if (kv_.prefix_caching() && !seq->skip_prefix_cache) kv_.record_prefix_lookup(seq->num_tokens(), hit_tokens, hits);
      if (seq->num_preemptions == 0) seq->num_prefix_hit_tokens = hit_tokens;
    }
    waiting_.erase(waiting_.begin() + static_cast<ptrdiff_t>(i));
    seq->status = SeqStatus::kRunning;
    running_.push_back(seq);
    out.seqs.push_back({seq, num_new, seq->num_computed_tokens + num_new == seq->num_tokens()});
    out.num_batched_tokens += num_new;
    budget -= num_new;
  }
}

bool Scheduler::schedule_running(Sequence* seq, SchedulerOutput& out, int& budget) {
  int num_new = std::min(seq->num_tokens() - seq->num_computed_tokens, budget);
  PEREGRINE_CHECK(num_new > 0, "running sequence with nothing to compute");
  PEREGRINE_CHECK(seq->num_tokens() <= config_.max_model_len, "sequence longer than max_model_len");
  // A decode carries its drafts (as many as the budgets and the context allow; a prefix of a tree is a tree).
  int drafts = 0;
  if (num_new == 1 && seq->num_computed_tokens + 1 == seq->num_tokens() && !seq->draft_tokens.empty()) {
    drafts = std::min({static_cast<int>(seq->draft_tokens.size()), budget - 1, draft_budget_,
                       config_.max_model_len - seq->num_tokens()});
    drafts = std::max(drafts, 0);
    num_new += drafts;
  }
  seq->draft_tokens.resize(static_cast<size_t>(drafts));
  seq->draft_parents.resize(static_cast<size_t>(drafts));
  const int needed = kv_.num_blocks_to_allocate(*seq, num_new, {});
  if (needed > kv_.pool().num_free() && !make_room(needed, seq, out, budget)) return false;
  const bool ok = kv_.allocate_slots(*seq, num_new, {});
  PEREGRINE_CHECK(ok, "allocation failed after make_room");
  const bool samples = seq->num_computed_tokens + num_new == seq->num_tokens() + drafts;
  out.seqs.push_back({seq, num_new, samples, drafts});
  out.num_batched_tokens += num_new;
  if (num_new == 1 + drafts && samples) ++out.num_decodes;
  budget -= num_new;
  draft_budget_ -= drafts;
  return true;
}

bool Scheduler::make_room(int needed, Sequence* for_seq, SchedulerOutput& out, int& budget) {
  while (kv_.pool().num_free() < needed) {
    Sequence* newest = nullptr;
    for (Sequence* s : running_) {
      if (newest == nullptr || s->id > newest->id) newest = s;
    }
    if (newest != nullptr && newest != for_seq) {
      preempt(newest, out, budget);
      continue;
    }
    // for_seq is the newest running sequence. When it is the only one, blocks pinned by waiting sequences
    // (forked siblings, whose leader may be gone) are the last thing to give back before it must yield.
    if (running_.size() == 1) {
      bool released = false;
      for (Sequence* w : waiting_) {
        if (!w->block_table.empty()) {
          kv_.free(*w);
          released = true;
        }
      }
      if (released) continue;
      throw Error(ErrorCode::kInternal, "KV cache too small for one sequence of " +
                                            std::to_string(for_seq->num_tokens()) + " tokens (" +
                                            std::to_string(kv_.pool().num_blocks()) + " blocks)");
    }
    preempt(for_seq, out, budget);
    return false;
  }
  return true;
}

void Scheduler::preempt(Sequence* victim, SchedulerOutput& out, int& budget) {
  // A victim already scheduled this step gives its tokens back.
  for (auto it = out.seqs.begin(); it != out.seqs.end(); ++it) {
    if (it->seq == victim) {
      budget += it->num_new_tokens;
      draft_budget_ += it->num_draft_tokens;
      out.num_batched_tokens -= it->num_new_tokens;
      if (it->num_new_tokens == 1 + it->num_draft_tokens && it->samples) --out.num_decodes;
      out.seqs.erase(it);
      break;
    }
  }
  kv_.free(*victim);
  victim->draft_tokens.clear();
  victim->draft_parents.clear();
  victim->status = SeqStatus::kWaiting;
  ++victim->num_preemptions;
  ++num_preemptions_;
  running_.erase(std::find(running_.begin(), running_.end(), victim));
  waiting_.push_front(victim);
  out.preempted.push_back(victim);
}

void Scheduler::on_step_computed(const SchedulerOutput& output) {
  for (const ScheduledSeq& s : output.seqs) {
    Sequence* seq = s.seq;
    // Drafts' KV counts once they are accepted (accept_drafts); only verified tokens reach the prefix cache.
    seq->num_computed_tokens += s.num_new_tokens - s.num_draft_tokens;
    kv_.cache_full_blocks(*seq);
    if (!seq->fork_waiters.empty() && seq->prompt_done()) {
      for (Sequence* sibling : seq->fork_waiters) {
        if (sibling->status == SeqStatus::kWaiting && sibling->block_table.empty()) kv_.fork(*seq, *sibling);
        sibling->fork_leader = nullptr;
      }
      seq->fork_waiters.clear();
    }
  }
}

void Scheduler::accept_drafts(Sequence* seq, int accepted) {
  PEREGRINE_CHECK(accepted >= 0 && seq->num_computed_tokens + accepted <= seq->num_tokens() - 1,
                  "more accepted drafts than tokens");
  seq->num_computed_tokens += accepted;
  kv_.cache_full_blocks(*seq);
  kv_.release_blocks_after(*seq, seq->num_computed_tokens + 1);
}

void Scheduler::finish(Sequence* seq) {
  if (auto it = std::find(running_.begin(), running_.end(), seq); it != running_.end()) {
    running_.erase(it);
  } else if (auto wit = std::find(waiting_.begin(), waiting_.end(), seq); wit != waiting_.end()) {
    waiting_.erase(wit);
  }
  kv_.free(*seq);
  seq->status = SeqStatus::kFinished;
  for (Sequence* sibling : seq->fork_waiters) sibling->fork_leader = nullptr;
  seq->fork_waiters.clear();
  if (Sequence* leader = seq->fork_leader) {
    auto& w = leader->fork_waiters;
    w.erase(std::remove(w.begin(), w.end(), seq), w.end());
    seq->fork_leader = nullptr;
  }
}

}  // namespace peregrine::engine
