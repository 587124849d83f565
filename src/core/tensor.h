// TensorView: a non-owning, row-major, contiguous view (pointer, dtype, up to 4 dims).
// Ops take views inside params structs; who owns the memory is said where the view is made.
#pragma once

#include <array>
#include <cstdint>
#include <initializer_list>
#include <string>

#include "core/dtype.h"

namespace peregrine {

struct TensorView {
  void* data = nullptr;
  DType dtype = DType::kF32;
  std::array<int64_t, 4> shape{};  // only the first ndim entries are meaningful
  int ndim = 0;

  TensorView() = default;
  TensorView(void* d, DType t, std::initializer_list<int64_t> dims) : data(d), dtype(t) {
    for (int64_t v : dims) shape[ndim++] = v;
  }
  TensorView(const void* d, DType t, std::initializer_list<int64_t> dims)
      : TensorView(const_cast<void*>(d), t, dims) {}

  bool empty() const { return data == nullptr; }
  int64_t dim(int i) const { return shape[i < 0 ? ndim + i : i]; }
  int64_t numel() const {
    int64_t n = 1;
    for (int i = 0; i < ndim; ++i) n *= shape[i];
    return n;
  }
  size_t bytes() const { return dtype_bytes(dtype, static_cast<size_t>(numel())); }
  template <typename T> T* as() const { return static_cast<T*>(data); }
  // Rows [begin, begin+count) of the first dimension.
  TensorView slice_rows(int64_t begin, int64_t count) const {
    TensorView v = *this;
    int64_t row = numel() / (shape[0] == 0 ? 1 : shape[0]);
    v.data = static_cast<char*>(data) + dtype_bytes(dtype, static_cast<size_t>(begin * row));
    v.shape[0] = count;
    return v;
  }
  TensorView reshaped(std::initializer_list<int64_t> dims) const {
    TensorView v(data, dtype, dims);
    return v;
  }
  std::string shape_string() const;
};

}  // namespace peregrine
