// GGUF reader: the fixtures' tensors dequantized against llama.cpp's own dequantization (tensor_checks.json),
// metadata of every type, and every defect of a malformed file reported as an Error naming the file and the key or
// tensor.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>

#include "core/ggml_quant.h"
#include "io/gguf.h"
#include "io/gguf_config.h"
#include "tokenizer/tokenizer.h"
#include "unit/io/gguf_writer.h"
#include "test_fixtures.h"

namespace fs = std::filesystem;
using namespace peregrine;
using peregrine::testing::GgufBuilder;

namespace {

std::unique_ptr<io::GgufFile> parse(const GgufBuilder& b) {
  return std::make_unique<io::GgufFile>(reinterpret_cast<const std::byte*>(b.out.data()), b.out.size(), "t.gguf");
}

// Expects parsing to fail with this code and a message containing every `parts`.
void expect_error(const GgufBuilder& b, ErrorCode code, std::vector<std::string> parts) {
  try {
    parse(b);
    ADD_FAILURE() << "no error; expected one containing '" << parts[0] << "'";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), code) << e.what();
    EXPECT_NE(std::string(e.what()).find("t.gguf: "), std::string::npos) << e.what();
    for (const auto& p : parts) EXPECT_NE(std::string(e.what()).find(p), std::string::npos) << "'" << p << "' in " << e.what();
  }
}

// A small valid file: one metadata of each kind, a Q8_0 [64 x 2] and an F32 [4] tensor.
GgufBuilder valid(uint32_t version = 3) {
  GgufBuilder b;
  b.header(version, 2, 4);
  b.kv_str("general.architecture", "llama");
  b.kv_u32("general.alignment", 32);
  b.kv_strs("tokenizer.ggml.tokens", {"a", "b"});
  b.kv_f32s("tokenizer.ggml.scores", {0.5f, -1.f});
  b.tensor("w", {64, 2}, 8, 0);   // 2 rows x 2 blocks x 34 bytes = 136
  b.tensor("n", {4}, 0, 160);     // 16 bytes
  b.align();
  for (int i = 0; i < 136; ++i) b.out.push_back(static_cast<uint8_t>(i));
  b.bytes(24);
  b.bytes(16);
  return b;
}

}  // namespace

TEST(GgufReader, ReadsMetadataAndTensors) {
  for (uint32_t version : {2u, 3u}) {
    const GgufBuilder b = valid(version);
    auto f = parse(b);
    EXPECT_EQ(f->version(), version);
    EXPECT_EQ(f->string("general.architecture"), "llama");
    EXPECT_EQ(f->uint("general.alignment"), 32u);
    const io::GgufValue* toks = f->array("tokenizer.ggml.tokens", io::GgufType::kString);
    ASSERT_NE(toks, nullptr);
    ASSERT_EQ(toks->strings.size(), 2u);
    EXPECT_EQ(toks->strings[1], "b");
    EXPECT_EQ(f->f32_array("tokenizer.ggml.scores"), (std::vector<float>{0.5f, -1.f}));
    ASSERT_EQ(f->tensors().size(), 2u);
    const io::GgufTensor* w = f->tensor("w");
    ASSERT_NE(w, nullptr);
    EXPECT_EQ(w->type, GgmlType::kQ8_0);
    EXPECT_EQ(w->bytes, 136u);
    EXPECT_EQ(w->rows(), 2);
    EXPECT_EQ(static_cast<size_t>(w->data - reinterpret_cast<const std::byte*>(b.out.data())), f->data_offset());
    EXPECT_EQ(f->data_offset() % 32, 0u);
  }
}

