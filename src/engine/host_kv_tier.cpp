// HostKvTier (see host_kv_tier.h).
#include "engine/host_kv_tier.h"

#include <algorithm>

namespace peregrine::engine {

HostKvTier::HostKvTier(ops::Backend& backend, KvCache& kv, int num_slots, std::unique_ptr<DiskKvStore> disk)
    : kv_(kv), host_(backend, kv.config(), num_slots), slots_(static_cast<size_t>(num_slots)), disk_(std::move(disk)) {
  for (int s = num_slots - 1; s >= 0; --s) free_.push_back(s);
}

HostKvTier::~HostKvTier() {
  for (int s : to_disk_) write_through(s);
}

void HostKvTier::write_through(int s) {
  Slot& slot = slots_[static_cast<size_t>(s)];
  if (!slot.to_disk) return;
  kv_.wait(slot.ticket);
  slot.to_disk = false;
  if (slot.used && disk_) disk_->put(slot.key, slot.parent_key, slot.tokens, host_.slot(s));
}

void HostKvTier::poll() {
  if (to_disk_.empty()) return;
  size_t kept = 0;
  for (int s : to_disk_) {
    Slot& slot = slots_[static_cast<size_t>(s)];
    if (!slot.to_disk) continue;
    if (kv_.transfer_done(slot.ticket)) {
      write_through(s);
    } else {
      to_disk_[kept++] = s;
    }
  }
  to_disk_.resize(kept);
}

int HostKvTier::take_slot() {
  if (!free_.empty()) {
    const int s = free_.back();
    free_.pop_back();
    return s;
  }
  const int s = lru_.front();
  Slot& old = slots_[static_cast<size_t>(s)];
  if (old.pinned) return -1;
  write_through(s);
  by_key_.erase(old.key);
  lru_.erase(old.lru);
  old.used = false;
  ++stats_.dropped;
  return s;
}

void HostKvTier::keep(std::span<const Evicted> blocks) {
  if (host_.num_slots() == 0 || blocks.empty()) return;
  std::vector<int> device, host;
  for (const Evicted& e : blocks) {
    if (by_key_.count(e.key)) continue;  // already held (an earlier copy of the same content)
    const int s = take_slot();
    if (s < 0) break;  // every slot holds one of this call's blocks: the rest are not kept
    Slot& slot = slots_[static_cast<size_t>(s)];
    slot.pinned = true;  // one transfer must not write a slot twice (its copies run in no set order)
    slot.key = e.key;
    slot.parent_key = e.parent_key;
    slot.tokens.assign(e.tokens.begin(), e.tokens.end());
    slot.used = true;
    slot.lru = lru_.insert(lru_.end(), s);
    by_key_[e.key] = s;
    device.push_back(e.block);
    host.push_back(s);
  }
  for (int s : host) slots_[static_cast<size_t>(s)].pinned = false;
  if (device.empty()) return;
  const uint64_t ticket = kv_.swap_out(device, host_, host);
  kv_.compute_waits_for(ticket);  // the blocks' next owners write them only after the copy
  for (int s : host) {
    Slot& slot = slots_[static_cast<size_t>(s)];
    slot.ticket = ticket;
    if (disk_) {
      slot.to_disk = true;
      to_disk_.push_back(s);
    }
  }
  poll();  // host backends copy at once: straight to the disk queue
  ++stats_.transfers_down;
  stats_.blocks_down += device.size();
  stats_.bytes_down += device.size() * host_.slot_bytes();
}

bool HostKvTier::contains(uint64_t key, uint64_t parent_key, std::span<const int32_t> tokens) {
  auto it = by_key_.find(key);
  if (it == by_key_.end()) {
    if (disk_ && disk_->contains(key, parent_key, tokens)) {
      ++stats_.hits;
      return true;
    }
    return false;
  }
  Slot& slot = slots_[static_cast<size_t>(it->second)];
  if (slot.parent_key != parent_key || !std::equal(tokens.begin(), tokens.end(), slot.tokens.begin(), slot.tokens.end()))
    return false;
  lru_.splice(lru_.end(), lru_, slot.lru);
  ++stats_.hits;
  return true;
}

int HostKvTier::load(std::span<const uint64_t> keys, std::span<const int> blocks, uint64_t* ticket_out) {
  *ticket_out = 0;
  Load load;
  for (uint64_t key : keys) {
    if (load.slots.size() >= blocks.size()) break;
    auto it = by_key_.find(key);
    int s = -1;
    uint64_t read = 0;
    if (it != by_key_.end()) {
      s = it->second;
      lru_.splice(lru_.end(), lru_, slots_[static_cast<size_t>(s)].lru);
    } else if (disk_) {
      // Read back from disk into a free host slot (once no transfer uses that slot any more), in the background.
      s = take_slot();
      if (s < 0) break;
      kv_.wait(slots_[static_cast<size_t>(s)].ticket);
      read = disk_->read_async(key, host_.slot(s));
    } else {
      break;
    }
    slots_[static_cast<size_t>(s)].pinned = true;  // until the copy up is enqueued
    load.slots.push_back(s);
    load.reads.push_back(read);
    load.keys.push_back(key);
  }
  if (load.slots.empty()) return 0;
  load.blocks.assign(blocks.begin(), blocks.begin() + static_cast<long>(load.slots.size()));
  const int n = static_cast<int>(load.slots.size());
  const bool from_disk = std::any_of(load.reads.begin(), load.reads.end(), [](uint64_t r) { return r != 0; });
  if (!from_disk) issue(load);
  *ticket_out = ++next_load_;
  loads_.emplace(*ticket_out, std::move(load));
  return n;
}

void HostKvTier::issue(Load& load) {
  // The leading run whose blocks are in host slots: held ones, and reads that came back good; the run ends at the
  // first read that failed, and the slots past it are given back.
  int good = 0;
  bool run = true;
  for (size_t i = 0; i < load.slots.size(); ++i) {
    const int s = load.slots[i];
    Slot& slot = slots_[static_cast<size_t>(s)];
    if (load.reads[i] != 0) {
      uint64_t parent = 0;
      std::vector<int32_t> tokens;
      const bool ok = disk_->read_result(load.reads[i], parent, tokens) == 1;
      if (ok && !by_key_.count(load.keys[i])) {
        slot.key = load.keys[i];
        slot.parent_key = parent;
        slot.tokens = std::move(tokens);
        slot.used = true;
        slot.to_disk = false;
        slot.lru = lru_.insert(lru_.end(), s);
        by_key_[slot.key] = s;
        ++stats_.disk_loads;
      } else {
        slot.pinned = false;
        free_.push_back(s);
        run = false;
        continue;
      }
    }
    if (run) ++good;
  }
  std::vector<int> host(load.slots.begin(), load.slots.begin() + good);
  if (!host.empty()) {
    // Nothing waits for it on the device: the manager holds the blocks back until the transfer is done.
    load.transfer = kv_.swap_in(host_, host, std::span<const int>(load.blocks).first(host.size()), /*compute_waits=*/false);
    for (int s : host) slots_[static_cast<size_t>(s)].ticket = load.transfer;
    ++stats_.transfers_up;
    stats_.blocks_up += host.size();
    stats_.bytes_up += host.size() * host_.slot_bytes();
  }
  for (int s : load.slots) slots_[static_cast<size_t>(s)].pinned = false;
  load.count = good;
  load.issued = true;
}

bool HostKvTier::order_on_device(uint64_t ticket) {
  auto it = loads_.find(ticket);
  if (it == loads_.end()) return true;
  const Load& load = it->second;
  // Not before every read is back, and never for a load that came up short (its missing blocks must be uncached
  // first, when loaded() answers).
  if (!load.issued || load.count < static_cast<int>(load.slots.size())) return false;
  kv_.compute_waits_for(load.transfer);
  return true;
}

int HostKvTier::loaded(uint64_t ticket) {
  auto it = loads_.find(ticket);
  if (it == loads_.end()) return 0;
  Load& load = it->second;
  if (!load.issued) {
    for (size_t i = 0; i < load.reads.size(); ++i) {
      if (load.reads[i] != 0 && !disk_->read_finished(load.reads[i])) return -1;
    }
    issue(load);
  }
  if (load.count > 0 && !kv_.transfer_done(load.transfer)) return -1;
  const int count = load.count;
  loads_.erase(it);
  return count;
}

}  // namespace peregrine::engine
