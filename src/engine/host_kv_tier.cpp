// HostKvTier (see host_kv_tier.h).
#include "engine/host_kv_tier.h"

#include <algorithm>

namespace peregrine::engine {

HostKvTier::HostKvTier(ops::Backend& backend, KvCache& kv, int num_slots)
    : kv_(kv), host_(backend, kv.config(), num_slots), slots_(static_cast<size_t>(num_slots)) {
  for (int s = num_slots - 1; s >= 0; --s) free_.push_back(s);
}

int HostKvTier::take_slot() {
  if (!free_.empty()) {
    const int s = free_.back();
    free_.pop_back();
    return s;
  }
  const int s = lru_.front();
  Slot& old = slots_[static_cast<size_t>(s)];
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
    Slot& slot = slots_[static_cast<size_t>(s)];
    slot.key = e.key;
    slot.parent_key = e.parent_key;
    slot.tokens.assign(e.tokens.begin(), e.tokens.end());
    slot.used = true;
    slot.lru = lru_.insert(lru_.end(), s);
    by_key_[e.key] = s;
    device.push_back(e.block);
    host.push_back(s);
  }
  if (device.empty()) return;
  const uint64_t ticket = kv_.swap_out(device, host_, host);
  kv_.compute_waits_for(ticket);  // the blocks' next owners write them only after the copy
  ++stats_.transfers_down;
  stats_.blocks_down += device.size();
  stats_.bytes_down += device.size() * host_.slot_bytes();
}

bool HostKvTier::contains(uint64_t key, uint64_t parent_key, std::span<const int32_t> tokens) {
  auto it = by_key_.find(key);
  if (it == by_key_.end()) return false;
  Slot& slot = slots_[static_cast<size_t>(it->second)];
  if (slot.parent_key != parent_key || !std::equal(tokens.begin(), tokens.end(), slot.tokens.begin(), slot.tokens.end()))
    return false;
  lru_.splice(lru_.end(), lru_, slot.lru);
  ++stats_.hits;
  return true;
}

int HostKvTier::load(std::span<const uint64_t> keys, std::span<const int> blocks) {
  std::vector<int> host;
  for (uint64_t key : keys) {
    auto it = by_key_.find(key);
    if (it == by_key_.end() || host.size() >= blocks.size()) break;
    host.push_back(it->second);
  }
  if (host.empty()) return 0;
  kv_.swap_in(host_, host, blocks.first(host.size()));  // the compute queue waits for it
  ++stats_.transfers_up;
  stats_.blocks_up += host.size();
  stats_.bytes_up += host.size() * host_.slot_bytes();
  return static_cast<int>(host.size());
}

}  // namespace peregrine::engine
