// Helpers for op tests: typed random buffers, NaN poisoning, element-wise comparison against the reference
// backend with per-dtype bounds, and the list of CPU kernel sets (ISAs) to run each test on.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "core/dtype.h"
#include "core/tensor.h"

namespace peregrine::test {

// A host buffer holding n elements of dtype, with a view over it.
struct Buffer {
  DType dtype = DType::kF32;
  std::vector<uint8_t> bytes;
  int64_t n = 0;

  Buffer() = default;
  Buffer(DType t, int64_t count) : dtype(t), bytes(dtype_bytes(t, static_cast<size_t>(count)) + 64), n(count) {}
  void* data() { return bytes.data(); }
  TensorView view(std::initializer_list<int64_t> dims) { return TensorView(bytes.data(), dtype, dims); }
  float get(int64_t i) const {
    switch (dtype) {
      case DType::kBF16:
        return bf16_to_f32(reinterpret_cast<const uint16_t*>(bytes.data())[i]);
      case DType::kF16:
        return f16_to_f32(reinterpret_cast<const uint16_t*>(bytes.data())[i]);
      case DType::kI32:
        return static_cast<float>(reinterpret_cast<const int32_t*>(bytes.data())[i]);
      default:
        return reinterpret_cast<const float*>(bytes.data())[i];
    }
  }
  void set(int64_t i, float v) {
    switch (dtype) {
      case DType::kBF16:
        reinterpret_cast<uint16_t*>(bytes.data())[i] = f32_to_bf16(v);
        return;
      case DType::kF16:
        reinterpret_cast<uint16_t*>(bytes.data())[i] = f32_to_f16(v);
        return;
      case DType::kI32:
        reinterpret_cast<int32_t*>(bytes.data())[i] = static_cast<int32_t>(v);
        return;
      default:
        reinterpret_cast<float*>(bytes.data())[i] = v;
    }
  }
  int32_t* i32() { return reinterpret_cast<int32_t*>(bytes.data()); }
  float* f32() { return reinterpret_cast<float*>(bytes.data()); }
};

inline Buffer random_buffer(DType t, int64_t n, std::mt19937& rng, float lo = -1.0f, float hi = 1.0f) {
  Buffer b(t, n);
  std::uniform_real_distribution<float> dist(lo, hi);
  for (int64_t i = 0; i < n; ++i) b.set(i, dist(rng));
  return b;
}

inline Buffer int_buffer(const std::vector<int32_t>& v) {
  Buffer b(DType::kI32, static_cast<int64_t>(v.size()));
  if (!v.empty()) std::memcpy(b.data(), v.data(), v.size() * 4);
  return b;
}

inline Buffer poisoned(DType t, int64_t n) {
  Buffer b(t, n);
  for (int64_t i = 0; i < n; ++i) b.set(i, NAN);
  return b;
}

// Every element: |got - want| <= rtol * (|want| + rms(want)). NaN anywhere in got (a poisoned element left
// unwritten) fails unless want is NaN too.
inline void expect_close(const Buffer& got, const Buffer& want, float rtol, const std::string& what) {
  ASSERT_EQ(got.n, want.n) << what;
  double ss = 0;
  for (int64_t i = 0; i < want.n; ++i) ss += static_cast<double>(want.get(i)) * want.get(i);
  const double scale = want.n ? std::sqrt(ss / static_cast<double>(want.n)) : 0.0;
  int64_t bad = 0;
  for (int64_t i = 0; i < want.n; ++i) {
    const double g = got.get(i), w = want.get(i);
    const bool ok = std::isnan(w) ? std::isnan(g) : std::fabs(g - w) <= rtol * (std::fabs(w) + scale);
    if (!ok && bad++ < 5) ADD_FAILURE() << what << ": element " << i << " got " << g << " want " << w;
  }
  EXPECT_EQ(bad, 0) << what << ": " << bad << " of " << want.n << " elements out of bounds (rtol " << rtol << ")";
}

inline bool bits_equal(const Buffer& a, const Buffer& b) {
  return a.n == b.n && std::memcmp(a.bytes.data(), b.bytes.data(), dtype_bytes(a.dtype, static_cast<size_t>(a.n))) == 0;
}

inline const char* isa_name(ops::CpuIsa isa) {
  switch (isa) {
    case ops::CpuIsa::kScalar:
      return "Scalar";
    case ops::CpuIsa::kAvx2:
      return "Avx2";
    case ops::CpuIsa::kAvx512:
      return "Avx512";
    case ops::CpuIsa::kAvx512Vnni:
      return "Avx512Vnni";
    default:
      return "Auto";
  }
}

// Tests parameterised over the kernel set; sets this CPU cannot run are skipped with a message.
class CpuIsaTest : public ::testing::TestWithParam<ops::CpuIsa> {
 protected:
  void SetUp() override {
    if (!ops::cpu_isa_available(GetParam()))
      GTEST_SKIP() << isa_name(GetParam()) << " kernels are not available on this CPU";
  }
  std::unique_ptr<ops::Backend> make(int threads) { return ops::make_cpu_backend(threads, GetParam()); }
};

#define PEREGRINE_INSTANTIATE_ISA_TESTS(suite)                                                                \
  INSTANTIATE_TEST_SUITE_P(Isa, suite,                                                                        \
                           ::testing::Values(ops::CpuIsa::kScalar, ops::CpuIsa::kAvx2, ops::CpuIsa::kAvx512), \
                           [](const ::testing::TestParamInfo<ops::CpuIsa>& i) { return isa_name(i.param); })

}  // namespace peregrine::test
