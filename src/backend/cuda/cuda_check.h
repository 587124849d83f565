// Host-side error checking for CUDA runtime and cuBLAS calls: failures become peregrine::Error naming the call.
// Out-of-memory maps to kResourceExhausted, everything else to kInternal.
#pragma once

#include <cuda_runtime_api.h>

#include <string>

#include "core/status.h"

namespace peregrine::cuda {

// Bits kernels set in the backend's device error word when an input is out of range; the backend
// turns them into Error(kInvalidArgument) at the next synchronize()/copy_to_host().
enum DeviceErrorBits : int {
  kErrEmbeddingTokenId = 1,
  kErrKvSlot = 2,
  kErrGatherIndex = 4,
  kErrSampleToken = 8,
};


[[noreturn]] inline void throw_cuda_error(cudaError_t err, const char* what, const char* file, int line) {
  ErrorCode code = err == cudaErrorMemoryAllocation ? ErrorCode::kResourceExhausted : ErrorCode::kInternal;
  throw Error(code, std::string("cuda: ") + what + " failed: " + cudaGetErrorName(err) + " (" +
                        cudaGetErrorString(err) + ") at " + file + ":" + std::to_string(line));
}

}  // namespace peregrine::cuda

#define PEREGRINE_CUDA_CHECK(call)                                                          \
  do {                                                                                      \
    cudaError_t peregrine_err_ = (call);                                                    \
    if (peregrine_err_ != cudaSuccess) {                                                    \
      (void)cudaGetLastError();                                                             \
      ::peregrine::cuda::throw_cuda_error(peregrine_err_, #call, __FILE__, __LINE__);       \
    }                                                                                       \
  } while (0)

// After a kernel launch: reports launch-configuration errors at once (execution errors surface at sync).
#define PEREGRINE_CUDA_CHECK_LAUNCH() PEREGRINE_CUDA_CHECK(cudaGetLastError())
