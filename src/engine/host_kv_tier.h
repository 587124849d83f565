// HostKvTier: the prefix cache's host-memory tier. Cached device blocks that the block pool reuses are copied
// down into pinned host slots (one slot holds a block of every layer contiguously; all blocks evicted together go
// in one asynchronous transfer), stay findable by their prefix-cache identity, and are copied back into fresh
// device blocks on a hit. A hit must start at a chain's first block, so a chain's earlier blocks are worth more:
// of an eviction larger than the free slots the slots take the earliest blocks, and a slot is reused least
// recently used first among the blocks no held block continues (a chain is dropped from its end). Transfers run on
// the backend's copy queue, in order, after the work enqueued before them; the compute queue waits for a copy-down
// before it overwrites the blocks and for a load before it reads them, so the host never blocks on either.
// Copies are also made ahead of need (copy_ahead: the cached blocks the device pool evicts next, while they are
// still cached there), so an eviction of a block a slot already holds copies nothing, and a hit's load, whose
// allocation evicts such blocks, starts its copy up at once instead of behind their copy down.
//
// With a disk tier (disk_kv_store.h) every evicted block reaches the disk: the blocks in slots are written through
// once their copy is done, and the blocks the slots do not take go straight from the device to the disk through a
// small pinned staging buffer (in rounds when there are more of them; the engine thread waits for those copies; a
// full write queue drops its oldest writes rather than make it wait). A lookup the host misses
// continues on the disk (queued writes included); those blocks are read into host slots on the disk tier's reader
// threads and copied up from there, in rounds through the slots when a load is larger than the slots that are free.
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <list>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "engine/disk_kv_store.h"
#include "engine/kv_cache.h"
#include "engine/kv_cache_manager.h"

namespace peregrine::engine {

class HostKvTier final : public LowerKvTier {
 public:
  // A copy up goes as this many transfers, one per group of layers (loads overlapped with the prefill).
  static constexpr int kLayerGroups = 8;
  struct Stats {
    uint64_t blocks_down = 0, blocks_up = 0;  // blocks copied to host (slots and staging), loaded back
    uint64_t bytes_down = 0, bytes_up = 0;
    uint64_t transfers_down = 0, transfers_up = 0;
    uint64_t hits = 0, dropped = 0;  // blocks lookups found; blocks pushed out of the slots
    uint64_t disk_loads = 0;         // blocks read back from the disk tier (then loaded like host blocks)
    uint64_t past_host = 0;          // evicted blocks that went to the disk tier through the staging buffer
    uint64_t not_kept = 0;           // evicted blocks no tier took (no disk tier, and no slot free of loads)
    uint64_t blocks_ahead = 0;       // of blocks_down: copied ahead of their eviction (copy_ahead)
    uint64_t evicted_held = 0;       // evicted blocks a slot already held (copied ahead, or earlier): no copy
    double wait_seconds = 0;         // the engine thread waited for the staging buffer's copies
    double evict_seconds = 0;        // the engine thread's time in keep() (copies enqueued, staging, disk queue)
    uint64_t disk_skipped = 0;       // blocks on disk a lookup left to be recomputed (faster than reading them)
    double disk_load_seconds = 0;    // loads that read from the disk: from load() until every copy up was enqueued
  };

  // `num_slots` blocks of `kv`'s layout in pinned memory of kv's backend; with `disk`, every evicted block is also
  // written there (in the background), and blocks the host no longer holds are read back. `staging_slots` sizes
  // the disk's staging buffer (0: 64 MiB worth, 1 to 256 blocks).
  // ring_slots sizes the pinned ring whose slots are lent to the disk's write queue (0: 1 GiB worth, 1 to 1,024
  // blocks; -1: none).
  HostKvTier(ops::Backend& backend, KvCache& kv, int num_slots, std::unique_ptr<DiskKvStore> disk = nullptr,
             int staging_slots = 0, int ring_slots = 0);
  ~HostKvTier() override;  // waits for its loads' copies and hands the copies still in flight to the disk tier

