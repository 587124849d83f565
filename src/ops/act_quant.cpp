#include "ops/act_quant.h"

#include <algorithm>
#include <cmath>

#include "core/dtype.h"

namespace peregrine::ops {

float quantize_act_int8(const float* x, int64_t n, int8_t* q) {
  float amax = 0;
  for (int64_t i = 0; i < n; ++i) amax = std::max(amax, std::fabs(x[i]));
  if (amax == 0) {
    std::fill(q, q + n, int8_t{0});
    return 0.0f;
  }
  const float inv = 127.0f / amax;
  for (int64_t i = 0; i < n; ++i) {
    const float r = std::nearbyint(x[i] * inv);
    q[i] = static_cast<int8_t>(std::clamp(r, -128.0f, 127.0f));
  }
  return amax / 127.0f;
}

float quantize_act_fp8(const float* x, int64_t n, uint8_t* q) {
  float amax = 0;
  for (int64_t i = 0; i < n; ++i) amax = std::max(amax, std::fabs(x[i]));
  const float s = std::max(amax / 448.0f, 1.0f / (448.0f * 512.0f));
  for (int64_t i = 0; i < n; ++i) q[i] = f32_to_fp8_e4m3(std::clamp(x[i] / s, -448.0f, 448.0f));
  return s;
}

}  // namespace peregrine::ops
