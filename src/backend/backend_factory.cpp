// create_backend: picks the ref, cpu or cuda implementation of the op interface.
#include "backend/cpu/cpu_backend.h"
#include "backend/ref/ref_backend.h"
#include "core/status.h"
#include "ops/backend.h"
#ifdef PEREGRINE_HAVE_CUDA
#include "backend/cuda/cuda_backend.h"
#endif

namespace peregrine::ops {

bool cuda_available() {
#ifdef PEREGRINE_HAVE_CUDA
  return cuda_device_count() > 0;
#else
  return false;
#endif
}

std::unique_ptr<Backend> create_backend(const BackendOptions& options) {
  switch (options.kind) {
    case DeviceKind::kRef: return make_ref_backend();
    case DeviceKind::kCpu: return make_cpu_backend(options.num_threads);
    case DeviceKind::kCuda:
#ifdef PEREGRINE_HAVE_CUDA
      if (cuda_device_count() <= 0) throw Error(ErrorCode::kUnsupported, "--device cuda: no CUDA GPU is visible");
      return make_cuda_backend(options.device_index);
#else
      throw Error(ErrorCode::kUnsupported, "--device cuda: this build has no CUDA backend (configure with --preset cuda)");
#endif
  }
  throw Error(ErrorCode::kInvalidArgument, "unknown device kind");
}

}  // namespace peregrine::ops
