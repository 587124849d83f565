// Host memory for host backends (ref, cpu): 64-byte aligned allocation and available-RAM queries.
#pragma once

#include <cstddef>

namespace peregrine::ops {

void* host_allocate(size_t bytes);  // 64-byte aligned; throws Error(kResourceExhausted)
void host_deallocate(void* ptr);
size_t host_available_memory();     // MemAvailable from /proc/meminfo

}  // namespace peregrine::ops
