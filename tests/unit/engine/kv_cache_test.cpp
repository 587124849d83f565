// KvCache block operations on every backend: a block copied on the device, swapped out to pinned host memory and
// swapped back in (to the same or other blocks) reads back bit-identical, scales included; nothing else changes.
// The prefix cache's host tier over them, with and without a disk tier: a chain's first blocks are the ones kept,
// every evicted block reaches the disk tier, loads larger than the host tier come back whole, a full disk keeps a
// chain's first blocks. CUDA runs on the GPU machine (skipped without a GPU).
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <string>
#include <chrono>
#include <thread>

#include <unistd.h>

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

  // One group of layers (a load overlapped with the prefill): slot 2 into block 10 for layer 1 only, the compute
  // queue made to wait for it as layer 1 starts; the other layers of block 10 and every other block stay.
  fill_random(*backend, kv, rng);
  const auto scribbled2 = read_pools(*backend, kv);
  const int one_slot[] = {2}, one_block[] = {10};
  const uint64_t t_layer = kv.swap_in(host, one_slot, one_block, /*compute_waits=*/false, 1, 2);
  kv.wait_before_layer(1, t_layer);
  kv.enter_layer(0);
  EXPECT_TRUE(kv.has_layer_waits());
  kv.enter_layer(1);
  EXPECT_FALSE(kv.has_layer_waits());
  const auto layered = read_pools(*backend, kv);
  const size_t per_layer = num_pools / 3;
  for (size_t p = 0; p < num_pools; ++p) {
    for (int b = 0; b < cfg.num_blocks; ++b) {
      const bool copied = b == 10 && p / per_layer == 1;
      EXPECT_EQ(block_of(layered, p, b, cfg.num_blocks),
                block_of(copied ? now : scribbled2, p, copied ? 3 : b, cfg.num_blocks))
          << "pool " << p << " block " << b;
    }
  }
  kv.wait_before_layer(2, kv.swap_in(host, one_slot, one_block, false, 2, 3));
  kv.flush_layer_waits();
  EXPECT_FALSE(kv.has_layer_waits());
  const auto flushed = read_pools(*backend, kv);
  for (size_t p = 2 * per_layer; p < num_pools; ++p)
    EXPECT_EQ(block_of(flushed, p, 10, cfg.num_blocks), block_of(now, p, 3, cfg.num_blocks)) << "pool " << p;
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
  // Three blocks of a chain evicted at once (its end first, as the device evicts) into a tier of two slots: the
  // chain's first two are kept (a transfer never writes a slot twice), the third is not.
  HostKvTier tier(*backend, kv, 2);
  const std::vector<int32_t> t1{1, 2, 3, 4}, t2{5, 6, 7, 8}, t3{9, 10, 11, 12};
  const LowerKvTier::Evicted evicted[] = {{3, 103, 102, t3, 2}, {2, 102, 101, t2, 1}, {1, 101, 0, t1, 0}};
  tier.keep(evicted);
  EXPECT_EQ(tier.num_held(), 2);
  EXPECT_EQ(tier.stats().not_kept, 1u);
  const LowerKvTier::Probe run[] = {{101, 0, t1}, {102, 101, t2}, {103, 102, t3}};
  EXPECT_EQ(tier.count_held(run), 2);
  const LowerKvTier::Probe other[] = {{102, 0, t2}};  // another parent: another prefix
  EXPECT_EQ(tier.count_held(other), 0);
  // Loaded into other blocks, they read back bit-identical; a key the tier lacks ends the run.
  const uint64_t keys[] = {101, 102, 103};
  const int blocks[] = {8, 9, 10};
  uint64_t ticket = 0;
  uint8_t below[3] = {9, 9, 9};
  EXPECT_EQ(tier.load(keys, blocks, &ticket, below), 2);
  EXPECT_EQ(below[0] + below[1], 0);  // both from the host
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

// The tier tests' device: a small cache of random content on the case's backend.
struct TierDevice {
  std::unique_ptr<ops::Backend> backend;
  KvCacheConfig cfg;
  std::unique_ptr<KvCache> kv;
  std::vector<std::vector<std::byte>> original;

