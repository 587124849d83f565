// DiskKvStore: blocks written in the background read back bit-identical, survive a restart, and a truncated,
// corrupted, foreign or half-written file is dropped (and never served); blocks still queued for writing are found
// and read from memory, and a full queue waits for the writer instead of dropping blocks.
#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <random>
#include <thread>

#include <csignal>
#include <cstdio>
#include <functional>
#include <fcntl.h>
#include <sched.h>
#include <sys/mount.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <sys/stat.h>
#include <unistd.h>

#include "engine/disk_kv_store.h"

namespace peregrine::engine {
namespace {

namespace fs = std::filesystem;

struct TempDir {
  fs::path path;
  TempDir() {
    path = fs::temp_directory_path() / ("peregrine_disk_kv_" + std::to_string(::getpid()) + "_" +
                                        std::to_string(std::random_device{}()));
    fs::create_directories(path);
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
};

DiskKvStore::Config config_for(const fs::path& dir, uint64_t identity = 42) {
  DiskKvStore::Config c;
  c.dir = dir.string();
  c.max_bytes = 1 << 20;
  c.identity = identity;
  c.block_size = 4;
  c.payload_bytes = 1000;
  return c;
}

std::vector<std::byte> payload_of(uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<std::byte> p(1000);
  for (auto& b : p) b = static_cast<std::byte>(rng());
  return p;
}

std::vector<int32_t> tokens_of(uint64_t key) {
  return {static_cast<int32_t>(key), 7, 8, static_cast<int32_t>(key * 3)};
}

void put_blocks(DiskKvStore& s, int n) {
  for (int k = 1; k <= n; ++k) {
    const auto p = payload_of(static_cast<uint32_t>(k));
    s.put(static_cast<uint64_t>(k), static_cast<uint64_t>(k - 1), tokens_of(static_cast<uint64_t>(k)), p.data());
  }
  s.flush();
}

TEST(DiskKvStore, BlocksReadBackBitIdenticalAndSurviveARestart) {
  TempDir dir;
  {
    DiskKvStore s(config_for(dir.path));
    put_blocks(s, 5);
    EXPECT_EQ(s.stats().blocks_written, 5u);
    for (uint64_t k = 1; k <= 5; ++k) {
      EXPECT_TRUE(s.contains(k, k - 1, tokens_of(k)));
      EXPECT_FALSE(s.contains(k, k, tokens_of(k)));  // another parent: another prefix
      std::vector<std::byte> got(1000);
      uint64_t parent = 0;
      std::vector<int32_t> tokens;
      ASSERT_TRUE(s.read(k, got.data(), parent, tokens));
      EXPECT_EQ(got, payload_of(static_cast<uint32_t>(k)));
      EXPECT_EQ(parent, k - 1);
      EXPECT_EQ(tokens, tokens_of(k));
    }
  }
  DiskKvStore again(config_for(dir.path));
  EXPECT_EQ(again.stats().found_at_start, 5u);
  std::vector<std::byte> got(1000);
  uint64_t parent = 0;
  std::vector<int32_t> tokens;
  ASSERT_TRUE(again.read(3, got.data(), parent, tokens));
  EXPECT_EQ(got, payload_of(3));
  // Another model (identity) keeps its own folder and sees none of them.
  DiskKvStore other(config_for(dir.path, 43));
  EXPECT_EQ(other.stats().found_at_start, 0u);
  EXPECT_FALSE(other.contains(3, 2, tokens_of(3)));
}

TEST(DiskKvStore, BadFilesAreDroppedNeverServed) {
  TempDir dir;
  std::string folder;
  {
    DiskKvStore s(config_for(dir.path));
    put_blocks(s, 6);
    folder = s.path();
  }
  auto file = [&](uint64_t k) {
    char name[32];
    std::snprintf(name, sizeof name, "%016llx.kv", static_cast<unsigned long long>(k));
    return fs::path(folder) / name;
  };
  // 1: truncated; 2: a payload byte flipped; 3: a header from another identity; 4: a half-written .tmp.
  fs::resize_file(file(1), fs::file_size(file(1)) - 10);
  {
    std::fstream f(file(2), std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(-5, std::ios::end);
    f.put('\x5a');
  }
  {
    std::fstream f(file(3), std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(8);
    const uint64_t foreign = 777;
    f.write(reinterpret_cast<const char*>(&foreign), sizeof foreign);
  }
  fs::copy_file(file(4), fs::path(folder) / "00000000000000aa.kv.tmp");
  DiskKvStore s(config_for(dir.path));
  EXPECT_EQ(s.stats().found_at_start, 4u);  // 2, 4, 5, 6: the truncated and the foreign one are dropped at once
  EXPECT_EQ(s.stats().dropped_bad, 2u);
  EXPECT_FALSE(fs::exists(file(1)));
  EXPECT_FALSE(fs::exists(fs::path(folder) / "00000000000000aa.kv.tmp"));
  std::vector<std::byte> got(1000);
  uint64_t parent = 0;
  std::vector<int32_t> tokens;
  EXPECT_FALSE(s.read(1, got.data(), parent, tokens));
  EXPECT_FALSE(s.read(2, got.data(), parent, tokens));  // the checksum catches the flipped byte
  EXPECT_EQ(s.stats().dropped_bad, 3u);
  EXPECT_FALSE(fs::exists(file(2)));
  EXPECT_FALSE(s.contains(2, 1, tokens_of(2)));
  ASSERT_TRUE(s.read(5, got.data(), parent, tokens));
  EXPECT_EQ(got, payload_of(5));
}

TEST(DiskKvStore, StaysWithinItsBoundDroppingTheLeastRecentlyUsed) {
  TempDir dir;
  DiskKvStore::Config c = config_for(dir.path);
  const uint64_t file_bytes = 56 + 4 * 4 + 1000;
  c.max_bytes = 3 * file_bytes;
  DiskKvStore s(c);
  put_blocks(s, 2);
  EXPECT_TRUE(s.contains(1, 0, tokens_of(1)));  // 1 is now more recent than 2
  const auto p = payload_of(3);
  s.put(3, 2, tokens_of(3), p.data());
  const auto q = payload_of(4);
  s.put(4, 3, tokens_of(4), q.data());
  s.flush();
  EXPECT_EQ(s.stats().held_blocks, 3u);
  EXPECT_LE(s.stats().held_bytes, c.max_bytes);
  EXPECT_FALSE(s.contains(2, 1, tokens_of(2)));
  EXPECT_TRUE(s.contains(1, 0, tokens_of(1)));
  EXPECT_EQ(s.stats().evicted, 1u);
}

TEST(DiskKvStore, AnUnusableFolderIsAClearError) {
  TempDir dir;
  const fs::path blocker = dir.path / "a_file";
  std::ofstream(blocker) << "x";
  try {
    DiskKvStore s(config_for(blocker));
    FAIL() << "expected an error";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("kv_cache_dir"), std::string::npos) << e.what();
  }
}

// A disk that refuses writes (here a file-size limit, failing part-way through a block as a full disk does): the
// block is not kept, no temporary is left, nothing bad is ever served, and the store goes on once writes succeed.
TEST(DiskKvStore, WritesTheDiskRefusesAreDroppedNotServed) {
  TempDir dir;
  DiskKvStore store(config_for(dir.path));
  struct rlimit old {};
  ASSERT_EQ(::getrlimit(RLIMIT_FSIZE, &old), 0);
  auto* previous = std::signal(SIGXFSZ, SIG_IGN);
  struct rlimit small = old;
  small.rlim_cur = 600;  // header and tokens fit, the 1000-byte payload does not
  ASSERT_EQ(::setrlimit(RLIMIT_FSIZE, &small), 0);
  const auto p1 = payload_of(1);
  store.put(1, 0, tokens_of(1), p1.data());
  store.flush();
  ASSERT_EQ(::setrlimit(RLIMIT_FSIZE, &old), 0);
  std::signal(SIGXFSZ, previous);
  EXPECT_EQ(store.stats().dropped_full, 1u);
  EXPECT_EQ(store.stats().held_blocks, 0u);
  EXPECT_FALSE(store.contains(1, 0, tokens_of(1)));
  std::vector<std::byte> back(1000);
  uint64_t parent = 0;
  std::vector<int32_t> toks;
  EXPECT_FALSE(store.read(1, back.data(), parent, toks));
  for (const auto& e : fs::recursive_directory_iterator(dir.path))
    EXPECT_NE(e.path().extension(), ".tmp") << e.path();
  const auto p2 = payload_of(2);
  store.put(2, 1, tokens_of(2), p2.data());
  store.flush();
  ASSERT_TRUE(store.read(2, back.data(), parent, toks));
  EXPECT_EQ(back, p2);
}

// Runs body in a child process with a tmpfs of `size` mounted at dir (a user and mount namespace of its own, so no
// privilege is needed and nothing outside sees the mount). The child's exit status: body's, or 77 when this kernel
// or sandbox allows no namespaces.
int run_on_a_small_tmpfs(const fs::path& dir, const std::string& size, const std::function<int()>& body) {
  std::fflush(nullptr);
  const pid_t pid = ::fork();
  if (pid < 0) return 77;
  if (pid == 0) {
    const unsigned uid = ::getuid(), gid = ::getgid();
    if (::unshare(CLONE_NEWUSER | CLONE_NEWNS) != 0 && ::unshare(CLONE_NEWNS) != 0) ::_exit(77);
    auto put = [](const char* path, const std::string& text) {
      std::FILE* f = std::fopen(path, "w");
      if (!f) return;
      std::fputs(text.c_str(), f);
      std::fclose(f);
    };
    put("/proc/self/setgroups", "deny");
    put("/proc/self/uid_map", "0 " + std::to_string(uid) + " 1");
    put("/proc/self/gid_map", "0 " + std::to_string(gid) + " 1");
    if (::mount("none", "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0) ::_exit(77);
    if (::mount("tmpfs", dir.c_str(), "tmpfs", 0, ("size=" + size).c_str()) != 0) ::_exit(77);
    ::_exit(body());
  }
  int status = 0;
  if (::waitpid(pid, &status, 0) != pid) return 77;
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

// A disk that fills long before the store's bound (a 64 KiB tmpfs under a 1 MiB bound; each 1,072-byte file takes
// a 4 KiB page): the write that meets ENOSPC makes room among the store's oldest files, lowers the bound and goes
// on, so the newest blocks are kept, nothing is dropped, no temporary is left, and every block held reads back
// bit-identical.
TEST(DiskKvStore, AFullDiskShrinksTheStoreAndKeepsTheNewestBlocks) {
  TempDir dir;
  const int status = run_on_a_small_tmpfs(dir.path, "64k", [&] {
    int failures = 0;
    auto check = [&](bool ok, const std::string& what) {
      if (!ok) {
        std::fprintf(stderr, "full disk: %s\n", what.c_str());
        ++failures;
      }
    };
    DiskKvStore store(config_for(dir.path));
    constexpr int kBlocks = 60;
    for (int k = 1; k <= kBlocks; ++k) {
      const auto p = payload_of(static_cast<uint32_t>(k));
      store.put(static_cast<uint64_t>(k), static_cast<uint64_t>(k - 1), tokens_of(static_cast<uint64_t>(k)), p.data());
      store.flush();  // one at a time, so each write meets the disk as the previous ones left it
    }
    const DiskKvStore::Stats s = store.stats();
    check(s.disk_full >= 1, "no ENOSPC was met (disk_full " + std::to_string(s.disk_full) + ")");
    check(s.dropped_full == 0, "blocks dropped: " + std::to_string(s.dropped_full));
    check(s.bound_bytes < (1u << 20), "the bound was not lowered: " + std::to_string(s.bound_bytes));
    check(s.held_blocks >= 6 && s.held_blocks <= 16, "held " + std::to_string(s.held_blocks) + " blocks");
    check(s.blocks_written == kBlocks, "written " + std::to_string(s.blocks_written));
    std::vector<std::byte> back(1000);
    uint64_t parent = 0;
    std::vector<int32_t> toks;
    int held = 0;
    for (int k = 1; k <= kBlocks; ++k) {
      const uint64_t key = static_cast<uint64_t>(k);
      if (!store.contains(key, key - 1, tokens_of(key))) continue;
      ++held;
      check(store.read(key, back.data(), parent, toks) && back == payload_of(static_cast<uint32_t>(k)) &&
                toks == tokens_of(key) && parent == key - 1,
            "block " + std::to_string(k) + " did not read back intact");
    }
    check(held == static_cast<int>(s.held_blocks), "contains() found " + std::to_string(held));
    for (int k = kBlocks - 5; k <= kBlocks; ++k)
      check(store.contains(k, k - 1, tokens_of(k)), "newest block " + std::to_string(k) + " not kept");
    for (const auto& e : fs::recursive_directory_iterator(dir.path))
      check(e.path().extension() != ".tmp", "temporary left: " + e.path().string());
    check(store.stats().dropped_bad == 0, "bad files met");
    return failures == 0 ? 0 : 1;
  });
  if (status == 77) GTEST_SKIP() << "no user/mount namespaces here: the full-disk case is not exercised";
  EXPECT_EQ(status, 0) << "see the child's messages above";
}

// Reads on the store's reader thread: the same bytes as read(), a missing block answers 0, each answer is given once.
TEST(DiskKvStore, ReadsInTheBackgroundAnswerOnce) {
  TempDir dir;
  DiskKvStore store(config_for(dir.path));
  put_blocks(store, 3);
  std::vector<std::byte> a(1000), b(1000);
  const uint64_t ra = store.read_async(2, a.data()), rb = store.read_async(99, b.data());
  while (!store.read_finished(ra) || !store.read_finished(rb)) std::this_thread::yield();
  uint64_t parent = 0;
  std::vector<int32_t> toks;
  EXPECT_EQ(store.read_result(ra, parent, toks), 1);
  EXPECT_EQ(parent, 1u);
  EXPECT_EQ(toks, tokens_of(2));
  EXPECT_EQ(a, payload_of(2));
  EXPECT_EQ(store.read_result(rb, parent, toks), 0);
  EXPECT_EQ(store.read_result(ra, parent, toks), 0);  // answered already
}

// A writer that cannot go on: the temporary file of `key` is made a FIFO, so the writer's open() of it blocks until
// release() opens the other end (as a disk that has stopped answering would hold it). The FIFO then becomes the
// key's file, which the tests never read.
struct StuckWriter {
  std::string fifo;
  int fd = -1;
  StuckWriter(const DiskKvStore& store, uint64_t key) {
    char name[40];
    std::snprintf(name, sizeof name, "/%016llx.kv.tmp", static_cast<unsigned long long>(key));
    fifo = store.path() + name;
    EXPECT_EQ(::mkfifo(fifo.c_str(), 0644), 0) << fifo;
  }
  void release() {
    if (fd < 0) fd = ::open(fifo.c_str(), O_RDONLY | O_NONBLOCK);
  }
  ~StuckWriter() {
    release();  // never leave the store's writer blocked (its destructor waits for it)
    if (fd >= 0) ::close(fd);
  }
};

// A block queued behind a writer that has not written it is found and read from the queued copy; once written it
// is read from its file.
TEST(DiskKvStore, QueuedWritesAreFoundAndReadFromMemory) {
  TempDir dir;
  DiskKvStore::Config c = config_for(dir.path);
  c.writer_threads = 1;  // one writer, held by the FIFO: the other blocks stay queued
  DiskKvStore store(c);
  {
    StuckWriter stuck(store, 1);
    const auto p1 = payload_of(1), p2 = payload_of(2), p3 = payload_of(3);
    store.put(1, 0, tokens_of(1), p1.data());  // the writer takes it and blocks
    store.put(2, 1, tokens_of(2), p2.data());
    store.put(3, 2, tokens_of(3), p3.data());
    EXPECT_EQ(store.stats().queued_blocks, 3u);
    EXPECT_EQ(store.stats().blocks_written, 0u);
    for (uint64_t k = 1; k <= 3; ++k) EXPECT_TRUE(store.contains(k, k - 1, tokens_of(k))) << k;
    EXPECT_FALSE(store.contains(2, 0, tokens_of(2)));  // another parent: another prefix
    std::vector<std::byte> got(1000);
    uint64_t parent = 0;
    std::vector<int32_t> toks;
    ASSERT_TRUE(store.read(2, got.data(), parent, toks));
    EXPECT_EQ(got, p2);
    EXPECT_EQ(parent, 1u);
    EXPECT_EQ(toks, tokens_of(2));
    std::vector<std::byte> got3(1000);
    const uint64_t r = store.read_async(3, got3.data());
    while (!store.read_finished(r)) std::this_thread::yield();
    EXPECT_EQ(store.read_result(r, parent, toks), 1);
    EXPECT_EQ(got3, p3);
    ASSERT_TRUE(store.read(1, got.data(), parent, toks));  // the block being written, from memory too
    EXPECT_EQ(got, p1);
    EXPECT_EQ(store.stats().blocks_read_queued, 3u);
    EXPECT_EQ(store.stats().blocks_written, 0u);
    stuck.release();
    store.flush();
  }
  const DiskKvStore::Stats s = store.stats();
  EXPECT_EQ(s.queued_blocks, 0u);
  EXPECT_EQ(s.blocks_written, 3u);
  EXPECT_TRUE(store.contains(3, 2, tokens_of(3)));
  std::vector<std::byte> got(1000);
  uint64_t parent = 0;
  std::vector<int32_t> toks;
  ASSERT_TRUE(store.read(3, got.data(), parent, toks));  // from its file now
  EXPECT_EQ(got, payload_of(3));
  EXPECT_EQ(store.stats().blocks_read_queued, 3u);
}

// A full write queue: put() waits for the writer (back-pressure) rather than dropping; only a writer that makes no
// room within max_put_wait_seconds gets the block dropped (logged), and the store goes on once it moves again.
TEST(DiskKvStore, AFullQueueWaitsForTheWriterAndDropsOnlyWhenItIsStuck) {
  TempDir dir;
  DiskKvStore::Config c = config_for(dir.path);
  c.max_queued_bytes = 2000;  // two blocks
  c.max_put_wait_seconds = 0.3;
  c.drop_oldest_when_full = false;  // back-pressure
  c.writer_threads = 1;
  DiskKvStore store(c);
  StuckWriter stuck(store, 1);
  const auto p1 = payload_of(1), p2 = payload_of(2), p3 = payload_of(3), p4 = payload_of(4);
  store.put(1, 0, tokens_of(1), p1.data());
  store.put(2, 1, tokens_of(2), p2.data());
  store.put(3, 2, tokens_of(3), p3.data());  // the queue is full and the writer stuck: waits, then drops
  DiskKvStore::Stats s = store.stats();
  EXPECT_EQ(s.put_waits, 1u);
  EXPECT_GE(s.put_wait_seconds, 0.25);
  EXPECT_EQ(s.dropped_full, 1u);
  EXPECT_FALSE(store.contains(3, 2, tokens_of(3)));
  // A writer that moves again makes room: the waiting put() goes through.
  std::thread later([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    stuck.release();
  });
  store.put(4, 3, tokens_of(4), p4.data());
  later.join();
  store.flush();
  s = store.stats();
  EXPECT_EQ(s.put_waits, 2u);
  EXPECT_EQ(s.dropped_full, 1u);
  EXPECT_EQ(s.blocks_written, 3u);
  EXPECT_TRUE(store.contains(2, 1, tokens_of(2)));
  EXPECT_TRUE(store.contains(4, 3, tokens_of(4)));
  std::vector<std::byte> got(1000);
  uint64_t parent = 0;
  std::vector<int32_t> toks;
  ASSERT_TRUE(store.read(4, got.data(), parent, toks));
  EXPECT_EQ(got, p4);
}

// The default for a full queue: put() never waits; among blocks of one depth the oldest queued writes make room (not
// the one being written), so the newest blocks reach the disk, and the dropped ones are no longer found.
TEST(DiskKvStore, AFullQueueDropsItsOldestWritesAndNeverWaits) {
  TempDir dir;
  DiskKvStore::Config c = config_for(dir.path);
  c.max_queued_bytes = 3000;  // three blocks
  c.writer_threads = 1;
  DiskKvStore store(c);
  StuckWriter stuck(store, 1);
  const auto p1 = payload_of(1);
  store.put(1, 0, tokens_of(1), p1.data());  // the writer takes it and blocks on the FIFO
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  const auto t0 = std::chrono::steady_clock::now();
  for (int k = 2; k <= 6; ++k) {
    const auto p = payload_of(static_cast<uint32_t>(k));
    store.put(static_cast<uint64_t>(k), static_cast<uint64_t>(k - 1), tokens_of(static_cast<uint64_t>(k)), p.data());
  }
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 0.2) << "put() waited";
  DiskKvStore::Stats s = store.stats();
  EXPECT_EQ(s.put_waits, 0u);
  EXPECT_EQ(s.dropped_full, 3u);  // 2, 3 and 4 made room for 4, 5 and 6 in turn
  EXPECT_TRUE(store.contains(1, 0, tokens_of(1)));  // being written
  for (uint64_t k = 2; k <= 4; ++k) EXPECT_FALSE(store.contains(k, k - 1, tokens_of(k))) << k;
  for (uint64_t k = 5; k <= 6; ++k) EXPECT_TRUE(store.contains(k, k - 1, tokens_of(k))) << k;
  stuck.release();
  store.flush();
  s = store.stats();
  EXPECT_EQ(s.blocks_written, 3u);
  std::vector<std::byte> got(1000);
  uint64_t parent = 0;
  std::vector<int32_t> toks;
  ASSERT_TRUE(store.read(6, got.data(), parent, toks));
  EXPECT_EQ(got, payload_of(6));
}

// A full queue drops the deepest blocks of their prefix chains first (a hit needs every block before the one it
// uses, so a chain's roots are worth the most), the oldest of equally deep ones first, and a new block deeper than
// every queued one is dropped itself: an evicted chain followed by more evictions keeps its first blocks.
TEST(DiskKvStore, AFullQueueKeepsAChainsFirstBlocks) {
  TempDir dir;
  DiskKvStore::Config c = config_for(dir.path);
  c.max_queued_bytes = 4000;  // four blocks, the one being written included
  c.writer_threads = 1;
  DiskKvStore store(c);
  StuckWriter stuck(store, 1);
  auto put = [&](uint64_t key, int depth) {
    const auto p = payload_of(static_cast<uint32_t>(key));
    store.put(key, key + 100, tokens_of(key), p.data(), nullptr, depth);
  };
  put(1, 0);  // the writer takes it and blocks on the FIFO
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  put(2, 2);  // chain A, handed over deepest first as the host tier does
  put(3, 1);
  put(4, 0);
  put(5, 1);  // chain B: full, so A's deepest (2) goes
  put(6, 0);  // full: 3 and 5 are equally deep, the older (3) goes
  put(7, 3);  // full, and deeper than every queued block: dropped itself
  DiskKvStore::Stats s = store.stats();
  EXPECT_EQ(s.dropped_full, 3u);
  EXPECT_EQ(s.put_waits, 0u);
  for (uint64_t k : {1, 4, 5, 6}) EXPECT_TRUE(store.contains(k, k + 100, tokens_of(k))) << k;
  for (uint64_t k : {2, 3, 7}) EXPECT_FALSE(store.contains(k, k + 100, tokens_of(k))) << k;
  stuck.release();
  store.flush();
  s = store.stats();
  EXPECT_EQ(s.blocks_written, 4u);  // 1 (the FIFO: written, never read), 4, 5 and 6
  EXPECT_EQ(s.queued_blocks, 0u);
  std::vector<std::byte> got(1000);
  uint64_t parent = 0;
  std::vector<int32_t> toks;
  for (uint64_t k : {4, 5, 6}) {
    ASSERT_TRUE(store.read(k, got.data(), parent, toks)) << k;
    EXPECT_EQ(got, payload_of(static_cast<uint32_t>(k)));
    EXPECT_EQ(parent, k + 100);
  }
}

// Blocks a load is reading are protected: a full queue drops other writes (even newer ones would not push them out),
// and the bound drops other files; once unprotected they are ordinary again.
TEST(DiskKvStore, ProtectedBlocksStayWhileTheQueueOrTheBoundMakesRoom) {
  TempDir dir;
  DiskKvStore::Config c = config_for(dir.path);
  c.max_queued_bytes = 3000;
  c.writer_threads = 1;
  {
    DiskKvStore store(c);
    StuckWriter stuck(store, 1);
    const auto p1 = payload_of(1);
    store.put(1, 0, tokens_of(1), p1.data());
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    const std::vector<uint64_t> wanted = {2};
    for (int k = 2; k <= 3; ++k) {
      const auto p = payload_of(static_cast<uint32_t>(k));
      store.put(static_cast<uint64_t>(k), static_cast<uint64_t>(k - 1), tokens_of(static_cast<uint64_t>(k)), p.data());
    }
    store.protect(wanted);
    const auto p4 = payload_of(4);
    store.put(4, 3, tokens_of(4), p4.data());  // full: 3 goes, not the older 2
    EXPECT_TRUE(store.contains(2, 1, tokens_of(2)));
    EXPECT_FALSE(store.contains(3, 2, tokens_of(3)));
    EXPECT_TRUE(store.contains(4, 3, tokens_of(4)));
    store.unprotect(wanted);
    const auto p5 = payload_of(5);
    store.put(5, 4, tokens_of(5), p5.data());  // now 2 is the oldest again
    EXPECT_FALSE(store.contains(2, 1, tokens_of(2)));
    EXPECT_EQ(store.stats().dropped_full, 2u);
    stuck.release();
    store.flush();
  }
  // The bound: 3 files allowed; the protected oldest file survives a fourth write, another goes instead.
  TempDir dir2;
  DiskKvStore::Config b = config_for(dir2.path);
  b.max_bytes = 3 * (56 + 16 + 1000);
  DiskKvStore store(b);
  put_blocks(store, 3);
  const std::vector<uint64_t> oldest = {1};
  store.protect(oldest);
  const auto p4 = payload_of(4);
  store.put(4, 3, tokens_of(4), p4.data());
  store.flush();
  EXPECT_TRUE(store.contains(1, 0, tokens_of(1)));
  EXPECT_FALSE(store.contains(2, 1, tokens_of(2)));
  EXPECT_TRUE(store.contains(4, 3, tokens_of(4)));
  store.unprotect(oldest);
}

}  // namespace
}  // namespace peregrine::engine
