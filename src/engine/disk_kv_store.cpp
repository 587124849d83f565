// DiskKvStore (see disk_kv_store.h).
#include "engine/disk_kv_store.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <iterator>

#define XXH_INLINE_ALL
#include <xxhash.h>

#include "core/status.h"

namespace peregrine::engine {
namespace {

namespace fs = std::filesystem;

constexpr char kMagic[8] = {'P', 'G', 'K', 'V', 'B', 'L', 'K', '1'};

struct Header {
  char magic[8];
  uint64_t identity;
  uint64_t key;
  uint64_t parent_key;
  uint32_t block_size;
  uint32_t reserved;
  uint64_t payload_bytes;
  uint64_t checksum;
};
static_assert(sizeof(Header) == 56);

uint64_t checksum_of(std::span<const int32_t> tokens, const std::byte* payload, size_t n) {
  return XXH3_64bits_withSeed(payload, n, XXH3_64bits(tokens.data(), tokens.size_bytes()));
}

std::string hex16(uint64_t v) {
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(v));
  return buf;
}

bool read_all(int fd, void* dst, size_t n) {
  auto* p = static_cast<char*>(dst);
  while (n > 0) {
    const ssize_t r = ::read(fd, p, n);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return false;
    p += r;
    n -= static_cast<size_t>(r);
  }
  return true;
}

bool write_all(int fd, const void* src, size_t n) {
  const auto* p = static_cast<const char*>(src);
  while (n > 0) {
    const ssize_t w = ::write(fd, p, n);
    if (w < 0 && errno == EINTR) continue;
    if (w == 0) errno = EIO;
    if (w <= 0) return false;
    p += w;
    n -= static_cast<size_t>(w);
  }
  return true;
}

}  // namespace

DiskKvStore::DiskKvStore(Config config) : config_(std::move(config)) {
  if (config_.payload_bytes == 0 || config_.block_size <= 0)
    throw Error(ErrorCode::kInvalidArgument, "kv_cache_dir: the disk tier needs a KV layout");
  bound_ = config_.max_bytes;
  path_ = (fs::path(config_.dir) / hex16(config_.identity)).string();
  std::error_code ec;
  fs::create_directories(path_, ec);
  if (ec || !fs::is_directory(path_))
    throw Error(ErrorCode::kInvalidArgument, "kv_cache_dir: cannot create " + path_ + ": " + ec.message());
  index_existing();
  for (int i = 0; i < std::max(1, config_.writer_threads); ++i) writers_.emplace_back([this] { writer_loop(); });
  for (int i = 0; i < std::max(1, config_.reader_threads); ++i) readers_.emplace_back([this] { reader_loop(); });
}

DiskKvStore::~DiskKvStore() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  read_wake_.notify_all();
  room_.notify_all();
  for (std::thread& t : writers_) t.join();
  for (std::thread& t : readers_) t.join();
}

uint64_t DiskKvStore::read_async(uint64_t key, std::byte* dst) {
  std::lock_guard<std::mutex> lock(mutex_);
  const uint64_t id = ++next_read_;
  Read r;
  r.key = key;
  r.dst = dst;
  reads_.emplace(id, std::move(r));
  read_queue_.push_back(id);
  read_wake_.notify_one();
  return id;
}

int DiskKvStore::read_result(uint64_t id, uint64_t& parent_key, std::vector<int32_t>& tokens) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = reads_.find(id);
  if (it == reads_.end()) return 0;
  if (it->second.status < 0) return -1;
  const int status = it->second.status;
  parent_key = it->second.parent_key;
  tokens = std::move(it->second.tokens);
  reads_.erase(it);
  return status;
}

bool DiskKvStore::read_finished(uint64_t id) const {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = reads_.find(id);
  return it == reads_.end() || it->second.status >= 0;
}

void DiskKvStore::reader_loop() {
  std::unique_lock<std::mutex> lock(mutex_);
  for (;;) {
    read_wake_.wait(lock, [&] { return stopping_ || !read_queue_.empty(); });
    if (read_queue_.empty()) return;  // stopping; reads still queued are answered first
    const uint64_t id = read_queue_.front();
    read_queue_.pop_front();
    const Read job = reads_.at(id);
    ++reading_;
    lock.unlock();
    uint64_t parent = 0;
    std::vector<int32_t> tokens;
    const bool ok = read(job.key, job.dst, parent, tokens);
    lock.lock();
    if (--reading_ == 0 && read_queue_.empty()) wake_.notify_all();  // the writers may go on
    Read& r = reads_.at(id);
    r.status = ok ? 1 : 0;
    r.parent_key = parent;
    r.tokens = std::move(tokens);
  }
}

