// HostKvTier: the prefix cache's host-memory tier. Cached device blocks that the block pool reuses are copied
// down into pinned host slots (one slot holds a block of every layer contiguously; all blocks evicted together go
// in one asynchronous transfer), stay findable by their prefix-cache identity, and are copied back into fresh
// device blocks on a hit. Slots are reused least recently used first. Transfers run on the backend's copy queue,
// in order, after the work enqueued before them; the compute queue waits for a copy-down before it overwrites the
// blocks and for a load before it reads them, so the host never blocks on either. With a disk tier
// (disk_kv_store.h) every block copied down is also written to disk once its copy is done, and a lookup the host
// tier misses continues there (read into a host slot, then loaded like the others).
#pragma once

#include <cstdint>
#include <list>
#include <memory>
#include <unordered_map>
#include <vector>

#include "engine/disk_kv_store.h"
#include "engine/kv_cache.h"
#include "engine/kv_cache_manager.h"

namespace peregrine::engine {

class HostKvTier final : public LowerKvTier {
 public:
  struct Stats {
    uint64_t blocks_down = 0, blocks_up = 0;  // blocks copied to host, loaded back
    uint64_t bytes_down = 0, bytes_up = 0;
    uint64_t transfers_down = 0, transfers_up = 0;
    uint64_t hits = 0, dropped = 0;  // lookups that found a block; blocks pushed out of the tier
    uint64_t disk_loads = 0;         // blocks read back from the disk tier (then loaded like host blocks)
  };

  // `num_slots` blocks of `kv`'s layout in pinned memory of kv's backend; with `disk`, every block that comes down
  // is also written there (write-through, in the background), and blocks the host no longer holds are read back.
  HostKvTier(ops::Backend& backend, KvCache& kv, int num_slots, std::unique_ptr<DiskKvStore> disk = nullptr);
  ~HostKvTier() override;  // hands the copies still in flight to the disk tier

  void keep(std::span<const Evicted> blocks) override;
  bool contains(uint64_t key, uint64_t parent_key, std::span<const int32_t> tokens) override;
  // Blocks the host holds are copied up at once; blocks only the disk holds are first read into host slots on the
  // disk tier's reader thread (loaded() copies them up once every read is back), so no disk read runs on the
  // engine loop.
  int load(std::span<const uint64_t> keys, std::span<const int> blocks, uint64_t* ticket) override;
  int loaded(uint64_t ticket) override;
  bool order_on_device(uint64_t ticket) override;

  // Hands blocks whose copy-down finished to the disk tier (called once per engine step).
  void poll();
  const DiskKvStore* disk() const { return disk_.get(); }
  DiskKvStore* disk() { return disk_.get(); }

  int num_slots() const { return host_.num_slots(); }
  int num_held() const { return static_cast<int>(by_key_.size()); }
  const Stats& stats() const { return stats_; }

 private:
  struct Slot {
    uint64_t key = 0, parent_key = 0;
    std::vector<int32_t> tokens;
    bool used = false;
    bool pinned = false;        // part of the load being built
    bool to_disk = false;       // its copy-down has yet to reach the disk tier
    uint64_t ticket = 0;        // the last transfer into or out of it
    std::list<int>::iterator lru;  // position in lru_ while used
  };
  // A free slot, or the least recently used one (dropped; -1 when that one is pinned).
  int take_slot();
  void write_through(int slot);  // waits for the slot's copy-down, then queues it for the disk tier

  // A load in progress: its host slots (pinned until the copy up is enqueued), the disk reads into some of them
  // (0: the host held it), the device blocks, and once enqueued the transfer and how many leading blocks it carries.
  struct Load {
    std::vector<int> slots;
    std::vector<uint64_t> reads;
    std::vector<uint64_t> keys;
    std::vector<int> blocks;
    bool issued = false;
    uint64_t transfer = 0;
    int count = 0;
  };
  void issue(Load& load);  // every read is back: keep what was read, copy the good leading run up

  KvCache& kv_;
  HostKvBuffer host_;
  std::unordered_map<uint64_t, Load> loads_;
  uint64_t next_load_ = 0;
  std::vector<Slot> slots_;
  std::unordered_map<uint64_t, int> by_key_;
  std::list<int> lru_;  // used slots, least recently used first
  std::vector<int> free_;
  std::vector<int> to_disk_;  // slots whose copy-down is queued for the disk tier
  std::unique_ptr<DiskKvStore> disk_;
  Stats stats_;
};

}  // namespace peregrine::engine
