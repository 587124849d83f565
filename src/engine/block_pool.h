// BlockPool: the KV blocks of the paged cache, with reference counts and one free list kept in eviction
// order (head = evicted first). Blocks whose count drops to zero are appended at the tail but keep their
// content, so the prefix cache can revive them until allocate() reuses them (LRU).
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <vector>

namespace peregrine::engine {

class BlockPool {
 public:
  explicit BlockPool(int num_blocks);

  int num_blocks() const { return static_cast<int>(ref_counts_.size()); }
  int num_free() const { return num_free_; }  // unreferenced blocks, cached or not
  int num_used() const { return num_blocks() - num_free_; }
  int ref_count(int block) const { return ref_counts_[block]; }

  // Takes n blocks from the head of the free list, each with count 1, appended to out. Calls the evict
  // hook for each block before reuse (the prefix cache forgets it). Returns false, taking nothing, when
  // fewer than n blocks are free.
  bool allocate(int n, std::vector<int>& out);
  // Adds a reference (a prefix-cache hit or a fork). A block at count 0 leaves the free list.
  void add_ref(int block);
  // Drops one reference from each block, in order; blocks reaching 0 go to the free list tail in that order.
  // NOTE: pass a sequence's blocks last-to-first so its tail (the radix tree's leaves) is evicted first.
  void release(std::span<const int> blocks);
  void set_evict_hook(std::function<void(int)> hook) { evict_hook_ = std::move(hook); }

  // The free list from head to tail (tests).
  std::vector<int> free_list() const;
  // Appends the first n blocks of the free list (the next ones allocate() takes, head first) to out.
  void free_head(int n, std::vector<int>& out) const;

 private:
  void unlink(int block);
  void push_tail(int block);

  std::vector<int32_t> ref_counts_;
  // Intrusive doubly linked free list; index num_blocks is the sentinel.
  std::vector<int32_t> prev_;
  std::vector<int32_t> next_;
  int num_free_ = 0;
  std::function<void(int)> evict_hook_;
};

}  // namespace peregrine::engine