  explicit TierDevice(const Case& c, int num_blocks = 32) {
    ops::BackendOptions bo;
    bo.kind = c.device == "ref" ? ops::DeviceKind::kRef : c.device == "cpu" ? ops::DeviceKind::kCpu : ops::DeviceKind::kCuda;
    backend = ops::create_backend(bo);
    cfg.num_layers = 3;
    cfg.num_kv_heads = 2;
    cfg.head_dim = 8;
    cfg.num_blocks = num_blocks;
    cfg.block_size = 4;
    cfg.dtype = c.dtype;
    cfg.scales_per_token_head = c.scales;
    kv = std::make_unique<KvCache>(*backend, cfg);
    std::mt19937 rng(23);
    fill_random(*backend, *kv, rng);
    original = read_pools(*backend, *kv);
  }
  // Whether device block `to` holds what block `from` held at the start, in every pool.
  bool same_as_original(int to, int from) {
    backend->synchronize();
    const auto now = read_pools(*backend, *kv);
    for (size_t p = 0; p < now.size(); ++p)
      if (block_of(now, p, to, cfg.num_blocks) != block_of(original, p, from, cfg.num_blocks)) return false;
    return true;
  }
};

// A chain of blocks as the prefix cache names them: block i of the chain sits in device block first_block + i.
struct Chain {
  std::vector<uint64_t> keys;
  std::vector<std::vector<int32_t>> tokens;
  int first_block;
  Chain(uint64_t base, int n, int first) : first_block(first) {
    for (int i = 0; i < n; ++i) {
      keys.push_back(base + static_cast<uint64_t>(i));
      tokens.push_back({static_cast<int32_t>(base), i, i * 3, 7});
    }
  }
  uint64_t parent(int i) const { return i == 0 ? 0 : keys[static_cast<size_t>(i - 1)]; }
  // Blocks [from, to) as the device evicts them: the chain's end first.
  std::vector<LowerKvTier::Evicted> evicted(int from, int to) const {
    std::vector<LowerKvTier::Evicted> e;
    for (int i = to - 1; i >= from; --i)
      e.push_back({first_block + i, keys[static_cast<size_t>(i)], parent(i), tokens[static_cast<size_t>(i)], i});
    return e;
  }
  std::vector<LowerKvTier::Probe> run() const {
    std::vector<LowerKvTier::Probe> r;
    for (size_t i = 0; i < keys.size(); ++i) r.push_back({keys[i], parent(static_cast<int>(i)), tokens[i]});
    return r;
  }
};

// Loads the chain's first n blocks into device blocks to, to + 1, ...; returns how many arrived.
int load_run(HostKvTier& tier, const Chain& chain, int n, int to, std::vector<uint8_t>* below = nullptr) {
  std::vector<int> blocks;
  for (int i = 0; i < n; ++i) blocks.push_back(to + i);
  std::vector<uint8_t> from_below(static_cast<size_t>(n), 0);
  uint64_t ticket = 0;
  const int started = tier.load(std::span<const uint64_t>(chain.keys).first(static_cast<size_t>(n)), blocks, &ticket,
                                from_below);
  if (below) *below = from_below;
  if (started == 0) return 0;
  int arrived = -1;
  while ((arrived = tier.loaded(ticket)) < 0) std::this_thread::yield();
  return arrived;
}

struct TierDir {
  std::filesystem::path path;
  TierDir() {
    path = std::filesystem::temp_directory_path() /
           ("peregrine_tier_" + std::to_string(::getpid()) + "_" + std::to_string(std::random_device{}()));
  }
  ~TierDir() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
  std::unique_ptr<DiskKvStore> store(const KvCacheConfig& cfg, uint64_t max_bytes = uint64_t{1} << 30) const {
    DiskKvStore::Config d;
    d.dir = path.string();
    d.max_bytes = max_bytes;
    d.identity = 7;
    d.block_size = cfg.block_size;
    d.payload_bytes = cfg.bytes_per_block();
    return std::make_unique<DiskKvStore>(d);
  }
};

// Until the copies into ring slots are handed to the disk tier (they are found there from then on).
void settle(HostKvTier& tier) {
  for (int i = 0; i < 100000 && tier.num_ring_pending() > 0; ++i) {
    tier.poll();
    std::this_thread::yield();
  }
  ASSERT_EQ(tier.num_ring_pending(), 0);
}

