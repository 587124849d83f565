// Tests of model-file loading: safetensors defects, sharded indexes, config parsing (both styles), and the
// errors a user sees for a bad model folder (each names the file and the field or tensor).
#include <gtest/gtest.h>

#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>

#include "core/status.h"
#include "engine/device_setup.h"
#include "io/hf_config.h"
#include "io/safetensors.h"
#include "model/model.h"
#include "test_fixtures.h"

namespace fs = std::filesystem;
using namespace peregrine;
using nlohmann::json;

namespace {

class TempDir {
 public:
  TempDir() {
    path_ = fs::temp_directory_path() / ("peregrine_test_" + std::to_string(::getpid()) + "_" + std::to_string(counter_++));
    fs::remove_all(path_);
    fs::create_directories(path_);
  }
  ~TempDir() { fs::remove_all(path_); }
  const fs::path& path() const { return path_; }

 private:
  static inline int counter_ = 0;
  fs::path path_;
};

void write_file(const fs::path& p, const std::string& bytes) {
  std::ofstream out(p, std::ios::binary);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

// A safetensors file with the given header JSON and data bytes.
std::string safetensors_bytes(const std::string& header, const std::string& data) {
  uint64_t n = header.size();
  std::string out(8, '\0');
  std::memcpy(out.data(), &n, 8);
  return out + header + data;
}

std::string error_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.message();
  }
  return "";
}

TEST(Safetensors, ReadsTensorsInPlace) {
  TempDir dir;
  float values[3] = {1.5f, -2.0f, 3.25f};
  std::string data(reinterpret_cast<const char*>(values), sizeof(values));
  write_file(dir.path() / "model.safetensors",
             safetensors_bytes(R"({"a":{"dtype":"F32","shape":[3],"data_offsets":[0,12]},"__metadata__":{"x":"y"}})", data));
  auto store = io::WeightStore::open(dir.path());
  TensorView v = store.view("a", {3});
  EXPECT_EQ(v.as<float>()[2], 3.25f);
  EXPECT_EQ(store.total_bytes(), 12u);
}

TEST(Safetensors, DefectsNameFileAndTensor) {
  TempDir dir;
  const fs::path f = dir.path() / "model.safetensors";
  auto open_error = [&] { return error_of([&] { io::WeightStore::open(dir.path()); }); };

  write_file(f, "abc");
  EXPECT_NE(open_error().find("truncated"), std::string::npos) << open_error();

  write_file(f, safetensors_bytes(R"({"a":{"dtype":"F32","shape":[3],"data_offsets":[0,12]}})", "12345678"));
  EXPECT_NE(open_error().find("tensor 'a'"), std::string::npos) << open_error();
  EXPECT_NE(open_error().find("model.safetensors"), std::string::npos);

  write_file(f, safetensors_bytes(R"({"a":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", "12345678"));
  EXPECT_NE(open_error().find("need 12"), std::string::npos) << open_error();

  write_file(f, safetensors_bytes(R"({"a":{"dtype":"Q9","shape":[1],"data_offsets":[0,1]}})", "1"));
  EXPECT_NE(open_error().find("unknown dtype 'Q9'"), std::string::npos) << open_error();

  write_file(f, safetensors_bytes(R"({"a":{"dtype":"F32","shape":[-1],"data_offsets":[0,4]}})", "1234"));
  EXPECT_NE(open_error().find("shape"), std::string::npos) << open_error();

  write_file(f, safetensors_bytes("{not json", ""));
  EXPECT_NE(open_error().find("not valid JSON"), std::string::npos) << open_error();

  std::string huge(8, '\0');
  uint64_t lie = 1ull << 40;
  std::memcpy(huge.data(), &lie, 8);
  write_file(f, huge + "{}");
  EXPECT_NE(open_error().find("header length"), std::string::npos) << open_error();

  fs::remove(f);
  EXPECT_NE(open_error().find("not found"), std::string::npos) << open_error();
}

