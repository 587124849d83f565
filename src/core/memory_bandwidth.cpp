// measure_host_bandwidth: threads copy or sum disjoint slices of large buffers; best time wins.
// The buffers are 2 MiB aligned and asked for transparent huge pages, as the CPU backend's weight buffers are, and
// the read loop uses 256-bit loads where the CPU has AVX2: a scalar loop (or 4 KiB pages' TLB misses) measures the
// core, not DRAM, and would flatter every figure reported against it.
#include "core/memory_bandwidth.h"

#include <immintrin.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <thread>
#include <vector>

#include "core/cpu_features.h"
#include "core/huge_pages.h"

namespace peregrine {
namespace {

struct HugeBuffer {
  explicit HugeBuffer(size_t bytes) : data(static_cast<uint64_t*>(huge_page_alloc(bytes))) {}
  ~HugeBuffer() { std::free(data); }
  HugeBuffer(const HugeBuffer&) = delete;
  HugeBuffer& operator=(const HugeBuffer&) = delete;
  uint64_t* data;
};

uint64_t sum_scalar(const uint64_t* p, size_t n) {
  uint64_t a0 = 0, a1 = 0, a2 = 0, a3 = 0;
  size_t i = 0;
  for (; i + 4 <= n; i += 4) {
    a0 += p[i];
    a1 += p[i + 1];
    a2 += p[i + 2];
    a3 += p[i + 3];
  }
  for (; i < n; ++i) a0 += p[i];
  return a0 + a1 + a2 + a3;
}

#if defined(__x86_64__)
__attribute__((target("avx2"))) uint64_t sum_avx2(const uint64_t* p, size_t n) {
  __m256i s0 = _mm256_setzero_si256(), s1 = s0, s2 = s0, s3 = s0;
  size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    s0 = _mm256_add_epi64(s0, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + i)));
    s1 = _mm256_add_epi64(s1, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + i + 4)));
    s2 = _mm256_add_epi64(s2, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + i + 8)));
    s3 = _mm256_add_epi64(s3, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + i + 12)));
  }
  s0 = _mm256_add_epi64(_mm256_add_epi64(s0, s1), _mm256_add_epi64(s2, s3));
  alignas(32) uint64_t lanes[4];
  _mm256_store_si256(reinterpret_cast<__m256i*>(lanes), s0);
  return lanes[0] + lanes[1] + lanes[2] + lanes[3] + sum_scalar(p + i, n - i);
}
#endif

}  // namespace

MemoryBandwidth measure_host_bandwidth(int num_threads, size_t bytes, int repeats) {
  if (num_threads <= 0) num_threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  const size_t count = bytes / sizeof(uint64_t);
  HugeBuffer src_buf(count * sizeof(uint64_t)), dst_buf(count * sizeof(uint64_t));
  if (!src_buf.data || !dst_buf.data) return {};
  uint64_t* src = src_buf.data;
  uint64_t* dst = dst_buf.data;
  for (size_t i = 0; i < count; ++i) src[i] = i * 2654435761u;  // touch every page
  std::memset(dst, 1, count * sizeof(uint64_t));
  uint64_t (*sum)(const uint64_t*, size_t) = sum_scalar;
#if defined(__x86_64__)
  if (cpu_features().avx2) sum = sum_avx2;
#endif
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
  double copy_s = run([&](size_t b, size_t e) { std::memcpy(dst + b, src + b, (e - b) * 8); });
  bw.copy_gbs = 2.0 * static_cast<double>(count * 8) / copy_s / 1e9;
  std::vector<uint64_t> sums(static_cast<size_t>(num_threads) * 8);
  double read_s = run([&](size_t b, size_t e) {
    sums[(b * static_cast<size_t>(num_threads) / count) * 8] = sum(src + b, e - b);  // padded: no false sharing
  });
  bw.read_gbs = static_cast<double>(count * 8) / read_s / 1e9;
  return bw;
}

}  // namespace peregrine
