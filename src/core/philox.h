// Philox4x32-10 (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3", SC 2011): a counter-based
// generator, the same on the host and on the GPU, so sampling noise depends only on (key, counter).
#pragma once

#include <cstdint>

#if defined(__CUDACC__)
#define PEREGRINE_HOST_DEVICE __host__ __device__
#else
#define PEREGRINE_HOST_DEVICE
#endif

namespace peregrine {

PEREGRINE_HOST_DEVICE inline void philox4x32_10(uint32_t (&ctr)[4], uint32_t k0, uint32_t k1) {
  constexpr uint32_t kM0 = 0xD2511F53u, kM1 = 0xCD9E8D57u, kW0 = 0x9E3779B9u, kW1 = 0xBB67AE85u;
  for (int round = 0; round < 10; ++round) {
    const uint64_t p0 = static_cast<uint64_t>(kM0) * ctr[0];
    const uint64_t p1 = static_cast<uint64_t>(kM1) * ctr[2];
    const uint32_t hi0 = static_cast<uint32_t>(p0 >> 32), lo0 = static_cast<uint32_t>(p0);
    const uint32_t hi1 = static_cast<uint32_t>(p1 >> 32), lo1 = static_cast<uint32_t>(p1);
    const uint32_t n0 = hi1 ^ ctr[1] ^ k0, n2 = hi0 ^ ctr[3] ^ k1;
    ctr[0] = n0;
    ctr[1] = lo1;
    ctr[2] = n2;
    ctr[3] = lo0;
    k0 += kW0;
    k1 += kW1;
  }
}

// The uniform in (0, 1) that sampling draws for token `index` of a request at `offset` (its tokens so far).
PEREGRINE_HOST_DEVICE inline float philox_uniform(uint64_t seed, uint64_t offset, int index) {
  uint32_t ctr[4] = {static_cast<uint32_t>(index), static_cast<uint32_t>(offset), static_cast<uint32_t>(offset >> 32),
                     0u};
  philox4x32_10(ctr, static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32));
  return (static_cast<float>(ctr[0] >> 9) + 0.5f) * (1.0f / 8388608.0f);
}

}  // namespace peregrine