// A hit must start at a chain's first block: an eviction larger than the tier keeps the chain's first blocks, a
// chain evicted in two parts (its end first, as the device does) ends with its first blocks held, and a tier that
// must make room drops a chain from its end.
TEST_P(KvCacheOps, HostTierKeepsAChainsFirstBlocks) {
  const Case& c = GetParam();
  if (c.device == "cuda" && !ops::cuda_available()) GTEST_SKIP() << "no CUDA GPU visible";
  TierDevice dev(c);
  HostKvTier tier(*dev.backend, *dev.kv, 4);
  const Chain a(1000, 10, 0), b(2000, 2, 10);
  tier.keep(a.evicted(5, 10));  // blocks 5-9: the tier keeps 5-8
  EXPECT_EQ(tier.num_held(), 4);
  EXPECT_TRUE(tier.holds(a.keys[5]) && tier.holds(a.keys[8]) && !tier.holds(a.keys[9]));
  EXPECT_EQ(tier.stats().not_kept, 1u);
  tier.keep(a.evicted(0, 5));  // blocks 0-4: the tier ends with 0-3
  for (int i = 0; i < 4; ++i) EXPECT_TRUE(tier.holds(a.keys[static_cast<size_t>(i)])) << i;
  EXPECT_EQ(tier.count_held(a.run()), 4);
  tier.keep(b.evicted(0, 2));  // room for b: a loses its last held blocks, 3 and 2, not its first
  EXPECT_EQ(tier.count_held(a.run()), 2);
  EXPECT_EQ(tier.count_held(b.run()), 2);
  std::vector<uint8_t> below;
  EXPECT_EQ(load_run(tier, a, 2, 20, &below), 2);
  EXPECT_EQ(below, (std::vector<uint8_t>{0, 0}));
  EXPECT_TRUE(dev.same_as_original(20, 0));
  EXPECT_TRUE(dev.same_as_original(21, 1));
}

// Copies made ahead of need: blocks still cached on the device go down (copy_ahead); their eviction later costs no
// copy (keep finds them held), and the device writing them afterwards, even while the copy ahead may still run
// (the compute queue waits for it), never changes what the tier serves. A block copied ahead, evicted, written
// with new content and cached again under a new key goes down again; each key loads its own content back.
TEST_P(KvCacheOps, BlocksCopiedAheadAreEvictedWithoutACopyAndNeverServedStale) {
  const Case& c = GetParam();
  if (c.device == "cuda" && !ops::cuda_available()) GTEST_SKIP() << "no CUDA GPU visible";
  TierDevice dev(c);
  HostKvTier tier(*dev.backend, *dev.kv, 8);
  const Chain a(1000, 4, 0);
  auto ahead = a.evicted(0, 4);
  tier.copy_ahead(ahead);
  EXPECT_EQ(tier.stats().blocks_ahead, 4u);
  EXPECT_EQ(tier.stats().transfers_down, 1u);
  EXPECT_EQ(tier.count_held(a.run()), 4);
  tier.copy_ahead(ahead);  // held already: nothing more is copied
  EXPECT_EQ(tier.stats().transfers_down, 1u);
  // Evicted at once, the copy perhaps still running: no new copy; the blocks' new owner overwrites them on the
  // compute queue (blocks 0-3 := 10-13), after the copy.
  tier.keep(a.evicted(0, 4));
  EXPECT_EQ(tier.stats().transfers_down, 1u);
  EXPECT_EQ(tier.stats().blocks_down, 4u);
  EXPECT_EQ(tier.stats().evicted_held, 4u);
  const std::pair<int, int> overwrite[] = {{10, 0}, {11, 1}, {12, 2}, {13, 3}};
  dev.kv->copy_blocks(overwrite);
  EXPECT_EQ(load_run(tier, a, 4, 20), 4);
  for (int i = 0; i < 4; ++i) EXPECT_TRUE(dev.same_as_original(20 + i, i)) << "block " << i;
  EXPECT_TRUE(dev.same_as_original(0, 10));
  // Block 0 now holds block 10's content, cached under another key: offered ahead, it goes down as that content.
  const Chain b(2000, 1, 0);
  tier.copy_ahead(b.evicted(0, 1));
  EXPECT_EQ(tier.stats().blocks_ahead, 5u);
  EXPECT_EQ(load_run(tier, b, 1, 24), 1);
  EXPECT_TRUE(dev.same_as_original(24, 10));
  EXPECT_EQ(load_run(tier, a, 1, 25), 1);
  EXPECT_TRUE(dev.same_as_original(25, 0));
}

