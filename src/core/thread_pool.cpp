// ThreadPool: workers spin on a generation counter for a short while, then sleep on a condition variable; the
// submitter runs its own share, then spins and sleeps likewise until all are done.
#include "core/thread_pool.h"

#include <algorithm>
#include <chrono>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

namespace peregrine {
namespace {

// How long a thread polls before it sleeps: long enough to bridge the gap between two ops of a decode step and
// between two steps (sampling, scheduling), short enough not to burn a core when the engine is idle. Pools with
// more threads than cores never spin (a spinning thread would hold the core the awaited one needs). Measured on
// the 2-core VM (GGUF Q4_0 1B decode, 2026-12-02): 1 ms instead of 50 us took 36-40 tok/s to 38-43 (three
// alternated pairs), the wake-ups a sleeping worker costs (futex, tens of us each on a VM) being gone.
constexpr auto kSpinTime = std::chrono::microseconds(1000);
// Spin credit: a submitter's wait that the spin covered earns one; a spinning worker that picks a task up more
// than kLatePickup after it was posted was preempted while it spun, and that costs kSpinPenalty (on a loaded
// machine a spinning thread uses up its time slice and then waits behind other processes for milliseconds).
// At zero nobody spins; every kProbeEvery-th task then grants one credit to find out whether that has passed.
constexpr int kMaxSpinCredit = 64;
constexpr int kSpinPenalty = 16;
constexpr uint32_t kProbeEvery = 64;
constexpr auto kLatePickup = std::chrono::microseconds(20);

int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  _mm_pause();
#else
  std::this_thread::yield();
#endif
}

// Polls done() for up to `budget`; true when it became true.
template <class Done>
bool spin_until(const Done& done, std::chrono::nanoseconds budget) {
  if (budget.count() == 0) return done();
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0;; ++i) {
    if (done()) return true;
    cpu_relax();
    if ((i & 63) == 63 && std::chrono::steady_clock::now() - start > budget) return false;
  }
}

}  // namespace

ThreadPool::ThreadPool(int num_threads) {
  if (num_threads <= 0) num_threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  num_threads_ = num_threads;
  const unsigned cores = std::max(1u, std::thread::hardware_concurrency());
  spin_budget_ = static_cast<unsigned>(num_threads_) <= cores ? kSpinTime : std::chrono::nanoseconds(0);
  for (int i = 1; i < num_threads_; ++i) workers_.emplace_back([this, i] { worker_loop(i); });
}

ThreadPool::~ThreadPool() {
  stop_.store(true);
  generation_.fetch_add(1);
  { std::lock_guard<std::mutex> lock(mutex_); }  // a worker between its last check and its wait has reached the wait
  wake_.notify_all();
  for (auto& t : workers_) t.join();
}

std::chrono::nanoseconds ThreadPool::current_budget() const {
  return spin_credit_.load(std::memory_order_relaxed) > 0 ? spin_budget_ : std::chrono::nanoseconds(0);
}

void ThreadPool::worker_loop(int index) {
  uint32_t seen = 0;
  for (;;) {
    // NOTE: sleepers_ is raised (under the mutex) before the last look at generation_, and the submitter bumps
    // generation_ before it reads sleepers_ (all seq_cst), then notifies under the mutex: either this worker sees
    // the new generation or it is waiting when the notification comes.
    if (spin_until([&] { return generation_.load(std::memory_order_acquire) != seen; }, current_budget())) {
      if (now_ns() - posted_ns_.load(std::memory_order_relaxed) > kLatePickup.count() * 1000) {
        int credit = spin_credit_.load(std::memory_order_relaxed);
        while (credit > 0 && !spin_credit_.compare_exchange_weak(credit, std::max(0, credit - kSpinPenalty))) {
        }
      }
    } else {
      std::unique_lock<std::mutex> lock(mutex_);
      sleepers_.fetch_add(1);
      wake_.wait(lock, [&] { return generation_.load() != seen; });
      sleepers_.fetch_sub(1);
    }
    seen = generation_.load(std::memory_order_acquire);
    if (stop_.load()) return;
    (*task_)(index);
    if (pending_.fetch_sub(1) == 1 && submitter_waiting_.load()) {
      { std::lock_guard<std::mutex> lock(mutex_); }  // see run_on_all
      done_.notify_one();
    }
  }
}

void ThreadPool::run_on_all(const std::function<void(int)>& fn) {
  if (workers_.empty()) {
    fn(0);
    return;
  }
  if (spin_credit_.load(std::memory_order_relaxed) == 0 && ++probe_counter_ % kProbeEvery == 0)
    spin_credit_.store(1, std::memory_order_relaxed);
  task_ = &fn;
  pending_.store(static_cast<int>(workers_.size()));
  posted_ns_.store(now_ns(), std::memory_order_relaxed);
  generation_.fetch_add(1);  // seq_cst: publishes task_ and pending_
  if (sleepers_.load() > 0) {
    // Taking the mutex once makes sure a worker that saw the old generation under it is already waiting.
    { std::lock_guard<std::mutex> lock(mutex_); }
    wake_.notify_all();
  }
  fn(0);
  const std::chrono::nanoseconds budget = current_budget();
  if (spin_until([&] { return pending_.load(std::memory_order_acquire) == 0; }, budget)) {
    if (budget.count() > 0 && spin_credit_.load(std::memory_order_relaxed) < kMaxSpinCredit)
      spin_credit_.fetch_add(1, std::memory_order_relaxed);
  } else {
    std::unique_lock<std::mutex> lock(mutex_);
    submitter_waiting_.store(true);
    done_.wait(lock, [&] { return pending_.load() == 0; });
    submitter_waiting_.store(false);
  }
  task_ = nullptr;
}

void ThreadPool::parallel_for(int64_t n, const std::function<void(int64_t, int64_t)>& fn, int64_t grain) {
  if (n <= 0) return;
  grain = std::max<int64_t>(1, grain);
  int64_t units = (n + grain - 1) / grain;
  int threads = static_cast<int>(std::min<int64_t>(num_threads_, units));
  if (threads <= 1) {
    fn(0, n);
    return;
  }
  int64_t per = (units + threads - 1) / threads;
  run_on_all([&](int t) {
    int64_t begin = std::min(n, t * per * grain);
    int64_t end = std::min(n, (t + 1) * per * grain);
    if (begin < end) fn(begin, end);
  });
}

void ThreadPool::dynamic_for(int64_t n, int64_t chunk, const std::function<void(int64_t, int64_t)>& fn) {
  if (n <= 0) return;
  chunk = std::max<int64_t>(1, chunk);
  if (num_threads_ == 1 || n <= chunk) {
    fn(0, n);
    return;
  }
  std::atomic<int64_t> next{0};
  run_on_all([&](int) {
    for (int64_t b = next.fetch_add(chunk, std::memory_order_relaxed); b < n;
         b = next.fetch_add(chunk, std::memory_order_relaxed))
      fn(b, std::min(n, b + chunk));
  });
}

}  // namespace peregrine
