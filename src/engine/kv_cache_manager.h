// KvCacheManager: sequence-level KV bookkeeping over the BlockPool and the PrefixCache: prefix lookups,
// allocating slots for a step (all or nothing), caching newly full blocks, forks for n > 1, and freeing.
#pragma once

#include <algorithm>
#include <cstdint>
#include <span>
#include <vector>

#include "engine/block_pool.h"
#include "engine/prefix_cache.h"
#include "engine/sequence.h"

namespace peregrine::engine {

// A tier of the prefix cache below the device (host memory, with the disk below it): it keeps the content of cached
// device blocks that the pool reuses, and loads it back into fresh device blocks on a later hit. A block is
// identified as the prefix cache identifies it: its key, its parent's key and its tokens (so a hash collision never
// serves wrong KV). A hit must start at a chain's first block, so a chain's earlier blocks are worth more than its
// later ones: a tier that must drop blocks drops a chain from its end.
class LowerKvTier {
 public:
  virtual ~LowerKvTier() = default;
  struct Evicted {
    int block;
    uint64_t key, parent_key;
    std::span<const int32_t> tokens;  // valid during the call only
    int depth = 0;                    // the block's index in its chain (0: a prompt's first block)
  };
  struct Probe {
    uint64_t key, parent_key;
    std::span<const int32_t> tokens;
  };
  // Cached device blocks about to be reused: keep their content. Called before any later step writes them.
  virtual void keep(std::span<const Evicted> blocks) = 0;
  // Cached device blocks, unreferenced, that the pool will reuse soonest: the tier may copy them down now, so that
  // their eviction later costs no copy (keep() then finds them held). They stay cached on the device and unchanged
  // until keep() names them; keep() orders their next write after such a copy. Returns false when it had no room
  // for some (they are offered again later). The default copies nothing.
  virtual bool copy_ahead(std::span<const Evicted> blocks) {
    (void)blocks;
    return true;
  }
  // How many leading blocks of `run` (consecutive blocks of one chain) the tier holds; marks them recently used,
  // the run's first block last.
  virtual int count_held(std::span<const Probe> run) = 0;
  // Takes on loading the held blocks with these keys into the device blocks (same order). Returns how many leading
  // ones it will load (a key it no longer holds ends the run) and sets *ticket to the load: nothing may read or
  // write those blocks until loaded(*ticket) answers. Nothing is copied into them before the first loaded() or
  // order_on_device() call, so the caller hands down (keep) what allocating them evicted in between; the tier keeps
  // the run's blocks meanwhile. from_below (sized like keys) is set to 1 for the blocks that come from a tier below
  // this one (the disk), 0 for the others.
  virtual int load(std::span<const uint64_t> keys, std::span<const int> blocks, uint64_t* ticket,
                   std::span<uint8_t> from_below) = 0;
  // Never blocks: -1 while the load runs; then, once, how many leading blocks arrived intact (fewer than started
  // when a read from below failed; the blocks past them hold nothing).
  virtual int loaded(uint64_t ticket) = 0;
  // Makes work enqueued from now on wait for the load on the device (false when it cannot yet: its blocks are still
  // being read from below). The blocks may then be used before loaded() answers.
  virtual bool order_on_device(uint64_t ticket) = 0;
};

class KvCacheManager {
 public:
  KvCacheManager(int num_blocks, int block_size, bool enable_prefix_caching);

  int block_size() const { return block_size_; }
  bool prefix_caching() const { return enable_prefix_caching_; }
  const BlockPool& pool() const { return pool_; }
  const PrefixCache& cache() const { return cache_; }