std::string DiskKvStore::file_of(uint64_t key) const { return path_ + "/" + hex16(key) + ".kv"; }

void DiskKvStore::index_existing() {
  struct Found {
    fs::file_time_type time;
    uint64_t key;
    Entry entry;
  };
  std::vector<Found> found;
  const size_t tokens_bytes = sizeof(int32_t) * static_cast<size_t>(config_.block_size);
  const uint64_t want_size = sizeof(Header) + tokens_bytes + config_.payload_bytes;
  std::error_code ec;
  for (const auto& f : fs::directory_iterator(path_, ec)) {
    const fs::path p = f.path();
    if (p.extension() == ".tmp") {  // a write that never finished
      fs::remove(p, ec);
      continue;
    }
    if (p.extension() != ".kv") continue;
    auto bad = [&](const char* why) {
      std::fprintf(stderr, "peregrine: KV disk tier: dropped %s: %s\n", p.string().c_str(), why);
      fs::remove(p, ec);
      ++stats_.dropped_bad;
    };
    const int fd = ::open(p.c_str(), O_RDONLY);
    if (fd < 0) continue;
    Header h{};
    std::vector<int32_t> tokens(static_cast<size_t>(config_.block_size));
    const bool ok = read_all(fd, &h, sizeof h) && read_all(fd, tokens.data(), tokens_bytes);
    ::close(fd);
    std::error_code size_ec;
    const uint64_t size = fs::file_size(p, size_ec);
    if (!ok || size_ec) {
      bad("truncated header");
    } else if (std::memcmp(h.magic, kMagic, sizeof kMagic) != 0) {
      bad("not a Peregrine KV block (bad magic)");
    } else if (h.identity != config_.identity || h.block_size != static_cast<uint32_t>(config_.block_size) ||
               h.payload_bytes != config_.payload_bytes) {
      bad("written for another model, dtype or KV layout");
    } else if (size != want_size) {
      bad("truncated or padded (size disagrees with its header)");
    } else if (p.stem().string() != hex16(h.key)) {
      bad("its name disagrees with its key");
    } else {
      found.push_back({f.last_write_time(ec), h.key, Entry{h.parent_key, std::move(tokens), size, {}}});
    }
  }
  std::sort(found.begin(), found.end(), [](const Found& a, const Found& b) { return a.time < b.time; });
  std::lock_guard<std::mutex> lock(mutex_);
  for (Found& f : found) {
    f.entry.lru = lru_.insert(lru_.end(), f.key);
    f.entry.order = ++next_order_;
    stats_.held_bytes += f.entry.bytes;
    index_.emplace(f.key, std::move(f.entry));
  }
  stats_.found_at_start = index_.size();
  while (stats_.held_bytes > bound_ && drop_oldest_locked()) {
  }
  stats_.held_blocks = index_.size();
}

bool DiskKvStore::drop_oldest_locked() {
  for (uint64_t key : lru_) {
    if (protected_.count(key)) continue;
    drop_locked(key, false);
    ++stats_.evicted;
    return true;
  }
  return false;
}

void DiskKvStore::protect(std::span<const uint64_t> keys) {
  std::lock_guard<std::mutex> lock(mutex_);
  for (uint64_t k : keys) ++protected_[k];
}

void DiskKvStore::unprotect(std::span<const uint64_t> keys) {
  std::lock_guard<std::mutex> lock(mutex_);
  for (uint64_t k : keys) {
    auto it = protected_.find(k);
    if (it != protected_.end() && --it->second == 0) protected_.erase(it);
  }
}

void DiskKvStore::drop_locked(uint64_t key, bool bad) {
  auto it = index_.find(key);
  if (it == index_.end()) return;
  std::error_code ec;
  fs::remove(file_of(key), ec);
  stats_.held_bytes -= it->second.bytes;
  lru_.erase(it->second.lru);
  index_.erase(it);
  stats_.held_blocks = index_.size();
  if (bad) ++stats_.dropped_bad;
}

