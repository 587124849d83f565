// The checkpoint readers of model/quant_weights on layouts the fixtures do not cover, built here in memory from the
// packing rules of ../shared/models/quant/README.md: GPTQ 8-bit (v1 and v2 zeros) per channel and g32 with an
// act-order g_idx, compressed-tensors W8A16 with packed zero points, AWQ's interleaved nibbles; codes, zeros and
// scales must come back exactly, permuted columns sorted by group with perm recorded.
#include <gtest/gtest.h>

#include <map>
#include <random>

#include "core/status.h"
#include "model/quant_weights.h"

namespace peregrine::model {
namespace {

// A WeightSource over tensors held here.
class MemorySource final : public io::WeightSource {
 public:
  template <typename T>
  void add(const std::string& name, DType dtype, std::vector<int64_t> shape, const std::vector<T>& values) {
    Entry& e = entries_[name];
    e.bytes.resize(values.size() * sizeof(T));
    std::memcpy(e.bytes.data(), values.data(), e.bytes.size());
    e.info = {name, dtype, std::move(shape), reinterpret_cast<const std::byte*>(e.bytes.data()), e.bytes.size(), &file_};
  }
  bool contains(const std::string& name) const override { return entries_.count(name) != 0; }
  const io::TensorInfo& get(const std::string& name) const override {
    auto it = entries_.find(name);
    if (it == entries_.end()) throw Error(ErrorCode::kNotFound, "tensor '" + name + "' not found");
    return it->second.info;
  }
  size_t total_bytes() const override { return 0; }
  std::vector<std::string> names() const override {
    std::vector<std::string> n;
    for (const auto& [k, v] : entries_) n.push_back(k);
    return n;
  }

