// A fixed pool of worker threads for data-parallel loops in CPU kernels.
// parallel_for splits [0, n) into contiguous chunks, one per thread, and blocks until all finish.
// Workers spin briefly for the next task before sleeping (a decode step runs hundreds of short ops; a condvar
// wake-up per op would cost tens of microseconds each). NOTE: not re-entrant; a kernel running inside
// parallel_for must not call parallel_for again, and only one thread may submit work at a time.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace peregrine {

class ThreadPool {
 public:
  // num_threads 0 = hardware concurrency. The calling thread takes part, so num_threads-1 workers start.
  explicit ThreadPool(int num_threads = 0);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int num_threads() const { return num_threads_; }
  // fn(begin, end) is called on disjoint ranges covering [0, n); chunks are multiples of `grain` except the last.
  void parallel_for(int64_t n, const std::function<void(int64_t, int64_t)>& fn, int64_t grain = 1);
  // fn(begin, end) on chunks of `chunk` indices of [0, n) (the last shorter) taken by the threads as they come free
  // (an atomic counter): the loop ends when its last chunk does, however unevenly the (virtual) cores run, instead of
  // waiting for the slowest thread's fixed share. Chunks may run in any order on any thread.
  void dynamic_for(int64_t n, int64_t chunk, const std::function<void(int64_t, int64_t)>& fn);
  // fn(thread_index) once on each of num_threads threads.
  void run_on_all(const std::function<void(int)>& fn);

 private:
  void worker_loop(int index);
  std::chrono::nanoseconds current_budget() const;

  int num_threads_;
  std::chrono::nanoseconds spin_budget_{0};  // how long a waiting thread polls before it sleeps
  std::atomic<int> spin_credit_{16};         // see kMaxSpinCredit in thread_pool.cpp
  uint32_t probe_counter_ = 0;               // submitter only
  std::atomic<int64_t> posted_ns_{0};        // when the current task was posted (steady clock)
  std::vector<std::thread> workers_;
  const std::function<void(int)>* task_ = nullptr;  // published by the release increment of generation_
  std::atomic<uint32_t> generation_{0};             // bumped once per task; workers wait for it to change
  std::atomic<int> pending_{0};                     // workers still running the current task
  std::atomic<int> sleepers_{0};                    // workers asleep on wake_ (the submitter must notify)
  std::atomic<bool> submitter_waiting_{false};      // the submitter asleep on done_
  std::mutex mutex_;                                // guards the sleeping only; the spinning path takes no lock
  std::condition_variable wake_;
  std::condition_variable done_;
  std::atomic<bool> stop_{false};
};

}  // namespace peregrine
