// HostKvTier (see host_kv_tier.h).
#include "engine/host_kv_tier.h"

#include <algorithm>
#include <chrono>

namespace peregrine::engine {

HostKvTier::HostKvTier(ops::Backend& backend, KvCache& kv, int num_slots, std::unique_ptr<DiskKvStore> disk,
                       int staging_slots, int ring_slots)
    : kv_(kv), host_(backend, kv.config(), num_slots), slots_(static_cast<size_t>(num_slots)), disk_(std::move(disk)) {
  for (int s = num_slots - 1; s >= 0; --s) free_.push_back(s);
  if (disk_) {
    const size_t per = std::max<size_t>(host_.slot_bytes(), 1);
    if (staging_slots <= 0) staging_slots = static_cast<int>(std::clamp<size_t>((size_t{64} << 20) / per, 1, 256));
    staging_ = std::make_unique<HostKvBuffer>(backend, kv.config(), staging_slots);
    if (ring_slots == 0) ring_slots = static_cast<int>(std::clamp<size_t>((size_t{1} << 30) / per, 1, 1024));
    if (ring_slots > 0) {
      ring_ = std::make_unique<HostKvBuffer>(backend, kv.config(), ring_slots);
      for (int s = ring_slots - 1; s >= 0; --s) ring_free_.push_back(s);
    }
  }
}

int HostKvTier::take_ring_slot() {
  if (!ring_) return -1;
  if (ring_free_.empty()) {
    std::lock_guard<std::mutex> lock(ring_returned_->m);
    ring_free_.swap(ring_returned_->slots);
  }
  if (ring_free_.empty()) return -1;
  const int s = ring_free_.back();
  ring_free_.pop_back();
  return s;
}

void HostKvTier::hand_ring_to_disk(bool wait) {
  while (!ring_pending_.empty()) {
    RingCopy& c = ring_pending_.front();
    if (wait) {
      kv_.wait(c.ticket);
    } else if (!kv_.transfer_done(c.ticket)) {
      break;  // copies finish in order
    }
    // The slot comes back when the disk lets the lease go (written, or dropped).
    std::shared_ptr<void> lease(nullptr, [r = ring_returned_, s = c.slot](void*) {
      std::lock_guard<std::mutex> lock(r->m);
      r->slots.push_back(s);
    });
    disk_->put(c.key, c.parent_key, c.tokens, ring_->slot(c.slot), std::move(lease), c.depth);
    ring_keys_.erase(c.key);
    ring_pending_.pop_front();
  }
}

void HostKvTier::release_disk(const Load& load) {
  if (!disk_) return;
  std::vector<uint64_t> keys;
  for (const Part& p : load.parts) keys.push_back(p.key);
  disk_->unprotect(keys);
}

HostKvTier::~HostKvTier() {
  for (auto& [ticket, load] : loads_) {
    for (uint64_t t : load.transfers) kv_.wait(t);  // nothing may still read the slots once they are freed
    release_disk(load);
  }
  for (int s : to_disk_) write_through(s);
  hand_ring_to_disk(/*wait=*/true);
}

void HostKvTier::pin(int s) {
  if (slots_[static_cast<size_t>(s)].pins++ == 0) ++num_pinned_;
}

void HostKvTier::unpin(int s) {
  if (--slots_[static_cast<size_t>(s)].pins == 0) --num_pinned_;
}

void HostKvTier::write_through(int s) {
  Slot& slot = slots_[static_cast<size_t>(s)];
  if (!slot.to_disk) return;
  kv_.wait(slot.ticket);
  slot.to_disk = false;
  if (slot.used && disk_) disk_->put(slot.key, slot.parent_key, slot.tokens, host_.slot(s), nullptr, slot.depth);
}

void HostKvTier::poll() {
  hand_ring_to_disk(/*wait=*/false);
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

void HostKvTier::hold(int s, uint64_t key, uint64_t parent_key, std::span<const int32_t> tokens, int depth) {
  Slot& slot = slots_[static_cast<size_t>(s)];
  slot.key = key;
  slot.depth = depth;
  slot.parent_key = parent_key;
  slot.tokens.assign(tokens.begin(), tokens.end());
  slot.used = true;
  slot.to_disk = false;
  slot.lru = lru_.insert(lru_.end(), s);
  by_key_[key] = s;
  ++children_[parent_key];
}

void HostKvTier::drop(int s) {
  Slot& slot = slots_[static_cast<size_t>(s)];
  write_through(s);
  by_key_.erase(slot.key);
  lru_.erase(slot.lru);
  auto c = children_.find(slot.parent_key);
  if (c != children_.end() && --c->second == 0) children_.erase(c);
  slot.used = false;
  ++stats_.dropped;
}

int HostKvTier::holding(uint64_t key, uint64_t parent_key, std::span<const int32_t> tokens) const {
  auto it = by_key_.find(key);
  if (it == by_key_.end()) return -1;
  const Slot& slot = slots_[static_cast<size_t>(it->second)];
  if (slot.parent_key != parent_key || !std::equal(tokens.begin(), tokens.end(), slot.tokens.begin(), slot.tokens.end()))
    return -1;
  return it->second;
}

int HostKvTier::take_slot(bool idle_only) {
  if (!free_.empty()) {
    const int s = free_.back();
    free_.pop_back();
    return s;
  }
  int fallback = -1;
  for (int s : lru_) {
    const Slot& slot = slots_[static_cast<size_t>(s)];
    if (slot.pins > 0 || (idle_only && !kv_.transfer_done(slot.ticket))) continue;
    if (!children_.count(slot.key)) {  // a chain's last held block
      drop(s);
      return s;
    }
    if (fallback < 0) fallback = s;
  }
  if (fallback >= 0) drop(fallback);
  return fallback;
}

bool HostKvTier::stage_to_disk(const std::vector<const Evicted*>& blocks, bool ahead) {
  std::vector<const Evicted*> todo;
  for (auto it = blocks.rbegin(); it != blocks.rend(); ++it) {  // deepest first: the disk's LRU then drops them first
    if (auto r = ring_keys_.find((*it)->key); r != ring_keys_.end()) {
      // Its copy (ahead) into a ring slot may still run: evicted, its next owner writes it only after that copy.
      if (!ahead) kv_.compute_waits_for(r->second);
      continue;
    }
    if (!disk_->contains((*it)->key, (*it)->parent_key, (*it)->tokens)) todo.push_back(*it);
  }
  // Into ring slots first: lent to the disk's write queue once copied (poll), so nothing waits.
  size_t lent = 0;
  std::vector<int> device, ring;
  for (; lent < todo.size(); ++lent) {
    const int s = take_ring_slot();
    if (s < 0) break;
    device.push_back(todo[lent]->block);
    ring.push_back(s);
  }
  if (!device.empty()) {
    const uint64_t ticket = kv_.swap_out(device, *ring_, ring);
    if (!ahead) kv_.compute_waits_for(ticket);  // the blocks' next owners write them only after the copy
    for (size_t i = 0; i < lent; ++i) {
      const Evicted& e = *todo[i];
      ring_pending_.push_back(
          {ring[i], ticket, e.key, e.parent_key, std::vector<int32_t>(e.tokens.begin(), e.tokens.end()), e.depth});
      ring_keys_[e.key] = ticket;
    }
    ++stats_.transfers_down;
    stats_.blocks_down += lent;
    stats_.bytes_down += lent * ring_->slot_bytes();
    (ahead ? stats_.blocks_ahead : stats_.past_host) += lent;
    hand_ring_to_disk(/*wait=*/false);  // host backends copy at once
  }
  if (ahead) return lent == todo.size();
  todo.erase(todo.begin(), todo.begin() + static_cast<ptrdiff_t>(lent));
  const size_t per = static_cast<size_t>(staging_->num_slots());
  std::vector<int> staging;
  for (size_t first = 0; first < todo.size(); first += per) {
    const size_t n = std::min(per, todo.size() - first);
    device.clear();
    staging.clear();
    for (size_t i = 0; i < n; ++i) {
      device.push_back(todo[first + i]->block);
      staging.push_back(static_cast<int>(i));
    }
    const uint64_t ticket = kv_.swap_out(device, *staging_, staging);
    kv_.compute_waits_for(ticket);  // the blocks' next owners write them only after the copy
    const auto t0 = std::chrono::steady_clock::now();
    kv_.wait(ticket);  // the staging slots are reused by the next round
    stats_.wait_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    for (size_t i = 0; i < n; ++i) {
      const Evicted& e = *todo[first + i];
      disk_->put(e.key, e.parent_key, e.tokens, staging_->slot(static_cast<int>(i)), nullptr, e.depth);
    }
    ++stats_.transfers_down;
    stats_.blocks_down += n;
    stats_.bytes_down += n * staging_->slot_bytes();
    stats_.past_host += n;
  }
  return true;
}

void HostKvTier::keep(std::span<const Evicted> blocks) {
  const auto t0 = std::chrono::steady_clock::now();
  copy_down(blocks, /*ahead=*/false);
  stats_.evict_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

bool HostKvTier::copy_ahead(std::span<const Evicted> blocks) {
  if (!ahead_to_disk_) return host_.num_slots() == 0 || copy_down(blocks, /*ahead=*/true);
  std::vector<const Evicted*> order;  // a chain's earlier blocks first, as keep() orders them
  for (const Evicted& e : blocks)
    if (!by_key_.count(e.key)) order.push_back(&e);
  std::stable_sort(order.begin(), order.end(), [](const Evicted* a, const Evicted* b) { return a->depth < b->depth; });
  return stage_to_disk(order, /*ahead=*/true);
}

bool HostKvTier::copy_down(std::span<const Evicted> blocks, bool ahead) {
  if (blocks.empty() || (host_.num_slots() == 0 && !disk_)) return true;
  // The chain's earlier blocks first: they are the ones the slots take.
  std::vector<const Evicted*> order;
  order.reserve(blocks.size());
  for (const Evicted& e : blocks) order.push_back(&e);
  std::stable_sort(order.begin(), order.end(), [](const Evicted* a, const Evicted* b) { return a->depth < b->depth; });
  std::vector<const Evicted*> fresh;
  std::vector<std::pair<int, int>> touched;  // (depth, slot) of the call's blocks in host slots
  std::vector<int> pinned;                   // their slots, which the call's other blocks must not take
  for (const Evicted* e : order) {
    auto it = by_key_.find(e->key);
    if (it == by_key_.end()) {
      fresh.push_back(e);
    } else if (!ahead) {  // already held (copied ahead, or an earlier copy of the same content): no copy
      const Slot& slot = slots_[static_cast<size_t>(it->second)];
      // A copy ahead still running reads the block: its next owner writes it only after that copy.
      if (!kv_.transfer_done(slot.ticket)) kv_.compute_waits_for(slot.ticket);
      ++stats_.evicted_held;
      touched.emplace_back(e->depth, it->second);
      pinned.push_back(it->second);
      pin(it->second);
    }
  }
  const size_t room = static_cast<size_t>(host_.num_slots() - num_pinned_);
  const size_t in_host = std::min(fresh.size(), room);
  if (fresh.size() > in_host && !ahead) {
    const std::vector<const Evicted*> rest(fresh.begin() + static_cast<ptrdiff_t>(in_host), fresh.end());
    if (disk_) {
      stage_to_disk(rest);
    } else {
      stats_.not_kept += rest.size();
    }
  }
  bool all = fresh.size() <= in_host;
  std::vector<int> device, host;
  for (size_t i = in_host; i-- > 0;) {  // deepest first, so the chain's first block is the most recently used
    const Evicted& e = *fresh[i];
    const int s = take_slot();
    if (s < 0) {
      if (!ahead) stats_.not_kept += i + 1;  // cannot happen: `room` slots are unpinned
      all = false;
      break;
    }
    pin(s);  // one transfer must not write a slot twice (its copies run in no set order)
    pinned.push_back(s);
    hold(s, e.key, e.parent_key, e.tokens, e.depth);
    device.push_back(e.block);
    host.push_back(s);
    touched.emplace_back(e.depth, s);
  }
  for (int s : pinned) unpin(s);
  // The call's blocks are the most recently used, a chain's first block last.
  std::stable_sort(touched.begin(), touched.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
  for (const auto& [depth, s] : touched) lru_.splice(lru_.end(), lru_, slots_[static_cast<size_t>(s)].lru);
  if (device.empty()) return all;
  const uint64_t ticket = kv_.swap_out(device, host_, host);
  // Evicted blocks' next owners write them only after the copy; blocks copied ahead stay as they are on the
  // device until keep() names them.
  if (!ahead) kv_.compute_waits_for(ticket);
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
  if (ahead) stats_.blocks_ahead += device.size();
  return all;
}

int HostKvTier::count_held(std::span<const Probe> run) {
  hand_ring_to_disk(/*wait=*/false);  // ring copies that are done become findable on the disk tier
  std::vector<int> where;  // the slot of each block found, -1 for one on disk
  for (const Probe& p : run) {
    const int s = holding(p.key, p.parent_key, p.tokens);
    if (s < 0 && !(disk_ && disk_->contains(p.key, p.parent_key, p.tokens))) break;
    where.push_back(s);
  }
  // The blocks from the first one on disk to the run's end: recomputed instead where that is faster.
  const size_t first_disk = static_cast<size_t>(std::find(where.begin(), where.end(), -1) - where.begin());
  if (first_disk < where.size() && recompute_rate_ > 0 && disk_rate_ > 0) {
    const double n = static_cast<double>(where.size() - first_disk);
    const double read_s = n * static_cast<double>(host_.slot_bytes()) / disk_rate_;
    const double recompute_s = n * static_cast<double>(run[0].tokens.size()) / recompute_rate_;
    if (read_s > 1.25 * recompute_s && ++skip_decisions_ % 16 != 0) {
      stats_.disk_skipped += where.size() - first_disk;
      where.resize(first_disk);
    }
  }
  // Recently used from the run's end back to its first block, which becomes the most recent of them.
  for (size_t i = where.size(); i-- > 0;) {
    if (where[i] >= 0) {
      lru_.splice(lru_.end(), lru_, slots_[static_cast<size_t>(where[i])].lru);
    } else {
      disk_->touch(run[i].key);
    }
  }
  stats_.hits += where.size();
  return static_cast<int>(where.size());
}

int HostKvTier::load(std::span<const uint64_t> keys, std::span<const int> blocks, uint64_t* ticket_out,
                     std::span<uint8_t> from_below) {
  *ticket_out = 0;
  Load load;
  for (size_t i = 0; i < keys.size() && i < blocks.size(); ++i) {
    const bool in_host = by_key_.count(keys[i]) > 0;
    if (!in_host && !disk_) break;  // a key the tier no longer holds ends the run
    if (i < from_below.size()) from_below[i] = in_host ? 0 : 1;
    Part part;
    part.key = keys[i];
    part.from_disk = !in_host;
    load.parts.push_back(part);
  }
  const int n = static_cast<int>(load.parts.size());
  if (n == 0) return 0;
  load.blocks.assign(blocks.begin(), blocks.begin() + n);
  load.end = n;
  load.start = std::chrono::steady_clock::now();
  // The disk keeps the run while it loads: the evictions that making room for it causes must not push its queued
  // writes or its files out.
  if (disk_) disk_->protect(std::span<const uint64_t>(keys).first(static_cast<size_t>(n)));
  advance(load, /*issue=*/false);  // holds the run's first blocks and starts reads; copies wait for loaded()
  *ticket_out = ++next_load_;
  loads_.emplace(*ticket_out, std::move(load));
  return n;
}

void HostKvTier::advance(Load& load, bool issue) {
  // Reads that came back: a good block is held in its slot from now on; a failed read ends the load before it.
  for (int i = load.issued; i < load.frontier; ++i) {
    Part& p = load.parts[static_cast<size_t>(i)];
    if (p.read == 0 || !disk_->read_finished(p.read)) continue;
    uint64_t parent = 0;
    std::vector<int32_t> tokens;
    const bool ok = disk_->read_result(p.read, parent, tokens) == 1;
    p.read = 0;
    auto held = by_key_.find(p.key);
    if (ok && held == by_key_.end()) {
      hold(p.slot, p.key, parent, tokens);
      ++stats_.disk_loads;
      continue;
    }
    unpin(p.slot);
    free_.push_back(p.slot);
    p.slot = -1;
    if (ok) {  // another slot came to hold it meanwhile: use that one
      p.slot = held->second;
      pin(p.slot);
    } else {
      load.end = std::min(load.end, i);
    }
  }
  for (;;) {
    // Widen the window in chain order: a held block is pinned where it is, any other is read from disk into a slot
    // whose last transfer is done (none free: the next call tries again, once this load's copies free some).
    while (load.frontier < load.end) {
      Part& p = load.parts[static_cast<size_t>(load.frontier)];
      if (auto it = by_key_.find(p.key); it != by_key_.end()) {
        p.slot = it->second;
        pin(p.slot);
      } else if (!disk_) {
        load.end = load.frontier;  // dropped since the lookup, and nowhere below
        break;
      } else {
        const int s = take_slot(/*idle_only=*/true);
        if (s < 0) break;
        pin(s);
        p.slot = s;
        p.read = disk_->read_async(p.key, host_.slot(s));
      }
      ++load.frontier;
    }
    if (!issue) return;
    // The leading parts whose content is in place go up in one transfer; their slots are free again after it (later
    // transfers on the copy queue, and reads, which wait for it, come after it).
    std::vector<int> host, blocks;
    int j = load.issued;
    for (; j < std::min(load.frontier, load.end); ++j) {
      const Part& p = load.parts[static_cast<size_t>(j)];
      if (p.read != 0) break;
      host.push_back(p.slot);
      blocks.push_back(load.blocks[static_cast<size_t>(j)]);
    }
    if (host.empty()) break;
    // Nothing waits for it on the device: the manager holds the blocks back until the transfer is done. One
    // transfer per group of layers, so a step made to wait for the load (order_on_device) waits layer by layer.
    const int layers = kv_.config().num_layers, per = (layers + kLayerGroups - 1) / kLayerGroups;
    uint64_t t = 0;
    for (int first = 0; first < layers; first += per) {
      t = kv_.swap_in(host_, host, blocks, /*compute_waits=*/false, first, std::min(layers, first + per));
      load.transfers.push_back(t);
      load.layer_transfers.emplace_back(first, t);
      ++stats_.transfers_up;
    }
    for (int s : host) {
      slots_[static_cast<size_t>(s)].ticket = t;  // the last of them: the slot is read until it is done
      unpin(s);
    }
    for (int i = load.issued; i < j; ++i) load.parts[static_cast<size_t>(i)].slot = -1;
    load.issued = j;
    stats_.blocks_up += host.size();
    stats_.bytes_up += host.size() * host_.slot_bytes();
  }
  // Past a failed read: the held blocks are let go; blocks still being read are let go when their reads are back.
  if (load.issued >= load.end) {
    if (!load.timed) {  // every block read back and its copy up enqueued
      load.timed = true;
      const auto from_disk = std::count_if(load.parts.begin(), load.parts.begin() + load.end,
                                           [](const Part& p) { return p.from_disk; });
      if (from_disk > 0) {
        const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - load.start).count();
        stats_.disk_load_seconds += s;
        // The disk's read rate, as loads see it (a moving average; a load of one or two blocks says little).
        const double rate = static_cast<double>(from_disk) * static_cast<double>(host_.slot_bytes()) / std::max(s, 1e-6);
        if (from_disk >= 4) disk_rate_ = disk_rate_ > 0 ? 0.7 * disk_rate_ + 0.3 * rate : rate;
      }
    }
    for (int i = load.end; i < load.frontier; ++i) {
      Part& p = load.parts[static_cast<size_t>(i)];
      if (p.slot >= 0 && p.read == 0) {
        unpin(p.slot);
        p.slot = -1;
      }
    }
  }
}

bool HostKvTier::finished(Load& load) {
  if (load.issued < load.end) return false;
  for (int i = load.end; i < load.frontier; ++i)
    if (load.parts[static_cast<size_t>(i)].read != 0) return false;
  for (uint64_t t : load.transfers)
    if (!kv_.transfer_done(t)) return false;
  return true;
}

bool HostKvTier::order_on_device(uint64_t ticket) {
  auto it = loads_.find(ticket);
  if (it == loads_.end()) return true;
  Load& load = it->second;
  advance(load);
  // Not before every block's copy up is enqueued, and never for a load that came up short (its missing blocks must
  // be uncached first, when loaded() answers).
  const int n = static_cast<int>(load.parts.size());
  if (load.end < n || load.issued < n) return false;
  // Layer by layer: the step's layer l waits only for the copies of the layers up to l (KvCache::enter_layer);
  // else the whole step waits for the load.
  for (const auto& [layer, t] : load.layer_transfers) {
    if (layered_) {
      kv_.wait_before_layer(layer, t);
    } else {
      kv_.compute_waits_for(t);
    }
  }
  return true;
}

int HostKvTier::loaded(uint64_t ticket) {
  auto it = loads_.find(ticket);
  if (it == loads_.end()) return 0;
  Load& load = it->second;
  advance(load);
  if (!finished(load)) return -1;
  const int count = load.end;
  release_disk(load);
  loads_.erase(it);
  return count;
}

}  // namespace peregrine::engine
