// Safetensors parsing and validation (format: u64 little-endian header size, JSON header, raw data).
#include "io/safetensors.h"

#include <algorithm>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>

#include "core/status.h"

namespace peregrine::io {
namespace fs = std::filesystem;
using nlohmann::json;

namespace {

[[noreturn]] void format_error(const fs::path& file, const std::string& what) {
  throw Error(ErrorCode::kFormatError, file.string() + ": " + what);
}

constexpr uint64_t kMaxHeaderBytes = 100ull << 20;

}  // namespace

SafetensorsFile::SafetensorsFile(const fs::path& path) : file_(std::make_unique<MappedFile>(path)) {
  const size_t size = file_->size();
  if (size < 8) format_error(path, "truncated: shorter than the 8-byte header length");
  uint64_t header_len = 0;
  std::memcpy(&header_len, file_->data(), 8);  // little-endian on every platform we build for
  if (header_len > kMaxHeaderBytes || header_len > size - 8)
    format_error(path, "header length " + std::to_string(header_len) + " exceeds the file size " + std::to_string(size));
  json header;
  try {
    header = json::parse(reinterpret_cast<const char*>(file_->data()) + 8,
                         reinterpret_cast<const char*>(file_->data()) + 8 + header_len);
  } catch (const json::exception& e) {
    format_error(path, std::string("header is not valid JSON: ") + e.what());
  }
  if (!header.is_object()) format_error(path, "header is not a JSON object");
  const std::byte* data_start = file_->data() + 8 + header_len;
  const size_t data_size = size - 8 - header_len;
  for (auto& [name, entry] : header.items()) {
    if (name == "__metadata__") continue;
    const std::string where = "tensor '" + name + "'";
    if (!entry.is_object()) format_error(path, where + ": entry is not an object");
    if (!entry.contains("dtype") || !entry["dtype"].is_string()) format_error(path, where + ": missing field 'dtype'");
    if (!entry.contains("shape") || !entry["shape"].is_array()) format_error(path, where + ": missing field 'shape'");
    if (!entry.contains("data_offsets") || !entry["data_offsets"].is_array() || entry["data_offsets"].size() != 2)
      format_error(path, where + ": missing or malformed field 'data_offsets'");
    std::string dtype_str = entry["dtype"].get<std::string>();
    auto dtype = parse_dtype(dtype_str);
    if (!dtype) throw Error(ErrorCode::kUnsupported, path.string() + ": " + where + ": unknown dtype '" + dtype_str + "'");
    TensorInfo info;
    info.name = name;
    info.dtype = *dtype;
    uint64_t numel = 1;
    for (auto& d : entry["shape"]) {
      if (!d.is_number_unsigned()) format_error(path, where + ": shape has a non-integer or negative dimension");
      uint64_t v = d.get<uint64_t>();
      if (v > (1ull << 40)) format_error(path, where + ": shape dimension too large");
      info.shape.push_back(static_cast<int64_t>(v));
      numel *= v;
      if (numel > (1ull << 42)) format_error(path, where + ": tensor too large");
    }
    auto& offs = entry["data_offsets"];
    if (!offs[0].is_number_unsigned() || !offs[1].is_number_unsigned())
      format_error(path, where + ": data_offsets must be non-negative integers");
    uint64_t begin = offs[0].get<uint64_t>(), end = offs[1].get<uint64_t>();
    if (begin > end || end > data_size)
      format_error(path, where + ": data_offsets [" + std::to_string(begin) + ", " + std::to_string(end) +
                             ") lie outside the data section of " + std::to_string(data_size) + " bytes (truncated?)");
    uint64_t expected = dtype_bytes(info.dtype, numel);
    if (end - begin != expected)
      format_error(path, where + ": data_offsets span " + std::to_string(end - begin) + " bytes but dtype " +
                             dtype_str + " and shape need " + std::to_string(expected));
    info.data = data_start + begin;
    info.bytes = end - begin;
    info.file = &file_->path();
    tensors_.emplace(name, std::move(info));
  }
}

WeightStore WeightStore::open(const fs::path& dir) {
  WeightStore store;
  store.dir_ = dir;
  const fs::path index_path = dir / "model.safetensors.index.json";
  std::vector<fs::path> shards;
  std::map<std::string, std::string> weight_map;
  if (fs::exists(index_path)) {
    std::ifstream in(index_path);
    json index;
    try {
      index = json::parse(in);
    } catch (const json::exception& e) {
      throw Error(ErrorCode::kFormatError, index_path.string() + ": not valid JSON: " + e.what());
    }
    if (!index.contains("weight_map") || !index["weight_map"].is_object())
      throw Error(ErrorCode::kFormatError, index_path.string() + ": missing field 'weight_map'");
    for (auto& [name, file] : index["weight_map"].items()) {
      if (!file.is_string())
        throw Error(ErrorCode::kFormatError, index_path.string() + ": weight_map['" + name + "'] is not a string");
      std::string f = file.get<std::string>();
      if (f.find('/') != std::string::npos || f.find("..") != std::string::npos)
        throw Error(ErrorCode::kFormatError, index_path.string() + ": weight_map['" + name + "'] names a path outside the folder");
      weight_map[name] = f;
      if (std::find(shards.begin(), shards.end(), dir / f) == shards.end()) shards.push_back(dir / f);
    }
  } else if (fs::exists(dir / "model.safetensors")) {
    shards.push_back(dir / "model.safetensors");
  } else {
    if (fs::is_directory(dir))
      for (auto& e : fs::directory_iterator(dir))
        if (e.path().extension() == ".safetensors") shards.push_back(e.path());
    std::sort(shards.begin(), shards.end());
    if (shards.empty())
      throw Error(ErrorCode::kNotFound, (dir / "model.safetensors").string() +
                                            ": not found (nor model.safetensors.index.json nor any *.safetensors)");
  }
  for (auto& shard : shards) {
    auto file = std::make_unique<SafetensorsFile>(shard);
    for (auto& [name, info] : file->tensors()) {
      if (!weight_map.empty()) {
        auto it = weight_map.find(name);
        if (it == weight_map.end() || dir / it->second != shard) continue;  // the index names another shard
      }
      if (store.index_.count(name))
        throw Error(ErrorCode::kFormatError, shard.string() + ": tensor '" + name + "' appears in two files");
      store.index_[name] = &info;
    }
    store.files_.push_back(std::move(file));
  }
  for (auto& [name, file] : weight_map)
    if (!store.index_.count(name))
      throw Error(ErrorCode::kFormatError,
                  (dir / file).string() + ": tensor '" + name + "' listed in model.safetensors.index.json is missing");
  return store;
}

const TensorInfo& WeightStore::get(const std::string& name) const {
  auto it = index_.find(name);
  if (it == index_.end())
    throw Error(ErrorCode::kNotFound, dir_.string() + ": tensor '" + name + "' not found in the safetensors files");
  return *it->second;
}

TensorView WeightSource::view(const std::string& name, std::initializer_list<int64_t> expected) const {
  const TensorInfo& info = get(name);
  std::vector<int64_t> want(expected);
  if (info.shape != want) {
    auto fmt = [](const std::vector<int64_t>& s) {
      std::string r = "[";
      for (size_t i = 0; i < s.size(); ++i) r += (i ? ", " : "") + std::to_string(s[i]);
      return r + "]";
    };
    throw Error(ErrorCode::kFormatError, info.file->string() + ": tensor '" + name + "' has shape " + fmt(info.shape) +
                                             ", expected " + fmt(want) + " from config.json");
  }
  TensorView v(const_cast<std::byte*>(info.data), info.dtype, expected);
  return v;
}

size_t WeightStore::total_bytes() const {
  size_t total = 0;
  for (auto& [name, info] : index_) total += info->bytes;
  return total;
}

std::vector<std::string> WeightStore::names() const {
  std::vector<std::string> out;
  for (auto& [name, info] : index_) out.push_back(name);
  return out;
}

}  // namespace peregrine::io
