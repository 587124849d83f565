// GGUF parsing and validation (see gguf.h for the format).
#include "io/gguf.h"

#include <algorithm>
#include <cstring>
#include <fstream>

#include "core/status.h"

namespace peregrine::io {
namespace fs = std::filesystem;

namespace {

constexpr uint32_t kMagic = 0x46554747;  // "GGUF" read as a little-endian u32
constexpr int kMaxDepth = 4;             // nested arrays deeper than this are refused
constexpr uint64_t kMaxStringBytes = 1ull << 30;
constexpr int kMaxDims = 4;              // GGML_MAX_DIMS

size_t scalar_size(GgufType t) {
  switch (t) {
    case GgufType::kU8: case GgufType::kI8: case GgufType::kBool: return 1;
    case GgufType::kU16: case GgufType::kI16: return 2;
    case GgufType::kU32: case GgufType::kI32: case GgufType::kF32: return 4;
    case GgufType::kU64: case GgufType::kI64: case GgufType::kF64: return 8;
    default: return 0;
  }
}

bool known_type(uint32_t t) { return t <= static_cast<uint32_t>(GgufType::kF64); }

// A bounds-checked cursor over the file's bytes; every failure names the file, the offset and what was read.
class Reader {
 public:
  Reader(const std::byte* data, size_t size, const GgufFile& file) : data_(data), size_(size), file_(file) {}
  size_t pos() const { return pos_; }
  size_t left() const { return size_ - pos_; }
  const std::byte* here() const { return data_ + pos_; }

  void need(uint64_t n, const std::string& what) const {
    if (n > left())
      file_.fail(ErrorCode::kFormatError, "truncated: " + what + " needs " + std::to_string(n) + " bytes at offset " +
                                              std::to_string(pos_) + " but the file has " + std::to_string(left()) +
                                              " left");
  }
  template <typename T>
  T read(const std::string& what) {
    need(sizeof(T), what);
    T v;
    std::memcpy(&v, data_ + pos_, sizeof(T));
    pos_ += sizeof(T);
    return v;
  }
  std::string_view string(const std::string& what) {
    const uint64_t n = read<uint64_t>(what + " (string length)");
    if (n > kMaxStringBytes)
      file_.fail(ErrorCode::kFormatError, what + ": string length " + std::to_string(n) + " is absurd");
    need(n, what);
    std::string_view s(reinterpret_cast<const char*>(data_ + pos_), static_cast<size_t>(n));
    pos_ += static_cast<size_t>(n);
    return s;
  }
  void skip(uint64_t n, const std::string& what) {
    need(n, what);
    pos_ += static_cast<size_t>(n);
  }

