// A fixed pool of worker threads for data-parallel loops in CPU kernels.
// parallel_for splits [0, n) into contiguous chunks, one per thread, and blocks until all finish.
// NOTE: not re-entrant; a kernel running inside parallel_for must not call parallel_for again.
#pragma once

#include <atomic>
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
  // fn(thread_index) once on each of num_threads threads.
  void run_on_all(const std::function<void(int)>& fn);

 private:
  void worker_loop(int index);

  int num_threads_;
  std::vector<std::thread> workers_;
  std::mutex mutex_;
  std::condition_variable wake_;
  std::condition_variable done_;
  const std::function<void(int)>* task_ = nullptr;
  uint64_t generation_ = 0;
  int pending_ = 0;
  bool stop_ = false;
};

}  // namespace peregrine
