// The sampling op (ops.h SampleParams) on host memory: the reference the GPU kernels are checked against, and
// what the ref backend runs. Same arithmetic as the CUDA kernels (float logits, 32-bit fixed-point masses for
// top-p, Philox noise), so tokens agree except where a libm and the GPU's expf/logf differ in the last bit.
#pragma once

#include "ops/ops.h"

namespace peregrine::ops {

// Throws Error(kInvalidArgument) naming the field on a bad view or a penalty token outside [0, V).
void host_sample(const SampleParams& p);

}  // namespace peregrine::ops
