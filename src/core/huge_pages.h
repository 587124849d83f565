// Large host buffers on 2 MiB boundaries, asked for transparent huge pages (fewer TLB misses when streaming).
#pragma once

#include <sys/mman.h>

#include <cstddef>
#include <cstdlib>

namespace peregrine {

constexpr size_t kHugePageBytes = size_t{2} << 20;

// `bytes` rounded up to whole huge pages and 2 MiB aligned; nullptr when the allocation fails. Free with
// std::free. Only the huge pages `bytes` fills are madvised: the partial last one stays in small pages, so only
// what is used of it becomes resident (a model's ~100 weight buffers would otherwise hold ~1 MiB each unused).
inline void* huge_page_alloc(size_t bytes) {
  const size_t rounded = (bytes + kHugePageBytes - 1) / kHugePageBytes * kHugePageBytes;
  void* p = std::aligned_alloc(kHugePageBytes, rounded);
  if (p && bytes >= kHugePageBytes) madvise(p, bytes / kHugePageBytes * kHugePageBytes, MADV_HUGEPAGE);
  return p;
}

}  // namespace peregrine
