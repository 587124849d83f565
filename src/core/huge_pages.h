// Large host buffers on 2 MiB boundaries, asked for transparent huge pages (fewer TLB misses when streaming).
#pragma once

#include <sys/mman.h>

#include <cstddef>
#include <cstdlib>

namespace peregrine {

constexpr size_t kHugePageBytes = size_t{2} << 20;

// `bytes` rounded up to whole huge pages, 2 MiB aligned and madvised; nullptr when the allocation fails. Free with
// std::free.
inline void* huge_page_alloc(size_t bytes) {
  const size_t rounded = (bytes + kHugePageBytes - 1) / kHugePageBytes * kHugePageBytes;
  void* p = std::aligned_alloc(kHugePageBytes, rounded);
  if (p) madvise(p, rounded, MADV_HUGEPAGE);
  return p;
}

}  // namespace peregrine
