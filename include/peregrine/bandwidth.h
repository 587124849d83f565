// MemoryBandwidth: a device's measured memory bandwidth (the limit decode figures are reported against).
#pragma once

namespace peregrine {

struct MemoryBandwidth {
  double copy_gbs = 0.0;  // (bytes read + bytes written) / s of a large copy
  double read_gbs = 0.0;  // bytes read / s of a large read-only pass (host backends; 0 where not measured)
};

}  // namespace peregrine
