// GPU token sampling: the CUDA backend's Backend::sample (the contract is ops::SampleParams in ops.h). Plain C++
// (no CUDA headers). Every view is device memory of the CUDA backend; per-request parameters are [B] arrays so
// that one host->device copy per step fills them. Runs asynchronously on the backend's stream; throws
// Error(kInvalidArgument) on bad shapes, and a token id outside [0, V) in the penalty lists surfaces at the next
// synchronize().
#pragma once

#include "core/tensor.h"
#include "ops/backend.h"

namespace peregrine::ops {

using CudaSampleParams = SampleParams;

// backend must be the CUDA backend (as_cuda_backend); scratch is the backend's (B * V * 8 bytes at most).
void cuda_sample(Backend& backend, const CudaSampleParams& p);

}  // namespace peregrine::ops
