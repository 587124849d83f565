// Host DRAM bandwidth, measured with every core (the limit CPU decode figures are reported against).
#pragma once

#include <cstddef>

namespace peregrine {

struct MemoryBandwidth {
  double copy_gbs = 0;  // (bytes read + bytes written) / s of a large memcpy split across threads
  double read_gbs = 0;  // bytes read / s of a large sum split across threads
};

// Buffers of `bytes` each (default 1 GiB, well past the caches); best of `repeats` runs.
MemoryBandwidth measure_host_bandwidth(int num_threads, size_t bytes = size_t{1} << 30, int repeats = 5);

}  // namespace peregrine