TEST(GgufReader, NestedArraysAndEveryScalarType) {
  GgufBuilder b;
  b.header(3, 0, 13);
  b.str("u8"), b.put<uint32_t>(0), b.put<uint8_t>(200);
  b.str("i8"), b.put<uint32_t>(1), b.put<int8_t>(-5);
  b.str("u16"), b.put<uint32_t>(2), b.put<uint16_t>(60000);
  b.str("i16"), b.put<uint32_t>(3), b.put<int16_t>(-300);
  b.kv_u32("u32", 4000000000u);
  b.str("i32"), b.put<uint32_t>(5), b.put<int32_t>(-7);
  b.kv_f32("f32", 1.5f);
  b.kv_bool("b", true);
  b.kv_str("s", "hi");
  b.str("u64"), b.put<uint32_t>(10), b.put<uint64_t>(1ull << 40);
  b.str("i64"), b.put<uint32_t>(11), b.put<int64_t>(-(1ll << 40));
  b.str("f64"), b.put<uint32_t>(12), b.put<double>(0.25);
  // [[1, 2], [3]] as an array of INT32 arrays
  b.str("nested"), b.put<uint32_t>(9), b.put<uint32_t>(9), b.put<uint64_t>(2);
  b.put<uint32_t>(5), b.put<uint64_t>(2), b.put<int32_t>(1), b.put<int32_t>(2);
  b.put<uint32_t>(5), b.put<uint64_t>(1), b.put<int32_t>(3);
  auto f = parse(b);
  EXPECT_EQ(f->uint("u8"), 200u);
  EXPECT_EQ(*f->int_opt("i8"), -5);
  EXPECT_EQ(f->uint("u16"), 60000u);
  EXPECT_EQ(*f->int_opt("i16"), -300);
  EXPECT_EQ(f->uint("u32"), 4000000000u);
  EXPECT_EQ(*f->int_opt("i32"), -7);
  EXPECT_EQ(*f->number_opt("f32"), 1.5);
  EXPECT_EQ(*f->bool_opt("b"), true);
  EXPECT_EQ(f->string("s"), "hi");
  EXPECT_EQ(f->uint("u64"), 1ull << 40);
  EXPECT_EQ(*f->int_opt("i64"), -(1ll << 40));
  EXPECT_EQ(*f->number_opt("f64"), 0.25);
  const io::GgufValue* n = f->find("nested");
  ASSERT_NE(n, nullptr);
  ASSERT_EQ(n->items.size(), 2u);
  EXPECT_EQ(n->items[0].count, 2u);
  EXPECT_EQ(n->items[1].count, 1u);
  EXPECT_THROW(f->string("u8"), Error);     // wrong type, named
  EXPECT_THROW(f->uint("i8"), Error);       // negative
  EXPECT_THROW(f->uint("missing"), Error);  // absent
  try {
    f->string("u8");
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("key 'u8': type UINT8, expected STRING"), std::string::npos) << e.what();
  }
}

