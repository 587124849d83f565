// Dynamic activation quantization of W8A8 matmuls, exactly as ops.h (ActQuant) defines it, in float32: one group
// of n activations to codes and a scale. Every backend's host-side path and the ref backend use these; device
// kernels reproduce the same float32 operations.
#pragma once

#include <cstdint>

namespace peregrine::ops {

// kInt8: s = amax / 127, q = clamp(rint(x * (127 / amax)), -128, 127); all-zero groups give q = 0, s = 0.
float quantize_act_int8(const float* x, int64_t n, int8_t* q);
// kFp8: s = max(amax / 448, 1 / (448 * 512)), q = e4m3(clamp(x / s, +-448)) (bytes of float8_e4m3fn).
float quantize_act_fp8(const float* x, int64_t n, uint8_t* q);

}  // namespace peregrine::ops
