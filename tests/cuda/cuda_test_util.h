// Helpers for the CUDA op tests: host tensors with random contents, device mirrors, NaN poisoning, and an
// element-wise comparison against the ref backend with per-dtype bounds (reporting the worst elements).
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "backend/cuda/cuda_backend.h"
#include "backend/ref/ref_backend.h"
#include "core/dtype.h"
#include "ops/backend.h"

namespace peregrine::cuda_test {

using ops::Backend;
using ops::DeviceBuffer;

// One process-wide CUDA backend and ref backend (creating a CUDA context per test would be slow).
Backend& gpu();
Backend& ref();
ops::CudaBackend& gpu_services();

struct HostTensor {
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;
  std::vector<uint8_t> bytes;

  HostTensor() = default;
  HostTensor(DType t, std::vector<int64_t> dims) : dtype(t), shape(std::move(dims)) {
    bytes.assign(dtype_bytes(dtype, static_cast<size_t>(numel())), 0);
  }
  int64_t numel() const {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    return n;
  }
  TensorView view() const {
    TensorView v(static_cast<const void*>(bytes.data()), dtype, {});
    for (int64_t d : shape) v.shape[v.ndim++] = d;
    return v;
  }
  double get(int64_t i) const {
    switch (dtype) {
      case DType::kF32: { float f; std::memcpy(&f, bytes.data() + 4 * i, 4); return f; }
      case DType::kBF16: { uint16_t h; std::memcpy(&h, bytes.data() + 2 * i, 2); return bf16_to_f32(h); }
      case DType::kF16: { uint16_t h; std::memcpy(&h, bytes.data() + 2 * i, 2); return f16_to_f32(h); }
      case DType::kI32: { int32_t v; std::memcpy(&v, bytes.data() + 4 * i, 4); return v; }
      case DType::kI64: { int64_t v; std::memcpy(&v, bytes.data() + 8 * i, 8); return static_cast<double>(v); }
      default: return 0;
    }
  }
  void set(int64_t i, double v) {
    switch (dtype) {
      case DType::kF32: { float f = static_cast<float>(v); std::memcpy(bytes.data() + 4 * i, &f, 4); return; }
      case DType::kBF16: { uint16_t h = f32_to_bf16(static_cast<float>(v)); std::memcpy(bytes.data() + 2 * i, &h, 2); return; }
      case DType::kF16: { uint16_t h = f32_to_f16(static_cast<float>(v)); std::memcpy(bytes.data() + 2 * i, &h, 2); return; }
      case DType::kI32: { int32_t x = static_cast<int32_t>(v); std::memcpy(bytes.data() + 4 * i, &x, 4); return; }
      case DType::kI64: { int64_t x = static_cast<int64_t>(v); std::memcpy(bytes.data() + 8 * i, &x, 8); return; }
      default: return;
    }
  }
  void poison() { std::memset(bytes.data(), 0xFF, bytes.size()); }  // NaN in every float dtype
};

inline HostTensor random_tensor(DType t, std::vector<int64_t> shape, std::mt19937& rng, double scale = 1.0) {
  HostTensor h(t, std::move(shape));
  std::normal_distribution<double> dist(0.0, scale);
  for (int64_t i = 0; i < h.numel(); ++i) h.set(i, dist(rng));
  return h;
}

inline HostTensor int_tensor(const std::vector<int32_t>& values) {
  HostTensor h(DType::kI32, {static_cast<int64_t>(values.size())});
  if (!values.empty()) std::memcpy(h.bytes.data(), values.data(), values.size() * 4);
  return h;
}

// A device copy of a host tensor.
struct DeviceTensor {
  DeviceBuffer buffer;
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;

  DeviceTensor() = default;
  explicit DeviceTensor(const HostTensor& h) : buffer(gpu(), h.bytes.size()), dtype(h.dtype), shape(h.shape) {
    if (!h.bytes.empty()) gpu().copy_from_host(buffer.data(), h.bytes.data(), h.bytes.size());
  }
  TensorView view() const {
    TensorView v(buffer.data(), dtype, {});
    for (int64_t d : shape) v.shape[v.ndim++] = d;
    return v;
  }
  void poison() {
    std::vector<uint8_t> nan(buffer.bytes(), 0xFF);
    if (!nan.empty()) gpu().copy_from_host(buffer.data(), nan.data(), nan.size());
  }
  HostTensor to_host() const {
    HostTensor h(dtype, shape);
    if (!h.bytes.empty()) gpu().copy_to_host(h.bytes.data(), buffer.data(), h.bytes.size());
    return h;
  }
};

// Default bounds by output dtype: |got - want| <= rtol * |want| + rtol * rms(want).
inline double default_rtol(DType t) {
  switch (t) {
    case DType::kBF16: return 2e-2;
    case DType::kF16: return 5e-3;
    default: return 2e-5;
  }
}

inline ::testing::AssertionResult all_close(const HostTensor& got, const HostTensor& want, double rtol = -1,
                                            double atol_scale = -1) {
  if (got.numel() != want.numel()) return ::testing::AssertionFailure() << "element counts differ";
  if (rtol < 0) rtol = default_rtol(got.dtype);
  if (atol_scale < 0) atol_scale = rtol;
  double ss = 0;
  for (int64_t i = 0; i < want.numel(); ++i) ss += want.get(i) * want.get(i);
  const double rms = want.numel() ? std::sqrt(ss / static_cast<double>(want.numel())) : 0.0;
  const double atol = atol_scale * rms + 1e-30;
  int64_t bad = 0;
  double worst_ratio = 0;
  std::ostringstream first;
  for (int64_t i = 0; i < want.numel(); ++i) {
    const double g = got.get(i), w = want.get(i);
    const double err = std::fabs(g - w);
    const double bound = rtol * std::fabs(w) + atol;
    const double ratio = std::isnan(err) ? INFINITY : err / bound;
    worst_ratio = std::max(worst_ratio, ratio);
    if (!(err <= bound)) {
      if (bad < 5) first << " [" << i << "] got " << g << " want " << w << ";";
      ++bad;
    }
  }
  if (bad) {
    return ::testing::AssertionFailure() << bad << " of " << want.numel() << " elements out of bounds (rtol " << rtol
                                         << ", atol " << atol << "):" << first.str();
  }
  return ::testing::AssertionSuccess() << "worst error/bound " << worst_ratio;
}

inline bool bitwise_equal(const HostTensor& a, const HostTensor& b) { return a.bytes == b.bytes; }

}  // namespace peregrine::cuda_test