void DiskKvStore::put(uint64_t key, uint64_t parent_key, std::span<const int32_t> tokens, const std::byte* payload,
                      std::shared_ptr<void> lease, int depth) {
  std::unique_lock<std::mutex> lock(mutex_);
  if (stopping_ || index_.count(key) || queued_.count(key)) return;
  if (config_.payload_bytes + sizeof(Header) > config_.max_bytes) {
    ++stats_.dropped_full;
    return;
  }
  // A full queue: its deepest writes make room (never waiting), or, without drop_oldest_when_full, back-pressure:
  // the caller waits for the writer, and only a writer that makes no room for max_put_wait_seconds (a disk that
  // stopped answering) gets the block dropped.
  auto has_room = [&] { return stopping_ || queued_bytes_ == 0 || queued_bytes_ + config_.payload_bytes <= config_.max_queued_bytes; };
  if (!has_room() && config_.drop_oldest_when_full) {
    // Writes not started yet go, deepest first, the oldest of equally deep ones first (those being written stay:
    // the bound may be exceeded by them); writes a load is about to read stay. A new block deeper than every write
    // that could go is the one dropped.
    uint64_t dropped = 0;
    bool drop_new = false;
    for (auto it = droppable_.begin(); it != droppable_.end() && !has_room();) {
      const auto [neg_depth, order, victim] = *it;
      if (protected_.count(victim)) {
        ++it;
        continue;
      }
      if (-neg_depth < depth) {
        drop_new = true;
        break;
      }
      auto pos = queue_pos_.find(victim);
      queue_.erase(pos->second);
      queue_pos_.erase(pos);
      queued_.erase(victim);
      it = droppable_.erase(it);
      queued_bytes_ -= config_.payload_bytes;
      ++dropped;
    }
    if (drop_new) ++dropped;
    if (dropped > 0 && stats_.dropped_full == 0)
      std::fprintf(stderr, "peregrine: KV disk tier: the write queue is full (%.0f MB; the disk writes slower than "
                   "blocks are evicted): blocks are dropped, the deepest in their prefix chains first (%s)\n",
                   static_cast<double>(config_.max_queued_bytes) / 1e6, path_.c_str());
    stats_.dropped_full += dropped;
    stats_.queued_blocks = queued_.size();
    if (drop_new) return;
  } else if (!has_room()) {
    const auto t0 = std::chrono::steady_clock::now();
    const bool room = room_.wait_for(lock, std::chrono::duration<double>(config_.max_put_wait_seconds), has_room);
    ++stats_.put_waits;
    stats_.put_wait_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (!room) {
      if (stats_.dropped_full++ == 0)
        std::fprintf(stderr, "peregrine: KV disk tier: the writer made no room in %.1f s (%s); blocks are dropped "
                     "while it stays stuck\n", config_.max_put_wait_seconds, path_.c_str());
      return;
    }
    if (stopping_ || index_.count(key) || queued_.count(key)) return;
  }
  auto job = std::make_shared<Job>();
  job->key = key;
  job->parent_key = parent_key;
  job->order = ++next_order_;
  job->depth = depth;
  job->tokens.assign(tokens.begin(), tokens.end());
  if (lease) {  // lent: written (and read) from where it is until the job lets the lease go
    job->lent = payload;
    job->lease = std::move(lease);
  } else {
    job->payload.assign(payload, payload + config_.payload_bytes);
  }
  queued_bytes_ += config_.payload_bytes;
  queued_.emplace(key, job);
  droppable_.emplace(-depth, job->order, key);
  queue_.push_back(std::move(job));
  queue_pos_[key] = std::prev(queue_.end());
  stats_.queued_blocks = queued_.size();
  wake_.notify_one();
}

