// WeightSource: named tensors of a model checkpoint, whatever the file format (safetensors, GGUF).
// Tensors are views into memory the source owns (memory-mapped files); every lookup error names the file and
// the tensor. Quantized checkpoints hold integer and float8 tensors beside float ones: a source reports each
// tensor's stored dtype and shape as they are, and the model's loader decides what they mean.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <initializer_list>
#include <string>
#include <vector>

#include "core/ggml_quant.h"
#include "core/tensor.h"

namespace peregrine::io {

struct TensorInfo {
  std::string name;
  DType dtype;
  std::vector<int64_t> shape;
  const std::byte* data;  // into the owning file's map
  size_t bytes;
  const std::filesystem::path* file;  // the file it lives in
  // GGUF block quantization (core/ggml_quant.h): dtype is then kU8 and the last dim holds a row's bytes; kNone
  // for plain tensors.
  GgmlType ggml = GgmlType::kNone;
};

class WeightSource {
 public:
  virtual ~WeightSource() = default;
  virtual bool contains(const std::string& name) const = 0;
  // Throws Error(kNotFound) naming the tensor and where it was looked for.
  virtual const TensorInfo& get(const std::string& name) const = 0;
  // A view with exactly this shape; throws Error(kFormatError) naming the file and tensor when the shape differs.
  virtual TensorView view(const std::string& name, std::initializer_list<int64_t> expected_shape) const;
  virtual size_t total_bytes() const = 0;
  virtual std::vector<std::string> names() const = 0;
  // A hint that [data, data + bytes) of one of its tensors will not be read again soon (the backend holds its own
  // copy, e.g. a repacked one): a memory-mapped source drops those pages from the process, so memory stays the
  // file's size; they remain readable. Default: nothing.
  virtual void release_pages(const void* data, size_t bytes) const {
    (void)data;
    (void)bytes;
  }
};

}  // namespace peregrine::io
