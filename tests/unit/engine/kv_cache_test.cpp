// KvCache block operations on every backend: a block copied on the device, swapped out to pinned host memory and
// swapped back in (to the same or other blocks) reads back bit-identical, scales included; nothing else changes.
// CUDA runs on the GPU machine (skipped without a GPU).
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <string>

#include "core/status.h"
#include "engine/host_kv_tier.h"
#include "engine/kv_cache.h"
#include "ops/backend.h"

namespace peregrine::engine {
namespace {

struct Case {
  std::string device;
  DType dtype;
  int scales;
};

class KvCacheOps : public ::testing::TestWithParam<Case> {};

// Host copy of every pool, in KvCache::layers() order: K, V (then K scales, V scales) per layer.
std::vector<std::vector<std::byte>> read_pools(ops::Backend& backend, const KvCache& kv) {
  std::vector<std::vector<std::byte>> out;
  for (const model::KvLayer& l : kv.layers()) {
    for (const TensorView* t : {&l.k, &l.v, &l.k_scales, &l.v_scales}) {
      if (t->empty()) continue;
      out.emplace_back(t->bytes());
      backend.copy_to_host(out.back().data(), t->data, t->bytes());
    }
  }
  return out;
}

void fill_random(ops::Backend& backend, const KvCache& kv, std::mt19937& rng) {
  for (const model::KvLayer& l : kv.layers()) {
    for (const TensorView* t : {&l.k, &l.v, &l.k_scales, &l.v_scales}) {
      if (t->empty()) continue;
      std::vector<std::byte> bytes(t->bytes());
      for (auto& b : bytes) b = static_cast<std::byte>(rng() & 0xff);
      backend.copy_from_host(t->data, bytes.data(), bytes.size());
    }
  }
}

// Bytes of block b in pool p (pools listed as read_pools lists them).
std::vector<std::byte> block_of(const std::vector<std::vector<std::byte>>& pools, size_t p, int b, int num_blocks) {
  const size_t per = pools[p].size() / static_cast<size_t>(num_blocks);
  return {pools[p].begin() + static_cast<ptrdiff_t>(per * b), pools[p].begin() + static_cast<ptrdiff_t>(per * (b + 1))};
}

TEST_P(KvCacheOps, CopySwapOutAndSwapInAreBitExact) {
  const Case& c = GetParam();
  ops::BackendOptions bo;
  bo.kind = c.device == "ref" ? ops::DeviceKind::kRef : c.device == "cpu" ? ops::DeviceKind::kCpu : ops::DeviceKind::kCuda;
  if (bo.kind == ops::DeviceKind::kCuda && !ops::cuda_available()) GTEST_SKIP() << "no CUDA GPU visible";
  auto backend = ops::create_backend(bo);
  KvCacheConfig cfg;
  cfg.num_layers = 3;
  cfg.num_kv_heads = 2;
  cfg.head_dim = 8;
  cfg.num_blocks = 12;
  cfg.block_size = 4;
  cfg.dtype = c.dtype;
  cfg.scales_per_token_head = c.scales;
  KvCache kv(*backend, cfg);
  ASSERT_EQ(kv.layers().size(), 3u);
  std::mt19937 rng(7);
  fill_random(*backend, kv, rng);
  const auto original = read_pools(*backend, kv);
  const size_t num_pools = original.size();
  ASSERT_EQ(num_pools, c.scales ? 12u : 6u);

  // Device copies: 1 → 5, 2 → 6 (and a no-op self copy); every other block unchanged.
  const std::pair<int, int> copies[] = {{1, 5}, {2, 6}, {4, 4}};
  kv.copy_blocks(copies);
  auto now = read_pools(*backend, kv);
  for (size_t p = 0; p < num_pools; ++p) {
    for (int b = 0; b < cfg.num_blocks; ++b) {
      const int from = b == 5 ? 1 : b == 6 ? 2 : b;
      EXPECT_EQ(block_of(now, p, b, cfg.num_blocks), block_of(original, p, from, cfg.num_blocks))
          << "pool " << p << " block " << b;
    }
  }

  // Swap blocks 3 and 7 out to host slots 2 and 0: each slot holds the block of every pool back to back.
  HostKvBuffer host(*backend, cfg, 4);
  ASSERT_EQ(host.slot_bytes(), cfg.bytes_per_block());
  const int out_blocks[] = {3, 7}, out_slots[] = {2, 0};
  const uint64_t t_out = kv.swap_out(out_blocks, host, out_slots);
  kv.wait(t_out);
  EXPECT_TRUE(kv.transfer_done(t_out));
  for (int i = 0; i < 2; ++i) {
    std::vector<std::byte> expected;
    // Slot layout: K, V per layer, then the scales (K, V per layer).
    std::vector<size_t> order;
    for (int l = 0; l < cfg.num_layers; ++l) {
      order.push_back(static_cast<size_t>(l) * (num_pools / 3) + 0);
      order.push_back(static_cast<size_t>(l) * (num_pools / 3) + 1);
    }
    if (c.scales) {
      for (int l = 0; l < cfg.num_layers; ++l) {
        order.push_back(static_cast<size_t>(l) * 4 + 2);
        order.push_back(static_cast<size_t>(l) * 4 + 3);
      }
    }
    for (size_t p : order) {
      auto blk = block_of(now, p, out_blocks[i], cfg.num_blocks);
      expected.insert(expected.end(), blk.begin(), blk.end());
    }
    ASSERT_EQ(expected.size(), host.slot_bytes());
    EXPECT_EQ(std::memcmp(expected.data(), host.slot(out_slots[i]), expected.size()), 0) << "host slot " << out_slots[i];
  }

  // Scribble over the device, then swap the slots back in: into other blocks (8, 9) and into the originals.
  fill_random(*backend, kv, rng);
  const auto scribbled = read_pools(*backend, kv);
  const int in_slots[] = {2, 0, 2, 0}, in_blocks[] = {8, 9, 3, 7};
  const uint64_t t_in = kv.swap_in(host, in_slots, in_blocks);
  const auto back = read_pools(*backend, kv);  // reads on the compute queue, ordered after the swap-in
  kv.wait(t_in);
  for (size_t p = 0; p < num_pools; ++p) {
    for (int b = 0; b < cfg.num_blocks; ++b) {
      const auto got = block_of(back, p, b, cfg.num_blocks);
      if (b == 8 || b == 3) {
        EXPECT_EQ(got, block_of(now, p, 3, cfg.num_blocks)) << "pool " << p << " block " << b;
      } else if (b == 9 || b == 7) {
        EXPECT_EQ(got, block_of(now, p, 7, cfg.num_blocks)) << "pool " << p << " block " << b;
      } else {
        EXPECT_EQ(got, block_of(scribbled, p, b, cfg.num_blocks)) << "pool " << p << " block " << b;
      }
    }
  }
}

TEST_P(KvCacheOps, BadBlocksAndSlotsAreErrors) {
  const Case& c = GetParam();
  if (c.device != "ref") GTEST_SKIP() << "validation is backend-independent";
  auto backend = ops::create_backend({ops::DeviceKind::kRef, 0, 0});
  KvCacheConfig cfg;
  cfg.num_layers = 1;
  cfg.num_kv_heads = 1;
  cfg.head_dim = 4;
  cfg.num_blocks = 4;
  cfg.block_size = 2;
  KvCache kv(*backend, cfg);
  HostKvBuffer host(*backend, cfg, 2);
  const std::pair<int, int> bad_copy[] = {{0, 4}};
  EXPECT_THROW(kv.copy_blocks(bad_copy), Error);
  const int blocks[] = {1}, bad_blocks[] = {-1}, bad_slots[] = {2}, slots[] = {0}, two[] = {0, 1};
  EXPECT_THROW(kv.swap_out(bad_blocks, host, slots), Error);
  EXPECT_THROW(kv.swap_out(blocks, host, bad_slots), Error);
  EXPECT_THROW(kv.swap_in(host, two, blocks), Error);
  KvCacheConfig other = cfg;
  other.head_dim = 8;
  HostKvBuffer foreign(*backend, other, 2);
  EXPECT_THROW(kv.swap_in(foreign, slots, blocks), Error);
  cfg.num_blocks = 0;
  EXPECT_THROW(KvCache(*backend, cfg), Error);
}

std::string case_name(const ::testing::TestParamInfo<Case>& info) {
  return info.param.device + "_" + std::string(dtype_name(info.param.dtype)) + (info.param.scales ? "_scales" : "");
}

TEST_P(KvCacheOps, HostTierKeepsWhatFitsAndLoadsItBackBitExact) {
  const Case& c = GetParam();
  ops::BackendOptions bo;
  bo.kind = c.device == "ref" ? ops::DeviceKind::kRef : c.device == "cpu" ? ops::DeviceKind::kCpu : ops::DeviceKind::kCuda;
  if (bo.kind == ops::DeviceKind::kCuda && !ops::cuda_available()) GTEST_SKIP() << "no CUDA GPU visible";
  auto backend = ops::create_backend(bo);
  KvCacheConfig cfg;
  cfg.num_layers = 3;
  cfg.num_kv_heads = 2;
  cfg.head_dim = 8;
  cfg.num_blocks = 12;
  cfg.block_size = 4;
  cfg.dtype = c.dtype;
  cfg.scales_per_token_head = c.scales;
  KvCache kv(*backend, cfg);
  std::mt19937 rng(11);
  fill_random(*backend, kv, rng);
  const auto original = read_pools(*backend, kv);
  // Three blocks evicted at once into a tier of two slots: the first two are kept (a transfer never writes a slot
  // twice), the third is not.
  HostKvTier tier(*backend, kv, 2);
  const std::vector<int32_t> t1{1, 2, 3, 4}, t2{5, 6, 7, 8}, t3{9, 10, 11, 12};
  const LowerKvTier::Evicted evicted[] = {{1, 101, 0, t1}, {2, 102, 101, t2}, {3, 103, 102, t3}};
  tier.keep(evicted);
  EXPECT_EQ(tier.num_held(), 2);
  EXPECT_TRUE(tier.contains(101, 0, t1));
  EXPECT_TRUE(tier.contains(102, 101, t2));
  EXPECT_FALSE(tier.contains(102, 0, t2));  // another parent: another prefix
  EXPECT_FALSE(tier.contains(103, 102, t3));
  // Loaded into other blocks, they read back bit-identical; a key the tier lacks ends the run.
  const uint64_t keys[] = {101, 102, 103};
  const int blocks[] = {8, 9, 10};
  uint64_t ticket = 0;
  EXPECT_EQ(tier.load(keys, blocks, &ticket), 2);
  // Nothing on the device waits for a load: the caller holds the blocks back until it answers (once).
  int arrived = -1;
  while ((arrived = tier.loaded(ticket)) < 0) {
  }
  EXPECT_EQ(arrived, 2);
  backend->synchronize();
  const auto now = read_pools(*backend, kv);
  for (size_t p = 0; p < original.size(); ++p) {
    EXPECT_EQ(block_of(now, p, 8, 12), block_of(original, p, 1, 12)) << "pool " << p;
    EXPECT_EQ(block_of(now, p, 9, 12), block_of(original, p, 2, 12)) << "pool " << p;
    EXPECT_EQ(block_of(now, p, 10, 12), block_of(original, p, 10, 12)) << "pool " << p;
  }
}

INSTANTIATE_TEST_SUITE_P(Backends, KvCacheOps,
                         ::testing::Values(Case{"ref", DType::kF32, 0}, Case{"ref", DType::kBF16, 1},
                                           Case{"cpu", DType::kF32, 0}, Case{"cpu", DType::kBF16, 1},
                                           Case{"cuda", DType::kBF16, 0}, Case{"cuda", DType::kF16, 1}),
                         case_name);

}  // namespace
}  // namespace peregrine::engine
