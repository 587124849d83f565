// BPE model: vocabulary/merges loading, word -> symbols, merging, and the per-thread word cache.
#include "tokenizer/bpe_model.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <memory>
#include <cstdio>
#include <queue>

#include "core/status.h"
#include "tokenizer/byte_level.h"
#include "tokenizer/json_util.h"
#include "tokenizer/unicode.h"

namespace peregrine::tokenizer {
namespace {

constexpr uint32_t kNoRank = 0xFFFFFFFFu;
constexpr uint32_t kMetaspace = 0x2581;
constexpr std::string_view kMetaspaceUtf8 = "\xE2\x96\x81";
constexpr size_t kMaxCachedWordBytes = 2048;
constexpr size_t kMaxCacheEntries = 1 << 18;
constexpr size_t kMaxCacheBytes = 16u << 20;  // words and ids each
constexpr size_t kSmallWord = 96;  // up to this many symbols, merge by scanning a rank array

std::atomic<uint64_t> g_next_instance_id{1};

// Word -> ids cache of one tokenizer instance on one thread.
struct WordCache {
  uint64_t owner = 0;
  StringIdMap index;  // word -> entry number
  std::vector<uint32_t> starts{0};
  std::vector<int32_t> ids;

  void reset(uint64_t new_owner) {
    owner = new_owner;
    index.clear();
    starts.assign(1, 0);
    ids.clear();
  }
};
// Each thread keeps the caches of the last few tokenizer instances it used (a server may hold several models).
WordCache& thread_cache(uint64_t owner) {
  constexpr size_t kInstances = 4;
  thread_local std::vector<std::unique_ptr<WordCache>> caches;
  for (size_t i = 0; i < caches.size(); ++i) {
    if (caches[i]->owner != owner) continue;
    WordCache& cache = *caches[i];
    if (cache.index.size() >= kMaxCacheEntries || cache.index.arena_bytes() > kMaxCacheBytes ||
        cache.ids.size() > kMaxCacheBytes / sizeof(int32_t))
      cache.reset(owner);
    if (i != 0) std::rotate(caches.begin(), caches.begin() + static_cast<std::ptrdiff_t>(i), caches.begin() + static_cast<std::ptrdiff_t>(i + 1));
    return *caches[0];
  }
  if (caches.size() < kInstances) {
    caches.insert(caches.begin(), std::make_unique<WordCache>());
  } else {
    std::rotate(caches.begin(), caches.end() - 1, caches.end());  // reuse the least recently used
  }
  caches[0]->reset(owner);
  return *caches[0];
}

// A small direct-mapped cache in front of everything: short words seen recently -> their ids. It stays in L2,
// so a repeated word costs one hash and one compare instead of misses in the large vocabulary/cache tables.
// Entries carry their tokenizer's tag, so several tokenizers share it without flushing.
struct FrontCache {
  static constexpr size_t kEntries = 16384;
  static constexpr size_t kMaxBytes = 24;
  static constexpr size_t kMaxIds = 8;
  struct Entry {
    uint32_t owner = 0;  // 0: empty
    uint8_t len = 0;
    uint8_t num_ids = 0;
    char bytes[kMaxBytes];
    int32_t ids[kMaxIds];
  };
  std::vector<Entry> entries = std::vector<Entry>(kEntries);
};
FrontCache& front_cache() {
  thread_local FrontCache cache;
  return cache;
}

uint32_t last_code_point(std::string_view s) {
  size_t start = s.size() - 1;
  while (start > 0 && (static_cast<unsigned char>(s[start]) & 0xC0) == 0x80) --start;
  size_t i = start;
  return next_code_point(s, i);
}

}  // namespace

BpeModel::BpeModel(const nlohmann::json& model, TokenizerJsonParts& parts, bool raw_bytes)
    : raw_bytes_(raw_bytes), instance_id_(g_next_instance_id.fetch_add(1)) {
  if (!parts.has_vocab_object) throw Error(ErrorCode::kFormatError, "tokenizer.json: BPE model needs a 'vocab' object");
  continuing_subword_prefix_ = json_value<std::string>(model, "continuing_subword_prefix", "");
  end_of_word_suffix_ = json_value<std::string>(model, "end_of_word_suffix", "");
  fuse_unk_ = json_value<bool>(model, "fuse_unk", false);
  byte_fallback_ = json_value<bool>(model, "byte_fallback", false);
  ignore_merges_ = json_value<bool>(model, "ignore_merges", false);

  int64_t max_id = -1;
  for (const auto& e : parts.vocab) {
    if (e.id < 0 || e.id > 0x7FFFFFFF) throw Error(ErrorCode::kFormatError, "tokenizer.json: vocab id out of range");
    max_id = std::max(max_id, e.id);
  }
  tokens_.assign(static_cast<size_t>(max_id + 1), ArenaString{0, 0xFFFFFFFFu});
  vocab_.reserve(parts.vocab.size(), parts.arena.size());
  std::string scratch;
  for (const auto& e : parts.vocab) {
    tokens_[e.id] = e.token;
    std::string_view spelling = parts.view(e.token);
    if (raw_bytes_) {
      scratch.clear();
      if (byte_level_to_bytes(spelling, scratch)) vocab_.set(scratch, static_cast<uint32_t>(e.id));
      else unmappable_.set(spelling, static_cast<uint32_t>(e.id));
    } else {
      vocab_.set(spelling, static_cast<uint32_t>(e.id));
    }
  }

  // Maps a tokenizer.json spelling to its lookup form (raw bytes in raw-byte mode).
  auto to_internal = [&](std::string_view spelling, std::string& out) {
    out.clear();
    if (!raw_bytes_) {
      out.assign(spelling);
      return true;
    }
    return byte_level_to_bytes(spelling, out);
  };

  merges_.reserve(parts.merges.size());
  std::string left, right;
  for (size_t rank = 0; rank < parts.merges.size(); ++rank) {
    std::string_view l = parts.view(parts.merges[rank].left), r = parts.view(parts.merges[rank].right);
    if (!to_internal(l, left) || !to_internal(r, right)) continue;
    int32_t a = lookup(left), b = lookup(right);
    if (a < 0 || b < 0) continue;
    std::string_view r_rest = right;
    if (!continuing_subword_prefix_.empty() && r_rest.substr(0, continuing_subword_prefix_.size()) == continuing_subword_prefix_)
      r_rest.remove_prefix(continuing_subword_prefix_.size());
    left.append(r_rest);
    int32_t merged = lookup(left);
    if (merged < 0) continue;
    merges_.set(pair_key(a, b), MergeValue{static_cast<uint32_t>(rank), static_cast<uint32_t>(merged)});
    if (!raw_bytes_ && r.substr(0, kMetaspaceUtf8.size()) == kMetaspaceUtf8 && !l.empty()) {
      uint32_t prev = last_code_point(l);
      if (prev != kMetaspace) metaspace_blocking_prev_.push_back(prev);
    }
  }

  if (auto unk = model.find("unk_token"); unk != model.end() && unk->is_string()) {
    std::string unk_internal;
    if (to_internal(unk->get<std::string>(), unk_internal)) unk_id_ = lookup(unk_internal);
  }
  for (int b = 0; b < 256; ++b) {
    char name[8];
    std::snprintf(name, sizeof name, "<0x%02X>", b);
    byte_fallback_ids_[b] = raw_bytes_ ? -1 : lookup(name);
    byte_ids_[b] = raw_bytes_ ? lookup(std::string_view(reinterpret_cast<const char*>(&b), 1)) : -1;
  }
  has_all_byte_fallback_ = std::all_of(std::begin(byte_fallback_ids_), std::end(byte_fallback_ids_), [](int32_t id) { return id >= 0; });

  if (!raw_bytes_) {
    if (continuing_subword_prefix_.empty() && end_of_word_suffix_.empty()) {
      char_ids_.assign(0x10000, -1);
      for (size_t id = 0; id < tokens_.size(); ++id) {
        if (tokens_[id].length == 0xFFFFFFFFu) continue;
        std::string_view s = std::string_view(parts.arena).substr(tokens_[id].offset, tokens_[id].length);
        if (s.empty()) continue;
        size_t i = 0;
        uint32_t cp = next_code_point(s, i);
        if (i == s.size() && cp < 0x10000 && vocab_.get(s) == id) char_ids_[cp] = static_cast<int32_t>(id);
      }
    }
    // Splitting before U+2581 is safe when no token contains "<c>U+2581" for the preceding c (other than U+2581).
    if (lookup(kMetaspaceUtf8) >= 0) {
      for (const auto& e : parts.vocab) {
        std::string_view s = parts.view(e.token);
        size_t i = 0;
        uint32_t prev = 0;
        bool first = true;
        while (i < s.size()) {
          uint32_t cp = next_code_point(s, i);
          if (!first && cp == kMetaspace && prev != kMetaspace) metaspace_blocking_prev_.push_back(prev);
          prev = cp;
          first = false;
        }
      }
      std::sort(metaspace_blocking_prev_.begin(), metaspace_blocking_prev_.end());
      metaspace_blocking_prev_.erase(std::unique(metaspace_blocking_prev_.begin(), metaspace_blocking_prev_.end()),
                                     metaspace_blocking_prev_.end());
      split_before_metaspace_ = true;
    }
  }
  arena_ = std::move(parts.arena);
}

std::optional<int32_t> BpeModel::token_to_id(std::string_view token) const {
  if (raw_bytes_) {
    std::string bytes;
    if (byte_level_to_bytes(token, bytes)) {
      int32_t id = lookup(bytes);
      if (id >= 0) return id;
    }
    uint32_t v = unmappable_.get(token);
    if (v != StringIdMap::kMissing) return static_cast<int32_t>(v);
    return std::nullopt;
  }
  int32_t id = lookup(token);
  return id >= 0 ? std::optional<int32_t>(id) : std::nullopt;
}

std::string_view BpeModel::id_to_token(int32_t id) const {
  if (id < 0 || static_cast<size_t>(id) >= tokens_.size() || tokens_[id].length == 0xFFFFFFFFu) return {};
  return std::string_view(arena_).substr(tokens_[id].offset, tokens_[id].length);
}

void BpeModel::tokenize_spm(std::string_view word, std::vector<int32_t>& out) const {
  struct Sym {
    uint32_t begin, len;
    int32_t prev, next;
  };
  struct Pair {
    float score;
    int32_t left, right;
    uint32_t len;  // bytes of the merged text when queued (stale entries no longer match)
  };
  // Highest score first; on equal scores the leftmost pair.
  auto worse = [](const Pair& a, const Pair& b) { return a.score < b.score || (a.score == b.score && a.left > b.left); };
  std::vector<Sym> syms;
  for (size_t at = 0; at < word.size();) {
    const unsigned char c = static_cast<unsigned char>(word[at]);
    size_t n = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 1;
    n = std::min(n, word.size() - at);
    const int32_t i = static_cast<int32_t>(syms.size());
    syms.push_back({static_cast<uint32_t>(at), static_cast<uint32_t>(n), i - 1, at + n == word.size() ? -1 : i + 1});
    at += n;
  }
  std::vector<Pair> heap;
  auto try_pair = [&](int32_t l, int32_t r) {
    if (l < 0 || r < 0) return;
    const uint32_t len = syms[l].len + syms[r].len;
    const int32_t id = lookup(word.substr(syms[l].begin, len));
    if (id < 0 || static_cast<size_t>(id) >= spm_scores_.size()) return;
    heap.push_back({spm_scores_[static_cast<size_t>(id)], l, r, len});
    std::push_heap(heap.begin(), heap.end(), worse);
  };
  for (size_t i = 1; i < syms.size(); ++i) try_pair(static_cast<int32_t>(i - 1), static_cast<int32_t>(i));
  while (!heap.empty()) {
    std::pop_heap(heap.begin(), heap.end(), worse);
    const Pair p = heap.back();
    heap.pop_back();
    Sym& l = syms[p.left];
    Sym& r = syms[p.right];
    if (l.len == 0 || r.len == 0 || l.len + r.len != p.len || l.next != p.right) continue;
    l.len += r.len;
    r.len = 0;
    l.next = r.next;
    if (r.next >= 0) syms[r.next].prev = p.left;
    try_pair(l.prev, p.left);
    try_pair(p.left, l.next);
  }
  for (int32_t i = syms.empty() ? -1 : 0; i >= 0; i = syms[i].next) {
    const std::string_view text = word.substr(syms[i].begin, syms[i].len);
    const int32_t id = lookup(text);
    if (id >= 0) {
      out.push_back(id);
      continue;
    }
    for (char ch : text) {
      const int32_t b = byte_fallback_ids_[static_cast<unsigned char>(ch)];
      const int32_t single = lookup(std::string_view(&ch, 1));
      if (b >= 0) out.push_back(b);
      else if (single >= 0) out.push_back(single);
      else if (unk_id_ >= 0) out.push_back(unk_id_);
    }
  }
}

void BpeModel::tokenize(std::string_view word, std::vector<int32_t>& out) const {
  if (word.empty()) return;
  if (!spm_scores_.empty()) {
    tokenize_spm(word, out);
    return;
  }
  if (!split_before_metaspace_ || word.size() <= kMetaspaceUtf8.size()) {
    tokenize_chunk(word, out);
    return;
  }
  size_t chunk = 0;
  size_t pos = 1;
  while ((pos = word.find(kMetaspaceUtf8, pos)) != std::string_view::npos) {
    uint32_t prev = last_code_point(word.substr(0, pos));
    if (prev != kMetaspace &&
        !std::binary_search(metaspace_blocking_prev_.begin(), metaspace_blocking_prev_.end(), prev)) {
      tokenize_chunk(word.substr(chunk, pos - chunk), out);
      chunk = pos;
    }
    pos += kMetaspaceUtf8.size();
  }
  tokenize_chunk(word.substr(chunk), out);
}

void BpeModel::tokenize_chunk(std::string_view word, std::vector<int32_t>& out) const {
  FrontCache::Entry* front = nullptr;
  const auto tag = static_cast<uint32_t>(instance_id_);
  if (word.size() <= FrontCache::kMaxBytes) {
    FrontCache& fc = front_cache();
    front = &fc.entries[(hash_bytes(word.data(), word.size()) ^ tag) & (FrontCache::kEntries - 1)];
    if (front->owner == tag && front->len == word.size() && std::memcmp(front->bytes, word.data(), word.size()) == 0) {
      out.insert(out.end(), front->ids, front->ids + front->num_ids);
      return;
    }
  }
  size_t first = out.size();
  tokenize_uncached(word, out);
  if (front && out.size() - first <= FrontCache::kMaxIds) {
    front->owner = tag;
    front->len = static_cast<uint8_t>(word.size());
    front->num_ids = static_cast<uint8_t>(out.size() - first);
    std::memcpy(front->bytes, word.data(), word.size());
    std::copy(out.begin() + static_cast<std::ptrdiff_t>(first), out.end(), front->ids);
  }
}

void BpeModel::tokenize_uncached(std::string_view word, std::vector<int32_t>& out) const {
  if (ignore_merges_) {
    int32_t id = lookup(word);
    if (id >= 0) {
      out.push_back(id);
      return;
    }
  }
  bool cacheable = word.size() <= kMaxCachedWordBytes;
  WordCache* cache = nullptr;
  if (cacheable) {
    cache = &thread_cache(instance_id_);
    uint32_t entry = cache->index.get(word);
    if (entry != StringIdMap::kMissing) {
      out.insert(out.end(), cache->ids.begin() + cache->starts[entry], cache->ids.begin() + cache->starts[entry + 1]);
      return;
    }
  }
  thread_local std::vector<int32_t> syms;
  syms.clear();
  word_to_symbols(word, syms);
  if (syms.size() > 1) {
    if (syms.size() <= kSmallWord) merge_small(syms);
    else merge_large(syms);
  }
  out.insert(out.end(), syms.begin(), syms.end());
  if (cacheable) {
    cache->index.set(word, static_cast<uint32_t>(cache->starts.size() - 1));
    cache->ids.insert(cache->ids.end(), syms.begin(), syms.end());
    cache->starts.push_back(static_cast<uint32_t>(cache->ids.size()));
  }
}

void BpeModel::word_to_symbols(std::string_view word, std::vector<int32_t>& syms) const {
  if (raw_bytes_) {
    for (char c : word) {
      int32_t id = byte_ids_[static_cast<unsigned char>(c)];
      if (id >= 0) syms.push_back(id);
      else if (unk_id_ >= 0 && !(fuse_unk_ && !syms.empty() && syms.back() == unk_id_)) syms.push_back(unk_id_);
    }
    return;
  }
  bool decorated = !continuing_subword_prefix_.empty() || !end_of_word_suffix_.empty();
  bool pending_unk = false;  // an unknown run not yet emitted (fuse_unk)
  std::string scratch;
  for (size_t i = 0; i < word.size();) {
    size_t start = i;
    uint32_t cp = next_code_point(word, i);
    std::string_view ch = word.substr(start, i - start);
    int32_t id = -1;
    if (!decorated) {
      id = cp < 0x10000 ? char_ids_[cp] : lookup(ch);
    } else {
      scratch.clear();
      if (start != 0) scratch.append(continuing_subword_prefix_);
      scratch.append(ch);
      if (i == word.size()) scratch.append(end_of_word_suffix_);
      id = lookup(scratch);
      ch = scratch;
    }
    if (id >= 0) {
      if (pending_unk) syms.push_back(unk_id_), pending_unk = false;
      syms.push_back(id);
      continue;
    }
    if (byte_fallback_) {
      bool all = has_all_byte_fallback_;
      if (!all) {
        all = true;
        for (char c : ch) all = all && byte_fallback_ids_[static_cast<unsigned char>(c)] >= 0;
      }
      if (all) {
        if (pending_unk) syms.push_back(unk_id_), pending_unk = false;
        for (char c : ch) syms.push_back(byte_fallback_ids_[static_cast<unsigned char>(c)]);
        continue;
      }
    }
    if (unk_id_ >= 0) {
      if (pending_unk && !fuse_unk_) syms.push_back(unk_id_);
      pending_unk = true;
    }
  }
  if (pending_unk) syms.push_back(unk_id_);
}

void BpeModel::merge_small(std::vector<int32_t>& syms) const {
  size_t n = syms.size();
  uint32_t ranks[kSmallWord], new_ids[kSmallWord];
  auto fill = [&](size_t i) {
    const MergeValue* m = merges_.get(pair_key(syms[i], syms[i + 1]));
    ranks[i] = m ? m->rank : kNoRank;
    new_ids[i] = m ? m->new_id : 0;
  };
  for (size_t i = 0; i + 1 < n; ++i) fill(i);
  while (n > 1) {
    uint32_t best = kNoRank;
    size_t at = 0;
    for (size_t i = 0; i + 1 < n; ++i)
      if (ranks[i] < best) best = ranks[i], at = i;
    if (best == kNoRank) break;
    syms[at] = static_cast<int32_t>(new_ids[at]);
    // Remove symbol at+1 and the pair entry at+1 (pair (at+1, at+2) becomes (at, at+1)).
    for (size_t k = at + 1; k + 1 < n; ++k) {
      syms[k] = syms[k + 1];
      ranks[k] = ranks[k + 1];
      new_ids[k] = new_ids[k + 1];
    }
    --n;
    if (at + 1 < n) fill(at);
    else ranks[at] = kNoRank;
    if (at > 0) fill(at - 1);
  }
  syms.resize(n);
}

void BpeModel::merge_large(std::vector<int32_t>& syms) const {
  struct Sym {
    int32_t id;
    int32_t prev, next;
    uint32_t version;
  };
  struct Entry {
    uint32_t rank;
    int32_t pos;
    uint32_t left_version, right_version;
    bool operator>(const Entry& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
  };
  size_t n = syms.size();
  std::vector<Sym> s(n);
  for (size_t i = 0; i < n; ++i)
    s[i] = Sym{syms[i], static_cast<int32_t>(i) - 1, i + 1 < n ? static_cast<int32_t>(i + 1) : -1, 0};
  std::priority_queue<Entry, std::vector<Entry>, std::greater<Entry>> heap;
  auto push = [&](int32_t pos) {
    if (pos < 0 || s[pos].next < 0) return;
    int32_t nx = s[pos].next;
    if (const MergeValue* m = merges_.get(pair_key(s[pos].id, s[nx].id)))
      heap.push(Entry{m->rank, pos, s[pos].version, s[nx].version});
  };
  for (size_t i = 0; i + 1 < n; ++i) push(static_cast<int32_t>(i));
  while (!heap.empty()) {
    Entry e = heap.top();
    heap.pop();
    Sym& left = s[e.pos];
    if (left.id < 0 || left.version != e.left_version || left.next < 0) continue;
    Sym& right = s[left.next];
    if (right.version != e.right_version) continue;
    const MergeValue* m = merges_.get(pair_key(left.id, right.id));
    left.id = static_cast<int32_t>(m->new_id);
    ++left.version;
    right.id = -1;
    ++right.version;
    left.next = right.next;
    if (right.next >= 0) s[right.next].prev = e.pos;
    push(left.prev);
    push(e.pos);
  }
  syms.clear();
  for (int32_t i = 0; i >= 0; i = s[i].next) syms.push_back(s[i].id);
}

}  // namespace peregrine::tokenizer