TEST(Safetensors, ShardedIndex) {
  TempDir dir;
  float a = 1, b = 2;
  write_file(dir.path() / "s1.safetensors",
             safetensors_bytes(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})", std::string(reinterpret_cast<char*>(&a), 4)));
  write_file(dir.path() / "s2.safetensors",
             safetensors_bytes(R"({"b":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})", std::string(reinterpret_cast<char*>(&b), 4)));
  write_file(dir.path() / "model.safetensors.index.json", R"({"weight_map":{"a":"s1.safetensors","b":"s2.safetensors"}})");
  auto store = io::WeightStore::open(dir.path());
  EXPECT_EQ(store.view("b", {1}).as<float>()[0], 2.0f);
  EXPECT_NE(error_of([&] { store.view("a", {2}); }).find("has shape [1], expected [2]"), std::string::npos);
  EXPECT_NE(error_of([&] { store.get("c"); }).find("tensor 'c' not found"), std::string::npos);
  write_file(dir.path() / "model.safetensors.index.json", R"({"weight_map":{"a":"s1.safetensors","c":"s2.safetensors"}})");
  EXPECT_NE(error_of([&] { io::WeightStore::open(dir.path()); }).find("'c'"), std::string::npos);
}

const char* kClassic = R"({"architectures":["LlamaForCausalLM"],"hidden_size":64,"intermediate_size":128,
  "num_hidden_layers":2,"num_attention_heads":4,"num_key_value_heads":2,"vocab_size":100,"rope_theta":500000.0,
  "rope_scaling":{"rope_type":"llama3","factor":8.0,"low_freq_factor":1.0,"high_freq_factor":4.0,
  "original_max_position_embeddings":64},"torch_dtype":"bfloat16","eos_token_id":[1,2]})";

TEST(HfConfig, ClassicAndTransformers5Forms) {
  io::ModelConfig c = io::parse_model_config(kClassic);
  EXPECT_EQ(c.head_dim, 16);
  EXPECT_EQ(c.rope.type, io::RopeType::kLlama3);
  EXPECT_DOUBLE_EQ(c.rope.theta, 500000.0);
  EXPECT_EQ(c.eos_token_ids, (std::vector<int32_t>{1, 2}));
  EXPECT_EQ(c.torch_dtype, DType::kBF16);
  json j = json::parse(kClassic);
  j.erase("rope_scaling");
  j.erase("rope_theta");
  j.erase("torch_dtype");
  j["rope_parameters"] = {{"rope_type", "yarn"}, {"factor", 4.0}, {"rope_theta", 1000.0}};
  j["dtype"] = "float16";
  j["architectures"] = {"Qwen3ForCausalLM"};
  j["head_dim"] = 48;
  c = io::parse_model_config(j.dump());
  EXPECT_EQ(c.rope.type, io::RopeType::kYarn);
  EXPECT_DOUBLE_EQ(c.rope.theta, 1000.0);
  EXPECT_EQ(c.torch_dtype, DType::kF16);
  EXPECT_TRUE(c.qk_norm);
  EXPECT_EQ(c.head_dim, 48);
}

TEST(HfConfig, ErrorsNameTheField) {
  auto err = [](json j) { return error_of([&] { io::parse_model_config(j.dump(), "x/config.json"); }); };
  json j = json::parse(kClassic);
  json k = j;
  k.erase("hidden_size");
  EXPECT_NE(err(k).find("x/config.json: field 'hidden_size' is missing"), std::string::npos) << err(k);
  k = j;
  k["architectures"] = {"GPT2LMHeadModel"};
  EXPECT_NE(err(k).find("GPT2LMHeadModel"), std::string::npos);
  k = j;
  k["num_key_value_heads"] = 3;
  EXPECT_NE(err(k).find("num_key_value_heads"), std::string::npos);
  k = j;
  k["rope_scaling"]["rope_type"] = "longrope";
  EXPECT_NE(err(k).find("rope_scaling.rope_type"), std::string::npos) << err(k);
  k = j;
  k["rope_scaling"].erase("factor");
  EXPECT_NE(err(k).find("rope_scaling.factor"), std::string::npos) << err(k);
  k = j;
  k["hidden_size"] = "big";
  EXPECT_NE(err(k).find("'hidden_size' must be an integer"), std::string::npos) << err(k);
  EXPECT_NE(error_of([] { io::parse_model_config("[1,2"); }).find("not valid JSON"), std::string::npos);
}

