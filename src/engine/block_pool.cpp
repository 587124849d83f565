// BlockPool: reference counts and the eviction-ordered free list (see block_pool.h).
#include "engine/block_pool.h"

#include <string>

#include "core/status.h"

namespace peregrine::engine {

BlockPool::BlockPool(int num_blocks)
    : ref_counts_(num_blocks, 0), prev_(num_blocks + 1), next_(num_blocks + 1) {
  if (num_blocks <= 0) {
    throw Error(ErrorCode::kInvalidArgument, "BlockPool needs at least one block, got " + std::to_string(num_blocks));
  }
  const int sentinel = num_blocks;
  prev_[sentinel] = next_[sentinel] = sentinel;
  for (int b = 0; b < num_blocks; ++b) push_tail(b);
}

void BlockPool::unlink(int block) {
  next_[prev_[block]] = next_[block];
  prev_[next_[block]] = prev_[block];
  prev_[block] = next_[block] = -1;
  --num_free_;
}

void BlockPool::push_tail(int block) {
  const int sentinel = num_blocks();
  const int last = prev_[sentinel];
  next_[last] = block;
  prev_[block] = last;
  next_[block] = sentinel;
  prev_[sentinel] = block;
  ++num_free_;
}

bool BlockPool::allocate(int n, std::vector<int>& out) {
  if (n < 0) throw Error(ErrorCode::kInternal, "BlockPool::allocate: negative count");
  if (n > num_free_) return false;
  const int sentinel = num_blocks();
  for (int i = 0; i < n; ++i) {
    const int block = next_[sentinel];
    unlink(block);
    if (evict_hook_) evict_hook_(block);
    ref_counts_[block] = 1;
    out.push_back(block);
  }
  return true;
}

void BlockPool::add_ref(int block) {
  PEREGRINE_CHECK(block >= 0 && block < num_blocks(), "block id out of range");
  if (ref_counts_[block]++ == 0) unlink(block);
}

void BlockPool::release(std::span<const int> blocks) {
  for (int block : blocks) {
    PEREGRINE_CHECK(block >= 0 && block < num_blocks(), "block id out of range");
    PEREGRINE_CHECK(ref_counts_[block] > 0, "releasing a free block " + std::to_string(block));
    if (--ref_counts_[block] == 0) push_tail(block);
  }
}

std::vector<int> BlockPool::free_list() const {
  std::vector<int> out;
  free_head(num_free_, out);
  return out;
}

void BlockPool::free_head(int n, std::vector<int>& out) const {
  const int sentinel = num_blocks();
  for (int b = next_[sentinel]; b != sentinel && n-- > 0; b = next_[b]) out.push_back(b);
}

}  // namespace peregrine::engine
