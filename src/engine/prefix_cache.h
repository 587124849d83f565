// PrefixCache: the radix tree of full KV blocks, flattened into a hash chain. A block's key hashes its
// parent's key with its own block_size tokens, so equal keys mean equal prefixes; lookups also compare the
// stored tokens and parent key, so a hash collision can never serve wrong KV. Cached blocks live in the
// BlockPool; when the pool reuses one, evict() forgets it (its descendants simply become unreachable).
#pragma once

#include <cstdint>
#include <span>
#include <unordered_map>
#include <vector>

namespace peregrine::engine {

class PrefixCache {
 public:
  static constexpr uint64_t kRootHash = 0x9e3779b97f4a7c15ull;

  PrefixCache(int num_blocks, int block_size);

  int block_size() const { return block_size_; }
  static uint64_t hash_block(uint64_t parent_hash, std::span<const int32_t> tokens);
  // Extends hashes (a memo of the chain) to the first min(max_blocks, tokens/bs) full blocks of tokens.
  void extend_hashes(std::span<const int32_t> tokens, int max_blocks, std::vector<uint64_t>& hashes) const;
  // Appends the cached blocks of the leading hashes to out, stopping at the first miss.
  void match(std::span<const uint64_t> hashes, std::span<const int32_t> tokens, std::vector<int>& out) const;
  // Registers block as holding the full block `index` of tokens. No-op when that content is already cached
  // under another block (the caller's block stays uncached) or the block is already cached.
  void insert(int block, std::span<const uint64_t> hashes, int index, std::span<const int32_t> tokens);
  // Forgets block if it is cached.
  void evict(int block);
  bool is_cached(int block) const { return cached_[block]; }
  // A cached block's identity: its key, its parent's key, its tokens.
  uint64_t key_of(int block) const { return keys_[block]; }
  uint64_t parent_key_of(int block) const { return parent_keys_[block]; }
  int depth_of(int block) const { return depths_[block]; }  // its index in its chain (0: a prompt's first block)
  std::span<const int32_t> tokens_of(int block) const {
    return std::span<const int32_t>(tokens_).subspan(static_cast<size_t>(block) * block_size_, block_size_);
  }
  size_t size() const { return map_.size(); }

 private:
  bool same_content(int block, uint64_t parent_hash, std::span<const int32_t> block_tokens) const;

  int block_size_;
  std::unordered_map<uint64_t, int> map_;  // key -> block
  std::vector<uint64_t> keys_;             // [num_blocks]
  std::vector<uint64_t> parent_keys_;      // [num_blocks]
  std::vector<int32_t> depths_;            // [num_blocks]
  std::vector<int32_t> tokens_;            // [num_blocks * block_size]
  std::vector<bool> cached_;               // [num_blocks]
};

}  // namespace peregrine::engine