TEST(ModelFolder, MissingAndMisshapenTensorsAreNamed) {
  PEREGRINE_REQUIRE_SHARED(shared);
  const fs::path src = shared / "models" / "arch" / "qwen2-bias";
  TempDir dir;
  fs::copy_file(src / "config.json", dir.path() / "config.json");
  auto backend = engine::create_backend(engine::resolve_device("cpu", "auto", DType::kF32), 1);
  model::ModelOptions mo;
  mo.max_num_tokens = 16;
  auto load_error = [&] { return error_of([&] { model::load_model(dir.path(), *backend, mo); }); };
  EXPECT_NE(load_error().find("model.safetensors"), std::string::npos) << load_error();

  // Drop one bias tensor from the real weights.
  io::WeightStore store = io::WeightStore::open(src);
  json header = json::object();
  std::string data;
  for (const auto& name : store.names()) {
    if (name == "model.layers.1.self_attn.k_proj.bias") continue;
    const io::TensorInfo& t = store.get(name);
    header[name] = {{"dtype", "F32"}, {"shape", t.shape}, {"data_offsets", {data.size(), data.size() + t.bytes}}};
    data.append(reinterpret_cast<const char*>(t.data), t.bytes);
    if (t.dtype != DType::kF32) header[name]["dtype"] = std::string(dtype_name(t.dtype)) == "bfloat16" ? "BF16" : "F16";
  }
  write_file(dir.path() / "model.safetensors", safetensors_bytes(header.dump(), data));
  EXPECT_NE(load_error().find("tensor 'model.layers.1.self_attn.k_proj.bias' not found"), std::string::npos) << load_error();

  // A config that disagrees with the tensors' shapes.
  json cfg = json::parse(io::read_text_file(src / "config.json"));
  cfg["intermediate_size"] = cfg["intermediate_size"].get<int>() + 1;
  write_file(dir.path() / "config.json", cfg.dump());
  EXPECT_NE(load_error().find("expected"), std::string::npos) << load_error();
}

TEST(QuantConfig, UnsupportedSchemesNameTheFieldAndValue) {
  auto parse = [](const std::string& text) { return io::parse_quant_config(text, "m/config.json", "quantization_config."); };
  EXPECT_EQ(parse(R"({"quant_method": "gptq", "bits": 3})").unsupported,
            "m/config.json: field 'quantization_config.bits' is 3: supported: 4, 8");
  EXPECT_NE(parse(R"({"quant_method": "awq", "version": "gemv"})").unsupported.find("'quantization_config.version' is 'gemv'"),
            std::string::npos);
  EXPECT_NE(parse(R"({"quant_method": "bitsandbytes"})").unsupported.find("'quantization_config.quant_method' is 'bitsandbytes'"),
            std::string::npos);
  const std::string tensor = R"({"quant_method": "compressed-tensors", "format": "pack-quantized", "config_groups":
      {"g": {"targets": ["Linear"], "weights": {"num_bits": 4, "type": "int", "strategy": "tensor"}}}})";
  EXPECT_NE(parse(tensor).unsupported.find("'quantization_config.config_groups.g.weights.strategy' is 'tensor'"),
            std::string::npos) << parse(tensor).unsupported;
  const io::QuantConfig g = parse(R"({"quant_method": "gptq_marlin", "bits": 8, "group_size": -1, "sym": true})");
  EXPECT_EQ(g.method, "gptq");
  EXPECT_TRUE(g.unsupported.empty()) << g.unsupported;
  EXPECT_EQ(g.group_size, -1);
  const io::QuantConfig a = parse(R"({"quant_method": "awq", "modules_to_not_convert": ["mlp.down"]})");
  EXPECT_FALSE(a.applies_to("model.layers.3.mlp.down_proj"));
  EXPECT_TRUE(a.applies_to("model.layers.3.mlp.up_proj"));
  const io::QuantConfig ct = parse(R"({"quant_method": "compressed-tensors", "format": "pack-quantized",
      "ignore": ["lm_head", "re:.*layers\\.0\\..*"], "config_groups": {"g": {"targets": ["Linear"],
      "weights": {"num_bits": 8, "type": "int", "strategy": "channel", "symmetric": false}}}})");
  EXPECT_TRUE(ct.unsupported.empty()) << ct.unsupported;
  EXPECT_FALSE(ct.applies_to("model.layers.0.mlp.down_proj"));
  EXPECT_TRUE(ct.applies_to("model.layers.10.mlp.down_proj"));
  EXPECT_FALSE(ct.applies_to("lm_head"));
}