  // For a sequence holding no blocks: its cached leading blocks, leaving at least one token to compute. Blocks the
  // lower tier is still loading are among them: see hits_ready.
  std::vector<int> find_cached_prefix(Sequence& seq);
  // Whether every hit block is on the device (no lower-tier load into it still in flight). A sequence whose hits
  // are not ready is not admitted yet, so other requests' steps never wait for its copies; the manager holds the
  // blocks in flight (they cannot be evicted) and hands them to the cache when their transfer finishes. Answers
  // for the state find_cached_prefix left (it polls nothing), so `hits` stay valid until they are taken.
  bool hits_ready(std::span<const int> hits);
  // For when nothing else would run: makes the device wait for the hits' loads instead of the host (so the step is
  // enqueued while they copy). False when a load cannot be ordered yet (reads from below still running).
  bool order_hits_on_device(std::span<const int> hits);
  // Releases the blocks whose loads finished (called once per schedule, before its lookups, and by the engine while
  // it has no request to run, so an aborted request's loads never leave blocks held).
  void poll_loads();
  int num_blocks_loading() const { return static_cast<int>(loading_.size()); }
  bool is_loading(int block) const {
    for (const auto& l : loading_)
      if (l.block == block) return true;
    return false;
  }
  // Counts an admitted lookup (its hit blocks) in the hit-rate statistics.
  void record_prefix_lookup(int num_tokens, int num_hit_tokens, std::span<const int> hits = {});
  // Blocks that must be newly allocated for seq to hold num_new_tokens more tokens after taking hit_blocks.
  int num_blocks_to_allocate(const Sequence& seq, int num_new_tokens, std::span<const int> hit_blocks) const;
  // Takes hit_blocks (seq then starts with them computed) and allocates room for num_new_tokens more tokens.
  // All or nothing: returns false and changes nothing when the pool is short.
  bool allocate_slots(Sequence& seq, int num_new_tokens, std::span<const int> hit_blocks);
  // Registers seq's full, computed blocks in the prefix cache (no-op when caching is off).
  void cache_full_blocks(Sequence& seq);
  // Shares the leader's full prompt blocks with a sibling holding none; the sibling then computes the rest
  // of the prompt (at least one token) itself.
  void fork(const Sequence& leader, Sequence& sibling);
  // Releases seq's blocks (tail first, so leaves are evicted first) and resets it to nothing computed.
  void free(Sequence& seq);
  // Cuts seq back to its first num_tokens tokens (speculative rejection): drops the later token ids, keeps KV for
  // at most num_tokens tokens and releases the blocks past them. Blocks registered in the prefix cache are never
  // cut (only verified tokens are cached); num_tokens must be at least the prompt length.
  void truncate(Sequence& seq, int num_tokens);
  // Releases seq's blocks past those holding its first num_tokens positions (rejected drafts' blocks).
  void release_blocks_after(Sequence& seq, int num_tokens);

  // The tier below the device (null: none). The manager keeps evicted cached blocks there and looks hits up there
  // after the device's.
  void set_lower_tier(LowerKvTier* tier) { tier_ = tier; }
  // Copies down ahead of need: the cached blocks among the first `blocks` of the free list (the next ones an
  // allocation evicts) are offered to the lower tier (LowerKvTier::copy_ahead) by copy_ahead(). 0: off.
  void set_copy_ahead(int blocks) { ahead_ = std::max(0, blocks); }
  int copy_ahead_window() const { return ahead_; }
  // Offers the window's cached blocks not offered since they were cached (called once per step, after the
  // schedule's allocations, and while the engine is idle).
  void copy_ahead();
  // Blocks of admitted lookups that came from the lower tier (counted by record_prefix_lookup), and of those the
  // ones that came from below it (the disk).
  uint64_t num_lower_tier_hit_blocks() const { return lower_hit_blocks_; }
  uint64_t num_lower_tier_hit_blocks_from_below() const { return below_hit_blocks_; }

  uint64_t num_queried_tokens() const { return queried_tokens_; }
  uint64_t num_hit_tokens() const { return hit_tokens_; }

 private:
  int block_size_;
  bool enable_prefix_caching_;
  BlockPool pool_;
  PrefixCache cache_;
  // Hands the blocks evicted since the last call to the lower tier.
  void flush_evictions();
  void forget_from_lower(int block);  // block no longer counts as loaded from the lower tier

  LowerKvTier* tier_ = nullptr;
  int ahead_ = 0;
  std::vector<uint64_t> offered_;  // per block: the key it was last offered to copy_ahead under (0: none)
  std::vector<int> window_;        // scratch of copy_ahead
  std::vector<int> evicted_;             // cached blocks the pool reused, not yet handed down
  std::vector<uint64_t> evicted_keys_;   // [2 * i]: key, [2 * i + 1]: parent key
  std::vector<int32_t> evicted_tokens_;  // block_size per block
  std::vector<int> evicted_depths_;
  int last_lower_hits_ = 0, last_below_hits_ = 0;
  uint64_t lower_hit_blocks_ = 0, below_hit_blocks_ = 0;
  struct Loading {
    int block;
    uint64_t ticket;
    int index;  // within its load
  };
  std::vector<Loading> loading_;  // blocks held while the lower tier loads them
  std::vector<int> from_lower_;  // blocks loaded from the lower tier that no admitted lookup has counted yet
  std::vector<int> from_below_;  // those of them that came from below it
  uint64_t queried_tokens_ = 0;
  uint64_t hit_tokens_ = 0;
};

}  // namespace peregrine::engine
