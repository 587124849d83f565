// The GGUF mapping of every Llama-family variant: each tiny model of ../shared/models/arch is written as a GGUF the
// way llama.cpp's converter writes it (its tensor names, `<arch>.*` keys, q/k rows permuted for llama, 1-D tensors
// in F32, `rope_freqs` for Llama-3 scaling, rope.scaling keys for linear/YaRN), then run from that file and from the
// HF folder through the Engine on the CPU: the same greedy ids and log-probs (the same weights, the same math).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <unistd.h>

#include "io/hf_config.h"
#include "io/safetensors.h"
#include "peregrine/engine.h"
#include "peregrine/error.h"
#include "test_fixtures.h"
#include "unit/io/gguf_writer.h"

namespace fs = std::filesystem;
using namespace peregrine;

namespace {

uint32_t ggml_type_of(DType t) {
  switch (t) {
    case DType::kF32: return 0;
    case DType::kF16: return 1;
    case DType::kBF16: return 30;
    default: throw Error(ErrorCode::kUnsupported, "dtype");
  }
}

// HF row order -> llama.cpp's (the converter's permute(w, n_head, n_head_kv)): GGUF row 2j + s of each head is
// HF row s * head_dim / 2 + j.
std::vector<uint8_t> permute_rows(const uint8_t* src, int64_t rows, size_t row_bytes, int64_t heads) {
  std::vector<uint8_t> out(static_cast<size_t>(rows) * row_bytes);
  const int64_t hd = rows / heads, half = hd / 2;
  for (int64_t h = 0; h < heads; ++h)
    for (int64_t j = 0; j < half; ++j)
      for (int64_t s = 0; s < 2; ++s)
        std::memcpy(out.data() + static_cast<size_t>(h * hd + 2 * j + s) * row_bytes,
                    src + static_cast<size_t>(h * hd + s * half + j) * row_bytes, row_bytes);
  return out;
}

void write_gguf(const fs::path& dir, const fs::path& out) {
  const io::ModelConfig c = io::load_model_config(dir);
  const io::WeightStore store = io::WeightStore::open(dir);
  std::string arch = c.architecture == io::Architecture::kQwen2 ? "qwen2" : c.architecture == io::Architecture::kQwen3 ? "qwen3" : "llama";
  struct T {
    std::string name;
    std::vector<uint64_t> ne;
    uint32_t type;
    std::vector<uint8_t> data;
  };
  std::vector<T> tensors;
  auto add = [&](const std::string& hf, const std::string& gg, int64_t permute_heads = 0) {
    if (!store.contains(hf)) return;
    const io::TensorInfo& t = store.get(hf);
    T g;
    g.name = gg;
    for (auto it = t.shape.rbegin(); it != t.shape.rend(); ++it) g.ne.push_back(static_cast<uint64_t>(*it));
    const auto* p = reinterpret_cast<const uint8_t*>(t.data);
    if (t.shape.size() == 1 && t.dtype != DType::kF32) {  // 1-D tensors as F32, as the converter stores them
      std::vector<float> f(static_cast<size_t>(t.shape[0]));
      convert_to_f32(t.dtype, t.data, f.data(), f.size());
      g.type = 0;
      g.data.resize(f.size() * 4);
      std::memcpy(g.data.data(), f.data(), g.data.size());
    } else {
      g.type = ggml_type_of(t.dtype);
      g.data.assign(p, p + t.bytes);
    }
    if (permute_heads > 0) {
      const int64_t rows = t.shape[0];
      g.data = permute_rows(g.data.data(), rows, g.data.size() / static_cast<size_t>(rows), permute_heads);
    }
    tensors.push_back(std::move(g));
  };
  const bool permute = arch == "llama";
  add("model.embed_tokens.weight", "token_embd.weight");
  for (int64_t i = 0; i < c.num_hidden_layers; ++i) {
    const std::string p = "model.layers." + std::to_string(i) + ".", b = "blk." + std::to_string(i) + ".";
    add(p + "input_layernorm.weight", b + "attn_norm.weight");
    for (const char* s : {"weight", "bias"}) {
      add(p + "self_attn.q_proj." + s, b + "attn_q." + s, permute ? c.num_attention_heads : 0);
      add(p + "self_attn.k_proj." + s, b + "attn_k." + s, permute ? c.num_key_value_heads : 0);
      add(p + "self_attn.v_proj." + s, b + "attn_v." + s);
      add(p + "self_attn.o_proj." + s, b + "attn_output." + s);
    }
    add(p + "self_attn.q_norm.weight", b + "attn_q_norm.weight");
    add(p + "self_attn.k_norm.weight", b + "attn_k_norm.weight");
    add(p + "post_attention_layernorm.weight", b + "ffn_norm.weight");
    add(p + "mlp.gate_proj.weight", b + "ffn_gate.weight");
    add(p + "mlp.up_proj.weight", b + "ffn_up.weight");
    add(p + "mlp.down_proj.weight", b + "ffn_down.weight");
  }
  add("model.norm.weight", "output_norm.weight");
  if (!c.tie_word_embeddings) add("lm_head.weight", "output.weight");
  const io::RopeConfig& r = c.rope;
  const int64_t rot = c.rotary_dim();
  if (r.type == io::RopeType::kLlama3) {  // the converter's rope_freqs: 1 / the factor each frequency is divided by
    T g{"rope_freqs.weight", {static_cast<uint64_t>(rot / 2)}, 0, {}};
    const double low_wl = r.original_max_position_embeddings / r.low_freq_factor;
    const double high_wl = r.original_max_position_embeddings / r.high_freq_factor;
    for (int64_t i = 0; i < rot / 2; ++i) {
      const double freq = 1.0 / std::pow(r.theta, 2.0 * static_cast<double>(i) / static_cast<double>(rot));
      const double wl = 2 * M_PI / freq;
      double f = 1.0;
      if (wl > low_wl) {
        f = r.factor;
      } else if (wl >= high_wl) {
        const double smooth = (r.original_max_position_embeddings / wl - r.low_freq_factor) / (r.high_freq_factor - r.low_freq_factor);
        f = 1.0 / ((1 - smooth) / r.factor + smooth);
      }
      const float v = static_cast<float>(f);
      const auto* b = reinterpret_cast<const uint8_t*>(&v);
      g.data.insert(g.data.end(), b, b + 4);
    }
    tensors.push_back(std::move(g));
  }

  peregrine::testing::GgufBuilder b;
  const std::string p = arch + ".";
  std::vector<std::function<void()>> kvs;
  kvs.push_back([&] { b.kv_str("general.architecture", arch); });
  kvs.push_back([&] { b.kv_u32(p + "context_length", static_cast<uint32_t>(c.max_position_embeddings)); });
  kvs.push_back([&] { b.kv_u32(p + "embedding_length", static_cast<uint32_t>(c.hidden_size)); });
  kvs.push_back([&] { b.kv_u32(p + "block_count", static_cast<uint32_t>(c.num_hidden_layers)); });
  kvs.push_back([&] { b.kv_u32(p + "feed_forward_length", static_cast<uint32_t>(c.intermediate_size)); });
  kvs.push_back([&] { b.kv_u32(p + "attention.head_count", static_cast<uint32_t>(c.num_attention_heads)); });
  kvs.push_back([&] { b.kv_u32(p + "attention.head_count_kv", static_cast<uint32_t>(c.num_key_value_heads)); });
  kvs.push_back([&] { b.kv_u32(p + "attention.key_length", static_cast<uint32_t>(c.head_dim)); });
  kvs.push_back([&] { b.kv_u32(p + "attention.value_length", static_cast<uint32_t>(c.head_dim)); });
  kvs.push_back([&] { b.kv_f32(p + "rope.freq_base", static_cast<float>(r.theta)); });
  kvs.push_back([&] { b.kv_u32(p + "rope.dimension_count", static_cast<uint32_t>(rot)); });
  kvs.push_back([&] { b.kv_f32(p + "attention.layer_norm_rms_epsilon", static_cast<float>(c.rms_norm_eps)); });
  kvs.push_back([&] { b.kv_u32(p + "vocab_size", static_cast<uint32_t>(c.vocab_size)); });
  if (r.type == io::RopeType::kLinear) {
    kvs.push_back([&] { b.kv_str(p + "rope.scaling.type", "linear"); });
    kvs.push_back([&] { b.kv_f32(p + "rope.scaling.factor", static_cast<float>(r.factor)); });
  }
  if (r.type == io::RopeType::kYarn) {
    kvs.push_back([&] { b.kv_str(p + "rope.scaling.type", "yarn"); });
    kvs.push_back([&] { b.kv_f32(p + "rope.scaling.factor", static_cast<float>(r.factor)); });
    kvs.push_back([&] {
      b.kv_u32(p + "rope.scaling.original_context_length",
               static_cast<uint32_t>(r.original_max_position_embeddings > 0 ? r.original_max_position_embeddings
                                                                            : c.max_position_embeddings));
    });
  }
  b.header(3, tensors.size(), kvs.size());
  for (auto& kv : kvs) kv();
  uint64_t offset = 0;
  for (const T& t : tensors) {
    b.tensor(t.name, t.ne, t.type, offset);
    offset += (t.data.size() + 31) / 32 * 32;
  }
  b.align();
  for (const T& t : tensors) {
    b.out.insert(b.out.end(), t.data.begin(), t.data.end());
    b.align();
  }
  std::ofstream(out, std::ios::binary).write(reinterpret_cast<const char*>(b.out.data()), static_cast<std::streamsize>(b.out.size()));
}

std::vector<RequestOutput> run(const fs::path& model, const std::vector<std::vector<int32_t>>& prompts) {
  EngineConfig ec;
  ec.model = model.string();
  ec.device = "cpu";
  ec.max_model_len = 512;
  ec.max_num_seqs = static_cast<int>(prompts.size());
  ec.generation_config = "vllm";
  ec.skip_tokenizer_init = true;
  auto engine = Engine::create(ec);
  SamplingParams sp;
  sp.max_tokens = 8;
  sp.temperature = 0;
  sp.logprobs = 5;
  sp.ignore_eos = true;
  return engine->generate(prompts, sp);
}

class GgufArch : public ::testing::TestWithParam<std::string> {};

TEST_P(GgufArch, SameOutputsAsTheHfFolder) {
  PEREGRINE_REQUIRE_SHARED(shared);
  const fs::path dir = shared / "models" / "arch" / GetParam();
  if (!fs::exists(dir / "config.json")) GTEST_SKIP() << dir << " absent";
  const fs::path file = fs::temp_directory_path() / ("peregrine_arch_" + GetParam() + "_" + std::to_string(::getpid()) + ".gguf");
  write_gguf(dir, file);
  std::ifstream in(dir / "reference.json");
  const auto ref = nlohmann::json::parse(in);
  std::vector<std::vector<int32_t>> prompts;
  for (const auto& c : ref["cases"]) prompts.push_back(c["prompt_ids"].get<std::vector<int32_t>>());
  const auto hf = run(dir, prompts);
  const auto gg = run(file, prompts);
  fs::remove(file);
  double max_err = 0;
  for (size_t i = 0; i < prompts.size(); ++i) {
    const auto& a = hf[i].outputs.at(0);
    const auto& b = gg[i].outputs.at(0);
    ASSERT_EQ(a.token_ids.size(), b.token_ids.size());
    for (size_t s = 0; s < a.token_ids.size(); ++s) {
      for (size_t k = 0; k < a.logprobs[s].top.size(); ++k) {
        const auto& x = a.logprobs[s].top[k];
        for (const auto& y : b.logprobs[s].top)
          if (y.token_id == x.token_id) max_err = std::max(max_err, static_cast<double>(std::fabs(x.logprob - y.logprob)));
      }
      if (a.token_ids[s] != b.token_ids[s]) {
        const double margin = a.logprobs[s].top.at(0).logprob - a.logprobs[s].top.at(1).logprob;
        EXPECT_LT(margin, 1e-4) << GetParam() << " case " << i << " step " << s;
        break;
      }
    }
  }
  EXPECT_LT(max_err, 1e-4) << GetParam();
  std::printf("%s: GGUF vs HF folder, max |d logprob| %.2e\n", GetParam().c_str(), max_err);
}

INSTANTIATE_TEST_SUITE_P(Variants, GgufArch,
                         ::testing::Values("llama3-rope", "llama-linear-mqa", "qwen2-bias", "qwen3-qknorm", "llama-yarn"),
                         [](const auto& info) {
                           std::string n = info.param;
                           for (char& ch : n)
                             if (ch == '-') ch = '_';
                           return n;
                         });

}  // namespace