void DiskKvStore::writer_loop() {
  std::unique_lock<std::mutex> lock(mutex_);
  for (;;) {
    wake_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
    if (queue_.empty()) {
      if (stopping_) return;
      continue;
    }
    // Reads first: a hit waits for them, a write waits for nobody (a full queue drops its deepest). While reads are
    // queued or running the writers hold back, each for at most a second (a read stuck on a bad disk must not stop
    // the writes for good).
    if (reading_ > 0 || !read_queue_.empty()) {
      wake_.wait_for(lock, std::chrono::seconds(1),
                     [&] { return stopping_ || (reading_ == 0 && read_queue_.empty()); });
      if (queue_.empty()) continue;
    }
    std::shared_ptr<const Job> job = std::move(queue_.front());
    queue_.pop_front();
    queue_pos_.erase(job->key);
    droppable_.erase({-job->depth, job->order, job->key});
    ++writing_;
    const auto now = std::chrono::steady_clock::now();
    if (bound_ < config_.max_bytes && now - bound_lowered_ > std::chrono::seconds(60)) bound_ = config_.max_bytes;
    lock.unlock();
    int err = write_one(*job);
    if (err == ENOSPC || err == EDQUOT) {
      // The disk is full below the bound: make room among the store's own files, lower the bound to it, try again.
      lock.lock();
      const uint64_t before = stats_.held_bytes;
      bound_ = std::min(bound_, before / 8 * 7);
      bound_lowered_ = std::chrono::steady_clock::now();
      while (stats_.held_bytes > bound_ && drop_oldest_locked()) {
      }
      if (stats_.disk_full++ == 0)
        std::fprintf(stderr, "peregrine: KV disk tier: the disk under %s is full (%s) at %.3f MB of KV files; the "
                     "tier now keeps at most %.3f MB there (of %.1f MB allowed), dropping its oldest files\n",
                     path_.c_str(), std::strerror(err), static_cast<double>(before) / 1e6,
                     static_cast<double>(bound_) / 1e6, static_cast<double>(config_.max_bytes) / 1e6);
      lock.unlock();
      err = write_one(*job);
    }
    if (err != 0) note_write_failure(file_of(job->key), err);
    const bool ok = err == 0;
    lock.lock();
    --writing_;
    // The block leaves the queue and enters the index in one step, so a lookup always finds it in one of them.
    queued_.erase(job->key);
    queued_bytes_ -= config_.payload_bytes;
    stats_.queued_blocks = queued_.size();
    if (ok) {
      const uint64_t bytes = sizeof(Header) + job->tokens.size() * sizeof(int32_t) + config_.payload_bytes;
      // In queue order among the entries used since it was queued, so the disk's LRU drops blocks in the order they
      // were handed over (a chain's later blocks first), whichever writer finished first.
      auto at = lru_.end();
      while (at != lru_.begin() && index_.at(*std::prev(at)).order > job->order) --at;
      Entry e{job->parent_key, job->tokens, bytes, lru_.insert(at, job->key), job->order};
      index_.emplace(job->key, std::move(e));
      stats_.held_bytes += bytes;
      ++stats_.blocks_written;
      stats_.bytes_written += bytes;
      // A full store drops its least recently used files (the one just written too, when the writers finished out
      // of order and it is the oldest).
      while (stats_.held_bytes > bound_ && drop_oldest_locked()) {
      }
      stats_.held_blocks = index_.size();
    }
    room_.notify_all();
    if (queue_.empty() && writing_ == 0) idle_.notify_all();
  }
}

void DiskKvStore::note_write_failure(const std::string& file, int err) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (stats_.dropped_full++ == 0)
    std::fprintf(stderr, "peregrine: KV disk tier: cannot write %s (%s); blocks that do not fit are not kept\n",
                 file.c_str(), std::strerror(err));
}

int DiskKvStore::write_one(const Job& job) {
  Header h{};
  std::memcpy(h.magic, kMagic, sizeof kMagic);
  h.identity = config_.identity;
  h.key = job.key;
  h.parent_key = job.parent_key;
  h.block_size = static_cast<uint32_t>(config_.block_size);
  h.payload_bytes = config_.payload_bytes;
  h.checksum = checksum_of(job.tokens, job.data(), config_.payload_bytes);
  const std::string final_name = file_of(job.key), tmp = final_name + ".tmp";
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  bool ok = fd >= 0 && write_all(fd, &h, sizeof h) && write_all(fd, job.tokens.data(), job.tokens.size() * sizeof(int32_t)) &&
            write_all(fd, job.data(), config_.payload_bytes);
  int err = ok ? 0 : errno;
  if (fd >= 0 && ::close(fd) != 0 && ok) {
    ok = false;
    err = errno;
  }
  if (ok && ::rename(tmp.c_str(), final_name.c_str()) != 0) {
    ok = false;
    err = errno;
  }
  if (ok) return 0;
  std::error_code ec;
  fs::remove(tmp, ec);
  return err != 0 ? err : EIO;
}

