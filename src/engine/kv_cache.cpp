// KvCache: pools per layer, block copies and swaps (see kv_cache.h).
#include "engine/kv_cache.h"

#include <string>

#include "core/status.h"

namespace peregrine::engine {

HostKvBuffer::HostKvBuffer(ops::Backend& backend, const KvCacheConfig& config, int num_slots)
    : backend_(backend), num_slots_(num_slots), slot_bytes_(config.bytes_per_block()) {
  if (num_slots <= 0) throw Error(ErrorCode::kInvalidArgument, "host KV buffer needs at least one slot");
  data_ = static_cast<std::byte*>(backend_.allocate_pinned(slot_bytes_ * static_cast<size_t>(num_slots)));
}

HostKvBuffer::~HostKvBuffer() { backend_.deallocate_pinned(data_); }

KvCache::KvCache(ops::Backend& backend, const KvCacheConfig& config) : backend_(backend), config_(config) {
  if (config.num_blocks <= 0 || config.block_size <= 0)
    throw Error(ErrorCode::kInvalidArgument, "KV cache needs a positive number of blocks and block size");
  if (config.num_layers <= 0 || config.num_kv_heads <= 0 || config.head_dim <= 0)
    throw Error(ErrorCode::kInvalidArgument, "KV cache needs positive layers, KV heads and head_dim");
  const int64_t nb = config.num_blocks, bs = config.block_size, nkv = config.num_kv_heads, hd = config.head_dim;
  const size_t pool = config.block_bytes() * static_cast<size_t>(nb);
  const size_t scales = config.block_scale_bytes() * static_cast<size_t>(nb);
  for (int l = 0; l < config.num_layers; ++l) {
    k_.emplace_back(backend_, pool);
    v_.emplace_back(backend_, pool);
    backend_.fill_zero(k_.back().data(), pool);
    backend_.fill_zero(v_.back().data(), pool);
    model::KvLayer view;
    view.k = TensorView(k_.back().data(), config.dtype, {nb, bs, nkv, hd});
    view.v = TensorView(v_.back().data(), config.dtype, {nb, bs, nkv, hd});
    if (scales) {
      k_scales_.emplace_back(backend_, scales);
      v_scales_.emplace_back(backend_, scales);
      backend_.fill_zero(k_scales_.back().data(), scales);
      backend_.fill_zero(v_scales_.back().data(), scales);
      const int64_t per = config.scales_per_token_head;
      view.k_scales = TensorView(k_scales_.back().data(), DType::kF32, {nb, bs, nkv, per});
      view.v_scales = TensorView(v_scales_.back().data(), DType::kF32, {nb, bs, nkv, per});
    }
    views_.push_back(view);
  }
}

KvCache::KvCache(ops::Backend& backend, const KvCacheConfig& config, std::vector<model::KvLayer> views)
    : backend_(backend), config_(config), view_(true), views_(std::move(views)) {}

std::unique_ptr<KvCache> KvCache::view_of(const KvCache& base, std::span<const int> layers) {
  KvCacheConfig c = base.config_;
  c.num_layers = static_cast<int>(layers.size());
  std::vector<model::KvLayer> views;
  for (int l : layers) {
    if (l < 0 || l >= base.config_.num_layers)
      throw Error(ErrorCode::kInvalidArgument, "KV cache view: layer " + std::to_string(l) + " does not exist");
    views.push_back(base.views_[static_cast<size_t>(l)]);
  }
  return std::unique_ptr<KvCache>(new KvCache(base.backend_, c, std::move(views)));
}

void KvCache::check_block(int block, const char* what) const {
  if (block < 0 || block >= config_.num_blocks)
    throw Error(ErrorCode::kInvalidArgument, std::string("KV cache ") + what + ": block " + std::to_string(block) +
                                                 " is outside [0, " + std::to_string(config_.num_blocks) + ")");
}

void KvCache::block_regions(int block, std::vector<std::byte*>& out) const {
  const size_t bb = config_.block_bytes(), sb = config_.block_scale_bytes();
  const size_t b = static_cast<size_t>(block);
  for (int l = 0; l < config_.num_layers; ++l) {
    out.push_back(static_cast<std::byte*>(k_[l].data()) + b * bb);
    out.push_back(static_cast<std::byte*>(v_[l].data()) + b * bb);
  }
  if (sb) {
    for (int l = 0; l < config_.num_layers; ++l) {
      out.push_back(static_cast<std::byte*>(k_scales_[l].data()) + b * sb);
      out.push_back(static_cast<std::byte*>(v_scales_[l].data()) + b * sb);
    }
  }
}

void KvCache::copy_blocks(std::span<const std::pair<int, int>> src_dst) {
  if (view_) throw Error(ErrorCode::kUnsupported, "KV cache view: blocks are moved through the cache it views");
  std::vector<std::byte*> src, dst;
  for (const auto& [s, d] : src_dst) {
    check_block(s, "copy_blocks source");
    check_block(d, "copy_blocks destination");
    if (s == d) continue;
    src.clear();
    dst.clear();
    block_regions(s, src);
    block_regions(d, dst);
    const size_t pools = 2 * static_cast<size_t>(config_.num_layers);
    for (size_t i = 0; i < src.size(); ++i) {
      backend_.copy_on_device(dst[i], src[i], i < pools ? config_.block_bytes() : config_.block_scale_bytes());
    }
  }
}

void KvCache::copy_token_slots(std::span<const std::pair<int64_t, int64_t>> src_dst) {
  // Works on views too: it moves rows inside the pools the views point at.
  const int64_t slots = static_cast<int64_t>(config_.num_blocks) * config_.block_size;
  const size_t row = dtype_bytes(config_.dtype, static_cast<size_t>(config_.num_kv_heads) * config_.head_dim);
  const size_t srow = sizeof(float) * static_cast<size_t>(config_.num_kv_heads) * config_.scales_per_token_head;
  for (const auto& [s, d] : src_dst) {
    if (s < 0 || s >= slots || d < 0 || d >= slots)
      throw Error(ErrorCode::kInvalidArgument, "KV cache copy_token_slots: slot out of range");
    if (s == d) continue;
    for (const model::KvLayer& l : views_) {
      backend_.copy_on_device(static_cast<std::byte*>(l.k.data) + static_cast<size_t>(d) * row,
                              static_cast<const std::byte*>(l.k.data) + static_cast<size_t>(s) * row, row);
      backend_.copy_on_device(static_cast<std::byte*>(l.v.data) + static_cast<size_t>(d) * row,
                              static_cast<const std::byte*>(l.v.data) + static_cast<size_t>(s) * row, row);
      if (srow) {
        backend_.copy_on_device(static_cast<std::byte*>(l.k_scales.data) + static_cast<size_t>(d) * srow,
                                static_cast<const std::byte*>(l.k_scales.data) + static_cast<size_t>(s) * srow, srow);
        backend_.copy_on_device(static_cast<std::byte*>(l.v_scales.data) + static_cast<size_t>(d) * srow,
                                static_cast<const std::byte*>(l.v_scales.data) + static_cast<size_t>(s) * srow, srow);
      }
    }
  }
}

namespace {

// Joins regions that continue each other on both sides into one copy.
void append_region(std::vector<ops::Backend::CopyRegion>& regions, void* dst, const void* src, size_t bytes) {
  if (!regions.empty()) {
    ops::Backend::CopyRegion& last = regions.back();
    if (static_cast<std::byte*>(last.dst) + last.bytes == dst &&
        static_cast<const std::byte*>(last.src) + last.bytes == src) {
      last.bytes += bytes;
      return;
    }
  }
  regions.push_back({dst, src, bytes});
}

}  // namespace

uint64_t KvCache::swap_out(std::span<const int> blocks, HostKvBuffer& host, std::span<const int> host_slots) {
  if (view_) throw Error(ErrorCode::kUnsupported, "KV cache view: blocks are moved through the cache it views");
  if (blocks.size() != host_slots.size())
    throw Error(ErrorCode::kInvalidArgument, "KV swap_out: blocks and host slots differ in number");
  if (host.slot_bytes() != config_.bytes_per_block())
    throw Error(ErrorCode::kInvalidArgument, "KV swap_out: the host buffer was made for another cache layout");
  std::vector<ops::Backend::CopyRegion> regions;
  std::vector<std::byte*> dev;
  const size_t pools = 2 * static_cast<size_t>(config_.num_layers);
  for (size_t i = 0; i < blocks.size(); ++i) {
    check_block(blocks[i], "swap_out");
    if (host_slots[i] < 0 || host_slots[i] >= host.num_slots())
      throw Error(ErrorCode::kInvalidArgument, "KV swap_out: host slot " + std::to_string(host_slots[i]) + " out of range");
    dev.clear();
    block_regions(blocks[i], dev);
    std::byte* at = host.slot(host_slots[i]);
    for (size_t r = 0; r < dev.size(); ++r) {
      const size_t n = r < pools ? config_.block_bytes() : config_.block_scale_bytes();
      append_region(regions, at, dev[r], n);
      at += n;
    }
  }
  return backend_.copy_async(ops::Backend::CopyDirection::kDeviceToHost, regions);
}

void KvCache::enter_layer(int layer) {
  size_t kept = 0;
  for (const auto& w : layer_waits_) {
    if (w.first <= layer) {
      backend_.compute_waits_for(w.second);
    } else {
      layer_waits_[kept++] = w;
    }
  }
  layer_waits_.resize(kept);
}

void KvCache::flush_layer_waits() {
  for (const auto& w : layer_waits_) backend_.compute_waits_for(w.second);
  layer_waits_.clear();
}

uint64_t KvCache::swap_in(const HostKvBuffer& host, std::span<const int> host_slots, std::span<const int> blocks,
                          bool compute_waits, int first_layer, int end_layer) {
  if (view_) throw Error(ErrorCode::kUnsupported, "KV cache view: blocks are moved through the cache it views");
  if (blocks.size() != host_slots.size())
    throw Error(ErrorCode::kInvalidArgument, "KV swap_in: blocks and host slots differ in number");
  if (host.slot_bytes() != config_.bytes_per_block())
    throw Error(ErrorCode::kInvalidArgument, "KV swap_in: the host buffer was made for another cache layout");
  std::vector<ops::Backend::CopyRegion> regions;
  std::vector<std::byte*> dev;
  const size_t pools = 2 * static_cast<size_t>(config_.num_layers);
  for (size_t i = 0; i < blocks.size(); ++i) {
    check_block(blocks[i], "swap_in");
    if (host_slots[i] < 0 || host_slots[i] >= host.num_slots())
      throw Error(ErrorCode::kInvalidArgument, "KV swap_in: host slot " + std::to_string(host_slots[i]) + " out of range");
    dev.clear();
    block_regions(blocks[i], dev);
    const std::byte* at = host.slot(host_slots[i]);
    for (size_t r = 0; r < dev.size(); ++r) {
      const size_t n = r < pools ? config_.block_bytes() : config_.block_scale_bytes();
      const int layer = static_cast<int>(r < pools ? r / 2 : (r - pools) / 2);
      if (layer >= first_layer && (end_layer < 0 || layer < end_layer)) append_region(regions, dev[r], at, n);
      at += n;
    }
  }
  const uint64_t ticket = backend_.copy_async(ops::Backend::CopyDirection::kHostToDevice, regions);
  if (compute_waits) backend_.compute_waits_for(ticket);
  return ticket;
}

}  // namespace peregrine::engine