TEST(GgufReader, EveryDefectIsNamed) {
  {
    GgufBuilder b = valid();
    b.out[0] = 'X';
    expect_error(b, ErrorCode::kFormatError, {"bad magic"});
  }
  {
    GgufBuilder b = valid();
    b.out[4] = 1;
    expect_error(b, ErrorCode::kUnsupported, {"GGUF version 1"});
  }
  {
    GgufBuilder b = valid();
    b.out[4] = 4;
    expect_error(b, ErrorCode::kUnsupported, {"GGUF version 4"});
  }
  for (size_t cut : {size_t{3}, size_t{10}, size_t{30}, size_t{70}, size_t{120}, size_t{200}}) {  // truncated anywhere
    GgufBuilder b = valid();
    b.out.resize(cut);
    expect_error(b, ErrorCode::kFormatError, {"truncated"});
  }
  {
    GgufBuilder b;
    b.header(3, 1ull << 60, 0);
    expect_error(b, ErrorCode::kFormatError, {"tensor count"});
  }
  {
    GgufBuilder b;
    b.header(3, 0, 1ull << 62);
    expect_error(b, ErrorCode::kFormatError, {"metadata count"});
  }
  {  // an array far longer than the file
    GgufBuilder b;
    b.header(3, 0, 1);
    b.str("a"), b.put<uint32_t>(9), b.put<uint32_t>(8), b.put<uint64_t>(1ull << 50);
    b.bytes(64);
    expect_error(b, ErrorCode::kFormatError, {"key 'a'", "does not fit"});
  }
  {  // a string longer than the file
    GgufBuilder b;
    b.header(3, 0, 1);
    b.str("s"), b.put<uint32_t>(8), b.put<uint64_t>(1000);
    expect_error(b, ErrorCode::kFormatError, {"key 's'", "truncated"});
  }
  {
    GgufBuilder b;
    b.header(3, 0, 1);
    b.str("k"), b.put<uint32_t>(13), b.put<uint32_t>(0);
    expect_error(b, ErrorCode::kFormatError, {"key 'k'", "unknown value type 13"});
  }
  {
    GgufBuilder b;
    b.header(3, 0, 1);
    b.str("k"), b.put<uint32_t>(9), b.put<uint32_t>(77), b.put<uint64_t>(0);
    expect_error(b, ErrorCode::kFormatError, {"key 'k'", "unknown array element type 77"});
  }
  {  // nesting without end
    GgufBuilder b;
    b.header(3, 0, 1);
    b.str("deep"), b.put<uint32_t>(9);
    for (int i = 0; i < 10; ++i) b.put<uint32_t>(9), b.put<uint64_t>(1);
    b.put<uint32_t>(0), b.put<uint64_t>(0);
    expect_error(b, ErrorCode::kFormatError, {"key 'deep", "nested deeper"});
  }
  {
    GgufBuilder b;
    b.header(3, 0, 1);
    b.str("b"), b.put<uint32_t>(7), b.put<uint8_t>(2);
    expect_error(b, ErrorCode::kFormatError, {"key 'b'", "bool"});
  }
  {
    GgufBuilder b;
    b.header(3, 0, 2);
    b.kv_u32("x", 1);
    b.kv_u32("x", 2);
    expect_error(b, ErrorCode::kFormatError, {"key 'x' appears twice"});
  }
  {
    GgufBuilder b;
    b.header(3, 0, 1);
    b.kv_u32("general.alignment", 24);
    expect_error(b, ErrorCode::kFormatError, {"general.alignment", "power of two"});
  }
  {
    GgufBuilder b;
    b.header(3, 0, 1);
    b.kv_str("general.alignment", "32");
    expect_error(b, ErrorCode::kFormatError, {"general.alignment", "expected UINT32"});
  }
  auto one_tensor = [](std::vector<uint64_t> ne, uint32_t type, uint64_t offset, size_t data) {
    GgufBuilder b;
    b.header(3, 1, 0);
    b.tensor("blk.0.attn_q.weight", ne, type, offset);
    b.align();
    b.bytes(data);
    return b;
  };
  expect_error(one_tensor({32, 1}, 99, 0, 64), ErrorCode::kFormatError, {"tensor 'blk.0.attn_q.weight'", "unknown tensor type 99"});
  expect_error(one_tensor({256, 1}, 16, 0, 64), ErrorCode::kUnsupported, {"tensor 'blk.0.attn_q.weight'", "IQ2_XXS"});
  expect_error(one_tensor({33, 1}, 8, 0, 64), ErrorCode::kFormatError, {"tensor 'blk.0.attn_q.weight'", "not a multiple"});
  expect_error(one_tensor({32, 1}, 8, 8, 64), ErrorCode::kFormatError, {"tensor 'blk.0.attn_q.weight'", "alignment"});
  expect_error(one_tensor({32, 4}, 8, 0, 64), ErrorCode::kFormatError, {"tensor 'blk.0.attn_q.weight'", "outside the data section"});
  expect_error(one_tensor({32, 1}, 8, 1ull << 62, 64), ErrorCode::kFormatError, {"tensor 'blk.0.attn_q.weight'", "outside"});
  expect_error(one_tensor({0, 1}, 0, 0, 64), ErrorCode::kFormatError, {"tensor 'blk.0.attn_q.weight'", "dimension 0 is 0"});
  expect_error(one_tensor({1ull << 30, 1ull << 30}, 0, 0, 64), ErrorCode::kFormatError, {"too many elements"});
  expect_error(one_tensor({1, 1, 1, 1, 1}, 0, 0, 64), ErrorCode::kFormatError, {"5 dimensions"});
  {
    GgufBuilder b;
    b.header(3, 2, 0);
    b.tensor("a", {32, 2}, 8, 0);   // 68 bytes: [0, 68)
    b.tensor("b", {8}, 0, 64);      // [64, 96) overlaps
    b.align();
    b.bytes(128);
    expect_error(b, ErrorCode::kFormatError, {"tensor 'b'", "overlaps tensor 'a'"});
  }
  {
    GgufBuilder b;
    b.header(3, 2, 0);
    b.tensor("a", {8}, 0, 0);
    b.tensor("a", {8}, 0, 32);
    b.align();
    b.bytes(64);
    expect_error(b, ErrorCode::kFormatError, {"tensor 'a' appears twice"});
  }
}

