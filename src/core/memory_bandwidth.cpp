// measure_host_bandwidth: threads copy or sum disjoint slices of large buffers; best time wins.
#include "core/memory_bandwidth.h"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <thread>
#include <vector>

namespace peregrine {

MemoryBandwidth measure_host_bandwidth(int num_threads, size_t bytes, int repeats) {
  if (num_threads <= 0) num_threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  const size_t count = bytes / sizeof(uint64_t);
  std::vector<uint64_t> src(count), dst(count);
  for (size_t i = 0; i < count; ++i) src[i] = i * 2654435761u;  // touch every page
  std::memset(dst.data(), 1, count * sizeof(uint64_t));
  auto run = [&](auto&& body) {
    double best = 1e30;
    for (int r = 0; r < repeats; ++r) {
      auto t0 = std::chrono::steady_clock::now();
      std::vector<std::thread> threads;
      for (int t = 0; t < num_threads; ++t) {
        size_t begin = count * t / num_threads, end = count * (t + 1) / num_threads;
        threads.emplace_back([&, begin, end] { body(begin, end); });
      }
      for (auto& th : threads) th.join();
      best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    }
    return best;
  };
  MemoryBandwidth bw;
  double copy_s = run([&](size_t b, size_t e) { std::memcpy(dst.data() + b, src.data() + b, (e - b) * 8); });
  bw.copy_gbs = 2.0 * static_cast<double>(count * 8) / copy_s / 1e9;
  std::vector<uint64_t> sums(static_cast<size_t>(num_threads) * 8);
  double read_s = run([&](size_t b, size_t e) {
    uint64_t a0 = 0, a1 = 0, a2 = 0, a3 = 0;
    size_t i = b;
    for (; i + 4 <= e; i += 4) {
      a0 += src[i];
      a1 += src[i + 1];
      a2 += src[i + 2];
      a3 += src[i + 3];
    }
    for (; i < e; ++i) a0 += src[i];
    sums[(b * static_cast<size_t>(num_threads) / count) * 8] = a0 + a1 + a2 + a3;  // padded: no false sharing
  });
  bw.read_gbs = static_cast<double>(count * 8) / read_s / 1e9;
  return bw;
}

}  // namespace peregrine