 private:
  const std::byte* data_;
  size_t size_;
  size_t pos_ = 0;
  const GgufFile& file_;
};

GgufValue read_value(Reader& r, GgufType type, const std::string& where, int depth, const GgufFile& file) {
  GgufValue v;
  v.type = type;
  switch (type) {
    case GgufType::kU8: v.u = r.read<uint8_t>(where); break;
    case GgufType::kI8: v.i = r.read<int8_t>(where); break;
    case GgufType::kU16: v.u = r.read<uint16_t>(where); break;
    case GgufType::kI16: v.i = r.read<int16_t>(where); break;
    case GgufType::kU32: v.u = r.read<uint32_t>(where); break;
    case GgufType::kI32: v.i = r.read<int32_t>(where); break;
    case GgufType::kU64: v.u = r.read<uint64_t>(where); break;
    case GgufType::kI64: v.i = r.read<int64_t>(where); break;
    case GgufType::kF32: v.f = r.read<float>(where); break;
    case GgufType::kF64: v.f = r.read<double>(where); break;
    case GgufType::kBool: {
      const uint8_t b = r.read<uint8_t>(where);
      if (b > 1) file.fail(ErrorCode::kFormatError, where + ": bool value " + std::to_string(b) + " is neither 0 nor 1");
      v.u = b;
      break;
    }
    case GgufType::kString: v.str = r.string(where); break;
    case GgufType::kArray: {
      if (depth >= kMaxDepth) file.fail(ErrorCode::kFormatError, where + ": arrays nested deeper than " + std::to_string(kMaxDepth));
      const uint32_t et = r.read<uint32_t>(where + " (array element type)");
      if (!known_type(et))
        file.fail(ErrorCode::kFormatError, where + ": unknown array element type " + std::to_string(et));
      v.elem_type = static_cast<GgufType>(et);
      v.count = r.read<uint64_t>(where + " (array length)");
      // Each element takes at least this many bytes, so a count the rest of the file cannot hold is refused
      // before anything is allocated.
      const size_t min_elem = v.elem_type == GgufType::kString ? 8 : v.elem_type == GgufType::kArray ? 12
                                                                                                   : scalar_size(v.elem_type);
      if (v.count > r.left() / min_elem)
        file.fail(ErrorCode::kFormatError, where + ": array of " + std::to_string(v.count) + " " +
                                               std::string(gguf_type_name(v.elem_type)) + " elements does not fit in the " +
                                               std::to_string(r.left()) + " bytes left (truncated?)");
      if (v.elem_type == GgufType::kString) {
        v.strings.reserve(static_cast<size_t>(v.count));
        for (uint64_t k = 0; k < v.count; ++k) v.strings.push_back(r.string(where + "[" + std::to_string(k) + "]"));
      } else if (v.elem_type == GgufType::kArray) {
        v.items.reserve(static_cast<size_t>(v.count));
        for (uint64_t k = 0; k < v.count; ++k)
          v.items.push_back(read_value(r, GgufType::kArray, where + "[" + std::to_string(k) + "]", depth + 1, file));
      } else {
        v.raw = r.here();
        r.skip(v.count * min_elem, where);
      }
      break;
    }
  }
  return v;
}

template <typename T>
T load(const std::byte* p) {
  T v;
  std::memcpy(&v, p, sizeof(T));
  return v;
}

}  // namespace

std::string_view gguf_type_name(GgufType t) {
  switch (t) {
    case GgufType::kU8: return "UINT8";
    case GgufType::kI8: return "INT8";
    case GgufType::kU16: return "UINT16";
    case GgufType::kI16: return "INT16";
    case GgufType::kU32: return "UINT32";
    case GgufType::kI32: return "INT32";
    case GgufType::kF32: return "FLOAT32";
    case GgufType::kBool: return "BOOL";
    case GgufType::kString: return "STRING";
    case GgufType::kArray: return "ARRAY";
    case GgufType::kU64: return "UINT64";
    case GgufType::kI64: return "INT64";
    case GgufType::kF64: return "FLOAT64";
  }
  return "?";
}

bool GgufValue::is_integer() const {
  switch (type) {
    case GgufType::kU8: case GgufType::kI8: case GgufType::kU16: case GgufType::kI16: case GgufType::kU32:
    case GgufType::kI32: case GgufType::kU64: case GgufType::kI64:
      return true;
    default:
      return false;
  }
}

int64_t GgufTensor::rows() const {
  int64_t r = 1;
  for (size_t d = 1; d < ne.size(); ++d) r *= ne[d];
  return r;
}

GgufFile::GgufFile(const fs::path& path) : map_(std::make_unique<MappedFile>(path)), path_(path) {
  parse(map_->data(), map_->size());
}

GgufFile::GgufFile(const std::byte* data, size_t size, const std::string& name) : path_(name) { parse(data, size); }

void GgufFile::fail(ErrorCode code, const std::string& what) const { throw Error(code, path_.string() + ": " + what); }

void GgufFile::parse(const std::byte* data, size_t size) {
  Reader r(data, size, *this);
  if (size < 4) fail(ErrorCode::kFormatError, "truncated: " + std::to_string(size) + " bytes, not a GGUF file");
  const uint32_t magic = r.read<uint32_t>("magic");
  if (magic != kMagic) fail(ErrorCode::kFormatError, "bad magic: not a GGUF file (it does not start with 'GGUF')");
  version_ = r.read<uint32_t>("version");
  if (version_ != 2 && version_ != 3)
    fail(ErrorCode::kUnsupported, "GGUF version " + std::to_string(version_) + " is not supported (versions 2 and 3 are)");
  const uint64_t n_tensors = r.read<uint64_t>("tensor count");
  const uint64_t n_kv = r.read<uint64_t>("metadata count");
  // A key-value takes at least 13 bytes (empty key, type, one-byte value); a tensor info at least 28.
  if (n_kv > r.left() / 13)
    fail(ErrorCode::kFormatError, "metadata count " + std::to_string(n_kv) + " cannot fit in the file (truncated?)");
  if (n_tensors > r.left() / 28)
    fail(ErrorCode::kFormatError, "tensor count " + std::to_string(n_tensors) + " cannot fit in the file (truncated?)");

  for (uint64_t k = 0; k < n_kv; ++k) {
    const std::string_view key = r.string("metadata key #" + std::to_string(k));
    const std::string where = "key '" + std::string(key) + "'";
    if (key.empty()) fail(ErrorCode::kFormatError, "metadata key #" + std::to_string(k) + " is empty");
    const uint32_t t = r.read<uint32_t>(where + " (value type)");
    if (!known_type(t)) fail(ErrorCode::kFormatError, where + ": unknown value type " + std::to_string(t));
    GgufValue v = read_value(r, static_cast<GgufType>(t), where, 0, *this);
    if (!kv_.emplace(std::string(key), std::move(v)).second) fail(ErrorCode::kFormatError, where + " appears twice");
  }

  if (const GgufValue* a = find("general.alignment")) {
    if (a->type != GgufType::kU32)
      fail(ErrorCode::kFormatError, "key 'general.alignment': type " + std::string(gguf_type_name(a->type)) +
                                        ", expected UINT32");
    if (a->u == 0 || (a->u & (a->u - 1)) != 0)
      fail(ErrorCode::kFormatError, "key 'general.alignment': " + std::to_string(a->u) + " is not a power of two");
    alignment_ = a->u;
  }

  tensors_.reserve(static_cast<size_t>(n_tensors));
  for (uint64_t k = 0; k < n_tensors; ++k) {
    GgufTensor t;
    t.name = std::string(r.string("tensor info #" + std::to_string(k) + " (name)"));
    const std::string where = "tensor '" + t.name + "'";
    if (t.name.empty()) fail(ErrorCode::kFormatError, "tensor info #" + std::to_string(k) + " has an empty name");
    const uint32_t nd = r.read<uint32_t>(where + " (dimension count)");
    if (nd == 0 || nd > kMaxDims)
      fail(ErrorCode::kFormatError, where + ": " + std::to_string(nd) + " dimensions (1 to " + std::to_string(kMaxDims) + " allowed)");
    uint64_t numel = 1;
    for (uint32_t d = 0; d < nd; ++d) {
      const uint64_t n = r.read<uint64_t>(where + " (dimension " + std::to_string(d) + ")");
      if (n == 0 || n > (1ull << 40))
        fail(ErrorCode::kFormatError, where + ": dimension " + std::to_string(d) + " is " + std::to_string(n));
      numel *= n;
      if (numel > (1ull << 42)) fail(ErrorCode::kFormatError, where + ": too many elements");
      t.ne.push_back(static_cast<int64_t>(n));
    }
    const uint32_t type_id = r.read<uint32_t>(where + " (type)");
    const auto type = ggml_type_from_id(type_id);
    if (!type) fail(ErrorCode::kFormatError, where + ": unknown tensor type " + std::to_string(type_id));
    t.type = *type;
    const auto info = ggml_block_info(t.type);
    if (!info)
      fail(ErrorCode::kUnsupported, where + ": tensor type " + ggml_type_name(t.type) +
                                        " is not supported (F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K, Q5_K, Q6_K are)");
    if (t.ne[0] % info->block_size != 0)
      fail(ErrorCode::kFormatError, where + ": row length " + std::to_string(t.ne[0]) + " is not a multiple of the " +
                                        ggml_type_name(t.type) + " block size " + std::to_string(info->block_size));
    t.bytes = static_cast<size_t>(numel / static_cast<uint64_t>(info->block_size) * static_cast<uint64_t>(info->type_size));
    t.offset = r.read<uint64_t>(where + " (data offset)");
    if (t.offset % alignment_ != 0)
      fail(ErrorCode::kFormatError, where + ": data offset " + std::to_string(t.offset) + " is not a multiple of the alignment " +
                                        std::to_string(alignment_));
    if (!by_name_.emplace(t.name, tensors_.size()).second) fail(ErrorCode::kFormatError, where + " appears twice");
    tensors_.push_back(std::move(t));
  }

  // The data section starts at the next multiple of the alignment.
  const uint64_t pad = (alignment_ - r.pos() % alignment_) % alignment_;
  data_offset_ = r.pos();
  if (!tensors_.empty()) {
    if (pad > r.left())
      fail(ErrorCode::kFormatError, "truncated: the file ends before its data section (offset " +
                                        std::to_string(r.pos() + pad) + ")");
    data_offset_ = r.pos() + static_cast<size_t>(pad);
  }
  const uint64_t data_size = size - data_offset_;
  std::vector<const GgufTensor*> order;
  for (GgufTensor& t : tensors_) {
    if (t.offset > data_size || t.bytes > data_size - t.offset)
      fail(ErrorCode::kFormatError, "tensor '" + t.name + "': data [" + std::to_string(t.offset) + ", " +
                                        std::to_string(t.offset + t.bytes) + ") lies outside the data section of " +
                                        std::to_string(data_size) + " bytes (truncated?)");
    t.data = data + data_offset_ + t.offset;
    order.push_back(&t);
  }
  std::sort(order.begin(), order.end(), [](const GgufTensor* a, const GgufTensor* b) { return a->offset < b->offset; });
  for (size_t k = 1; k < order.size(); ++k)
    if (order[k]->offset < order[k - 1]->offset + order[k - 1]->bytes)
      fail(ErrorCode::kFormatError, "tensor '" + order[k]->name + "': data at offset " + std::to_string(order[k]->offset) +
                                        " overlaps tensor '" + order[k - 1]->name + "' (" +
                                        std::to_string(order[k - 1]->offset) + " + " + std::to_string(order[k - 1]->bytes) + ")");
}

const GgufValue* GgufFile::find(std::string_view key) const {
  auto it = kv_.find(key);
  return it == kv_.end() ? nullptr : &it->second;
}

const GgufTensor* GgufFile::tensor(std::string_view name) const {
  auto it = by_name_.find(name);
  return it == by_name_.end() ? nullptr : &tensors_[it->second];
}

std::optional<std::string> GgufFile::string_opt(std::string_view key) const {
  const GgufValue* v = find(key);
  if (!v) return std::nullopt;
  if (v->type != GgufType::kString)
    fail(ErrorCode::kFormatError, "key '" + std::string(key) + "': type " + std::string(gguf_type_name(v->type)) + ", expected STRING");
  return std::string(v->str);
}

std::string GgufFile::string(std::string_view key) const {
  auto s = string_opt(key);
  if (!s) fail(ErrorCode::kNotFound, "key '" + std::string(key) + "' is missing");
  return *s;
}

std::optional<int64_t> GgufFile::int_opt(std::string_view key) const {
  const GgufValue* v = find(key);
  if (!v) return std::nullopt;
  if (!v->is_integer())
    fail(ErrorCode::kFormatError, "key '" + std::string(key) + "': type " + std::string(gguf_type_name(v->type)) + ", expected an integer");
  if (v->type == GgufType::kU64 || v->type == GgufType::kU32 || v->type == GgufType::kU16 || v->type == GgufType::kU8) {
    if (v->u > static_cast<uint64_t>(INT64_MAX)) fail(ErrorCode::kFormatError, "key '" + std::string(key) + "': value too large");
    return static_cast<int64_t>(v->u);
  }
  return v->i;
}

std::optional<uint64_t> GgufFile::uint_opt(std::string_view key) const {
  auto i = int_opt(key);
  if (!i) return std::nullopt;
  if (*i < 0) fail(ErrorCode::kFormatError, "key '" + std::string(key) + "': " + std::to_string(*i) + " is negative");
  return static_cast<uint64_t>(*i);
}

uint64_t GgufFile::uint(std::string_view key) const {
  auto u = uint_opt(key);
  if (!u) fail(ErrorCode::kNotFound, "key '" + std::string(key) + "' is missing");
  return *u;
}

std::optional<double> GgufFile::number_opt(std::string_view key) const {
  const GgufValue* v = find(key);
  if (!v) return std::nullopt;
  if (v->is_float()) return v->f;
  if (v->is_integer()) return static_cast<double>(*int_opt(key));
  fail(ErrorCode::kFormatError, "key '" + std::string(key) + "': type " + std::string(gguf_type_name(v->type)) + ", expected a number");
}

std::optional<bool> GgufFile::bool_opt(std::string_view key) const {
  const GgufValue* v = find(key);
  if (!v) return std::nullopt;
  if (v->type != GgufType::kBool)
    fail(ErrorCode::kFormatError, "key '" + std::string(key) + "': type " + std::string(gguf_type_name(v->type)) + ", expected BOOL");
  return v->u != 0;
}

const GgufValue* GgufFile::array(std::string_view key, GgufType elem) const {
  const GgufValue* v = find(key);
  if (!v) return nullptr;
  if (v->type != GgufType::kArray || v->elem_type != elem)
    fail(ErrorCode::kFormatError, "key '" + std::string(key) + "': type " + std::string(gguf_type_name(v->type)) +
                                      (v->type == GgufType::kArray ? " of " + std::string(gguf_type_name(v->elem_type)) : "") +
                                      ", expected ARRAY of " + std::string(gguf_type_name(elem)));
  return v;
}

std::vector<float> GgufFile::f32_array(std::string_view key) const {
  const GgufValue* v = find(key);
  if (!v) return {};
  const GgufValue* a = array(key, v->type == GgufType::kArray && v->elem_type == GgufType::kF64 ? GgufType::kF64 : GgufType::kF32);
  std::vector<float> out(static_cast<size_t>(a->count));
  for (size_t k = 0; k < out.size(); ++k)
    out[k] = a->elem_type == GgufType::kF32 ? load<float>(a->raw + 4 * k) : static_cast<float>(load<double>(a->raw + 8 * k));
  return out;
}

std::vector<int64_t> GgufFile::int_array(std::string_view key) const {
  const GgufValue* v = find(key);
  if (!v) return {};
  if (v->type != GgufType::kArray)
    fail(ErrorCode::kFormatError, "key '" + std::string(key) + "': type " + std::string(gguf_type_name(v->type)) + ", expected ARRAY");
  std::vector<int64_t> out(static_cast<size_t>(v->count));
  const std::byte* p = v->raw;
  for (size_t k = 0; k < out.size(); ++k) {
    switch (v->elem_type) {
      case GgufType::kU8: out[k] = load<uint8_t>(p + k); break;
      case GgufType::kI8: out[k] = load<int8_t>(p + k); break;
      case GgufType::kU16: out[k] = load<uint16_t>(p + 2 * k); break;
      case GgufType::kI16: out[k] = load<int16_t>(p + 2 * k); break;
      case GgufType::kU32: out[k] = load<uint32_t>(p + 4 * k); break;
      case GgufType::kI32: out[k] = load<int32_t>(p + 4 * k); break;
      case GgufType::kU64: out[k] = static_cast<int64_t>(load<uint64_t>(p + 8 * k)); break;
      case GgufType::kI64: out[k] = load<int64_t>(p + 8 * k); break;
      default:
        fail(ErrorCode::kFormatError, "key '" + std::string(key) + "': ARRAY of " + std::string(gguf_type_name(v->elem_type)) +
                                          ", expected an array of integers");
    }
  }
  return out;
}

GgufWeightSource::GgufWeightSource(std::shared_ptr<const GgufFile> file) : file_(std::move(file)) {
  for (const GgufTensor& t : file_->tensors()) {
    TensorInfo info;
    info.name = t.name;
    info.data = t.data;
    info.bytes = t.bytes;
    info.file = &file_->path();
    for (auto it = t.ne.rbegin(); it != t.ne.rend(); ++it) info.shape.push_back(*it);
    switch (t.type) {
      case GgmlType::kF32: info.dtype = DType::kF32; break;
      case GgmlType::kF16: info.dtype = DType::kF16; break;
      case GgmlType::kBF16: info.dtype = DType::kBF16; break;
      default:
        info.dtype = DType::kU8;
        info.ggml = t.type;
        info.shape.back() = static_cast<int64_t>(ggml_row_bytes(t.type, t.ne[0]));
        break;
    }
    index_.emplace(t.name, std::move(info));
  }
}

const TensorInfo& GgufWeightSource::get(const std::string& name) const {
  auto it = index_.find(name);
  if (it == index_.end()) file_->fail(ErrorCode::kNotFound, "tensor '" + name + "' not found");
  return it->second;
}

void GgufFile::release_pages(const void* p, size_t bytes) const {
  if (map_) map_->release_pages(p, bytes);
}

size_t GgufWeightSource::total_bytes() const {
  size_t total = 0;
  for (auto& [name, info] : index_) total += info.bytes;
  return total;
}

std::vector<std::string> GgufWeightSource::names() const {
  std::vector<std::string> out;
  for (auto& [name, info] : index_) out.push_back(name);
  return out;
}

bool is_gguf_path(const fs::path& path) {
  std::error_code ec;
  if (!fs::is_regular_file(path, ec)) return false;
  if (path.extension() == ".gguf") return true;
  std::ifstream in(path, std::ios::binary);
  char magic[4] = {};
  in.read(magic, 4);
  return in.gcount() == 4 && std::memcmp(magic, "GGUF", 4) == 0;
}

}  // namespace peregrine::io
