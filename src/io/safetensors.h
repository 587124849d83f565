// Safetensors reading: a single model.safetensors or a sharded set described by model.safetensors.index.json,
// memory-mapped; tensors are returned as views into the map. Every defect (truncated file, lying header,
// unknown dtype, offsets out of range) is an Error naming the file and the tensor.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "io/mapped_file.h"
#include "io/weight_source.h"

namespace peregrine::io {

// One .safetensors file.
class SafetensorsFile {
 public:
  explicit SafetensorsFile(const std::filesystem::path& path);
  const std::map<std::string, TensorInfo>& tensors() const { return tensors_; }
  const std::filesystem::path& path() const { return file_->path(); }

 private:
  std::unique_ptr<MappedFile> file_;
  std::map<std::string, TensorInfo> tensors_;
};

// All tensors of a model folder (single file or sharded): the safetensors WeightSource.
class WeightStore final : public WeightSource {
 public:
  // Opens dir/model.safetensors.index.json if present, else dir/model.safetensors (or the only *.safetensors).
  static WeightStore open(const std::filesystem::path& dir);

  bool contains(const std::string& name) const override { return index_.count(name) != 0; }
  // Throws Error(kNotFound) naming the tensor and the folder.
  const TensorInfo& get(const std::string& name) const override;
  size_t total_bytes() const override;
  std::vector<std::string> names() const override;
  const std::filesystem::path& dir() const { return dir_; }

 private:
  std::filesystem::path dir_;
  std::vector<std::unique_ptr<SafetensorsFile>> files_;
  std::map<std::string, const TensorInfo*> index_;
};

}  // namespace peregrine::io