// A minimal Llama-family file for the metadata mapping (no tensors: the optional parts stay off).
GgufBuilder config_file(const std::string& arch, int sliding_window) {
  GgufBuilder b;
  const std::string p = arch + ".";
  b.header(3, 0, sliding_window > 0 ? 7 : 6);
  b.kv_str("general.architecture", arch);
  b.kv_u32(p + "embedding_length", 64);
  b.kv_u32(p + "block_count", 2);
  b.kv_u32(p + "feed_forward_length", 128);
  b.kv_u32(p + "attention.head_count", 4);
  b.kv_strs("tokenizer.ggml.tokens", {"a", "b", "c"});
  if (sliding_window > 0) b.kv_u32(p + "attention.sliding_window", static_cast<uint32_t>(sliding_window));
  return b;
}

TEST(GgufReader, SlidingWindowAndMistral3) {
  const io::ModelConfig llama = io::gguf_model_config(*parse(config_file("llama", 4096)));
  EXPECT_EQ(llama.architecture, io::Architecture::kLlama);
  EXPECT_EQ(llama.sliding_window, 4096);  // Mistral 7B v0.1 converted as "llama"
  EXPECT_EQ(io::gguf_model_config(*parse(config_file("llama", 0))).sliding_window, 0);
  const io::ModelConfig m3 = io::gguf_model_config(*parse(config_file("mistral3", 8192)));
  EXPECT_EQ(m3.architecture, io::Architecture::kMistral);
  EXPECT_EQ(m3.hidden_size, 64);
  EXPECT_EQ(m3.sliding_window, 8192);
  EXPECT_TRUE(io::gguf_qk_permuted(m3));
  try {
    io::gguf_model_config(*parse(config_file("gemma3", 0)));
    ADD_FAILURE() << "gemma3 is not supported";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("mistral3"), std::string::npos) << e.what();
  }
}

// A tokenizer whose token text is not UTF-8 (GGUF strings must be) is refused naming the key and the token (the
// fuzzer found it escaping as a JSON library exception).
TEST(GgufReader, TokenizerWithInvalidUtf8IsRefusedNamingTheToken) {
  GgufBuilder b;
  b.header(3, 0, 4);
  b.kv_str("general.architecture", "llama");
  b.kv_str("tokenizer.ggml.model", "gpt2");
  b.kv_strs("tokenizer.ggml.tokens", {"a", "b\xff", "c"});
  b.kv_strs("tokenizer.ggml.merges", {"a b"});
  try {
    tokenizer::Tokenizer::from_gguf(*parse(b));
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("key 'tokenizer.ggml.tokens': token 1 is not valid UTF-8"), std::string::npos)
        << e.what();
  }
}

TEST(GgufReader, WeightSourceShapes) {
  const GgufBuilder b = valid();
  auto f = std::make_shared<io::GgufFile>(reinterpret_cast<const std::byte*>(b.out.data()), b.out.size(), "t.gguf");
  io::GgufWeightSource src(f);
  const io::TensorInfo& w = src.get("w");
  EXPECT_EQ(w.dtype, DType::kU8);
  EXPECT_EQ(w.ggml, GgmlType::kQ8_0);
  EXPECT_EQ(w.shape, (std::vector<int64_t>{2, 68}));
  const io::TensorInfo& n = src.get("n");
  EXPECT_EQ(n.dtype, DType::kF32);
  EXPECT_EQ(n.ggml, GgmlType::kNone);
  EXPECT_EQ(n.shape, (std::vector<int64_t>{4}));
  EXPECT_EQ(src.total_bytes(), 136u + 16u);
  try {
    src.get("nope");
    ADD_FAILURE();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kNotFound);
    EXPECT_NE(std::string(e.what()).find("t.gguf: tensor 'nope' not found"), std::string::npos) << e.what();
  }
}

