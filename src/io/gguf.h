// GGUF (llama.cpp's model file, versions 2 and 3) read over a memory map: the header, the metadata (every value
// type, arrays and nested arrays), the tensor infos and the aligned data section. Nothing is copied: strings and
// numeric arrays are views into the map. Every defect (bad magic, unsupported version, truncation, absurd counts,
// unknown value or tensor types, offsets and sizes out of range, misaligned or overlapping data, duplicate keys
// or tensors) is an Error naming the file and the key or tensor; every length is checked against the bytes left
// before anything is allocated, so no input makes the reader crash, hang or allocate without bound.
//
// Format (little-endian): "GGUF", u32 version, u64 tensor_count, u64 kv_count; kv_count times (string key,
// u32 value type, value); tensor_count times (string name, u32 n_dims, u64 ne[n_dims], u32 ggml type, u64 offset);
// padding to `general.alignment` (default 32); the data, each tensor at data start + offset (a multiple of the
// alignment). A string is u64 length + bytes; an array is u32 element type, u64 count, elements. ne[0] is the
// innermost dimension (a row's length).
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/ggml_quant.h"
#include "core/status.h"
#include "io/mapped_file.h"
#include "io/weight_source.h"

namespace peregrine::io {

enum class GgufType : uint32_t {
  kU8 = 0, kI8 = 1, kU16 = 2, kI16 = 3, kU32 = 4, kI32 = 5, kF32 = 6, kBool = 7, kString = 8, kArray = 9,
  kU64 = 10, kI64 = 11, kF64 = 12,
};
std::string_view gguf_type_name(GgufType t);

// One metadata value. Scalars are held decoded; strings and numeric arrays point into the map.
struct GgufValue {
  GgufType type = GgufType::kU8;
  uint64_t u = 0;       // unsigned integers and bool
  int64_t i = 0;        // signed integers
  double f = 0;         // floats
  std::string_view str; // kString
  // kArray
  GgufType elem_type = GgufType::kU8;
  uint64_t count = 0;
  const std::byte* raw = nullptr;        // numeric elements (count * element size bytes, unaligned)
  std::vector<std::string_view> strings; // string elements
  std::vector<GgufValue> items;          // array elements (nested arrays)

  bool is_integer() const;
  bool is_float() const { return type == GgufType::kF32 || type == GgufType::kF64; }
};

struct GgufTensor {
  std::string name;
  GgmlType type = GgmlType::kF32;
  std::vector<int64_t> ne;  // innermost first, as stored
  uint64_t offset = 0;      // from the data section's start
  size_t bytes = 0;
  const std::byte* data = nullptr;
  int64_t rows() const;     // product of ne[1..]
};

class GgufFile {
 public:
  // Maps and parses `path`. Throws Error(kNotFound/kIoError) when it cannot be read, kFormatError for a
  // malformed file, kUnsupported for a well-formed one we cannot read (version, tensor type); each names the file.
  explicit GgufFile(const std::filesystem::path& path);
  // Parses a buffer the caller keeps alive (tests, the fuzz target); `name` stands for the file in errors.
  GgufFile(const std::byte* data, size_t size, const std::string& name);
  GgufFile(const GgufFile&) = delete;
  GgufFile& operator=(const GgufFile&) = delete;

  const std::filesystem::path& path() const { return path_; }
  uint32_t version() const { return version_; }
  uint64_t alignment() const { return alignment_; }
  size_t data_offset() const { return data_offset_; }

  const std::map<std::string, GgufValue, std::less<>>& metadata() const { return kv_; }
  const GgufValue* find(std::string_view key) const;
  bool contains(std::string_view key) const { return find(key) != nullptr; }
  // Typed getters: Error(kNotFound) naming the file and key when absent (the first form), kFormatError when the
  // value has another type or does not fit.
  std::string string(std::string_view key) const;
  std::optional<std::string> string_opt(std::string_view key) const;
  uint64_t uint(std::string_view key) const;
  std::optional<uint64_t> uint_opt(std::string_view key) const;
  std::optional<int64_t> int_opt(std::string_view key) const;
  std::optional<double> number_opt(std::string_view key) const;  // any integer or float
  std::optional<bool> bool_opt(std::string_view key) const;
  // Arrays: element type checked; nullptr when absent.
  const GgufValue* array(std::string_view key, GgufType elem) const;
  std::vector<float> f32_array(std::string_view key) const;    // F32 (or F64) elements
  std::vector<int64_t> int_array(std::string_view key) const;  // any integer elements

  const std::vector<GgufTensor>& tensors() const { return tensors_; }
  const GgufTensor* tensor(std::string_view name) const;

  // "path: key 'x': what" — the house style of errors.
  [[noreturn]] void fail(ErrorCode code, const std::string& what) const;
  // MappedFile::release_pages on the file's map (no-op for a caller's buffer).
  void release_pages(const void* p, size_t bytes) const;

 private:
  void parse(const std::byte* data, size_t size);

  std::unique_ptr<MappedFile> map_;
  std::filesystem::path path_;
  uint32_t version_ = 0;
  uint64_t alignment_ = 32;
  size_t data_offset_ = 0;
  std::map<std::string, GgufValue, std::less<>> kv_;
  std::vector<GgufTensor> tensors_;
  std::map<std::string, size_t, std::less<>> by_name_;
};

// A GGUF file's tensors as a WeightSource under their GGUF names. F32/F16/BF16 tensors are plain views
// (shape = ne reversed: [rows, row length]); block-quantized ones are u8 [.., rows, row bytes] with
// TensorInfo::ggml set. Other types are reported as u8 too (the model refuses them by name).
class GgufWeightSource final : public WeightSource {
 public:
  explicit GgufWeightSource(std::shared_ptr<const GgufFile> file);
  bool contains(const std::string& name) const override { return index_.count(name) != 0; }
  const TensorInfo& get(const std::string& name) const override;
  size_t total_bytes() const override;
  std::vector<std::string> names() const override;
  const GgufFile& file() const { return *file_; }
  void release_pages(const void* data, size_t bytes) const override { file_->release_pages(data, bytes); }

 private:
  std::shared_ptr<const GgufFile> file_;
  std::map<std::string, TensorInfo> index_;
};

// True when `path` names a GGUF file (a regular file ending in .gguf, or one that starts with the magic).
bool is_gguf_path(const std::filesystem::path& path);

}  // namespace peregrine::io
