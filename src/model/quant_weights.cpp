// Checkpoint formats read into ops::WeightQuant's layout (see quant_weights.h; the packing rules are those of
// ../shared/models/quant/README.md: GPTQ input-dim packing with v1 zeros, AWQ's interleaved output-dim packing,
// compressed-tensors' offset codes).
#include "model/quant_weights.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "core/status.h"

namespace peregrine::model {
namespace {

[[noreturn]] void fail(const io::WeightSource& src, const std::string& name, const std::string& what) {
  const io::TensorInfo& t = src.get(name);
  throw Error(ErrorCode::kFormatError, t.file->string() + ": tensor '" + name + "' " + what);
}

// The tensor `name` with exactly this shape and one of the dtypes.
const void* need(const io::WeightSource& src, const std::string& name, std::initializer_list<int64_t> shape,
                 std::initializer_list<DType> dtypes) {
  TensorView v = src.view(name, shape);
  if (std::find(dtypes.begin(), dtypes.end(), v.dtype) == dtypes.end()) {
    std::string want;
    for (DType d : dtypes) {
      if (!want.empty()) want.append(" or ");
      want.append(dtype_name(d));
    }
    fail(src, name, "has dtype " + std::string(dtype_name(v.dtype)) + "; expected " + want);
  }
  return v.data;
}

std::vector<float> floats(const io::WeightSource& src, const std::string& name, std::initializer_list<int64_t> shape) {
  const void* p = need(src, name, shape, {DType::kF32, DType::kBF16, DType::kF16});
  const io::TensorInfo& t = src.get(name);
  std::vector<float> out(static_cast<size_t>(src.view(name, shape).numel()));
  convert_to_f32(t.dtype, p, out.data(), out.size());
  return out;
}

void set_code(HostQuantLinear& w, int64_t n, int64_t kk, uint32_t code) {
  const int64_t i = n * w.k + kk;
  if (w.codes_dtype == DType::kU8) {
    w.codes[static_cast<size_t>(i)] = static_cast<uint8_t>(code);
  } else {
    uint8_t& b = w.codes[static_cast<size_t>(i / 2)];
    b = (i % 2 == 0) ? static_cast<uint8_t>((b & 0xf0) | (code & 0xf)) : static_cast<uint8_t>((b & 0x0f) | (code << 4));
  }
}

HostQuantLinear empty_linear(int bits, int64_t n, int64_t k, int64_t group_size) {
  HostQuantLinear w;
  w.codes_dtype = bits == 4 ? DType::kI4 : DType::kU8;
  w.n = n;
  w.k = k;
  w.group_size = group_size <= 0 ? k : group_size;
  w.groups = (k + w.group_size - 1) / w.group_size;
  w.codes.assign(dtype_bytes(w.codes_dtype, static_cast<size_t>(n * k)), 0);
  return w;
}

// Zeros equal to the midpoint everywhere are dropped (ops.h's default).
void drop_midpoint_zeros(HostQuantLinear& w) {
  const float mid = w.codes_dtype == DType::kI4 ? 8.0f : 128.0f;
  if (std::all_of(w.zeros.begin(), w.zeros.end(), [&](float z) { return z == mid; })) w.zeros.clear();
}

// A g_idx (group of each input column) applied: trivial ones are dropped; act-order ones sort the code columns
// by group (stable) and record perm; g_idx stays only when the sorted groups are not runs of group_size.
void apply_g_idx(const io::WeightSource& src, const std::string& name, const int32_t* g_idx, HostQuantLinear& w) {
  const int64_t k = w.k;
  bool trivial = true;
  for (int64_t kk = 0; kk < k; ++kk) {
    if (g_idx[kk] < 0 || g_idx[kk] >= w.groups)
    {
      std::string what = "[";
      what.append(std::to_string(kk)).append("] = ").append(std::to_string(g_idx[kk]));
      what.append(" is outside [0, ").append(std::to_string(w.groups)).append(")");
      fail(src, name, what);
    }
    trivial = trivial && g_idx[kk] == kk / w.group_size;
  }
  if (trivial) return;
  std::vector<int32_t> perm(static_cast<size_t>(k));
  std::iota(perm.begin(), perm.end(), 0);
  std::stable_sort(perm.begin(), perm.end(), [&](int32_t a, int32_t b) { return g_idx[a] < g_idx[b]; });
  bool regular = true;
  for (int64_t j = 0; j < k; ++j) regular = regular && g_idx[perm[static_cast<size_t>(j)]] == j / w.group_size;
  HostQuantLinear sorted = w;
  for (int64_t n = 0; n < w.n; ++n)
    for (int64_t j = 0; j < k; ++j) set_code(sorted, n, j, static_cast<uint32_t>(code_at(w, n, perm[static_cast<size_t>(j)])));
  w.codes = std::move(sorted.codes);
  if (!regular) {
    w.g_idx.resize(static_cast<size_t>(k));
    for (int64_t j = 0; j < k; ++j) w.g_idx[static_cast<size_t>(j)] = g_idx[perm[static_cast<size_t>(j)]];
  }
  w.perm = std::move(perm);
}

HostQuantLinear read_gptq(const io::QuantConfig& q, const io::WeightSource& src, const std::string& p, int64_t n,
                          int64_t k) {
  const int bits = q.bits, pack = 32 / bits;
  const uint32_t mask = (1u << bits) - 1;
  if (k % pack != 0 || n % pack != 0)
    fail(src, p + ".qweight", "belongs to a [" + std::to_string(n) + ", " + std::to_string(k) +
                                  "] projection whose dimensions are not multiples of " + std::to_string(pack));
  HostQuantLinear w = empty_linear(bits, n, k, q.group_size);
  const int64_t groups = w.groups;
  const auto* qw = static_cast<const uint32_t*>(need(src, p + ".qweight", {k / pack, n}, {DType::kI32}));
  const auto* qz = static_cast<const uint32_t*>(need(src, p + ".qzeros", {groups, n / pack}, {DType::kI32}));
  const std::vector<float> scales = floats(src, p + ".scales", {groups, n});
  for (int64_t r = 0; r < k / pack; ++r)
    for (int64_t c = 0; c < n; ++c) {
      const uint32_t word = qw[r * n + c];
      for (int j = 0; j < pack; ++j) set_code(w, c, r * pack + j, (word >> (bits * j)) & mask);
    }
  w.scales.resize(static_cast<size_t>(n * groups));
  w.zeros.resize(static_cast<size_t>(n * groups));
  const uint32_t add = q.gptq_v1_zeros ? 1 : 0;
  for (int64_t g = 0; g < groups; ++g)
    for (int64_t c = 0; c < n; ++c) {
      w.scales[static_cast<size_t>(c * groups + g)] = scales[static_cast<size_t>(g * n + c)];
      const uint32_t z = ((qz[g * (n / pack) + c / pack] >> (bits * (c % pack))) & mask) + add;
      w.zeros[static_cast<size_t>(c * groups + g)] = static_cast<float>(z);
    }
  drop_midpoint_zeros(w);
  if (src.contains(p + ".g_idx")) {
    const auto* gi = static_cast<const int32_t*>(need(src, p + ".g_idx", {k}, {DType::kI32}));
    apply_g_idx(src, p + ".g_idx", gi, w);
  } else if (q.desc_act) {
    throw Error(ErrorCode::kNotFound, src.get(p + ".qweight").file->string() + ": desc_act is true but tensor '" + p +
                                          ".g_idx' is missing");
  }
  return w;
}

HostQuantLinear read_awq(const io::QuantConfig& q, const io::WeightSource& src, const std::string& p, int64_t n,
                         int64_t k) {
  static constexpr int kShift[8] = {0, 16, 4, 20, 8, 24, 12, 28};  // output 8c + j sits at bits kShift[j]
  if (n % 8 != 0) fail(src, p + ".qweight", "belongs to a projection with " + std::to_string(n) + " outputs (not a multiple of 8)");
  HostQuantLinear w = empty_linear(4, n, k, q.group_size);
  const int64_t groups = w.groups;
  const auto* qw = static_cast<const uint32_t*>(need(src, p + ".qweight", {k, n / 8}, {DType::kI32}));
  const auto* qz = static_cast<const uint32_t*>(need(src, p + ".qzeros", {groups, n / 8}, {DType::kI32}));
  const std::vector<float> scales = floats(src, p + ".scales", {groups, n});
  for (int64_t kk = 0; kk < k; ++kk)
    for (int64_t c = 0; c < n; ++c) set_code(w, c, kk, (qw[kk * (n / 8) + c / 8] >> kShift[c % 8]) & 0xf);
  w.scales.resize(static_cast<size_t>(n * groups));
  w.zeros.resize(static_cast<size_t>(n * groups));
  for (int64_t g = 0; g < groups; ++g)
    for (int64_t c = 0; c < n; ++c) {
      w.scales[static_cast<size_t>(c * groups + g)] = scales[static_cast<size_t>(g * n + c)];
      w.zeros[static_cast<size_t>(c * groups + g)] = static_cast<float>((qz[g * (n / 8) + c / 8] >> kShift[c % 8]) & 0xf);
    }
  drop_midpoint_zeros(w);
  return w;
}

HostQuantLinear read_compressed_tensors(const io::QuantConfig& q, const io::WeightSource& src, const std::string& p,
                                        int64_t n, int64_t k) {
  const int bits = q.bits, pack = 32 / bits;
  const uint32_t mask = (1u << bits) - 1;
  if (k % pack != 0) fail(src, p + ".weight_packed", "belongs to a projection with " + std::to_string(k) +
                                                       " inputs (not a multiple of " + std::to_string(pack) + ")");
  HostQuantLinear w = empty_linear(bits, n, k, q.group_size);
  const int64_t groups = w.groups;
  const auto* wp = static_cast<const uint32_t*>(need(src, p + ".weight_packed", {n, k / pack}, {DType::kI32}));
  if (src.contains(p + ".weight_shape")) {
    const io::TensorInfo& t = src.get(p + ".weight_shape");
    const void* d = need(src, p + ".weight_shape", {2}, {DType::kI64, DType::kI32});
    int64_t s0 = t.dtype == DType::kI64 ? static_cast<const int64_t*>(d)[0] : static_cast<const int32_t*>(d)[0];
    int64_t s1 = t.dtype == DType::kI64 ? static_cast<const int64_t*>(d)[1] : static_cast<const int32_t*>(d)[1];
    if (s0 != n || s1 != k)
      fail(src, p + ".weight_shape", "says [" + std::to_string(s0) + ", " + std::to_string(s1) + "]; the config gives [" +
                                          std::to_string(n) + ", " + std::to_string(k) + "]");
  }
  const int64_t words = k / pack;
  for (int64_t c = 0; c < n; ++c)
    for (int64_t r = 0; r < words; ++r) {
      const uint32_t word = wp[c * words + r];
      for (int j = 0; j < pack; ++j) set_code(w, c, r * pack + j, (word >> (bits * j)) & mask);
    }
  w.scales = floats(src, p + ".weight_scale", {n, groups});
  const std::string zp = p + ".weight_zero_point";
  if (src.contains(zp)) {
    w.zeros.resize(static_cast<size_t>(n * groups));
    const io::TensorInfo& t = src.get(zp);
    if (t.dtype == DType::kI32) {
      const auto* z = static_cast<const uint32_t*>(need(src, zp, {(n + pack - 1) / pack, groups}, {DType::kI32}));
      for (int64_t c = 0; c < n; ++c)
        for (int64_t g = 0; g < groups; ++g)
          w.zeros[static_cast<size_t>(c * groups + g)] =
              static_cast<float>((z[(c / pack) * groups + g] >> (bits * (c % pack))) & mask);
    } else {
      const auto* z = static_cast<const int8_t*>(need(src, zp, {n, groups}, {DType::kI8}));
      for (int64_t i = 0; i < n * groups; ++i)
        w.zeros[static_cast<size_t>(i)] = static_cast<float>(z[i] + (1 << (bits - 1)));
    }
    drop_midpoint_zeros(w);
  } else if (!q.sym) {
    throw Error(ErrorCode::kNotFound, src.get(p + ".weight_packed").file->string() +
                                          ": the scheme is asymmetric but tensor '" + zp + "' is missing");
  }
  if (src.contains(p + ".weight_g_idx")) {
    const auto* gi = static_cast<const int32_t*>(need(src, p + ".weight_g_idx", {k}, {DType::kI32}));
    apply_g_idx(src, p + ".weight_g_idx", gi, w);
  }
  return w;
}

// 8-bit codes stored as such: compressed-tensors int-quantized / float-quantized (`weight` + `weight_scale`
// per channel, per tensor or per block) and quant_method fp8 (`weight` + per-tensor `weight_scale`, or
// `weight_scale_inv` per weight_block_size block: a multiplier despite its name).
HostQuantLinear read_8bit(const io::QuantConfig& q, const io::WeightSource& src, const std::string& p, int64_t n,
                          int64_t k) {
  const bool fp = q.weight_type == "float";
  HostQuantLinear w;
  w.codes_dtype = fp ? DType::kF8E4M3 : DType::kI8;
  w.n = n;
  w.k = k;
  const void* codes = need(src, p + ".weight", {n, k}, {w.codes_dtype});
  w.codes.assign(static_cast<const uint8_t*>(codes), static_cast<const uint8_t*>(codes) + n * k);
  if (q.act_bits == 8) {
    w.act = fp ? HostActQuant::kFp8 : HostActQuant::kInt8;
    w.act_group = q.act_group;
  }
  const bool fp8_method = q.method == "fp8";
  const std::string sname = p + (fp8_method && q.strategy == "block" ? ".weight_scale_inv" : ".weight_scale");
  const io::TensorInfo& st = src.get(sname);
  int64_t numel = 1;
  for (int64_t d : st.shape) numel *= d;
  std::string shape = "[";
  for (size_t i = 0; i < st.shape.size(); ++i) shape.append(i ? ", " : "").append(std::to_string(st.shape[i]));
  shape.append("]");
  auto read_scales = [&](int64_t count) {
    if (st.dtype != DType::kF32 && st.dtype != DType::kBF16 && st.dtype != DType::kF16)
      fail(src, sname, "has dtype " + std::string(dtype_name(st.dtype)) + "; expected F32 or BF16 or F16");
    w.scales.resize(static_cast<size_t>(count));
    convert_to_f32(st.dtype, st.data, w.scales.data(), w.scales.size());
  };
  if (q.strategy == "block") {
    const int64_t rows = (n + q.block_n - 1) / q.block_n, cols = (k + q.block_k - 1) / q.block_k;
    if (st.shape.size() != 2 || st.shape[0] != rows || st.shape[1] != cols)
      fail(src, sname, "has shape " + shape + "; expected [" + std::to_string(rows) + ", " + std::to_string(cols) +
                           "] (blocks of " + std::to_string(q.block_n) + "x" + std::to_string(q.block_k) + ")");
    read_scales(rows * cols);
    w.block_rows = q.block_n;
    w.group_size = q.block_k;
    w.groups = cols;
  } else if (q.strategy == "tensor") {
    if (numel != 1 || st.shape.size() > 2) fail(src, sname, "has shape " + shape + "; expected one scale for the tensor");
    read_scales(1);
    w.block_rows = n;
    w.group_size = k;
    w.groups = 1;
  } else {  // channel
    if (numel != n || !(st.shape.size() == 1 || (st.shape.size() == 2 && st.shape[1] == 1)))
      fail(src, sname, "has shape " + shape + "; expected [" + std::to_string(n) + ", 1] (one scale per output channel)");
    read_scales(n);
    w.group_size = k;
    w.groups = 1;
  }
  for (size_t i = 0; i < w.scales.size(); ++i)
    if (!std::isfinite(w.scales[i]))
      fail(src, sname, "holds a non-finite scale at element " + std::to_string(i));
  if (w.act_group > 0 && w.act_group != w.group_size && q.strategy == "block")
    fail(src, sname, "belongs to a scheme whose activation groups (" + std::to_string(w.act_group) +
                         " columns) differ from its weight blocks (" + std::to_string(w.group_size) + ")");
  return w;
}

// int4 values stored one per int8 (compressed-tensors int-quantized with num_bits 4, what llm-compressor writes for
// its W4A8 preset): `weight` I8 [n, k] in [-8, 7] and `weight_scale` [n, groups] ([n, 1] per channel), repacked
// into kI4 codes (value + 8, the midpoint zero).
HostQuantLinear read_int4_unpacked(const io::QuantConfig& q, const io::WeightSource& src, const std::string& p, int64_t n,
                                   int64_t k) {
  const std::string wname = p + ".weight";
  if (k % 2 != 0) fail(src, wname, "belongs to a projection with " + std::to_string(k) + " inputs (int4 needs an even count)");
  HostQuantLinear w = empty_linear(4, n, k, q.group_size);
  if (q.group_size > 0 && k % q.group_size != 0)
    fail(src, wname, "has " + std::to_string(k) + " inputs, not a multiple of group_size " + std::to_string(q.group_size));
  const auto* v = static_cast<const int8_t*>(need(src, wname, {n, k}, {DType::kI8}));
  for (int64_t r = 0; r < n; ++r)
    for (int64_t c = 0; c < k; ++c) {
      const int8_t x = v[r * k + c];
      if (x < -8 || x > 7)
        fail(src, wname, "holds " + std::to_string(x) + " at [" + std::to_string(r) + ", " + std::to_string(c) +
                             "]; 4-bit values must lie in [-8, 7]");
      set_code(w, r, c, static_cast<uint32_t>(x + 8));
    }
  w.scales = floats(src, p + ".weight_scale", {n, w.groups});
  for (size_t i = 0; i < w.scales.size(); ++i)
    if (!std::isfinite(w.scales[i])) fail(src, p + ".weight_scale", "holds a non-finite scale at element " + std::to_string(i));
  const std::string zp = p + ".weight_zero_point";
  if (src.contains(zp)) {
    const auto* z = static_cast<const int8_t*>(need(src, zp, {n, w.groups}, {DType::kI8}));
    for (int64_t i = 0; i < n * w.groups; ++i)
      if (z[i] != 0) fail(src, zp, "holds a non-zero zero point at element " + std::to_string(i) + "; the scheme is symmetric");
  }
  return w;
}

}  // namespace

HostQuantLinear quantize_dense_8bit(const TensorView& wv, HostActQuant scheme) {
  const int64_t n = wv.dim(0), k = wv.dim(1);
  HostQuantLinear w;
  const bool fp = scheme == HostActQuant::kFp8;
  w.codes_dtype = fp ? DType::kF8E4M3 : DType::kI8;
  w.n = n;
  w.k = k;
  w.group_size = k;
  w.groups = 1;
  w.act = scheme;
  w.codes.resize(static_cast<size_t>(n * k));
  w.scales.resize(static_cast<size_t>(n));
  std::vector<float> row(static_cast<size_t>(k));
  const size_t row_bytes = dtype_bytes(wv.dtype, static_cast<size_t>(k));
  for (int64_t r = 0; r < n; ++r) {
    convert_to_f32(wv.dtype, static_cast<const std::byte*>(wv.data) + r * row_bytes, row.data(), row.size());
    float amax = 0;
    for (float v : row) amax = std::max(amax, std::fabs(v));
    const float scale = amax == 0 ? 1.0f : amax / (fp ? 448.0f : 127.5f);
    w.scales[static_cast<size_t>(r)] = scale;
    uint8_t* c = w.codes.data() + r * k;
    for (int64_t i = 0; i < k; ++i) {
      const float v = row[static_cast<size_t>(i)] / scale;
      c[i] = fp ? f32_to_fp8_e4m3(std::clamp(v, -448.0f, 448.0f))
                : static_cast<uint8_t>(static_cast<int8_t>(std::clamp(std::nearbyint(v), -128.0f, 127.0f)));
    }
  }
  return w;
}

HostActQuant load_time_scheme(const std::string& name) {
  if (name == "fp8" || name == "w8a8-fp8") return HostActQuant::kFp8;
  if (name == "w8a8-int8" || name == "int8_w8a8" || name == "w8a8") return HostActQuant::kInt8;
  return HostActQuant::kNone;
}

int code_at(const HostQuantLinear& w, int64_t n, int64_t kk) {
  const int64_t i = n * w.k + kk;
  if (w.codes_dtype == DType::kU8) return w.codes[static_cast<size_t>(i)];
  const uint8_t b = w.codes[static_cast<size_t>(i / 2)];
  return i % 2 == 0 ? (b & 0xf) : (b >> 4);
}

HostQuantLinear read_quantized_linear(const io::QuantConfig& q, const io::WeightSource& src, const std::string& prefix,
                                      int64_t n, int64_t k) {
  if (!q.unsupported.empty()) throw Error(ErrorCode::kUnsupported, q.unsupported);
  if (q.method == "gptq") return read_gptq(q, src, prefix, n, k);
  if (q.method == "awq") return read_awq(q, src, prefix, n, k);
  HostQuantLinear w;
  if (q.method == "compressed-tensors" && q.format == "int-quantized" && q.bits == 4)
    w = read_int4_unpacked(q, src, prefix, n, k);
  else if (q.method == "fp8" ||
           (q.method == "compressed-tensors" && (q.format == "int-quantized" || q.format == "float-quantized")))
    return read_8bit(q, src, prefix, n, k);
  else if (q.method == "compressed-tensors")
    w = read_compressed_tensors(q, src, prefix, n, k);
  if (q.method == "compressed-tensors") {
    // W4A8: int4 codes with activations quantized per token (int8) in the matmul.
    if (q.act_bits == 8) w.act = HostActQuant::kInt8;
    return w;
  }
  throw Error(ErrorCode::kUnsupported, q.file + ": quant_method '" + q.method + "' is not supported");
}

HostQuantLinear random_quantized(int64_t n, int64_t k, int bits, int64_t group_size, uint64_t seed) {
  HostQuantLinear w = empty_linear(bits, n, k, group_size);
  uint64_t s = seed * 0x9E3779B97F4A7C15ull + 0x51ED27ull;
  for (size_t i = 0; i < w.codes.size(); i += 8) {
    s ^= s << 13;
    s ^= s >> 7;
    s ^= s << 17;
    for (size_t b = 0; b < 8 && i + b < w.codes.size(); ++b) w.codes[i + b] = static_cast<uint8_t>(s >> (8 * b));
  }
  const float a = std::sqrt(3.0f / static_cast<float>(k));
  w.scales.assign(static_cast<size_t>(n * w.groups), a / (bits == 4 ? 7.5f : 127.5f));
  return w;
}

HostQuantLinear random_quantized_8bit(int64_t n, int64_t k, HostActQuant scheme, uint64_t seed, bool blocks) {
  HostQuantLinear w = empty_linear(8, n, k, blocks ? 128 : k);
  const bool fp = scheme == HostActQuant::kFp8;
  w.codes_dtype = fp ? DType::kF8E4M3 : DType::kI8;
  w.act = scheme;
  uint8_t lut[256];
  for (int b = 0; b < 256; ++b)
    lut[b] = fp ? f32_to_fp8_e4m3((static_cast<float>(b) + 0.5f) / 128.0f * 448.0f - 448.0f) : static_cast<uint8_t>(b);
  uint64_t s = seed * 0x9E3779B97F4A7C15ull + 0x8B1Dull;
  for (size_t i = 0; i < w.codes.size(); i += 8) {
    s ^= s << 13;
    s ^= s >> 7;
    s ^= s << 17;
    for (size_t b = 0; b < 8 && i + b < w.codes.size(); ++b) w.codes[i + b] = lut[static_cast<uint8_t>(s >> (8 * b))];
  }
  const float a = std::sqrt(3.0f / static_cast<float>(k));
  if (blocks) {  // 128 x 128 blocks (weight_block_size [128, 128]), activations per token and 128 columns
    w.block_rows = 128;
    w.act_group = 128;
  }
  w.scales.assign(static_cast<size_t>((n + w.block_rows - 1) / w.block_rows * w.groups), a / (fp ? 448.0f : 127.5f));
  return w;
}

bool random_scheme(const std::string& name, int* bits, int64_t* group_size) {
  *group_size = 128;
  if (name == "w4a16" || name == "gptq" || name == "awq" || name == "compressed-tensors" || name == "int4") {
    *bits = 4;
    return true;
  }
  if (name == "w8a16" || name == "int8") {
    *bits = 8;
    return true;
  }
  return false;
}

}  // namespace peregrine::model
