// KvCacheManager: prefix lookups, slot allocation, caching, forks and frees (see kv_cache_manager.h).
#include "engine/kv_cache_manager.h"

#include <algorithm>

#include "core/status.h"

namespace peregrine::engine {

KvCacheManager::KvCacheManager(int num_blocks, int block_size, bool enable_prefix_caching)
    : block_size_(block_size),
      enable_prefix_caching_(enable_prefix_caching),
      pool_(num_blocks),
      cache_(num_blocks, block_size) {
  pool_.set_evict_hook([this](int block) {
    if (tier_ && cache_.is_cached(block)) {
      evicted_.push_back(block);
      evicted_keys_.push_back(cache_.key_of(block));
      evicted_keys_.push_back(cache_.parent_key_of(block));
      const auto t = cache_.tokens_of(block);
      evicted_tokens_.insert(evicted_tokens_.end(), t.begin(), t.end());
      evicted_depths_.push_back(cache_.depth_of(block));
    }
    cache_.evict(block);
    forget_from_lower(block);
  });
}

void KvCacheManager::flush_evictions() {
  if (evicted_.empty()) return;
  std::vector<LowerKvTier::Evicted> blocks;
  blocks.reserve(evicted_.size());
  for (size_t i = 0; i < evicted_.size(); ++i) {
    blocks.push_back({evicted_[i], evicted_keys_[2 * i], evicted_keys_[2 * i + 1],
                      std::span<const int32_t>(evicted_tokens_).subspan(i * static_cast<size_t>(block_size_), block_size_),
                      evicted_depths_[i]});
  }
  tier_->keep(blocks);
  evicted_.clear();
  evicted_keys_.clear();
  evicted_tokens_.clear();
  evicted_depths_.clear();
}

void KvCacheManager::copy_ahead() {
  if (!tier_ || ahead_ == 0) return;
  if (offered_.empty()) offered_.assign(static_cast<size_t>(pool_.num_blocks()), 0);
  window_.clear();
  pool_.free_head(ahead_, window_);
  std::vector<LowerKvTier::Evicted> blocks;
  for (int b : window_) {
    if (!cache_.is_cached(b) || offered_[static_cast<size_t>(b)] == cache_.key_of(b)) continue;
    offered_[static_cast<size_t>(b)] = cache_.key_of(b);
    blocks.push_back({b, cache_.key_of(b), cache_.parent_key_of(b), cache_.tokens_of(b), cache_.depth_of(b)});
  }
  if (!blocks.empty() && !tier_->copy_ahead(blocks)) {
    for (const LowerKvTier::Evicted& e : blocks) offered_[static_cast<size_t>(e.block)] = 0;  // offered again later
  }
}

void KvCacheManager::forget_from_lower(int block) {
  from_lower_.erase(std::remove(from_lower_.begin(), from_lower_.end(), block), from_lower_.end());
  from_below_.erase(std::remove(from_below_.begin(), from_below_.end(), block), from_below_.end());
}

std::vector<int> KvCacheManager::find_cached_prefix(Sequence& seq) {
  std::vector<int> hits;
  last_lower_hits_ = 0;
  last_below_hits_ = 0;
  if (!enable_prefix_caching_ || seq.skip_prefix_cache || !seq.block_table.empty()) return hits;
  // At least one token must be computed to produce logits, so the last token is never served from cache.
  const int max_blocks = (seq.num_tokens() - 1) / block_size_;
  cache_.extend_hashes(seq.token_ids, max_blocks, seq.block_hashes);
  const int usable = std::min<int>(max_blocks, static_cast<int>(seq.block_hashes.size()));
  cache_.match(std::span<const uint64_t>(seq.block_hashes).first(usable), seq.token_ids, hits);
  // Hits the lower tier loaded (now, or for an earlier lookup of this prefix that was not admitted yet).
  auto count_from_lower = [&] {
    for (int b : hits) {
      last_lower_hits_ += std::count(from_lower_.begin(), from_lower_.end(), b) > 0 ? 1 : 0;
      last_below_hits_ += std::count(from_below_.begin(), from_below_.end(), b) > 0 ? 1 : 0;
    }
  };
  if (!tier_ || static_cast<int>(hits.size()) >= usable) {
    count_from_lower();
    return hits;
  }
  // The run continues in the lower tier: load it into fresh device blocks, which become cached device blocks.
  const std::span<const int32_t> tokens(seq.token_ids);
  std::vector<LowerKvTier::Probe> run;
  for (int i = static_cast<int>(hits.size()); i < usable; ++i) {
    const uint64_t parent = i == 0 ? PrefixCache::kRootHash : seq.block_hashes[static_cast<size_t>(i - 1)];
    run.push_back({seq.block_hashes[static_cast<size_t>(i)], parent,
                   tokens.subspan(static_cast<size_t>(i) * block_size_, block_size_)});
  }
  const int held = tier_->count_held(run);
  std::vector<uint64_t> keys;
  for (int i = 0; i < held; ++i) keys.push_back(run[static_cast<size_t>(i)].key);
  if (keys.empty()) {
    count_from_lower();
    return hits;
  }
  // The device hits must survive the allocation (unreferenced ones sit in the free list).
  for (int b : hits) pool_.add_ref(b);
  std::vector<int> fresh;
  int loaded = 0;
  const int n = std::min<int>(static_cast<int>(keys.size()), pool_.num_free());
  if (n > 0 && pool_.allocate(n, fresh)) {
    // The tier takes the run first (so what the allocation evicted cannot push the run's blocks out of it), then
    // what the allocation evicted goes down, before the load's copies (from its first loaded()) reuse the blocks.
    uint64_t ticket = 0;
    std::vector<uint8_t> below(static_cast<size_t>(n), 0);
    loaded = tier_->load(std::span<const uint64_t>(keys).first(static_cast<size_t>(n)), fresh, &ticket, below);
    flush_evictions();
    for (int j = 0; j < loaded; ++j) {
      cache_.insert(fresh[static_cast<size_t>(j)], seq.block_hashes, static_cast<int>(hits.size()) + j, seq.token_ids);
    }
    // Blocks never written go back to the free list's tail at once; loaded ones as cached blocks once their copy
    // is done (now, or when poll_loads sees it), leaves first; a block that never arrived is uncached first.
    const int arrived = loaded == 0 ? 0 : tier_->loaded(ticket);
    const bool done = arrived >= 0;
    if (done && arrived < loaded) {
      for (int j = arrived; j < loaded; ++j) cache_.evict(fresh[static_cast<size_t>(j)]);
      loaded = arrived;
    }
    std::vector<int> back;
    for (int j = n - 1; j >= (done ? 0 : loaded); --j) back.push_back(fresh[static_cast<size_t>(j)]);
    pool_.release(back);
    if (!done) {
      for (int j = loaded - 1; j >= 0; --j) loading_.push_back({fresh[static_cast<size_t>(j)], ticket, j});
    }
    for (int j = 0; j < loaded; ++j) {
      hits.push_back(fresh[static_cast<size_t>(j)]);
      from_lower_.push_back(fresh[static_cast<size_t>(j)]);
      if (below[static_cast<size_t>(j)]) from_below_.push_back(fresh[static_cast<size_t>(j)]);
    }
  }
  // Drop the protection (the caller takes its own references), device hits first in the list's order.
  std::vector<int> protected_hits(hits.begin(), hits.end() - loaded);
  std::reverse(protected_hits.begin(), protected_hits.end());
  pool_.release(protected_hits);
  count_from_lower();
  return hits;
}

bool KvCacheManager::hits_ready(std::span<const int> hits) {
  // No poll here: a load that ended short between the lookup and this answer would uncache and free some of
  // `hits`, and the request would then take blocks that hold nothing (a stale hit). Loads are seen finished by the
  // next schedule's poll_loads, before its lookups.
  for (const Loading& l : loading_) {
    if (std::find(hits.begin(), hits.end(), l.block) != hits.end()) return false;
  }
  return true;
}

bool KvCacheManager::order_hits_on_device(std::span<const int> hits) {
  std::vector<uint64_t> tickets;
  for (const Loading& l : loading_) {
    if (std::find(hits.begin(), hits.end(), l.block) != hits.end() &&
        std::find(tickets.begin(), tickets.end(), l.ticket) == tickets.end())
      tickets.push_back(l.ticket);
  }
  for (uint64_t t : tickets)
    if (!tier_->order_on_device(t)) return false;
  return true;
}

void KvCacheManager::poll_loads() {
  if (loading_.empty()) return;
  std::vector<std::pair<uint64_t, int>> answers;  // each load is asked once: its answer is given once
  auto answer = [&](uint64_t ticket) {
    for (const auto& [t, a] : answers)
      if (t == ticket) return a;
    answers.emplace_back(ticket, tier_->loaded(ticket));
    return answers.back().second;
  };
  std::vector<int> done;
  auto keep = loading_.begin();
  for (auto it = loading_.begin(); it != loading_.end(); ++it) {
    const int arrived = answer(it->ticket);
    if (arrived < 0) {
      *keep++ = *it;
      continue;
    }
    if (it->index >= arrived) {  // it never arrived: it must not be found as cached
      cache_.evict(it->block);
      forget_from_lower(it->block);
    }
    done.push_back(it->block);
  }
  loading_.erase(keep, loading_.end());
  pool_.release(done);
}

void KvCacheManager::record_prefix_lookup(int num_tokens, int num_hit_tokens, std::span<const int> hits) {
  queried_tokens_ += static_cast<uint64_t>(num_tokens);
  hit_tokens_ += static_cast<uint64_t>(num_hit_tokens);
  // The lookup's blocks that came from the lower tier are counted once, by the admission that takes them.
  lower_hit_blocks_ += static_cast<uint64_t>(last_lower_hits_);
  below_hit_blocks_ += static_cast<uint64_t>(last_below_hits_);
  last_lower_hits_ = 0;
  last_below_hits_ = 0;
  for (int b : hits) forget_from_lower(b);
}

int KvCacheManager::num_blocks_to_allocate(const Sequence& seq, int num_new_tokens,
                                           std::span<const int> hit_blocks) const {
  const int computed = seq.num_computed_tokens + static_cast<int>(hit_blocks.size()) * block_size_;
  const int total_blocks = (computed + num_new_tokens + block_size_ - 1) / block_size_;
  const int held = static_cast<int>(seq.block_table.size() + hit_blocks.size());
  return std::max(0, total_blocks - held);
}

bool KvCacheManager::allocate_slots(Sequence& seq, int num_new_tokens, std::span<const int> hit_blocks) {
  PEREGRINE_CHECK(hit_blocks.empty() || seq.block_table.empty(), "prefix hits on a sequence holding blocks");
  const int needed = num_blocks_to_allocate(seq, num_new_tokens, hit_blocks);
  // Hit blocks nobody references sit in the free list; taking them shrinks what allocate() can use.
  int free_hits = 0;
  for (int b : hit_blocks) free_hits += pool_.ref_count(b) == 0 ? 1 : 0;
  if (needed > pool_.num_free() - free_hits) return false;
  for (int b : hit_blocks) {
    pool_.add_ref(b);
    seq.block_table.push_back(b);
  }
  if (!hit_blocks.empty()) {
    seq.num_computed_tokens = static_cast<int>(hit_blocks.size()) * block_size_;
    seq.num_cached_blocks = static_cast<int>(hit_blocks.size());
  }
  const bool ok = pool_.allocate(needed, seq.block_table);
  PEREGRINE_CHECK(ok, "block pool allocation failed after the free count check");
  if (tier_) flush_evictions();
  return true;
}

void KvCacheManager::cache_full_blocks(Sequence& seq) {
  if (!enable_prefix_caching_) return;
  const int full = std::min<int>(seq.num_computed_tokens / block_size_, static_cast<int>(seq.block_table.size()));
  if (full <= seq.num_cached_blocks) return;
  cache_.extend_hashes(seq.token_ids, full, seq.block_hashes);
  for (int i = seq.num_cached_blocks; i < full; ++i) {
    cache_.insert(seq.block_table[i], seq.block_hashes, i, seq.token_ids);
  }
  seq.num_cached_blocks = full;
}

void KvCacheManager::fork(const Sequence& leader, Sequence& sibling) {
  PEREGRINE_CHECK(sibling.block_table.empty(), "fork into a sequence holding blocks");
  // Full blocks holding prompt tokens only, leaving at least the last prompt token to compute.
  const int shared = std::min<int>((sibling.num_prompt_tokens - 1) / block_size_,
                                   std::min<int>(leader.num_computed_tokens / block_size_,
                                                 static_cast<int>(leader.block_table.size())));
  for (int i = 0; i < shared; ++i) {
    pool_.add_ref(leader.block_table[i]);
    sibling.block_table.push_back(leader.block_table[i]);
  }
  sibling.num_computed_tokens = shared * block_size_;
  // The sibling's copies count as cached when the leader's are (same content), so it won't re-insert them.
  sibling.num_cached_blocks = std::min(shared, leader.num_cached_blocks);
}

void KvCacheManager::free(Sequence& seq) {
  std::vector<int> reversed(seq.block_table.rbegin(), seq.block_table.rend());
  pool_.release(reversed);
  seq.block_table.clear();
  seq.num_computed_tokens = 0;
  seq.num_cached_blocks = 0;
}

void KvCacheManager::release_blocks_after(Sequence& seq, int num_tokens) {
  const size_t keep = static_cast<size_t>((num_tokens + block_size_ - 1) / block_size_);
  if (seq.block_table.size() <= keep) return;
  PEREGRINE_CHECK(static_cast<int>(keep) >= seq.num_cached_blocks, "releasing a cached block");
  std::vector<int> tail(seq.block_table.rbegin(), seq.block_table.rend() - static_cast<ptrdiff_t>(keep));
  pool_.release(tail);
  seq.block_table.resize(keep);
}

void KvCacheManager::truncate(Sequence& seq, int num_tokens) {
  PEREGRINE_CHECK(num_tokens >= seq.num_prompt_tokens && num_tokens <= seq.num_tokens(),
                  "truncate outside [prompt length, length]");
  PEREGRINE_CHECK(num_tokens >= seq.num_cached_blocks * block_size_, "truncate into a cached block");
  seq.token_ids.resize(static_cast<size_t>(num_tokens));
  seq.num_computed_tokens = std::min(seq.num_computed_tokens, num_tokens);
  const size_t keep = static_cast<size_t>((num_tokens + block_size_ - 1) / block_size_);
  if (seq.block_table.size() > keep) {
    std::vector<int> tail(seq.block_table.rbegin(), seq.block_table.rend() - static_cast<ptrdiff_t>(keep));
    pool_.release(tail);
    seq.block_table.resize(keep);
  }
  if (seq.block_hashes.size() > static_cast<size_t>(num_tokens / block_size_)) {
    seq.block_hashes.resize(static_cast<size_t>(num_tokens / block_size_));
  }
}

}  // namespace peregrine::engine
