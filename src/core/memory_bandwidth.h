// Host DRAM bandwidth, measured with every core (the limit CPU decode figures are reported against).
#pragma once

#include <cstddef>

#include "peregrine/bandwidth.h"

namespace peregrine {

// copy_gbs: a large memcpy split across threads; read_gbs: a large sum split across threads.

// Buffers of `bytes` each (default 1 GiB, well past the caches); best of `repeats` runs.
MemoryBandwidth measure_host_bandwidth(int num_threads, size_t bytes = size_t{1} << 30, int repeats = 5);

}  // namespace peregrine
