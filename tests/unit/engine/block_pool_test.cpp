// Tests of BlockPool (reference counts, eviction-ordered free list) and PrefixCache (hash chain lookups
// with exact token checks), driven directly with no model.
#include <gtest/gtest.h>

#include <numeric>

#include "core/status.h"
#include "engine/block_pool.h"
#include "engine/prefix_cache.h"

namespace peregrine::engine {
namespace {

TEST(BlockPool, AllocatesFromHeadAndFreesToTail) {
  BlockPool pool(4);
  EXPECT_EQ(pool.num_free(), 4);
  std::vector<int> got;
  ASSERT_TRUE(pool.allocate(3, got));
  EXPECT_EQ(got, (std::vector<int>{0, 1, 2}));
  EXPECT_EQ(pool.num_free(), 1);
  EXPECT_FALSE(pool.allocate(2, got));  // all or nothing
  EXPECT_EQ(got.size(), 3u);
  EXPECT_EQ(pool.num_free(), 1);
  // Released last-to-first: the free list order is 3, 2, 1, 0.
  std::vector<int> rev{2, 1, 0};
  pool.release(rev);
  EXPECT_EQ(pool.free_list(), (std::vector<int>{3, 2, 1, 0}));
}

TEST(BlockPool, RefCountsKeepBlocksOutOfTheFreeList) {
  BlockPool pool(3);
  std::vector<int> got;
  ASSERT_TRUE(pool.allocate(1, got));
  pool.add_ref(got[0]);
  EXPECT_EQ(pool.ref_count(got[0]), 2);
  pool.release(got);
  EXPECT_EQ(pool.num_free(), 2);
  pool.release(got);
  EXPECT_EQ(pool.num_free(), 3);
  EXPECT_EQ(pool.free_list().back(), got[0]);
  // Reviving a free block (a prefix-cache hit) takes it out of the list wherever it is.
  pool.add_ref(1);
  EXPECT_EQ(pool.free_list(), (std::vector<int>{2, 0}));
  EXPECT_THROW(pool.release(std::vector<int>{2}), Error);  // double free is a bug, caught
}

TEST(BlockPool, EvictHookSeesReusedBlocks) {
  BlockPool pool(2);
  std::vector<int> evicted;
  pool.set_evict_hook([&](int b) { evicted.push_back(b); });
  std::vector<int> got;
  ASSERT_TRUE(pool.allocate(2, got));
  EXPECT_EQ(evicted, (std::vector<int>{0, 1}));
}

std::vector<int32_t> iota_tokens(int n, int start = 0) {
  std::vector<int32_t> t(n);
  std::iota(t.begin(), t.end(), start);
  return t;
}

TEST(PrefixCache, MatchesTheLongestCachedChain) {
  PrefixCache cache(8, 4);
  auto tokens = iota_tokens(12);
  std::vector<uint64_t> hashes;
  cache.extend_hashes(tokens, 100, hashes);
  ASSERT_EQ(hashes.size(), 3u);
  cache.insert(5, hashes, 0, tokens);
  cache.insert(6, hashes, 1, tokens);
  std::vector<int> out;
  cache.match(hashes, tokens, out);
  EXPECT_EQ(out, (std::vector<int>{5, 6}));
  // A different second block stops the match after the first.
  auto other = tokens;
  other[5] = 99;
  std::vector<uint64_t> other_hashes;
  cache.extend_hashes(other, 100, other_hashes);
  out.clear();
  cache.match(other_hashes, other, out);
  EXPECT_EQ(out, (std::vector<int>{5}));
  // Same block content after a different prefix is a different key.
  auto shifted = tokens;
  shifted[0] = 42;
  std::vector<uint64_t> shifted_hashes;
  cache.extend_hashes(shifted, 100, shifted_hashes);
  out.clear();
  cache.match(shifted_hashes, shifted, out);
  EXPECT_TRUE(out.empty());
}

TEST(PrefixCache, EvictionForgetsAndDuplicatesAreNotCached) {
  PrefixCache cache(8, 2);
  auto tokens = iota_tokens(4);
  std::vector<uint64_t> hashes;
  cache.extend_hashes(tokens, 2, hashes);
  cache.insert(1, hashes, 0, tokens);
  cache.insert(2, hashes, 0, tokens);  // same content already cached under block 1
  EXPECT_TRUE(cache.is_cached(1));
  EXPECT_FALSE(cache.is_cached(2));
  EXPECT_EQ(cache.size(), 1u);
  cache.evict(1);
  EXPECT_FALSE(cache.is_cached(1));
  std::vector<int> out;
  cache.match(hashes, tokens, out);
  EXPECT_TRUE(out.empty());
}

TEST(PrefixCache, ForgedHashCollisionIsRejectedByTokenCheck) {
  PrefixCache cache(4, 2);
  auto tokens = iota_tokens(2);
  std::vector<uint64_t> hashes;
  cache.extend_hashes(tokens, 1, hashes);
  cache.insert(0, hashes, 0, tokens);
  // Pretend another prompt hashed to the same key: its tokens differ, so it must not match.
  std::vector<int32_t> other{7, 8};
  std::vector<int> out;
  cache.match(hashes, other, out);
  EXPECT_TRUE(out.empty());
}

}  // namespace
}  // namespace peregrine::engine
