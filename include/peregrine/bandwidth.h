// MemoryBandwidth: a device's measured memory bandwidth (the limit decode figures are reported against).
#pragma once

namespace peregrine {

struct MemoryBandwidth {
  double copy_gbs = 0.0;  // (bytes read + bytes written) / s of a large copy
  double read_gbs = 0.0;  // bytes read / s of a large read-only pass (host backends; 0 where not measured)
  // Pinned host memory <-> device on the copy queue (the KV host tier's path; 0 on host backends).
  double host_to_device_gbs = 0.0;
  double device_to_host_gbs = 0.0;
};

}  // namespace peregrine
