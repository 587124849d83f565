// Entry point of cuda_ops_tests: skips everything (exit 0) when no GPU is visible, else runs GoogleTest.
// The shared backends live here so that every test reuses one CUDA context.
#include <gtest/gtest.h>

#include <cstdio>

#include "cuda_test_util.h"

namespace peregrine::cuda_test {

Backend& gpu() {
  static std::unique_ptr<Backend> backend = ops::make_cuda_backend(0);
  return *backend;
}
Backend& ref() {
  static std::unique_ptr<Backend> backend = ops::make_ref_backend();
  return *backend;
}
ops::CudaBackend& gpu_services() { return *ops::as_cuda_backend(gpu()); }

}  // namespace peregrine::cuda_test

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  if (peregrine::ops::cuda_device_count() == 0) {
    std::printf("cuda_ops_tests: no CUDA device visible; nothing to run\n");
    return 0;
  }
  std::printf("cuda_ops_tests on %s\n", peregrine::cuda_test::gpu().name().c_str());
  return RUN_ALL_TESTS();
}
