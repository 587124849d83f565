// DiskKvStore: the prefix cache's disk tier. One file per KV block under DIR/<identity>/ (the identity hashes the
// model, dtype and KV layout, so a restart with the same model finds its blocks and another model never sees
// them), written by a pool of background threads to a temporary name and renamed when complete (a process killed mid-write
// leaves a .tmp file, removed at the next start, never a torn block). A file holds a header (magic, identity, the
// block's prefix-cache key, parent key and tokens, payload size, an XXH3 checksum of tokens and payload) and the
// block's bytes as a host-tier slot holds them. The store is bounded in bytes, dropping the least recently used
// files. Every read checks the header and the checksum; a truncated, corrupted or foreign file is dropped and logged.
// A block queued for writing is already part of the store: contains() finds it and a read is served from the queued
// copy in memory, so a block handed over a moment ago is never missed. The queue is bounded in bytes. A put() that
// finds it full never waits (the engine thread, and so decode, must not wait for a disk slower than the evictions):
// queued writes are dropped to make room (logged once, counted in dropped_full), the deepest first (a block's depth is
// its index in its prefix chain: a hit needs every block before it, so a chain's last blocks are worth the least), the
// oldest first among equally deep ones; a new block deeper than every queued one is dropped itself. With
// drop_oldest_when_full off, put() waits for the writer instead (back-pressure) and drops the block only when the
// writer has made no room for max_put_wait_seconds.
// Reads come first: while reads are queued or running the writers hold back (each for at most a second).
// A disk that fills before the bound does (other files on it, a smaller filesystem than --kv-cache-disk-gb) is met
// by shrinking: the write that found no space drops the least recently used files down to 7/8 of what the store
// held, lowers the bound to that, and is tried once more; the store goes on within what the disk has, logging once.
// The lowered bound is lifted again a minute later (a new ENOSPC lowers it again).
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <list>
#include <memory>
#include <mutex>
#include <set>
#include <span>
#include <string>
#include <thread>
#include <tuple>
#include <unordered_map>
#include <vector>

namespace peregrine::engine {

class DiskKvStore {
 public:
  struct Config {
    std::string dir;             // the root; files go to dir/<identity as 16 hex digits>/
    uint64_t max_bytes = 0;      // bound on the files' bytes
    uint64_t identity = 0;       // model + dtype + KV layout
    int block_size = 16;         // tokens per block
    size_t payload_bytes = 0;    // bytes of one block (a host slot)
    size_t max_queued_bytes = size_t{1} << 30;  // bytes of queued writes; a put() beyond them makes room
    bool drop_oldest_when_full = true;             // room by dropping the oldest queued writes (else: wait)
    double max_put_wait_seconds = 10.0;            // when waiting: a put() waiting this long for room is dropped
    // Files written and read at once: a disk takes several in parallel, and a load reads many blocks. On the H200
    // host's disk, 16 each against 4 dropped 0 writes instead of 231 and cut a disk hit from 376 to 337 ms.
    int writer_threads = 16;
    int reader_threads = 16;
  };
  struct Stats {
    uint64_t blocks_written = 0, bytes_written = 0, blocks_read = 0, bytes_read = 0;
    uint64_t dropped_bad = 0;      // files found truncated, corrupted or foreign
    uint64_t dropped_full = 0;     // writes dropped (the disk refused them, or the writer made no room in time)
    uint64_t evicted = 0;          // files removed to stay within max_bytes
    uint64_t found_at_start = 0;   // files indexed when the store opened
    uint64_t held_blocks = 0, held_bytes = 0;  // files (queued writes not included)
    uint64_t queued_blocks = 0;    // writes waiting now (findable and readable from memory)
    uint64_t blocks_read_queued = 0;  // reads served from a queued write's memory (part of blocks_read)
    uint64_t put_waits = 0;        // put() calls that found the queue full and waited for the writer
    double put_wait_seconds = 0;   // the time they waited
    uint64_t disk_full = 0;        // writes the disk refused for want of space (ENOSPC, EDQUOT)
    uint64_t bound_bytes = 0;      // the bound in force: max_bytes, or lower while the disk is full (see put)
  };

  // Opens (creating) the directory and indexes the files already there. Throws Error(kInvalidArgument) naming the
  // directory when it cannot be created or read.
  explicit DiskKvStore(Config config);
  ~DiskKvStore();  // finishes the queued writes
  DiskKvStore(const DiskKvStore&) = delete;
  DiskKvStore& operator=(const DiskKvStore&) = delete;