// A copy ahead never pushes the blocks of a load in flight out of their slots, and never goes past the slots: with
// every slot taken by a load, copy_ahead copies nothing (and nothing goes to the disk tier for it).
TEST_P(KvCacheOps, CopyAheadLeavesLoadsAloneAndStopsAtTheSlots) {
  const Case& c = GetParam();
  if (c.device == "cuda" && !ops::cuda_available()) GTEST_SKIP() << "no CUDA GPU visible";
  TierDevice dev(c);
  TierDir dir;
  HostKvTier tier(*dev.backend, *dev.kv, 2, dir.store(dev.cfg), /*staging_slots=*/3);
  const Chain a(1000, 2, 0), b(2000, 3, 4);
  tier.keep(a.evicted(0, 2));
  uint64_t ticket = 0;
  const int targets[] = {20, 21};
  std::vector<uint8_t> below(2, 0);
  ASSERT_EQ(tier.load(a.keys, targets, &ticket, below), 2);  // pins both slots until loaded()
  const uint64_t past_host = tier.stats().past_host;
  tier.copy_ahead(b.evicted(0, 3));
  EXPECT_EQ(tier.stats().blocks_ahead, 0u);
  EXPECT_EQ(tier.stats().past_host, past_host);
  EXPECT_EQ(tier.stats().not_kept, 0u);
  int arrived = -1;
  while ((arrived = tier.loaded(ticket)) < 0) std::this_thread::yield();
  EXPECT_EQ(arrived, 2);
  EXPECT_TRUE(dev.same_as_original(20, 0) && dev.same_as_original(21, 1));
  tier.copy_ahead(b.evicted(0, 3));  // the slots are free of the load now: the chain's first two go down
  EXPECT_EQ(tier.stats().blocks_ahead, 2u);
  EXPECT_TRUE(tier.holds(b.keys[0]) && tier.holds(b.keys[1]) && !tier.holds(b.keys[2]));
}

