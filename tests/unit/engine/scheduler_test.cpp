// Scheduler tests with fake sequences and no model: token budget, decodes first, chunked prefill, prefix-cache
// hits, n > 1 forks, preemption under KV pressure, and a randomized run that must finish every request.
#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <random>
#include <map>
#include <set>

#include "engine/scheduler.h"

namespace peregrine::engine {
namespace {

// Drives a Scheduler like the engine does: schedule, "compute", append one token per sampling sequence,
// finish sequences that reach their output length.
class Harness {
 public:
  explicit Harness(SchedulerConfig config) : sched(config) {}

  Sequence* add(std::vector<int32_t> prompt, int max_output) {
    auto seq = std::make_unique<Sequence>();
    seq->id = next_id_++;
    seq->token_ids = std::move(prompt);
    seq->num_prompt_tokens = seq->num_tokens();
    Sequence* raw = seq.get();
    max_output_[raw] = max_output;
    seqs_.push_back(std::move(seq));
    sched.add(raw);
    return raw;
  }

  SchedulerOutput step() {
    SchedulerOutput out = sched.schedule();
    check_invariants(out);
    sched.on_step_computed(out);
    for (const ScheduledSeq& s : out.seqs) {
      if (!s.samples) continue;
      Sequence* seq = s.seq;
      seq->token_ids.push_back(1000 + seq->num_output_tokens());
      if (seq->num_output_tokens() >= max_output_[seq]) {
        sched.finish(seq);
        finished.push_back(seq);
      }
    }
    ++steps;
    return out;
  }

  void run_to_completion(int max_steps = 100000) {
    while (sched.has_unfinished() && steps < max_steps) step();
    ASSERT_FALSE(sched.has_unfinished()) << "did not finish in " << max_steps << " steps";
  }

  void check_invariants(const SchedulerOutput& out) {
    const auto& cfg = sched.config();
    EXPECT_LE(out.num_batched_tokens, cfg.max_num_batched_tokens);
    EXPECT_LE(sched.num_running(), cfg.max_num_seqs);
    int total = 0;
    std::set<Sequence*> unique;
    for (size_t i = 0; i < out.seqs.size(); ++i) {
      const ScheduledSeq& s = out.seqs[i];
      EXPECT_TRUE(unique.insert(s.seq).second) << "sequence scheduled twice";
      EXPECT_GT(s.num_new_tokens, 0);
      total += s.num_new_tokens;
      // Decodes of running sequences lead the batch.
      if (static_cast<int>(i) < out.num_decodes) {
        EXPECT_TRUE(s.num_new_tokens == 1 && s.samples);
      }
      // The block table covers every token this step writes.
      const int needed = (s.seq->num_computed_tokens + s.num_new_tokens + cfg.block_size - 1) / cfg.block_size;
      EXPECT_GE(static_cast<int>(s.seq->block_table.size()), needed);
      EXPECT_EQ(s.samples, s.seq->num_computed_tokens + s.num_new_tokens == s.seq->num_tokens());
    }
    EXPECT_EQ(total, out.num_batched_tokens);
    // Reference counts equal the number of block-table entries pointing at each block.
    std::vector<int> refs(sched.kv().pool().num_blocks(), 0);
    for (auto& seq : seqs_) {
      if (seq->status == SeqStatus::kFinished) continue;
      for (int b : seq->block_table) ++refs[b];
    }
    // (plus the manager's own reference on blocks the lower tier is loading)
    for (int b = 0; b < sched.kv().pool().num_blocks(); ++b)
      EXPECT_EQ(refs[b] + (sched.kv().is_loading(b) ? 1 : 0), sched.kv().pool().ref_count(b));
  }

  Scheduler sched;
  std::vector<Sequence*> finished;
  int steps = 0;