  // Queues the block for writing (the payload is copied); a block already stored or queued is skipped. A full queue
  // drops its deepest writes, or waits (see above); depth is the block's index in its chain (0: a prompt's first).
  // With a lease the payload is lent, not copied: it must stay unchanged until the store lets the lease go (its last
  // reference, once the block is written or dropped, on any thread).
  void put(uint64_t key, uint64_t parent_key, std::span<const int32_t> tokens, const std::byte* payload,
           std::shared_ptr<void> lease = nullptr, int depth = 0);
  // Whether a stored or queued block has this identity (and marks a stored one recently used).
  bool contains(uint64_t key, uint64_t parent_key, std::span<const int32_t> tokens);
  // Marks a stored block recently used (no-op when absent).
  void touch(uint64_t key);
  // Reads a stored or queued block's payload into dst (payload_bytes) and its identity. False when it is absent or
  // bad (a bad file is removed and logged).
  bool read(uint64_t key, std::byte* dst, uint64_t& parent_key, std::vector<int32_t>& tokens);
  // The same read on the store's reader thread, so the engine loop never waits for the disk: returns an id for
  // read_result; dst must stay valid until the result is taken.
  uint64_t read_async(uint64_t key, std::byte* dst);
  // -1 while the read runs; then, once (the result is forgotten when returned), 1 with the block's identity filled
  // in, or 0 when it was absent or bad (a bad file is dropped and logged).
  int read_result(uint64_t id, uint64_t& parent_key, std::vector<int32_t>& tokens);
  bool read_finished(uint64_t id) const;  // whether read_result would return 0 or 1 now
  // Waits until every queued write is done (tests, shutdown).
  void flush();
  // Blocks a load is about to read (counted: as many unprotects as protects). A full queue drops other writes
  // first, and the bound drops other files first, so a hit's own evictions never push out what it is loading.
  void protect(std::span<const uint64_t> keys);
  void unprotect(std::span<const uint64_t> keys);

  Stats stats() const;
  size_t num_queued() const {  // writes not yet in files
    std::lock_guard<std::mutex> lock(mutex_);
    return queued_.size();
  }
  const std::string& path() const { return path_; }

 private:
  struct Entry {
    uint64_t parent_key;
    std::vector<int32_t> tokens;
    uint64_t bytes;
    std::list<uint64_t>::iterator lru;
    uint64_t order = 0;  // when it was queued or last used: lru_ is sorted by it
  };
  struct Job {  // a queued write; shared with reads served from it while it is written
    uint64_t key, parent_key;
    uint64_t order = 0;  // its place in the queue: the writers finish in any order, the LRU keeps this one
    int depth = 0;       // its index in its chain: a full queue drops the deepest first
    std::vector<int32_t> tokens;
    std::vector<std::byte> payload;   // a copy, or empty when lent
    const std::byte* lent = nullptr;  // the lent payload, valid while lease is held
    std::shared_ptr<void> lease;
    const std::byte* data() const { return lent ? lent : payload.data(); }
  };
  struct Read {
    uint64_t key = 0;
    std::byte* dst = nullptr;
    int status = -1;  // -1 queued or running, 1 read, 0 failed
    uint64_t parent_key = 0;
    std::vector<int32_t> tokens;
  };
  void reader_loop();
  std::string file_of(uint64_t key) const;
  void writer_loop();
  // The file, renamed into place; on failure nothing is left behind and the errno is returned (0: written).
  int write_one(const Job& job);
  void note_write_failure(const std::string& file, int err);  // logs the first failure
  void drop_locked(uint64_t key, bool bad);  // removes the file and the entry (mutex_ held)
  // Drops the least recently used unprotected file (mutex_ held); false when there is none.
  bool drop_oldest_locked();
  std::unordered_map<uint64_t, int> protected_;  // keys loads are reading, with their counts
  void index_existing();

  Config config_;
  std::string path_;
  mutable std::mutex mutex_;
  std::condition_variable wake_, idle_, room_;
  std::unordered_map<uint64_t, Entry> index_;
  std::list<uint64_t> lru_;  // least recently used first
  uint64_t next_order_ = 0;  // Entry::order and Job::order
  void make_recent(Entry& e);  // marks it used now (mutex_ held)
  std::list<std::shared_ptr<const Job>> queue_;  // not yet taken by a writer, in the order they came
  std::unordered_map<uint64_t, std::list<std::shared_ptr<const Job>>::iterator> queue_pos_;  // by key
  std::set<std::tuple<int, uint64_t, uint64_t>> droppable_;  // (-depth, order, key) of queue_: a full queue's victims
  std::unordered_map<uint64_t, std::shared_ptr<const Job>> queued_;  // by key, until its file is in the index
  size_t queued_bytes_ = 0;
  uint64_t bound_ = 0;  // bytes the files may take now (config_.max_bytes unless the disk was found full)
  std::chrono::steady_clock::time_point bound_lowered_{};
  int writing_ = 0;  // writers inside write_one
  int reading_ = 0;  // readers inside read (writers hold back while reads run or wait)
  bool stopping_ = false;
  Stats stats_;
  std::deque<uint64_t> read_queue_;              // ids of reads not started
  std::unordered_map<uint64_t, Read> reads_;      // by id, until read_result returns their result
  uint64_t next_read_ = 0;
  std::condition_variable read_wake_;
  std::vector<std::thread> writers_, readers_;
};

}  // namespace peregrine::engine
