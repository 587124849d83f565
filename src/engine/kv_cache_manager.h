// KvCacheManager: sequence-level KV bookkeeping over the BlockPool and the PrefixCache: prefix lookups,
// allocating slots for a step (all or nothing), caching newly full blocks, forks for n > 1, and freeing.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "engine/block_pool.h"
#include "engine/prefix_cache.h"
#include "engine/sequence.h"

namespace peregrine::engine {

class KvCacheManager {
 public:
  KvCacheManager(int num_blocks, int block_size, bool enable_prefix_caching);

  int block_size() const { return block_size_; }
  bool prefix_caching() const { return enable_prefix_caching_; }
  const BlockPool& pool() const { return pool_; }
  const PrefixCache& cache() const { return cache_; }

  // For a sequence holding no blocks: its cached leading blocks, leaving at least one token to compute.
  std::vector<int> find_cached_prefix(Sequence& seq);
  // Counts an admitted lookup in the hit-rate statistics.
  void record_prefix_lookup(int num_tokens, int num_hit_tokens);
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

  uint64_t num_queried_tokens() const { return queried_tokens_; }
  uint64_t num_hit_tokens() const { return hit_tokens_; }

 private:
  int block_size_;
  bool enable_prefix_caching_;
  BlockPool pool_;
  PrefixCache cache_;
  uint64_t queried_tokens_ = 0;
  uint64_t hit_tokens_ = 0;
};

}  // namespace peregrine::engine