 private:
  int64_t next_id_ = 1;
  std::vector<std::unique_ptr<Sequence>> seqs_;
  std::map<Sequence*, int> max_output_;
};

std::vector<int32_t> tokens(int n, int start = 0) {
  std::vector<int32_t> t(n);
  for (int i = 0; i < n; ++i) t[i] = start + i;
  return t;
}

SchedulerConfig config(int num_blocks, int budget = 64, int max_seqs = 8, bool caching = true) {
  SchedulerConfig c;
  c.num_blocks = num_blocks;
  c.block_size = 4;
  c.max_num_batched_tokens = budget;
  c.max_num_seqs = max_seqs;
  c.max_model_len = 256;
  c.enable_prefix_caching = caching;
  return c;
}

TEST(Scheduler, ChunkedPrefillWithinTheBudget) {
  Harness h(config(64, /*budget=*/16));
  Sequence* a = h.add(tokens(40), 2);
  auto out = h.step();
  ASSERT_EQ(out.seqs.size(), 1u);
  EXPECT_EQ(out.seqs[0].num_new_tokens, 16);
  EXPECT_FALSE(out.seqs[0].samples);
  h.step();
  out = h.step();
  EXPECT_EQ(out.seqs[0].num_new_tokens, 8);
  EXPECT_TRUE(out.seqs[0].samples);
  EXPECT_EQ(a->num_output_tokens(), 1);
  h.run_to_completion();
  EXPECT_EQ(a->num_output_tokens(), 2);
  EXPECT_EQ(h.sched.kv().pool().num_free(), 64);
}

TEST(Scheduler, DecodesGoFirstAndPrefillsFillTheRest) {
  Harness h(config(64, /*budget=*/10));
  Sequence* a = h.add(tokens(5), 50);
  h.step();  // a's prompt
  Sequence* b = h.add(tokens(30, 100), 5);
  auto out = h.step();
  ASSERT_EQ(out.seqs.size(), 2u);
  EXPECT_EQ(out.seqs[0].seq, a);
  EXPECT_EQ(out.seqs[0].num_new_tokens, 1);
  EXPECT_EQ(out.seqs[1].seq, b);
  EXPECT_EQ(out.seqs[1].num_new_tokens, 9);  // the budget's remainder
  EXPECT_EQ(out.num_decodes, 1);
  out = h.step();
  EXPECT_EQ(out.seqs[0].seq, a);  // a running prefill chunk never overtakes a decode
  EXPECT_EQ(out.seqs[1].seq, b);
}

TEST(Scheduler, MaxNumSeqsCapsRunning) {
  Harness h(config(256, 512, /*max_seqs=*/3));
  for (int i = 0; i < 7; ++i) h.add(tokens(6, i * 10), 3);
  auto out = h.step();
  EXPECT_EQ(out.seqs.size(), 3u);
  EXPECT_EQ(h.sched.num_waiting(), 4);
  h.run_to_completion();
  EXPECT_EQ(h.finished.size(), 7u);
}

TEST(Scheduler, PrefixCacheHitSkipsCachedBlocks) {
  Harness h(config(64));
  Sequence* a = h.add(tokens(18), 1);
  h.run_to_completion();
  Sequence* b = h.add(tokens(18), 1);
  auto out = h.step();
  ASSERT_EQ(out.seqs.size(), 1u);
  // 4 full blocks (16 tokens) cached; at most (18-1)/4 = 4 blocks reusable, so 2 tokens computed.
  EXPECT_EQ(out.seqs[0].num_new_tokens, 2);
  EXPECT_EQ(b->num_prefix_hit_tokens, 16);
  EXPECT_EQ(a->num_prefix_hit_tokens, 0);
  EXPECT_EQ(h.sched.kv().num_hit_tokens(), 16u);
  EXPECT_EQ(h.sched.kv().num_queried_tokens(), 36u);
}

TEST(Scheduler, FullyCachedPromptStillComputesItsLastToken) {
  Harness h(config(64));
  h.add(tokens(16), 1);
  h.run_to_completion();
  h.add(tokens(16), 1);
  auto out = h.step();
  // (16-1)/4 = 3 blocks reusable: the last block is recomputed so the last token yields logits.
  EXPECT_EQ(out.seqs[0].num_new_tokens, 4);
}

TEST(Scheduler, PrefixCachingOffMeansNoHits) {
  Harness h(config(64, 64, 8, /*caching=*/false));
  h.add(tokens(18), 1);
  h.run_to_completion();
  h.add(tokens(18), 1);
  auto out = h.step();
  EXPECT_EQ(out.seqs[0].num_new_tokens, 18);
}

TEST(Scheduler, SiblingsForkTheLeadersPromptBlocks) {
  for (bool caching : {true, false}) {
    Harness h(config(64, 64, 8, caching));
    Sequence* leader = h.add(tokens(10), 3);
    Sequence* s1 = h.add(tokens(10), 3);
    Sequence* s2 = h.add(tokens(10), 3);
    s1->fork_leader = leader;
    s2->fork_leader = leader;
    leader->fork_waiters = {s1, s2};
    auto out = h.step();
    ASSERT_EQ(out.seqs.size(), 1u);  // siblings wait for the leader's prompt
    EXPECT_EQ(out.seqs[0].seq, leader);
    // Forked: the two full prompt blocks are shared three ways.
    EXPECT_EQ(s1->num_computed_tokens, 8);
    EXPECT_EQ(h.sched.kv().pool().ref_count(leader->block_table[0]), 3);
    EXPECT_EQ(h.sched.kv().pool().ref_count(leader->block_table[1]), 3);
    out = h.step();
    ASSERT_EQ(out.seqs.size(), 3u);
    EXPECT_EQ(out.seqs[1].num_new_tokens, 2);  // each sibling computes the rest of the prompt
    EXPECT_EQ(out.seqs[2].num_new_tokens, 2);
    EXPECT_EQ(s1->block_table[0], leader->block_table[0]);
    EXPECT_NE(s1->block_table[2], s2->block_table[2]);
    h.run_to_completion();
    EXPECT_EQ(h.sched.kv().pool().num_free(), 64);
  }
}

TEST(Scheduler, LeaderFinishingEarlyReleasesWaiters) {
  Harness h(config(64));
  Sequence* leader = h.add(tokens(10), 1);
  Sequence* s1 = h.add(tokens(10), 2);
  s1->fork_leader = leader;
  leader->fork_waiters = {s1};
  h.run_to_completion();
  EXPECT_EQ(s1->num_output_tokens(), 2);
  EXPECT_EQ(h.sched.kv().pool().num_free(), 64);
}

TEST(Scheduler, PreemptsTheNewestWhenBlocksRunOut) {
  // 6 blocks of 4 tokens; two sequences each growing to 12 tokens (3 blocks)... plus one more.
  Harness h(config(6, 64, 8, /*caching=*/false));
  Sequence* a = h.add(tokens(4), 8);        // grows to 12 tokens = 3 blocks
  Sequence* b = h.add(tokens(4, 50), 8);    // same
  Sequence* c = h.add(tokens(4, 90), 8);    // newest
  bool saw_preemption = false;
  while (h.sched.has_unfinished()) {
    auto out = h.step();
    for (Sequence* p : out.preempted) {
      saw_preemption = true;
      EXPECT_EQ(p->block_table.size(), 0u);
      // The victim is always the newest among the running and the victim itself.
      for (Sequence* r : h.sched.running()) EXPECT_LT(r->id, p->id);
    }
    ASSERT_LT(h.steps, 1000);
  }
  EXPECT_TRUE(saw_preemption);
  EXPECT_GT(c->num_preemptions, 0);
  EXPECT_EQ(a->num_preemptions, 0);  // the oldest always progresses
  for (Sequence* s : {a, b, c}) EXPECT_EQ(s->num_output_tokens(), 8);
  EXPECT_EQ(h.sched.kv().pool().num_free(), 6);
}

TEST(Scheduler, ALongRequestAloneFitsExactlyAndCompletes) {
  // max_model_len 32 tokens = 8 blocks, and exactly 8 blocks exist: requests queue behind each other but none fails.
  SchedulerConfig c = config(8, 16, 4);
  c.max_model_len = 32;
  Harness h(c);
  for (int i = 0; i < 4; ++i) h.add(tokens(20, i * 100), 12);
  h.run_to_completion();
  EXPECT_EQ(h.finished.size(), 4u);
  for (Sequence* s : h.finished) EXPECT_EQ(s->num_tokens(), 32);
}

TEST(Scheduler, RandomizedRunFinishesEverythingAndFreesAllBlocks) {
  std::mt19937 rng(1234);
  for (int trial = 0; trial < 20; ++trial) {
    SchedulerConfig c = config(12 + trial % 20, 8 + trial * 3, 1 + trial % 9, trial % 2 == 0);
    c.max_model_len = 40;
    Harness h(c);
    int added = 0;
    while (added < 40 || h.sched.has_unfinished()) {
      if (added < 40 && rng() % 3 == 0) {
        const int len = 1 + static_cast<int>(rng() % 24);
        const int out_len = 1 + static_cast<int>(rng() % (c.max_model_len - len));
        // Shared prefixes make prefix-cache hits likely.
        auto prompt = tokens(len, static_cast<int>(rng() % 3) * 1000);
        Sequence* s = h.add(prompt, out_len);
        (void)s;
        ++added;
      }
      h.step();
      ASSERT_LT(h.steps, 20000) << "trial " << trial;
    }
    EXPECT_EQ(h.finished.size(), 40u);
    EXPECT_EQ(h.sched.kv().pool().num_free(), c.num_blocks) << "trial " << trial;
  }
}

// A lower tier that holds every block asked for and finishes its loads only when told.
class SlowTier final : public LowerKvTier {
 public:
  bool holds_all = false, ready = false;
  int loads = 0;
  void keep(std::span<const Evicted>) override {}
  int count_held(std::span<const Probe> run) override { return holds_all ? static_cast<int>(run.size()) : 0; }
  int arrives = 1 << 30;  // leading blocks of a load that arrive intact
  int load(std::span<const uint64_t> keys, std::span<const int> blocks, uint64_t* ticket,
           std::span<uint8_t>) override {
    ++loads;
    *ticket = static_cast<uint64_t>(loads);
    count = static_cast<int>(std::min(keys.size(), blocks.size()));
    return count;
  }
  int ready_after = -1;  // with ready false: the load finishes at this many loaded() calls (-1: never)
  int loaded_calls = 0;
  int loaded(uint64_t) override {
    ++loaded_calls;
    if (ready_after >= 0 && loaded_calls > ready_after) ready = true;
    return ready ? std::min(count, arrives) : -1;
  }
  bool orderable = false;  // whether the device can be made to wait for a load
  int ordered = 0;
  bool order_on_device(uint64_t) override {
    ordered += orderable ? 1 : 0;
    return orderable;
  }
  int count = 0;
};

TEST(Scheduler, ARequestWhoseBlocksAreLoadingWaitsWhileOthersRun) {
  Harness h(config(16));
  SlowTier tier;
  h.sched.kv().set_lower_tier(&tier);
  Sequence* b = h.add(tokens(8, 900), 20);
  h.step();  // b's prefill; it decodes from now on
  tier.holds_all = true;
  Sequence* a = h.add(tokens(17), 3);  // 4 full blocks the tier holds
  for (int i = 0; i < 3; ++i) {
    SchedulerOutput out = h.step();
    ASSERT_EQ(out.seqs.size(), 1u) << "step " << i;
    EXPECT_EQ(out.seqs[0].seq, b);  // the decode goes on; a waits for its blocks
    EXPECT_EQ(a->status, SeqStatus::kWaiting);
    EXPECT_EQ(h.sched.kv().num_blocks_loading(), 4);
  }
  EXPECT_EQ(tier.loads, 1);  // the load is started once, then waited for
  tier.ready = true;
  SchedulerOutput out = h.step();
  ASSERT_EQ(out.seqs.size(), 2u);
  EXPECT_EQ(out.seqs[1].seq, a);
  EXPECT_EQ(out.seqs[1].num_new_tokens, 1);  // 16 tokens came from the tier
  EXPECT_EQ(h.sched.kv().num_blocks_loading(), 0);
  EXPECT_EQ(h.sched.kv().num_lower_tier_hit_blocks(), 4u);
  EXPECT_EQ(tier.loads, 1);
  h.run_to_completion();
  EXPECT_EQ(h.sched.kv().pool().num_free(), 16);
}

// Alone, a request need not wait on the host: the device is made to wait for its load, and its step goes out at once.
TEST(Scheduler, ALoneRequestGoesOutWhileItsBlocksLoadWhenTheDeviceCanWait) {
  Harness h(config(16));
  SlowTier tier;
  h.sched.kv().set_lower_tier(&tier);
  tier.holds_all = true;
  tier.orderable = true;
  Sequence* a = h.add(tokens(17), 3);
  SchedulerOutput out = h.step();
  ASSERT_EQ(out.seqs.size(), 1u);
  EXPECT_EQ(out.seqs[0].seq, a);
  EXPECT_EQ(out.seqs[0].num_new_tokens, 1);
  EXPECT_EQ(tier.ordered, 1);
  EXPECT_EQ(h.sched.kv().num_blocks_loading(), 4);  // held until the transfer is seen done
  tier.ready = true;
  h.run_to_completion();
  EXPECT_EQ(h.sched.kv().num_blocks_loading(), 0);
  EXPECT_EQ(h.sched.kv().pool().num_free(), 16);
}

// A load whose later blocks never arrive (a disk read failed): the request takes the blocks that did and computes
// the rest; the others are not found as cached afterwards.
TEST(Scheduler, BlocksThatNeverArriveAreRecomputed) {
  Harness h(config(16));
  SlowTier tier;
  h.sched.kv().set_lower_tier(&tier);
  tier.holds_all = true;
  tier.arrives = 2;
  Sequence* a = h.add(tokens(17), 3);
  EXPECT_TRUE(h.step().seqs.empty());
  tier.ready = true;
  tier.holds_all = false;
  SchedulerOutput out = h.step();
  ASSERT_EQ(out.seqs.size(), 1u);
  EXPECT_EQ(out.seqs[0].seq, a);
  EXPECT_EQ(out.seqs[0].num_new_tokens, 17 - 8);
  EXPECT_EQ(h.sched.kv().num_lower_tier_hit_blocks(), 2u);
  EXPECT_EQ(h.sched.kv().num_blocks_loading(), 0);
  h.run_to_completion();
  EXPECT_EQ(h.sched.kv().pool().num_free(), 16);
}

// A load that ends short between the lookup and the admission (its first loaded() answer was "still running", the
// next says only 2 of 4 blocks arrived): the request must not take the 2 that hold nothing. It waits, and the next
// lookup finds the 2 that arrived; it computes the rest.
TEST(Scheduler, ALoadEndingShortRightAfterTheLookupServesNoStaleBlocks) {
  Harness h(config(16));
  SlowTier tier;
  h.sched.kv().set_lower_tier(&tier);
  tier.holds_all = true;
  tier.arrives = 2;
  tier.ready_after = 1;  // the lookup's own call answers -1; any later one answers 2
  Sequence* a = h.add(tokens(17), 3);
  SchedulerOutput first = h.step();
  for (const ScheduledSeq& s : first.seqs) EXPECT_NE(s.num_new_tokens, 1) << "admitted on blocks that never arrived";
  tier.holds_all = false;
  SchedulerOutput out = first.seqs.empty() ? h.step() : first;
  ASSERT_EQ(out.seqs.size(), 1u);
  EXPECT_EQ(out.seqs[0].seq, a);
  EXPECT_EQ(out.seqs[0].num_new_tokens, 17 - 8);
  EXPECT_EQ(h.sched.kv().num_lower_tier_hit_blocks(), 2u);
  EXPECT_EQ(h.sched.kv().num_blocks_loading(), 0);
  h.run_to_completion();
  EXPECT_EQ(h.sched.kv().pool().num_free(), 16);
}

// A lower tier that records what it is asked to keep and to copy ahead.
class RecordingTier final : public LowerKvTier {
 public:
  const KvCacheManager* kv = nullptr;
  std::vector<std::pair<int, uint64_t>> ahead;  // (block, key) offered to copy_ahead
  std::vector<uint64_t> kept;
  void keep(std::span<const Evicted> blocks) override {
    for (const Evicted& e : blocks) kept.push_back(e.key);
  }
  bool copy_ahead(std::span<const Evicted> blocks) override {
    for (const Evicted& e : blocks) {
      // Only unreferenced blocks still cached under the key they are offered with.
      EXPECT_EQ(kv->pool().ref_count(e.block), 0) << e.block;
      EXPECT_TRUE(kv->cache().is_cached(e.block) && kv->cache().key_of(e.block) == e.key) << e.block;
      EXPECT_EQ(kv->cache().depth_of(e.block), e.depth);
      ahead.emplace_back(e.block, e.key);
    }
    return true;
  }
  int count_held(std::span<const Probe>) override { return 0; }
  int load(std::span<const uint64_t>, std::span<const int>, uint64_t* ticket, std::span<uint8_t>) override {
    *ticket = 0;
    return 0;
  }
  int loaded(uint64_t) override { return 0; }
  bool order_on_device(uint64_t) override { return true; }
};

// Copies ahead of need: the manager offers the cached blocks among the next ones an allocation evicts, each once
// while it stays cached under the same key (a device hit and release in between changes nothing); a block evicted
// and cached again with new content is offered again under its new key; blocks past the window are not offered.
TEST(Scheduler, CopyAheadOffersTheWindowsCachedBlocksOncePerContent) {
  Harness h(config(16));
  RecordingTier tier;
  tier.kv = &h.sched.kv();
  h.sched.kv().set_lower_tier(&tier);
  h.sched.kv().set_copy_ahead(16);
  h.sched.kv().copy_ahead();
  EXPECT_TRUE(tier.ahead.empty());  // nothing cached yet
  h.add(tokens(17), 1);             // 4 full blocks cached, then released
  h.run_to_completion();
  h.sched.kv().copy_ahead();
  ASSERT_EQ(tier.ahead.size(), 4u);
  h.sched.kv().copy_ahead();
  EXPECT_EQ(tier.ahead.size(), 4u);
  h.add(tokens(17), 1);  // a device hit on the same blocks, released again
  h.run_to_completion();
  h.sched.kv().copy_ahead();
  EXPECT_EQ(tier.ahead.size(), 4u);
  // 15 full blocks of other content: the allocation reuses every block, a's four among them (handed to keep).
  h.add(tokens(61, 500), 1);
  h.run_to_completion();
  EXPECT_EQ(tier.kept.size(), 4u);
  std::set<int> a_blocks;
  for (const auto& [b, key] : tier.ahead) a_blocks.insert(b);
  h.sched.kv().copy_ahead();
  ASSERT_EQ(tier.ahead.size(), 4u + 15u);
  int again = 0;
  for (size_t i = 4; i < tier.ahead.size(); ++i) {
    again += a_blocks.count(tier.ahead[i].first) > 0 ? 1 : 0;
    for (size_t j = 0; j < 4; ++j) EXPECT_NE(tier.ahead[i].second, tier.ahead[j].second);
  }
  int recached = 0;  // a's blocks that hold full blocks of the new content (one holds its partial last block)
  for (int b : a_blocks) recached += h.sched.kv().cache().is_cached(b) ? 1 : 0;
  EXPECT_EQ(recached, 3);
  EXPECT_EQ(again, recached) << "a's blocks now hold other content: offered again";
  // A window of 2: only the free list's first two blocks are looked at.
  Harness small(config(16));
  RecordingTier t2;
  t2.kv = &small.sched.kv();
  small.sched.kv().set_lower_tier(&t2);
  small.sched.kv().set_copy_ahead(2);
  small.add(tokens(61, 500), 1);
  small.run_to_completion();
  small.sched.kv().copy_ahead();
  const std::vector<int> head = small.sched.kv().pool().free_list();
  ASSERT_LE(t2.ahead.size(), 2u);
  for (const auto& [b, key] : t2.ahead) EXPECT_TRUE(b == head[0] || b == head[1]) << b;
}

// A request that ends while its blocks load leaves nothing held once the load is done.
TEST(Scheduler, LoadingBlocksAreReleasedWhenTheLoadEndsEvenWithoutTheirRequest) {
  Harness h(config(16));
  SlowTier tier;
  h.sched.kv().set_lower_tier(&tier);
  tier.holds_all = true;
  Sequence* a = h.add(tokens(17), 3);
  EXPECT_TRUE(h.step().seqs.empty());
  EXPECT_EQ(h.sched.kv().num_blocks_loading(), 4);
  h.sched.finish(a);  // aborted while waiting
  tier.ready = true;
  EXPECT_TRUE(h.step().seqs.empty());
  EXPECT_EQ(h.sched.kv().num_blocks_loading(), 0);
  EXPECT_EQ(h.sched.kv().pool().num_free(), 16);
  EXPECT_FALSE(h.sched.has_unfinished());
}

}  // namespace
}  // namespace peregrine::engine