 private:
  struct Entry {
    std::vector<uint8_t> bytes;
    io::TensorInfo info;
  };
  std::map<std::string, Entry> entries_;
  std::filesystem::path file_ = "memory.safetensors";
};

std::vector<uint16_t> f16(const std::vector<float>& v) {
  std::vector<uint16_t> out;
  for (float x : v) out.push_back(f32_to_f16(x));
  return out;
}

TEST(QuantWeights, Gptq8BitPerChannelAndActOrder) {
  std::mt19937 rng(5);
  const int64_t n = 16, k = 64;
  for (int64_t group : {int64_t{-1}, int64_t{32}}) {
    for (bool v1 : {true, false}) {
      for (bool act_order : {false, true}) {
        if (group == -1 && act_order) continue;
        const int64_t gs = group < 0 ? k : group, groups = k / gs;
        std::vector<std::vector<int>> q(n, std::vector<int>(k)), z(groups, std::vector<int>(n));
        for (auto& row : q)
          for (int& c : row) c = static_cast<int>(rng() % 256);
        for (auto& row : z)
          for (int& c : row) c = 1 + static_cast<int>(rng() % 255);
        std::vector<int32_t> g_idx(k);
        for (int64_t c = 0; c < k; ++c) g_idx[c] = static_cast<int32_t>(act_order ? (c * 7 + 3) % k / gs : c / gs);
        std::vector<int32_t> qweight(k / 4 * n, 0), qzeros(groups * n / 4, 0);
        for (int64_t r = 0; r < k / 4; ++r)  // packed along the input dim: bits 8j.. of qweight[r, c] hold q[c, 4r + j]
          for (int64_t c = 0; c < n; ++c)
            for (int j = 0; j < 4; ++j) qweight[r * n + c] |= static_cast<int32_t>(static_cast<uint32_t>(q[c][4 * r + j]) << (8 * j));
        for (int64_t g = 0; g < groups; ++g)  // packed along the output dim, v1 stores zero - 1
          for (int64_t c = 0; c < n; ++c)
            qzeros[g * (n / 4) + c / 4] |=
                static_cast<int32_t>(static_cast<uint32_t>(z[g][c] - (v1 ? 1 : 0)) << (8 * (c % 4)));
        std::vector<float> scales(groups * n);
        for (float& s : scales) s = 0.001f * static_cast<float>(1 + rng() % 100);
        MemorySource src;
        src.add("p.qweight", DType::kI32, {k / 4, n}, qweight);
        src.add("p.qzeros", DType::kI32, {groups, n / 4}, qzeros);
        src.add("p.scales", DType::kF16, {groups, n}, f16(scales));
        src.add("p.g_idx", DType::kI32, {k}, g_idx);
        io::QuantConfig cfg;
        cfg.method = "gptq";
        cfg.bits = 8;
        cfg.group_size = group;
        cfg.desc_act = act_order;
        cfg.gptq_v1_zeros = v1;
        const HostQuantLinear w = read_quantized_linear(cfg, src, "p", n, k);
        ASSERT_EQ(w.codes_dtype, DType::kU8);
        ASSERT_EQ(w.groups, groups);
        ASSERT_EQ(w.perm.empty(), !act_order);
        EXPECT_TRUE(w.g_idx.empty());
        for (int64_t c = 0; c < n; ++c)
          for (int64_t j = 0; j < k; ++j) {
            const int64_t col = act_order ? w.perm[j] : j;  // code column j holds input column perm[j]
            const int64_t g = g_idx[col];
            ASSERT_EQ(j / gs, g) << "sorted by group";
            ASSERT_EQ(code_at(w, c, j), q[c][col]);
            ASSERT_EQ(w.scales[c * groups + g], f16_to_f32(f32_to_f16(scales[g * n + c])));
            ASSERT_EQ(w.zeros[c * groups + g], static_cast<float>(z[g][c]));
          }
      }
    }
  }
}

TEST(QuantWeights, CompressedTensorsW8A16WithPackedZeroPoints) {
  std::mt19937 rng(6);
  const int64_t n = 12, k = 64, gs = 32, groups = 2;  // n not a multiple of 4: the last zero-point word is partial
  std::vector<std::vector<int>> q(n, std::vector<int>(k)), z(n, std::vector<int>(groups));
  for (auto& row : q)
    for (int& c : row) c = static_cast<int>(rng() % 256) - 128;  // signed int8 values
  for (auto& row : z)
    for (int& c : row) c = static_cast<int>(rng() % 256) - 128;
  std::vector<int32_t> packed(n * k / 4, 0), zp((n + 3) / 4 * groups, 0);
  for (int64_t r = 0; r < n; ++r)
    for (int64_t w = 0; w < k / 4; ++w)
      for (int i = 0; i < 4; ++i)
        packed[r * (k / 4) + w] |= static_cast<int32_t>(static_cast<uint32_t>(q[r][4 * w + i] + 128) << (8 * i));
  for (int64_t r = 0; r < n; ++r)
    for (int64_t g = 0; g < groups; ++g)
      zp[(r / 4) * groups + g] |= static_cast<int32_t>(static_cast<uint32_t>(z[r][g] + 128) << (8 * (r % 4)));
  std::vector<uint16_t> scale(n * groups);
  for (auto& s : scale) s = f32_to_bf16(0.01f * static_cast<float>(1 + rng() % 50));
  MemorySource src;
  src.add("p.weight_packed", DType::kI32, {n, k / 4}, packed);
  src.add("p.weight_scale", DType::kBF16, {n, groups}, scale);
  src.add("p.weight_zero_point", DType::kI32, {(n + 3) / 4, groups}, zp);
  src.add("p.weight_shape", DType::kI64, {2}, std::vector<int64_t>{n, k});
  io::QuantConfig cfg;
  cfg.method = "compressed-tensors";
  cfg.bits = 8;
  cfg.group_size = gs;
  cfg.sym = false;
  const HostQuantLinear w = read_quantized_linear(cfg, src, "p", n, k);
  for (int64_t r = 0; r < n; ++r)
    for (int64_t j = 0; j < k; ++j) {
      // W = (q - zp) * s = (code - zero) * s with code = q + 128, zero = zp + 128.
      ASSERT_EQ(code_at(w, r, j), q[r][j] + 128);
      ASSERT_EQ(w.zeros[r * groups + j / gs], static_cast<float>(z[r][j / gs] + 128));
      ASSERT_EQ(w.scales[r * groups + j / gs], bf16_to_f32(scale[r * groups + j / gs]));
    }
  // The unpacked shape must agree with the config's.
  src.add("p.weight_shape", DType::kI64, {2}, std::vector<int64_t>{n, k + 8});
  try {
    read_quantized_linear(cfg, src, "p", n, k);
    ADD_FAILURE() << "accepted";
  } catch (const Error& e) {
    EXPECT_NE(e.message().find("memory.safetensors: tensor 'p.weight_shape' says [12, 72]"), std::string::npos) << e.message();
  }
}

TEST(QuantWeights, AwqInterleavedNibbles) {
  const int64_t n = 16, k = 8, groups = 1;
  static constexpr int kOrder[8] = {0, 2, 4, 6, 1, 3, 5, 7};  // nibble i of a word holds output 8c + kOrder[i]
  std::vector<int32_t> qweight(k * n / 8, 0), qzeros(groups * n / 8, 0);
  auto code = [](int64_t out, int64_t in) { return static_cast<int>((out * 3 + in * 5) % 16); };
  for (int64_t in = 0; in < k; ++in)
    for (int64_t c = 0; c < n / 8; ++c)
      for (int i = 0; i < 8; ++i)
        qweight[in * (n / 8) + c] |= static_cast<int32_t>(static_cast<uint32_t>(code(8 * c + kOrder[i], in)) << (4 * i));
  for (int64_t c = 0; c < n / 8; ++c)
    for (int i = 0; i < 8; ++i) qzeros[c] |= static_cast<int32_t>(static_cast<uint32_t>((8 * c + kOrder[i]) % 16) << (4 * i));
  MemorySource src;
  src.add("p.qweight", DType::kI32, {k, n / 8}, qweight);
  src.add("p.qzeros", DType::kI32, {groups, n / 8}, qzeros);
  src.add("p.scales", DType::kF16, {groups, n}, f16(std::vector<float>(n, 0.5f)));
  io::QuantConfig cfg;
  cfg.method = "awq";
  cfg.bits = 4;
  cfg.group_size = 8;
  cfg.sym = false;
  const HostQuantLinear w = read_quantized_linear(cfg, src, "p", n, k);
  for (int64_t out = 0; out < n; ++out) {
    for (int64_t in = 0; in < k; ++in) ASSERT_EQ(code_at(w, out, in), code(out, in)) << out << "," << in;
    ASSERT_EQ(w.zeros[out], static_cast<float>(out % 16));
  }
}

}  // namespace
}  // namespace peregrine::model