bool DiskKvStore::contains(uint64_t key, uint64_t parent_key, std::span<const int32_t> tokens) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto same = [&](uint64_t parent, const std::vector<int32_t>& held) {
    return parent == parent_key && std::equal(tokens.begin(), tokens.end(), held.begin(), held.end());
  };
  if (auto q = queued_.find(key); q != queued_.end()) return same(q->second->parent_key, q->second->tokens);
  auto it = index_.find(key);
  if (it == index_.end() || !same(it->second.parent_key, it->second.tokens)) return false;
  make_recent(it->second);
  return true;
}

void DiskKvStore::touch(uint64_t key) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = index_.find(key);
  if (it != index_.end()) make_recent(it->second);
}

bool DiskKvStore::read(uint64_t key, std::byte* dst, uint64_t& parent_key_out, std::vector<int32_t>& tokens_out) {
  uint64_t parent_key = 0;
  std::vector<int32_t> want_tokens;
  std::shared_ptr<const Job> queued;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (auto q = queued_.find(key); q != queued_.end()) {
      queued = q->second;
    } else {
      auto it = index_.find(key);
      if (it == index_.end()) return false;
      parent_key = it->second.parent_key;
      want_tokens = it->second.tokens;
    }
  }
  if (queued) {  // not written yet (or being written): the queued copy is the block
    std::memcpy(dst, queued->data(), config_.payload_bytes);
    parent_key_out = queued->parent_key;
    tokens_out = queued->tokens;
    std::lock_guard<std::mutex> lock(mutex_);
    ++stats_.blocks_read;
    ++stats_.blocks_read_queued;
    stats_.bytes_read += config_.payload_bytes;
    return true;
  }
  const std::string name = file_of(key);
  auto bad = [&](const char* why) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!index_.count(key)) return false;  // dropped meanwhile to stay within the bound: absent, not bad
    std::fprintf(stderr, "peregrine: KV disk tier: dropped %s: %s\n", name.c_str(), why);
    drop_locked(key, true);
    return false;
  };
  const int fd = ::open(name.c_str(), O_RDONLY);
  if (fd < 0) return bad("cannot be opened");
  Header h{};
  std::vector<int32_t> tokens(static_cast<size_t>(config_.block_size));
  bool ok = read_all(fd, &h, sizeof h) && read_all(fd, tokens.data(), tokens.size() * sizeof(int32_t)) &&
            read_all(fd, dst, config_.payload_bytes);
  char extra;
  const bool at_end = ok && ::read(fd, &extra, 1) == 0;
  ::close(fd);
  if (!ok) return bad("truncated");
  if (!at_end) return bad("longer than its header says");
  if (std::memcmp(h.magic, kMagic, sizeof kMagic) != 0 || h.identity != config_.identity || h.key != key ||
      h.parent_key != parent_key || h.payload_bytes != config_.payload_bytes || tokens != want_tokens)
    return bad("its header disagrees with the index (foreign or overwritten)");
  if (h.checksum != checksum_of(tokens, dst, config_.payload_bytes)) return bad("checksum mismatch (corrupted)");
  parent_key_out = parent_key;
  tokens_out = std::move(tokens);
  std::lock_guard<std::mutex> lock(mutex_);
  ++stats_.blocks_read;
  stats_.bytes_read += config_.payload_bytes;
  return true;
}

void DiskKvStore::make_recent(Entry& e) {
  lru_.splice(lru_.end(), lru_, e.lru);
  e.order = ++next_order_;
}

void DiskKvStore::flush() {
  std::unique_lock<std::mutex> lock(mutex_);
  idle_.wait(lock, [&] { return queue_.empty() && writing_ == 0; });
}

DiskKvStore::Stats DiskKvStore::stats() const {
  std::lock_guard<std::mutex> lock(mutex_);
  Stats s = stats_;
  s.bound_bytes = bound_;
  return s;
}

}  // namespace peregrine::engine
