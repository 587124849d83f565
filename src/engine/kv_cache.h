// KvCache: the paged KV cache of one model on one backend, as an object the engine can see and act on. Per layer
// a K and a V pool [num_blocks][block_size][num_kv_heads][head_dim] (the layout every attention kernel reads), an
// optional per-token scale pool beside each (the hook for quantized KV: fp8/int8 caches store one f32 scale per
// token and KV head), and block-level operations: copy blocks on the device, and swap blocks out to / in from
// pinned host memory asynchronously with completion tickets (the host tier of the prefix cache).
// Truncating a sequence's tail (speculative rejection) is bookkeeping only and lives in KvCacheManager: the
// slots past the new length are simply overwritten later.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <utility>
#include <vector>

#include "core/dtype.h"
#include "model/model.h"
#include "ops/backend.h"

namespace peregrine::engine {

struct KvCacheConfig {
  int num_layers = 0;
  int num_kv_heads = 0;
  int head_dim = 0;
  int num_blocks = 0;
  int block_size = 16;
  DType dtype = DType::kF32;
  // Scale slots per token and KV head kept beside each pool (0 for float caches; quantized KV sets 1).
  int scales_per_token_head = 0;

  // Bytes of one block of one layer's K (the same for V).
  size_t block_bytes() const {
    return dtype_bytes(dtype, static_cast<size_t>(block_size) * num_kv_heads * head_dim);
  }
  // Bytes of one block's scales of one layer's K (the same for V).
  size_t block_scale_bytes() const {
    return sizeof(float) * static_cast<size_t>(block_size) * num_kv_heads * scales_per_token_head;
  }
  // Bytes one block takes over all layers, K and V, scales included.
  size_t bytes_per_block() const {
    return 2 * static_cast<size_t>(num_layers) * (block_bytes() + block_scale_bytes());
  }
};

// Pinned host memory for swapped-out blocks: `num_slots` slots, each holding one whole block of every layer
// contiguously ([layer][K, V][block bytes], then the scales in the same order), so a slot can be written to or
// read from a file in one piece.
class HostKvBuffer {
 public:
  HostKvBuffer(ops::Backend& backend, const KvCacheConfig& config, int num_slots);
  ~HostKvBuffer();
  HostKvBuffer(const HostKvBuffer&) = delete;
  HostKvBuffer& operator=(const HostKvBuffer&) = delete;

  int num_slots() const { return num_slots_; }
  size_t slot_bytes() const { return slot_bytes_; }
  std::byte* slot(int s) { return data_ + static_cast<size_t>(s) * slot_bytes_; }
  const std::byte* slot(int s) const { return data_ + static_cast<size_t>(s) * slot_bytes_; }

 private:
  ops::Backend& backend_;
  int num_slots_;
  size_t slot_bytes_;
  std::byte* data_ = nullptr;
};

class KvCache {
 public:
  // Allocates every pool and zeroes it. Throws Error(kResourceExhausted) when the device is full.
  KvCache(ops::Backend& backend, const KvCacheConfig& config);
  // A view of some of base's layers (self-speculation: the draft layers read and write the target's KV). It owns
  // nothing (base must outlive it) and cannot copy or swap blocks.
  static std::unique_ptr<KvCache> view_of(const KvCache& base, std::span<const int> layers);
  bool is_view() const { return view_; }

  const KvCacheConfig& config() const { return config_; }
  int num_blocks() const { return config_.num_blocks; }
  int block_size() const { return config_.block_size; }
  DType dtype() const { return config_.dtype; }
  size_t total_bytes() const { return config_.bytes_per_block() * static_cast<size_t>(config_.num_blocks); }
  // The pools as the model reads and writes them, one entry per layer.
  std::span<const model::KvLayer> layers() const { return views_; }

  // dst block := src block for every pair, every layer (on the compute queue, ordered with the steps).
  void copy_blocks(std::span<const std::pair<int, int>> src_dst);
  // dst token slot := src token slot (physical slots, block * block_size + offset) for every pair, every layer, K, V
  // and scales, in order (speculative trees: an accepted path's KV moves to consecutive positions).
  void copy_token_slots(std::span<const std::pair<int64_t, int64_t>> src_dst);
  // Copies blocks[i] into host slot host_slots[i] after all work enqueued so far; returns the transfer's ticket.
  uint64_t swap_out(std::span<const int> blocks, HostKvBuffer& host, std::span<const int> host_slots);
  // Copies host slot host_slots[i] into blocks[i]; the host slots must stay unchanged until the ticket is done.
  // With compute_waits, steps enqueued after the call read the blocks only after the copy (compute waits for it
  // on the device); without, nothing may read them until transfer_done(ticket) (the caller holds them back).
  // Layers [first_layer, end_layer) only (end_layer -1: to the last), e.g. one group of a load overlapped with the
  // prefill layer by layer.
  uint64_t swap_in(const HostKvBuffer& host, std::span<const int> host_slots, std::span<const int> blocks,
                   bool compute_waits = true, int first_layer = 0, int end_layer = -1);
  bool transfer_done(uint64_t ticket) { return backend_.transfer_done(ticket); }
  void wait(uint64_t ticket) { backend_.wait_transfer(ticket); }
  // Work enqueued on the compute queue after this call starts after the transfer (e.g. overwriting swapped-out blocks).
  void compute_waits_for(uint64_t ticket) { backend_.compute_waits_for(ticket); }
  // Loads overlapped with the prefill layer by layer: the compute queue waits for the transfer only as the model
  // starts `layer` (enter_layer), so earlier layers run while the later layers' KV still copies. Waits not yet
  // entered are made whole by flush_layer_waits (the runner does so before any step that calls no enter_layer).
  void wait_before_layer(int layer, uint64_t ticket) { layer_waits_.emplace_back(layer, ticket); }
  bool has_layer_waits() const { return !layer_waits_.empty(); }
  void enter_layer(int layer);
  void flush_layer_waits();

 private:
  void check_block(int block, const char* what) const;
  // The regions of one block of every layer, device side, in slot order (K, V per layer; then scales).
  void block_regions(int block, std::vector<std::byte*>& out) const;

  KvCache(ops::Backend& backend, const KvCacheConfig& config, std::vector<model::KvLayer> views);
  ops::Backend& backend_;
  KvCacheConfig config_;
  bool view_ = false;
  std::vector<ops::DeviceBuffer> k_, v_, k_scales_, v_scales_;
  std::vector<model::KvLayer> views_;
  std::vector<std::pair<int, uint64_t>> layer_waits_;  // (first layer that reads it, transfer)
};

}  // namespace peregrine::engine