  void keep(std::span<const Evicted> blocks) override;
  // Into host slots only (never past them to the disk): a block copied ahead goes on to the disk tier like any
  // block in a slot.
  bool copy_ahead(std::span<const Evicted> blocks) override;
  int count_held(std::span<const Probe> run) override;
  // Blocks the host holds are copied up at the first loaded() (or order_on_device()); blocks only the disk holds
  // are first read into host slots on the disk tier's reader thread (loaded() copies them up as their reads come
  // back), so no disk read runs on the engine loop.
  int load(std::span<const uint64_t> keys, std::span<const int> blocks, uint64_t* ticket,
           std::span<uint8_t> from_below) override;
  int loaded(uint64_t ticket) override;
  bool order_on_device(uint64_t ticket) override;

  // Hands blocks whose copy-down finished to the disk tier (called once per engine step, and while the engine is
  // idle as long as busy()).
  void poll();
  // Copy-downs still to hand to the disk tier, loads not yet answered, or disk writes still queued.
  bool busy() const {
    return !to_disk_.empty() || !loads_.empty() || !ring_pending_.empty() || (disk_ && disk_->num_queued() > 0);
  }
  // With a disk tier: copy_ahead sends blocks to the disk (through the ring) instead of into host slots (for a
  // host tier small beside the copy-ahead window).
  void set_ahead_to_disk(bool on) { ahead_to_disk_ = on && disk_ && ring_; }
  // A step made to wait for a load (order_on_device) waits layer by layer (KvCache::wait_before_layer) instead of
  // for the whole load before it starts.
  void set_layered_loads(bool on) { layered_ = on; }
  // Skipping the disk where recomputing is faster: a lookup leaves a run's blocks on disk to be recomputed when
  // reading them at the measured disk rate (bytes a second of the loads that read from it; the setter for tests)
  // would take over 1.25x as long as recomputing their tokens at the engine's measured prefill rate (tokens a second;
  // 0: unknown, never skip). One such lookup in 16 reads anyway, so a disk that got faster (a warm page cache) is
  // measured again.
  void set_recompute_rate(double tokens_per_second) { recompute_rate_ = tokens_per_second; }
  void set_disk_read_rate(double bytes_per_second) { disk_rate_ = bytes_per_second; }
  double disk_read_rate() const { return disk_rate_; }
  int num_ring_slots() const { return ring_ ? ring_->num_slots() : 0; }
  int num_ring_pending() const { return static_cast<int>(ring_pending_.size()); }  // copies not yet handed down
  int num_pinned() const { return num_pinned_; }  // slots loads (or a transfer being built) hold where they are
  const DiskKvStore* disk() const { return disk_.get(); }
  DiskKvStore* disk() { return disk_.get(); }

  int num_slots() const { return host_.num_slots(); }
  int num_held() const { return static_cast<int>(by_key_.size()); }
  int num_staging_slots() const { return staging_ ? staging_->num_slots() : 0; }
  // Whether a slot holds this block (tests; marks nothing).
  bool holds(uint64_t key) const { return by_key_.count(key) > 0; }
  const Stats& stats() const { return stats_; }

