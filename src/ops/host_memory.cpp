// Aligned host allocation and available memory (see host_memory.h).
#include "ops/host_memory.h"

#include <cstdlib>
#include <fstream>
#include <string>

#include "core/status.h"

namespace peregrine::ops {

void* host_allocate(size_t bytes) {
  size_t rounded = (bytes + 63) / 64 * 64;
  void* p = std::aligned_alloc(64, rounded == 0 ? 64 : rounded);
  if (!p)
    throw Error(ErrorCode::kResourceExhausted, "host allocation of " + std::to_string(bytes) + " bytes failed");
  return p;
}

void host_deallocate(void* ptr) { std::free(ptr); }

size_t host_available_memory() {
  std::ifstream in("/proc/meminfo");
  std::string key;
  size_t value = 0;
  std::string unit;
  while (in >> key >> value >> unit) {
    if (key == "MemAvailable:") return value * 1024;
  }
  return size_t{8} << 30;
}

}  // namespace peregrine::ops