// Every tensor of every fixture, dequantized by core/ggml_quant, against llama.cpp's dequantize_row_* summaries:
// the 16 sampled values bit for bit, sums to float tolerance.
TEST(GgufFixtures, DequantizationMatchesLlamaCpp) {
  PEREGRINE_REQUIRE_SHARED(shared);
  const fs::path dir = shared / "models" / "gguf";
  std::ifstream in(dir / "tensor_checks.json");
  if (!in) GTEST_SKIP() << "no tensor_checks.json";
  const nlohmann::json checks = nlohmann::json::parse(in);
  int files = 0, tensors = 0;
  std::set<std::string> types;
  for (const auto& [name, per_tensor] : checks["files"].items()) {
    if (!fs::exists(dir / name)) continue;  // listed but not stored (f16, bf16, ...)
    ++files;
    io::GgufFile f(dir / name);
    EXPECT_EQ(f.tensors().size(), per_tensor.size()) << name;
    for (const auto& [tname, c] : per_tensor.items()) {
      const io::GgufTensor* t = f.tensor(tname);
      ASSERT_NE(t, nullptr) << name << " " << tname;
      EXPECT_EQ(ggml_type_name(t->type), c["type"].get<std::string>()) << tname;
      EXPECT_EQ(t->ne, c["ne"].get<std::vector<int64_t>>()) << tname;
      types.insert(ggml_type_name(t->type));
      const int64_t row = t->ne[0], rows = t->rows();
      const size_t row_bytes = ggml_row_bytes(t->type, row);
      std::vector<float> v(static_cast<size_t>(row));
      double sum = 0, sum_sq = 0, max_abs = 0;
      std::vector<float> first8, last8;
      for (int64_t r = 0; r < rows; ++r) {
        ggml_dequantize_row(t->type, t->data + static_cast<size_t>(r) * row_bytes, v.data(), row);
        for (float x : v) {
          sum += x;
          sum_sq += static_cast<double>(x) * x;
          max_abs = std::max(max_abs, static_cast<double>(std::fabs(x)));
        }
        if (r == 0) first8.assign(v.begin(), v.begin() + 8);
        if (r == rows - 1) last8.assign(v.end() - 8, v.end());
      }
      const std::string where = name + " " + tname + " (" + ggml_type_name(t->type) + ")";
      EXPECT_NEAR(sum, c["sum"].get<double>(), 1e-6 * (1 + std::fabs(c["sum"].get<double>())) + 1e-3) << where;
      EXPECT_NEAR(sum_sq, c["sum_sq"].get<double>(), 1e-6 * c["sum_sq"].get<double>()) << where;
      EXPECT_EQ(static_cast<float>(max_abs), c["max_abs"].get<float>()) << where;
      EXPECT_EQ(first8, c["row0_first8"].get<std::vector<float>>()) << where;
      EXPECT_EQ(last8, c["last_row_last8"].get<std::vector<float>>()) << where;
      ++tensors;
    }
  }
  EXPECT_EQ(files, 3);
  EXPECT_GE(tensors, 3 * 56);
  for (const char* t : {"F32", "Q8_0", "Q4_0", "Q5_0", "Q4_K", "Q6_K"}) EXPECT_TRUE(types.count(t)) << t;
}

TEST(GgufFixtures, ConfigFromMetadata) {
  PEREGRINE_REQUIRE_SHARED(shared);
  const fs::path path = shared / "models" / "gguf" / "pycoder-tiny-q4_k.gguf";
  if (!fs::exists(path)) GTEST_SKIP();
  io::GgufFile f(path);
  EXPECT_EQ(f.version(), 3u);
  const io::ModelConfig c = io::gguf_model_config(f);
  EXPECT_EQ(c.architecture, io::Architecture::kLlama);
  EXPECT_EQ(c.hidden_size, 384);
  EXPECT_EQ(c.num_hidden_layers, 6);
  EXPECT_EQ(c.num_attention_heads, 6);
  EXPECT_EQ(c.num_key_value_heads, 2);
  EXPECT_EQ(c.head_dim, 64);
  EXPECT_EQ(c.intermediate_size, 1024);
  EXPECT_EQ(c.vocab_size, 32000);
  EXPECT_EQ(c.max_position_embeddings, 4096);
  EXPECT_TRUE(c.tie_word_embeddings);
  EXPECT_FALSE(c.attention_bias);
  EXPECT_DOUBLE_EQ(c.rope.theta, 10000.0);
  EXPECT_NEAR(c.rms_norm_eps, 1e-5, 1e-12);
  EXPECT_EQ(c.bos_token_id, 1);
  EXPECT_EQ(c.eos_token_ids, std::vector<int32_t>{2});
  EXPECT_TRUE(io::gguf_qk_permuted(c));
}
