// Tests of ThreadPool: every index covered once, for many sizes and grains.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

#include "core/thread_pool.h"

using namespace peregrine;

TEST(ThreadPool, CoversEveryIndexOnce) {
  ThreadPool pool(3);
  for (int64_t n : {1, 2, 3, 7, 100, 1001}) {
    for (int64_t grain : {1, 4, 64}) {
      std::vector<std::atomic<int>> hits(static_cast<size_t>(n));
      pool.parallel_for(n, [&](int64_t b, int64_t e) {
        for (int64_t i = b; i < e; ++i) hits[static_cast<size_t>(i)]++;
      }, grain);
      for (auto& h : hits) EXPECT_EQ(h.load(), 1);
    }
  }
}

TEST(ThreadPool, DynamicForCoversEveryIndexOnceInWholeChunks) {
  for (int threads : {1, 3}) {
    ThreadPool pool(threads);
    for (int64_t n : {1, 3, 4, 5, 100, 1001}) {
      for (int64_t chunk : {1, 4, 64}) {
        std::vector<std::atomic<int>> hits(static_cast<size_t>(n));
        std::atomic<bool> aligned{true};
        pool.dynamic_for(n, chunk, [&](int64_t b, int64_t e) {
          if (b % chunk != 0 || (e != n && e - b != chunk)) aligned = false;
          for (int64_t i = b; i < e; ++i) hits[static_cast<size_t>(i)]++;
        });
        EXPECT_TRUE(aligned.load()) << "n " << n << " chunk " << chunk;
        for (auto& h : hits) EXPECT_EQ(h.load(), 1);
      }
    }
  }
}

TEST(ThreadPool, RunOnAllGivesEachIndex) {
  ThreadPool pool(4);
  std::vector<std::atomic<int>> seen(4);
  pool.run_on_all([&](int i) { seen[static_cast<size_t>(i)]++; });
  for (auto& s : seen) EXPECT_EQ(s.load(), 1);
}

// Back-to-back tasks (workers spinning) and tasks after idle gaps (workers asleep) all run on every thread.
TEST(ThreadPool, ManyTasksAcrossSpinAndSleep) {
  ThreadPool pool(3);
  std::atomic<int64_t> total{0};
  for (int round = 0; round < 2000; ++round) {
    if (round % 500 == 499) std::this_thread::sleep_for(std::chrono::milliseconds(2));
    pool.run_on_all([&](int i) { total += i + 1; });
  }
  EXPECT_EQ(total.load(), 2000 * (1 + 2 + 3));
}
