// DiskKvStore: the prefix cache's disk tier. One file per KV block under DIR/<identity>/ (the identity hashes the
// model, dtype and KV layout, so a restart with the same model finds its blocks and another model never sees
// them), written by a background thread to a temporary name and renamed when complete (a process killed mid-write
// leaves a .tmp file, removed at the next start, never a torn block). A file holds a header (magic, identity, the
// block's prefix-cache key, parent key and tokens, payload size, an XXH3 checksum of tokens and payload) and the
// block's bytes as a host-tier slot holds them. The store is bounded in bytes, dropping the least recently used
// files. Every read checks the header and the checksum; a truncated, corrupted or foreign file is dropped and logged.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <list>
#include <mutex>
#include <span>
#include <string>
#include <thread>
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
    size_t max_queued_bytes = size_t{256} << 20;  // writes waiting beyond this are dropped
  };
  struct Stats {
    uint64_t blocks_written = 0, bytes_written = 0, blocks_read = 0, bytes_read = 0;
    uint64_t dropped_bad = 0;      // files found truncated, corrupted or foreign
    uint64_t dropped_full = 0;     // writes dropped (queue full or the disk refused them)
    uint64_t evicted = 0;          // files removed to stay within max_bytes
    uint64_t found_at_start = 0;   // files indexed when the store opened
    uint64_t held_blocks = 0, held_bytes = 0;
  };

  // Opens (creating) the directory and indexes the files already there. Throws Error(kInvalidArgument) naming the
  // directory when it cannot be created or read.
  explicit DiskKvStore(Config config);
  ~DiskKvStore();  // finishes the queued writes
  DiskKvStore(const DiskKvStore&) = delete;
  DiskKvStore& operator=(const DiskKvStore&) = delete;

  // Queues the block for writing (the payload is copied); a block already stored or queued is skipped.
  void put(uint64_t key, uint64_t parent_key, std::span<const int32_t> tokens, const std::byte* payload);
  // Whether a stored block has this identity (and marks it recently used).
  bool contains(uint64_t key, uint64_t parent_key, std::span<const int32_t> tokens);
  // Reads a stored block's payload into dst (payload_bytes) and its identity. False when it is absent or bad (a bad
  // file is removed and logged).
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

  Stats stats() const;
  const std::string& path() const { return path_; }

 private:
  struct Entry {
    uint64_t parent_key;
    std::vector<int32_t> tokens;
    uint64_t bytes;
    std::list<uint64_t>::iterator lru;
  };
  struct Job {
    uint64_t key, parent_key;
    std::vector<int32_t> tokens;
    std::vector<std::byte> payload;
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
  void write_one(const Job& job);
  void drop_locked(uint64_t key, bool bad);  // removes the file and the entry (mutex_ held)
  void index_existing();

  Config config_;
  std::string path_;
  mutable std::mutex mutex_;
  std::condition_variable wake_, idle_;
  std::unordered_map<uint64_t, Entry> index_;
  std::list<uint64_t> lru_;  // least recently used first
  std::deque<Job> queue_;
  std::unordered_map<uint64_t, bool> queued_keys_;
  size_t queued_bytes_ = 0;
  bool writing_ = false;
  bool stopping_ = false;
  Stats stats_;
  std::deque<uint64_t> read_queue_;              // ids of reads not started
  std::unordered_map<uint64_t, Read> reads_;      // by id, until read_result returns their result
  uint64_t next_read_ = 0;
  std::condition_variable read_wake_;
  std::thread writer_, reader_;
};

}  // namespace peregrine::engine