// With a disk tier every evicted block reaches it: what the host slots cannot take goes through the staging buffer
// (in rounds), and a lookup finds the whole chain (on disk, or still queued for it). A load of more blocks than the
// host tier has slots streams through them and comes back whole and bit-exact; a block whose file went bad ends the
// run there.
TEST_P(KvCacheOps, DiskTierTakesEveryEvictedBlockAndLoadsMoreThanTheHostHolds) {
  const Case& c = GetParam();
  if (c.device == "cuda" && !ops::cuda_available()) GTEST_SKIP() << "no CUDA GPU visible";
  TierDevice dev(c);
  TierDir dir;
  HostKvTier tier(*dev.backend, *dev.kv, 2, dir.store(dev.cfg), /*staging_slots=*/3);
  ASSERT_EQ(tier.num_staging_slots(), 3);
  const Chain a(1000, 10, 0), b(2000, 2, 10);
  tier.keep(a.evicted(0, 10));
  EXPECT_EQ(tier.num_held(), 2);
  EXPECT_TRUE(tier.holds(a.keys[0]) && tier.holds(a.keys[1]));
  EXPECT_EQ(tier.stats().past_host, 8u);
  EXPECT_EQ(tier.stats().not_kept, 0u);
  settle(tier);
  EXPECT_EQ(tier.count_held(a.run()), 10);  // found before or after its writes finished
  tier.keep(b.evicted(0, 2));  // b takes the slots; a's first blocks were written through
  tier.poll();
  EXPECT_FALSE(tier.holds(a.keys[0]));
  EXPECT_EQ(tier.count_held(a.run()), 10);
  std::vector<uint8_t> below;
  EXPECT_EQ(load_run(tier, a, 10, 12, &below), 10);
  EXPECT_EQ(below, std::vector<uint8_t>(10, 1));
  for (int i = 0; i < 10; ++i) EXPECT_TRUE(dev.same_as_original(12 + i, i)) << "block " << i;
  EXPECT_EQ(tier.stats().disk_loads, 10u);
  EXPECT_GT(tier.stats().disk_load_seconds, 0.0);
  EXPECT_GE(tier.stats().transfers_up, 5u);  // two slots: five rounds at least
  EXPECT_LE(tier.num_held(), 2);
  // Block 5's file corrupted: a load of the chain stops before it, the file is dropped, nothing bad is served.
  tier.disk()->flush();
  char name[32];
  std::snprintf(name, sizeof name, "/%016llx.kv", static_cast<unsigned long long>(a.keys[5]));
  const std::string file = tier.disk()->path() + name;
  ASSERT_TRUE(std::filesystem::exists(file)) << file;
  {
    std::fstream f(file, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(-2, std::ios::end);
    f.put('\x3c');
  }
  const Chain c2(3000, 2, 14);
  tier.keep(c2.evicted(0, 2));  // the slots go to another chain, so a's blocks come from disk
  EXPECT_EQ(load_run(tier, a, 10, 20), 5);
  for (int i = 0; i < 5; ++i) EXPECT_TRUE(dev.same_as_original(20 + i, i)) << "block " << i;
  EXPECT_EQ(tier.disk()->stats().dropped_bad, 1u);
  EXPECT_EQ(tier.count_held(a.run()), 5);
}

// Evicted blocks past the host slots go to the disk through the ring (pinned slots lent to its write queue: no
// wait on the engine thread); what finds no ring slot takes the staging rounds. Every block loads back bit-exact.
TEST_P(KvCacheOps, BlocksPastTheHostGoThroughTheRingThenTheStaging) {
  const Case& c = GetParam();
  if (c.device == "cuda" && !ops::cuda_available()) GTEST_SKIP() << "no CUDA GPU visible";
  TierDevice dev(c);
  TierDir dir;
  HostKvTier tier(*dev.backend, *dev.kv, 2, dir.store(dev.cfg), /*staging_slots=*/3, /*ring_slots=*/4);
  ASSERT_EQ(tier.num_ring_slots(), 4);
  const Chain a(1000, 10, 0);
  tier.keep(a.evicted(0, 10));  // 2 into host slots, 4 through the ring, 4 in staging rounds
  EXPECT_EQ(tier.stats().past_host, 8u);
  EXPECT_EQ(tier.stats().transfers_down, 1u + 1u + 2u);
  settle(tier);
  tier.disk()->flush();  // the ring's slots come back once written
  EXPECT_EQ(tier.count_held(a.run()), 10);
  EXPECT_EQ(load_run(tier, a, 10, 12), 10);
  for (int i = 0; i < 10; ++i) EXPECT_TRUE(dev.same_as_original(12 + i, i)) << "block " << i;
  // The ring's slots came back: another chain goes through it again.
  const Chain b(2000, 6, 22);
  const uint64_t transfers = tier.stats().transfers_down;
  tier.keep(b.evicted(0, 6));
  EXPECT_EQ(tier.stats().transfers_down, transfers + 2u);  // host slots + the ring, no staging round
}

// Copies ahead to the disk (a host tier small beside the window): the blocks go down through the ring while still
// cached on the device; their eviction then copies nothing past the host, the device overwrites them at once, and
// they load back as they were. A tier destroyed with ring copies in flight hands them to the disk first: a tier
// opened again on the folder (a restart) finds them and loads them exact.
TEST_P(KvCacheOps, CopiesAheadToTheDiskAreEvictedWithoutACopyAndSurviveTheTier) {
  const Case& c = GetParam();
  if (c.device == "cuda" && !ops::cuda_available()) GTEST_SKIP() << "no CUDA GPU visible";
  TierDevice dev(c);
  TierDir dir;
  const Chain a(1000, 6, 0), b(2000, 3, 8);
  {
    HostKvTier tier(*dev.backend, *dev.kv, 1, dir.store(dev.cfg), /*staging_slots=*/2, /*ring_slots=*/8);
    tier.set_ahead_to_disk(true);
    EXPECT_TRUE(tier.copy_ahead(a.evicted(0, 6)));
    EXPECT_EQ(tier.stats().blocks_ahead, 6u);
    EXPECT_EQ(tier.num_held(), 0);  // nothing in host slots
    settle(tier);
    EXPECT_EQ(tier.count_held(a.run()), 6);
    const uint64_t transfers = tier.stats().transfers_down;
    tier.keep(a.evicted(0, 6));  // the first block into the host slot; the rest are on disk already
    EXPECT_EQ(tier.stats().transfers_down, transfers + 1u);
    EXPECT_EQ(tier.stats().past_host, 0u);
    const std::pair<int, int> overwrite[] = {{20, 0}, {21, 1}, {22, 2}, {23, 3}, {24, 4}, {25, 5}};
    dev.kv->copy_blocks(overwrite);
    EXPECT_EQ(load_run(tier, a, 6, 12), 6);
    for (int i = 0; i < 6; ++i) EXPECT_TRUE(dev.same_as_original(12 + i, i)) << "block " << i;
    // A ring with 8 slots, 6 of them perhaps still lent: a window larger than what is free reports it.
    tier.disk()->flush();
    EXPECT_TRUE(tier.copy_ahead(b.evicted(0, 3)));  // then destroyed with these copies perhaps in flight
  }
  HostKvTier again(*dev.backend, *dev.kv, 1, dir.store(dev.cfg), 2, 8);
  EXPECT_EQ(again.count_held(b.run()), 3);
  EXPECT_EQ(load_run(again, b, 3, 26), 3);
  for (int i = 0; i < 3; ++i) EXPECT_TRUE(dev.same_as_original(26 + i, 8 + i)) << "block " << i;
  EXPECT_EQ(again.disk()->stats().dropped_bad, 0u);
}

// A copy ahead to the disk that finds every ring slot lent says so, so the blocks are offered again later.
TEST_P(KvCacheOps, ACopyAheadWithNoRingSlotFreeSaysSo) {
  const Case& c = GetParam();
  if (c.device == "cuda" && !ops::cuda_available()) GTEST_SKIP() << "no CUDA GPU visible";
  TierDevice dev(c);
  TierDir dir;
  HostKvTier tier(*dev.backend, *dev.kv, 1, dir.store(dev.cfg), 2, /*ring_slots=*/2);
  tier.set_ahead_to_disk(true);
  const Chain a(1000, 4, 0);
  EXPECT_FALSE(tier.copy_ahead(a.evicted(0, 4)));  // two of four
  EXPECT_EQ(tier.stats().blocks_ahead, 2u);
  settle(tier);
  tier.disk()->flush();
  EXPECT_TRUE(tier.copy_ahead(a.evicted(0, 4)));  // the other two; the first two are on disk already
  EXPECT_EQ(tier.stats().blocks_ahead, 4u);
  settle(tier);
  EXPECT_EQ(tier.count_held(a.run()), 4);
  EXPECT_EQ(load_run(tier, a, 4, 12), 4);
  for (int i = 0; i < 4; ++i) EXPECT_TRUE(dev.same_as_original(12 + i, i)) << "block " << i;
}

// A disk tier bounded below the chain: it drops its oldest files, which are the chain's last blocks (they go down
// first), so what stays is a leading run; that run loads back bit-exact and no bad file is ever met.
TEST_P(KvCacheOps, AFullDiskTierKeepsAChainsFirstBlocks) {
  const Case& c = GetParam();
  if (c.device == "cuda" && !ops::cuda_available()) GTEST_SKIP() << "no CUDA GPU visible";
  TierDevice dev(c);
  TierDir dir;
  const uint64_t file_bytes = 56 + sizeof(int32_t) * static_cast<uint64_t>(dev.cfg.block_size) + dev.cfg.bytes_per_block();
  HostKvTier tier(*dev.backend, *dev.kv, 2, dir.store(dev.cfg, 5 * file_bytes), /*staging_slots=*/3);
  const Chain a(1000, 10, 0), b(2000, 2, 10);
  tier.keep(a.evicted(0, 10));
  tier.keep(b.evicted(0, 2));  // a's first blocks leave the host for the disk
  // Until every copy-down has reached the disk (a slow device, e.g. under compute-sanitizer, finishes them later
  // than the first poll).
  for (int i = 0; i < 10000 && tier.busy(); ++i) {
    tier.poll();
    tier.disk()->flush();
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
  ASSERT_FALSE(tier.busy());
  const DiskKvStore::Stats d = tier.disk()->stats();
  EXPECT_EQ(d.held_blocks, 5u);
  EXPECT_LE(d.held_bytes, 5 * file_bytes);
  EXPECT_EQ(d.evicted, 7u);  // 12 written, 5 kept: a's 0-2 and b's two
  EXPECT_EQ(tier.count_held(a.run()), 3);
  EXPECT_EQ(load_run(tier, a, 3, 20), 3);
  for (int i = 0; i < 3; ++i) EXPECT_TRUE(dev.same_as_original(20 + i, i)) << "block " << i;
  EXPECT_EQ(tier.disk()->stats().dropped_bad, 0u);
  EXPECT_EQ(tier.count_held(b.run()), 2);
  // A load still in flight when the tier goes (an engine shut down meanwhile): nothing is left running.
  const int targets[] = {24, 25, 26};
  uint64_t ticket = 0;
  uint8_t below[3] = {};
  EXPECT_EQ(tier.load(std::span<const uint64_t>(a.keys).first(3), targets, &ticket, below), 3);
}

// A disk slower than recomputing: a lookup leaves the run's blocks on disk to be recomputed (the host's leading
// blocks still count), but one such lookup in 16 reads anyway; a fast disk is always read. The disk's rate is
// measured from the loads that read it.
TEST_P(KvCacheOps, ADiskSlowerThanRecomputingIsSkipped) {
  const Case& c = GetParam();
  if (c.device == "cuda" && !ops::cuda_available()) GTEST_SKIP() << "no CUDA GPU visible";
  TierDevice dev(c);
  TierDir dir;
  HostKvTier tier(*dev.backend, *dev.kv, 2, dir.store(dev.cfg), 3, 4);
  const Chain a(1000, 8, 0);
  tier.keep(a.evicted(0, 8));  // 0-1 in the host slots, 2-7 to the disk
  settle(tier);
  EXPECT_EQ(tier.count_held(a.run()), 8);  // rates unknown: never skipped
  EXPECT_EQ(load_run(tier, a, 8, 12), 8);
  EXPECT_GT(tier.disk_read_rate(), 0.0);  // measured by that load
  const double slot = static_cast<double>(dev.cfg.bytes_per_block());
  tier.set_disk_read_rate(slot);           // a block a second
  tier.set_recompute_rate(4 * 1000.0);     // a block of 4 tokens in a millisecond
  int lead = 0;  // the run's leading blocks in host slots (the load left the last ones it read there)
  while (lead < 8 && tier.holds(a.keys[static_cast<size_t>(lead)])) ++lead;
  ASSERT_LT(lead, 8);
  int skipped = 0;
  for (int i = 0; i < 16; ++i) {
    const int held = tier.count_held(a.run());
    EXPECT_TRUE(held == lead || held == 8) << held;
    skipped += held == lead ? 1 : 0;
  }
  EXPECT_EQ(skipped, 15);
  EXPECT_EQ(tier.stats().disk_skipped, 15u * static_cast<uint64_t>(8 - lead));
  tier.set_disk_read_rate(slot * 1e6);  // a fast disk
  EXPECT_EQ(tier.count_held(a.run()), 8);
}

// Random work over the tier, each served block checked: device blocks are given content (copied from fixed source
// blocks) under fresh keys, copied ahead, evicted and at once overwritten by their next owner, and loaded back from
// the host slots, the ring's queued writes or the disk, with copies ahead into the slots or to the disk. Whatever
// arrives must be exactly the content its key was given; nothing may be served that the device wrote later.
TEST_P(KvCacheOps, RandomTierWorkNeverServesStaleBlocks) {
  const Case& c = GetParam();
  if (c.device == "cuda" && !ops::cuda_available()) GTEST_SKIP() << "no CUDA GPU visible";
  for (int trial = 0; trial < 4; ++trial) {
    TierDevice dev(c);  // blocks 0-15: cached blocks; 16-23: load targets; 24-31: sources, never written
    TierDir dir;
    HostKvTier tier(*dev.backend, *dev.kv, 3, dir.store(dev.cfg), /*staging_slots=*/2, /*ring_slots=*/3);
    tier.set_ahead_to_disk(trial % 2 == 1);
    std::mt19937 rng(static_cast<uint32_t>(100 + trial));
    auto pick = [&](int n) { return static_cast<int>(rng() % static_cast<uint32_t>(n)); };
    std::map<uint64_t, int> source_of;       // key -> the source block its content came from
    std::vector<uint64_t> cached(16, 0);     // device block -> its key (0: none)
    std::vector<std::vector<int32_t>> tokens_of(16);
    std::vector<uint64_t> evicted_keys;
    uint64_t next_key = 1;
    int served = 0;
    auto evicted_of = [&](int b) {
      return LowerKvTier::Evicted{b, cached[static_cast<size_t>(b)], 0, tokens_of[static_cast<size_t>(b)], 0};
    };
    for (int op = 0; op < 300; ++op) {
      const int b = pick(16);
      switch (pick(5)) {
        case 0: {  // give a free block new content under a new key
          if (cached[static_cast<size_t>(b)] != 0) break;
          const int src = 24 + pick(8);
          const std::pair<int, int> copy[] = {{src, b}};
          dev.kv->copy_blocks(copy);
          const uint64_t key = next_key++;
          source_of[key] = src;
          cached[static_cast<size_t>(b)] = key;
          tokens_of[static_cast<size_t>(b)] = {static_cast<int32_t>(key), 1, 2, 3};
          break;
        }
        case 1: {  // copy ahead the cached blocks among a window
          std::vector<LowerKvTier::Evicted> window;
          for (int i = 0; i < 16; ++i)
            if (cached[static_cast<size_t>(i)] != 0 && pick(2) == 0) window.push_back(evicted_of(i));
          tier.copy_ahead(window);
          break;
        }
        case 2: {  // evict, then the next owner overwrites the block at once
          if (cached[static_cast<size_t>(b)] == 0) break;
          const LowerKvTier::Evicted e[] = {evicted_of(b)};
          tier.keep(e);
          evicted_keys.push_back(cached[static_cast<size_t>(b)]);
          cached[static_cast<size_t>(b)] = 0;
          const std::pair<int, int> overwrite[] = {{24 + pick(8), b}};
          dev.kv->copy_blocks(overwrite);
          break;
        }
        case 3: {  // load an evicted key back, if the tier still has it
          if (evicted_keys.empty()) break;
          const uint64_t key = evicted_keys[static_cast<size_t>(pick(static_cast<int>(evicted_keys.size())))];
          const std::vector<int32_t> toks{static_cast<int32_t>(key), 1, 2, 3};
          const LowerKvTier::Probe probe[] = {{key, 0, toks}};
          if (tier.count_held(probe) != 1) break;
          const uint64_t keys[] = {key};
          const int target[] = {16 + pick(8)};
          uint64_t ticket = 0;
          uint8_t below[1] = {0};
          if (tier.load(keys, target, &ticket, below) != 1) break;
          int arrived = -1;
          while ((arrived = tier.loaded(ticket)) < 0) std::this_thread::yield();
          if (arrived == 1) {
            ASSERT_TRUE(dev.same_as_original(target[0], source_of[key]))
                << "trial " << trial << " op " << op << ": key " << key << " served stale content";
            ++served;
          }
          break;
        }
        default:
          tier.poll();
          if (pick(4) == 0) tier.disk()->flush();
      }
    }
    EXPECT_GT(served, 10) << "trial " << trial;
    EXPECT_GT(tier.stats().blocks_ahead, 0u) << "trial " << trial;
    EXPECT_GT(tier.stats().disk_loads, 0u) << "trial " << trial;
    EXPECT_EQ(tier.disk()->stats().dropped_bad, 0u);
  }
}

INSTANTIATE_TEST_SUITE_P(Backends, KvCacheOps,
                         ::testing::Values(Case{"ref", DType::kF32, 0}, Case{"ref", DType::kBF16, 1},
                                           Case{"cpu", DType::kF32, 0}, Case{"cpu", DType::kBF16, 1},
                                           Case{"cuda", DType::kBF16, 0}, Case{"cuda", DType::kF16, 1}),
                         case_name);

}  // namespace
}  // namespace peregrine::engine