TEST(ModelFolder, QuantizationIsDetectedAndUnsupportedSchemesAreRefusedByName) {
  PEREGRINE_REQUIRE_SHARED(shared);
  const fs::path quant = shared / "models" / "quant";
  if (!fs::exists(quant / "gptq-w4g32-sym" / "config.json")) GTEST_SKIP() << quant << " absent";
  const io::ModelConfig g = io::load_model_config(quant / "gptq-w4g128-actorder-asym");
  EXPECT_EQ(g.quant_method, "gptq");
  EXPECT_EQ(g.quant.bits, 4);
  EXPECT_EQ(g.quant.group_size, 128);
  EXPECT_TRUE(g.quant.desc_act);
  EXPECT_FALSE(g.quant.sym);
  const io::ModelConfig ct = io::load_model_config(quant / "ct-w4a16-g128");
  EXPECT_EQ(ct.quant_method, "compressed-tensors");
  EXPECT_TRUE(ct.quant.applies_to("model.layers.0.mlp.down_proj"));
  EXPECT_FALSE(ct.quant.applies_to("lm_head"));
  auto backend = engine::create_backend(engine::resolve_device("cpu", "auto", DType::kF32), 1);
  model::ModelOptions mo;
  mo.max_num_tokens = 16;
  // W8A8 and FP8 load (issue 12; tests/unit/model/w8a8_model_test.cpp); a scheme they cannot take is refused
  // naming the file, the field and the value.
  EXPECT_NO_THROW(model::load_model(quant / "ct-w8a8-int8", *backend, mo));
  EXPECT_NO_THROW(model::load_model(quant / "fp8-block128", *backend, mo));
  std::string e;
  {
    TempDir bad;
    for (const char* f : {"generation_config.json"}) fs::copy_file(quant / "fp8-block128" / f, bad.path() / f);
    json cfg = json::parse(io::read_text_file(quant / "fp8-block128" / "config.json"));
    cfg["quantization_config"]["activation_scheme"] = "static";
    write_file(bad.path() / "config.json", cfg.dump());
    fs::create_symlink(quant / "fp8-block128" / "model.safetensors", bad.path() / "model.safetensors");
    e = error_of([&] { model::load_model(bad.path(), *backend, mo); });
    EXPECT_NE(e.find("config.json: field 'quantization_config.activation_scheme' is 'static'"), std::string::npos) << e;
  }
  // --quantization insists: a mismatch names the file, field and value.
  mo.quantization = "awq";
  e = error_of([&] { model::load_model(quant / "gptq-w4g32-sym", *backend, mo); });
  EXPECT_NE(e.find("--quantization awq does not match"), std::string::npos) << e;
  EXPECT_NE(e.find("config.json: field 'quantization_config.quant_method' is 'gptq'"), std::string::npos) << e;
  mo.quantization = "gptq_marlin";  // vLLM's kernel name for the same format
  EXPECT_NO_THROW(model::load_model(quant / "gptq-w4g32-sym", *backend, mo));
  mo.quantization = "gptq";
  e = error_of([&] { model::load_model(shared / "models" / "pycoder-tiny", *backend, mo); });
  EXPECT_NE(e.find("has no quantization_config"), std::string::npos) << e;
  // A damaged quantized tensor is named with its file.
  TempDir dir;
  for (const char* f : {"config.json", "generation_config.json"}) fs::copy_file(quant / "awq-w4g64" / f, dir.path() / f);
  json cfg = json::parse(io::read_text_file(quant / "awq-w4g64" / "config.json"));
  cfg["quantization_config"]["group_size"] = 32;
  write_file(dir.path() / "config.json", cfg.dump());
  fs::create_symlink(quant / "awq-w4g64" / "model.safetensors", dir.path() / "model.safetensors");
  mo.quantization.clear();
  e = error_of([&] { model::load_model(dir.path(), *backend, mo); });
  EXPECT_NE(e.find("model.safetensors: tensor 'model.layers.0.self_attn.q_proj.qzeros'"), std::string::npos) << e;
}

}  // namespace
