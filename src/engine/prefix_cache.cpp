// PrefixCache: hash-chained lookup of full KV blocks with exact token verification (see prefix_cache.h).
#include "engine/prefix_cache.h"

#include <algorithm>

#define XXH_INLINE_ALL
#include <xxhash.h>

namespace peregrine::engine {

PrefixCache::PrefixCache(int num_blocks, int block_size)
    : block_size_(block_size),
      keys_(num_blocks, 0),
      parent_keys_(num_blocks, 0),
      depths_(num_blocks, 0),
      tokens_(static_cast<size_t>(num_blocks) * block_size, 0),
      cached_(num_blocks, false) {}

uint64_t PrefixCache::hash_block(uint64_t parent_hash, std::span<const int32_t> tokens) {
  return XXH3_64bits_withSeed(tokens.data(), tokens.size_bytes(), parent_hash);
}

void PrefixCache::extend_hashes(std::span<const int32_t> tokens, int max_blocks,
                                std::vector<uint64_t>& hashes) const {
  const int full = std::min<int>(max_blocks, static_cast<int>(tokens.size()) / block_size_);
  for (int i = static_cast<int>(hashes.size()); i < full; ++i) {
    const uint64_t parent = i == 0 ? kRootHash : hashes[i - 1];
    hashes.push_back(hash_block(parent, tokens.subspan(static_cast<size_t>(i) * block_size_, block_size_)));
  }
}

bool PrefixCache::same_content(int block, uint64_t parent_hash, std::span<const int32_t> block_tokens) const {
  if (parent_keys_[block] != parent_hash) return false;
  return std::equal(block_tokens.begin(), block_tokens.end(),
                    tokens_.begin() + static_cast<ptrdiff_t>(block) * block_size_);
}

void PrefixCache::match(std::span<const uint64_t> hashes, std::span<const int32_t> tokens,
                        std::vector<int>& out) const {
  for (size_t i = 0; i < hashes.size(); ++i) {
    auto it = map_.find(hashes[i]);
    if (it == map_.end()) return;
    const uint64_t parent = i == 0 ? kRootHash : hashes[i - 1];
    if (!same_content(it->second, parent, tokens.subspan(i * block_size_, block_size_))) return;
    out.push_back(it->second);
  }
}

void PrefixCache::insert(int block, std::span<const uint64_t> hashes, int index, std::span<const int32_t> tokens) {
  if (cached_[block]) return;
  const uint64_t key = hashes[index];
  if (map_.count(key)) return;
  map_.emplace(key, block);
  keys_[block] = key;
  parent_keys_[block] = index == 0 ? kRootHash : hashes[index - 1];
  depths_[block] = index;
  std::copy_n(tokens.begin() + static_cast<ptrdiff_t>(index) * block_size_, block_size_,
              tokens_.begin() + static_cast<ptrdiff_t>(block) * block_size_);
  cached_[block] = true;
}

void PrefixCache::evict(int block) {
  if (!cached_[block]) return;
  auto it = map_.find(keys_[block]);
  if (it != map_.end() && it->second == block) map_.erase(it);
  cached_[block] = false;
}

}  // namespace peregrine::engine