 private:
  struct Slot {
    uint64_t key = 0, parent_key = 0;
    std::vector<int32_t> tokens;
    int depth = 0;  // its index in its chain (the disk's full queue drops the deepest first)
    bool used = false;
    int pins = 0;                  // loads (and the transfer being built) that need its content where it is
    bool to_disk = false;          // its copy-down has yet to reach the disk tier
    uint64_t ticket = 0;           // the last transfer into or out of it
    std::list<int>::iterator lru;  // position in lru_ while used
  };
  // A free slot, or the least recently used unpinned one that no held block continues (else the least recently
  // used unpinned one), dropped; -1 when every slot is pinned. With idle_only, slots whose last transfer is still
  // running are passed over too.
  int take_slot(bool idle_only = false);
  // keep() (ahead = false) and copy_ahead(): copies the blocks no slot holds into slots (and, evicting, the rest
  // past them to the disk tier); evicting, a block a slot already holds costs no copy.
  // Returns whether every block found room (or was held already).
  bool copy_down(std::span<const Evicted> blocks, bool ahead);
  void drop(int slot);  // writes it through, then forgets it
  void hold(int slot, uint64_t key, uint64_t parent_key, std::span<const int32_t> tokens, int depth = 0);
  int holding(uint64_t key, uint64_t parent_key, std::span<const int32_t> tokens) const;  // its slot, or -1
  void pin(int slot);
  void unpin(int slot);
  void write_through(int slot);  // waits for the slot's copy-down, then queues it for the disk tier
  // Copies the blocks to the disk tier (deepest first), skipping those it holds: into free ring slots, lent to its
  // write queue once the copy is done (poll), with no wait; evicting, what finds no ring slot then goes through the
  // staging buffer in rounds (the engine thread waits for each round's copy). Ahead, what finds no slot is skipped.
  // Returns whether every block was taken (or held already).
  bool stage_to_disk(const std::vector<const Evicted*>& blocks, bool ahead = false);
  int take_ring_slot();  // -1 when none is free
  void hand_ring_to_disk(bool wait);  // lends the ring copies that are done (all, waiting, with wait) to the disk

  // A load in progress. Its parts are taken in chain order: [0, issued) are copied up (or on their way);
  // [issued, frontier) have their content pinned in a host slot (held there, or being read into it from disk);
  // the parts from frontier on wait for a slot. A read that fails ends the load before its part (end).
  struct Part {
    uint64_t key = 0;
    int slot = -1;      // while in [issued, frontier)
    uint64_t read = 0;  // the disk read into slot, until its result is taken
    bool from_disk = false;  // not in a slot when the load started
  };
  struct Load {
    std::vector<Part> parts;
    std::vector<int> blocks;
    int issued = 0, frontier = 0, end = 0;
    std::vector<uint64_t> transfers;  // its copies up
    std::vector<std::pair<int, uint64_t>> layer_transfers;  // the same, with the first layer each one copies
    std::chrono::steady_clock::time_point start;
    bool timed = false;  // its disk_load_seconds counted
  };
  void advance(Load& load, bool issue = true);  // never blocks; without issue, enqueues no copy up
  void release_disk(const Load& load);          // the disk may drop the load's blocks again
  bool finished(Load& load);

  KvCache& kv_;
  HostKvBuffer host_;
  std::unique_ptr<HostKvBuffer> staging_;  // with a disk tier
  std::unordered_map<uint64_t, Load> loads_;
  uint64_t next_load_ = 0;
  std::vector<Slot> slots_;
  std::unordered_map<uint64_t, int> by_key_;
  std::unordered_map<uint64_t, int> children_;  // key -> held blocks whose parent it is
  std::list<int> lru_;  // used slots, least recently used first
  std::vector<int> free_;
  int num_pinned_ = 0;
  std::vector<int> to_disk_;  // slots whose copy-down is queued for the disk tier
  // The ring (with a disk tier): pinned slots lent to the disk's write queue. A slot comes back (on whichever
  // thread lets its lease go) once its block is written or dropped.
  struct RingReturns {
    std::mutex m;
    std::vector<int> slots;
  };
  struct RingCopy {
    int slot;
    uint64_t ticket, key, parent_key;
    std::vector<int32_t> tokens;
    int depth;
  };
  std::unique_ptr<HostKvBuffer> ring_;
  std::vector<int> ring_free_;
  std::shared_ptr<RingReturns> ring_returned_ = std::make_shared<RingReturns>();
  std::deque<RingCopy> ring_pending_;       // copies into ring slots not yet lent to the disk, in order
  std::unordered_map<uint64_t, uint64_t> ring_keys_;  // their keys, with their copies' tickets
  bool ahead_to_disk_ = false;
  bool layered_ = false;
  double recompute_rate_ = 0, disk_rate_ = 0;
  uint64_t skip_decisions_ = 0;
  std::unique_ptr<DiskKvStore> disk_;  // after host_ and ring_: destroyed first, so nothing it runs touches freed slots
  Stats stats_;
};

}  // namespace peregrine::engine
