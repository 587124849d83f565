// W8A8 / FP8 checkpoints (../shared/models/quant: ct-w8a8-int8, fp8-per-channel, fp8-block128) held to the
// targets of its README: the linear probes (layer 0 q_proj / down_proj on 4 tokens: x_q equal, x_scale to 1e-6,
// y_act_quant within 1e-5 of max|y|, and y of the weights alone) on ref and cpu, and the model against
// `cases_act_quant` by the mean (teacher-forced, every top-5 entry: int8 mean <= 1e-2 / max 0.15, fp8 mean <=
// 3.5e-2 / max 0.3 for float32 engines). Unsupported 8-bit schemes are refused naming field and value;
// --quantization fp8 / w8a8-int8 on a dense checkpoint quantizes at load.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>

#include "core/dtype.h"
#include "core/status.h"
#include "io/hf_config.h"
#include "io/safetensors.h"
#include "model/quant_weights.h"
#include "ops/act_quant.h"
#include "ops/backend.h"
#include "peregrine/engine.h"
#include "test_fixtures.h"
#include "unit/model/teacher_forced.h"

namespace fs = std::filesystem;
using nlohmann::json;
using namespace peregrine;

namespace {

using peregrine::testing::Deviation;
using peregrine::testing::teacher_forced;

json read_json(const fs::path& p) {
  std::ifstream in(p);
  return json::parse(in);
}

ops::WeightQuant quant_of(const model::HostQuantLinear& h) {
  ops::WeightQuant q;
  q.scales = TensorView(const_cast<float*>(h.scales.data()), DType::kF32,
                        {(h.n + h.block_rows - 1) / h.block_rows, h.groups});
  q.group_size = h.group_size;
  q.block_rows = h.block_rows;
  q.act = h.act == model::HostActQuant::kInt8 ? ops::ActQuant::kInt8
          : h.act == model::HostActQuant::kFp8 ? ops::ActQuant::kFp8
                                                : ops::ActQuant::kNone;
  q.act_group = h.act_group;
  return q;
}

class W8A8Probe : public ::testing::TestWithParam<std::tuple<std::string, std::string>> {};

TEST_P(W8A8Probe, LinearProbesMatch) {
  PEREGRINE_REQUIRE_SHARED(shared);
  const auto& [folder, device] = GetParam();
  const fs::path dir = shared / "models" / "quant" / folder;
  if (!fs::exists(dir / "reference.json")) GTEST_SKIP() << dir << " absent";
  const json ref = read_json(dir / "reference.json");
  const io::ModelConfig cfg = io::load_model_config(dir);
  io::WeightStore store = io::WeightStore::open(dir);
  ops::BackendOptions bo;
  bo.kind = device == "ref" ? ops::DeviceKind::kRef : ops::DeviceKind::kCpu;
  auto backend = ops::create_backend(bo);
  for (const json& probe : ref["linear_probe"]) {
    const std::string proj = probe["proj"].get<std::string>();
    const std::string prefix = "model.layers." + std::to_string(probe["layer"].get<int>()) +
                               (proj == "down_proj" ? ".mlp." : ".self_attn.") + proj;
    const int64_t k = proj == "down_proj" ? cfg.intermediate_size : cfg.hidden_size;
    const int64_t n = proj == "down_proj" ? cfg.hidden_size : cfg.num_attention_heads * cfg.head_dim;
    const model::HostQuantLinear h = model::read_quantized_linear(cfg.quant, store, prefix, n, k);
    ASSERT_NE(h.act, model::HostActQuant::kNone) << folder;
    std::vector<float> x;
    for (const json& row : probe["x"])
      for (const json& v : row) x.push_back(v.get<float>());
    const int64_t m = static_cast<int64_t>(probe["x"].size());
    ASSERT_EQ(static_cast<int64_t>(x.size()), m * k);
    // x_q and x_scale: the activation quantizer itself.
    const int64_t g = h.act_group > 0 ? h.act_group : k;
    for (int64_t r = 0; r < m; ++r)
      for (int64_t c0 = 0, gi = 0; c0 < k; c0 += g, ++gi) {
        std::vector<int8_t> qi(static_cast<size_t>(g));
        std::vector<uint8_t> qf(static_cast<size_t>(g));
        const float s = h.act == model::HostActQuant::kInt8 ? ops::quantize_act_int8(x.data() + r * k + c0, g, qi.data())
                                                            : ops::quantize_act_fp8(x.data() + r * k + c0, g, qf.data());
        const double want_s = probe["x_scale"][r][gi].get<double>();
        EXPECT_NEAR(s, want_s, 1e-6 * want_s) << folder << " " << proj << " row " << r << " group " << gi;
        for (int64_t c = 0; c < g; ++c) {
          const int want = probe["x_q"][r][c0 + c].get<int>();
          const int got = h.act == model::HostActQuant::kInt8 ? qi[static_cast<size_t>(c)] : qf[static_cast<size_t>(c)];
          ASSERT_EQ(got, want) << folder << " " << proj << " x_q[" << r << "][" << c0 + c << "]";
        }
      }
    // y_act_quant through the op, y through the same weights with float activations.
    for (bool act : {true, false}) {
      ops::WeightQuant q = quant_of(h);
      if (!act) q.act = ops::ActQuant::kNone;
      ops::DeviceBuffer xb(*backend, x.size() * 4), wb(*backend, h.codes.size()), sb(*backend, h.scales.size() * 4),
          ob(*backend, static_cast<size_t>(m * n) * 4);
      backend->copy_from_host(xb.data(), x.data(), x.size() * 4);
      backend->copy_from_host(wb.data(), h.codes.data(), h.codes.size());
      backend->copy_from_host(sb.data(), h.scales.data(), h.scales.size() * 4);
      q.scales.data = sb.data();
      backend->matmul({TensorView(xb.data(), DType::kF32, {m, k}), TensorView(wb.data(), h.codes_dtype, {n, k}), {},
                       TensorView(ob.data(), DType::kF32, {m, n}), q});
      std::vector<float> y(static_cast<size_t>(m * n));
      backend->copy_to_host(y.data(), ob.data(), y.size() * 4);
      const json& want = probe[act ? "y_act_quant" : "y"];
      double ymax = 0;
      for (const json& row : want)
        for (const json& v : row) ymax = std::max(ymax, std::fabs(v.get<double>()));
      double worst = 0;
      for (int64_t r = 0; r < m; ++r)
        for (int64_t j = 0; j < n; ++j)
          worst = std::max(worst, std::fabs(y[static_cast<size_t>(r * n + j)] - want[r][j].get<double>()));
      EXPECT_LE(worst, 1e-5 * ymax) << folder << " " << device << " " << proj << (act ? " y_act_quant" : " y");
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Fixtures, W8A8Probe,
                         ::testing::Combine(::testing::Values("ct-w8a8-int8", "fp8-per-channel", "fp8-block128"),
                                            ::testing::Values("ref", "cpu")),
                         [](const auto& info) {
                           std::string s = std::get<0>(info.param) + "_" + std::get<1>(info.param);
                           for (char& c : s)
                             if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
                           return s;
                         });

std::unique_ptr<Engine> make_engine(const fs::path& dir, const std::string& device, const std::string& quantization = "") {
  EngineConfig ec;
  ec.model = dir.string();
  ec.device = device;
  ec.max_num_batched_tokens = 1024;
  ec.max_num_seqs = 4;
  ec.generation_config = "vllm";
  ec.quantization = quantization;
  if (device == "cuda") ec.dtype = "float32";  // the references' float32 engine bounds
  ec.skip_tokenizer_init = !fs::exists(dir / "tokenizer.json");
  return Engine::create(ec);
}

class W8A8Model : public ::testing::TestWithParam<std::tuple<std::string, std::string>> {};

TEST_P(W8A8Model, MatchesActQuantReferenceByTheMean) {
  PEREGRINE_REQUIRE_SHARED(shared);
  const auto& [folder, device] = GetParam();
  const fs::path dir = shared / "models" / "quant" / folder;
  if (!fs::exists(dir / "reference.json")) GTEST_SKIP() << dir << " absent";
  const json ref = read_json(dir / "reference.json");
  const json& tol = ref["tolerance"]["cases_act_quant"]["float32_engine"];
  if (device == "cuda" && !ops::cuda_available()) GTEST_SKIP() << "no CUDA GPU visible";
  auto engine = make_engine(dir, device);
  const Deviation d = teacher_forced(*engine, ref["cases_act_quant"]);
  std::printf("%s (%s) vs cases_act_quant: mean %.2e max %.2e over %lld entries\n", folder.c_str(), device.c_str(),
              d.mean(), d.max, static_cast<long long>(d.count));
  EXPECT_GT(d.count, 1000);  // 3 prompts: (6 + 63 + 199) prefill positions + 3 x 16 steps, 5 entries each
  EXPECT_LE(d.mean(), tol["mean_abs_logprob"].get<double>());
  EXPECT_LE(d.max, tol["max_abs_logprob"].get<double>());
}

// On CUDA the 64- and 200-token prompts' prefill runs past the 8-bit skinny kernel's M: cuBLASLt's FP8 GEMMs
// (per channel, and block-scaled for fp8-block128) and int8 GEMM.
INSTANTIATE_TEST_SUITE_P(Fixtures, W8A8Model,
                         ::testing::Combine(::testing::Values("ct-w8a8-int8", "fp8-per-channel", "fp8-block128"),
                                            ::testing::Values("ref", "cpu", "cuda")),
                         [](const auto& info) {
                           std::string s = std::get<0>(info.param) + "_" + std::get<1>(info.param);
                           for (char& c : s)
                             if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
                           return s;
                         });

std::string refusal(const std::string& config) {
  const io::QuantConfig q = io::parse_quant_config(config, "config.json", "quantization_config.");
  return q.unsupported;
}

std::string ct_group(const std::string& fmt, const std::string& weights, const std::string& acts) {
  return R"({"quant_method":"compressed-tensors","format":")" + fmt + R"(","config_groups":{"group_0":{"targets":["Linear"],"weights":)" +
         weights + R"(,"input_activations":)" + acts + R"(,"format":")" + fmt + R"("}},"ignore":["lm_head"]})";
}

TEST(W8A8Config, ReadsTheSupportedSchemes) {
  const std::string w8 = R"({"num_bits":8,"type":"int","symmetric":true,"strategy":"channel"})";
  const std::string a8 = R"({"num_bits":8,"type":"int","symmetric":true,"strategy":"token","dynamic":true})";
  io::QuantConfig q = io::parse_quant_config(ct_group("int-quantized", w8, a8), "config.json", "quantization_config.");
  EXPECT_EQ(q.unsupported, "");
  EXPECT_EQ(q.act_bits, 8);
  EXPECT_EQ(q.weight_type, "int");
  q = io::parse_quant_config(R"({"quant_method":"fp8","activation_scheme":"dynamic","weight_block_size":[128,128]})",
                             "config.json", "quantization_config.");
  EXPECT_EQ(q.unsupported, "");
  EXPECT_EQ(q.strategy, "block");
  EXPECT_EQ(q.act_group, 128);
  q = io::parse_quant_config(R"({"quant_method":"fp8","activation_scheme":"dynamic"})", "config.json", "quantization_config.");
  EXPECT_EQ(q.unsupported, "");
  EXPECT_EQ(q.strategy, "tensor");
}

TEST(W8A8Config, RefusesOtherSchemesNamingFieldAndValue) {
  const std::string w8 = R"({"num_bits":8,"type":"int","symmetric":true,"strategy":"channel"})";
  const std::string wf = R"({"num_bits":8,"type":"float","symmetric":true,"strategy":"channel"})";
  const std::string a8 = R"({"num_bits":8,"type":"int","symmetric":true,"strategy":"token","dynamic":true})";
  auto has = [](const std::string& msg, const std::string& a, const std::string& b) {
    EXPECT_NE(msg.find(a), std::string::npos) << msg;
    EXPECT_NE(msg.find(b), std::string::npos) << msg;
  };
  has(refusal(ct_group("int-quantized", w8, R"({"num_bits":8,"type":"int","strategy":"tensor","dynamic":false})")),
      "input_activations.dynamic", "false");
  has(refusal(ct_group("int-quantized", w8, R"({"num_bits":8,"type":"int","strategy":"token","dynamic":true,"symmetric":false})")),
      "input_activations.symmetric", "false");
  has(refusal(ct_group("int-quantized", R"({"num_bits":8,"type":"int","symmetric":false,"strategy":"channel"})", a8)),
      "weights.symmetric", "false");
  has(refusal(ct_group("int-quantized", R"({"num_bits":2,"type":"int","symmetric":true,"strategy":"channel"})", a8)),
      "weights.num_bits", "2");
  has(refusal(ct_group("int-quantized", R"({"num_bits":8,"type":"int","symmetric":true,"strategy":"group","group_size":128})", a8)),
      "weights.strategy", "'group'");
  has(refusal(ct_group("float-quantized", wf, a8)), "input_activations.type", "'int'");
  has(refusal(ct_group("marlin-24", w8, "null")), "format", "'marlin-24'");
  has(refusal(R"({"quant_method":"fp8","activation_scheme":"static"})"), "activation_scheme", "'static'");
  has(refusal(R"({"quant_method":"fp8","fmt":"e5m2"})"), "fmt", "'e5m2'");
}

// --quantization fp8 / w8a8-int8 on a dense checkpoint: every projection quantized at load per channel with
// activations per token; the model stays close to the dense reference (the bound: 4x the deviation the fixtures'
// README measures for a W8A8 engine against its own dequantized reference, about 5e-2 mean for fp8) and ref and
// cpu agree with each other.
TEST(W8A8Model, QuantizesADenseCheckpointAtLoad) {
  PEREGRINE_REQUIRE_SHARED(shared);
  const fs::path dir = shared / "models" / "pycoder-tiny";
  const fs::path ref_path = shared / "models" / "pycoder-tiny.reference.json";
  if (!fs::exists(ref_path)) GTEST_SKIP() << ref_path << " absent";
  const json ref = read_json(ref_path);
  json cases = json::array();
  for (size_t i = 0; i < 6 && i < ref["cases"].size(); ++i) cases.push_back(ref["cases"][i]);
  for (const std::string scheme : {"fp8", "w8a8-int8"}) {
    auto engine = make_engine(dir, "cpu", scheme);
    const Deviation d = teacher_forced(*engine, cases);
    std::printf("pycoder-tiny --quantization %s (cpu) vs the dense reference: mean %.2e max %.2e over %lld entries\n",
                scheme.c_str(), d.mean(), d.max, static_cast<long long>(d.count));
    EXPECT_GT(d.mean(), 1e-5) << "the weights were not quantized";
    EXPECT_LE(d.mean(), 0.2);
  }
  // A quantized checkpoint is not quantized again: --quantization must then name its method.
  const fs::path ct = shared / "models" / "quant" / "ct-w8a8-int8";
  EXPECT_THROW(make_engine(ct, "cpu", "fp8"), Error);
}

// Greedy ids of the cases' prompts (48 tokens) equal the reference's up to each case's first step whose reference
// top-1 margin is below `margin`.
void expect_greedy_up_to_margin(Engine& engine, const json& cases, double margin, const std::string& what) {
  std::vector<std::vector<int32_t>> prompts;
  for (const json& c : cases) prompts.push_back(c["prompt_ids"].get<std::vector<int32_t>>());
  SamplingParams sp;
  sp.max_tokens = 48;
  sp.temperature = 0;
  sp.ignore_eos = true;
  const std::vector<RequestOutput> out = engine.generate(prompts, sp);
  int compared = 0;
  for (size_t i = 0; i < cases.size(); ++i) {
    const auto ids = cases[i]["output_ids"].get<std::vector<int32_t>>();
    for (size_t s = 0; s < ids.size(); ++s) {
      if (cases[i]["top1_margin"][s].get<double>() < margin) break;
      ASSERT_EQ(out[i].outputs[0].token_ids.at(s), ids[s]) << what << " prompt " << i << " step " << s;
      ++compared;
    }
  }
  std::printf("  greedy: %d steps compared before the first margin below %.2f\n", compared, margin);
}

// Quantized KV caches on pycoder-tiny against its transformers float32 reference (6 prompts, teacher-forced,
// every top-5 entry). Bound: what an 8-bit cache adds is set by its rounding: int8 with a per-vector scale rounds
// each K/V element by at most amax/254, e4m3 by up to 2^-4 of the element (3 mantissa bits), about 4x more; these
// errors average over head_dim and the keys but pass through 6 layers. Measured here (2-core VM, 2026-12-01):
// int8 mean 1.8e-2 / max 0.12, fp8 mean 6.3e-2 / max 0.44 (perplexity +0.22% for fp8, docs/BENCHMARKS.md); the
// test holds about 1.5x that (mean <= 3e-2 / 1e-1, max <= 0.2 / 0.65), and greedy ids equal to the reference up to
// the first step whose reference margin is below twice the max bound. A cache read without its scales, or with
// another head's codes, is off by whole nats.
TEST(KvCacheQuant, StaysCloseToTheFloatReferenceOnPycoderTiny) {
  PEREGRINE_REQUIRE_SHARED(shared);
  const fs::path dir = shared / "models" / "pycoder-tiny";
  const fs::path ref_path = shared / "models" / "pycoder-tiny.reference.json";
  if (!fs::exists(ref_path)) GTEST_SKIP() << ref_path << " absent";
  const json ref = read_json(ref_path);
  json cases = json::array();
  for (size_t i = 0; i < 6 && i < ref["cases"].size(); ++i) cases.push_back(ref["cases"][i]);
  struct Bound {
    const char* kv;
    double mean, max;
  };
  for (const Bound& b : {Bound{"int8", 3e-2, 0.2}, Bound{"fp8", 1e-1, 0.65}}) {
    EngineConfig ec;
    ec.model = dir.string();
    ec.device = "cpu";
    ec.kv_cache_dtype = b.kv;
    ec.max_num_seqs = 6;
    auto engine = Engine::create(ec);
    const Deviation d = teacher_forced(*engine, cases);
    std::printf("pycoder-tiny --kv-cache-dtype %s (cpu) vs the float reference: mean %.2e max %.2e over %lld entries\n",
                b.kv, d.mean(), d.max, static_cast<long long>(d.count));
    EXPECT_LE(d.mean(), b.mean) << b.kv;
    EXPECT_LE(d.max, b.max) << b.kv;
    expect_greedy_up_to_margin(*engine, cases, 2 * b.max, b.kv);
    if (HasFatalFailure()) return;
  }
}

// The same caches on CUDA (bf16 activations: the tensor-core attention kernels read the codes, turning them
// exactly into bf16 values and applying the scales in f32). The bf16 path has its own deviation from the float32
// reference, so the bound is the CPU test's plus the bf16 cache's own deviation measured in the same run; greedy ids
// as above with that bound.
TEST(KvCacheQuant, StaysCloseOnCudaTensorCoreKernels) {
  PEREGRINE_REQUIRE_SHARED(shared);
  if (!ops::cuda_available()) GTEST_SKIP() << "no CUDA GPU visible";
  const fs::path dir = shared / "models" / "pycoder-tiny";
  const fs::path ref_path = shared / "models" / "pycoder-tiny.reference.json";
  if (!fs::exists(ref_path)) GTEST_SKIP() << ref_path << " absent";
  const json ref = read_json(ref_path);
  json cases = json::array();
  for (size_t i = 0; i < 6 && i < ref["cases"].size(); ++i) cases.push_back(ref["cases"][i]);
  auto make = [&](const std::string& kv) {
    EngineConfig ec;
    ec.model = dir.string();
    ec.device = "cuda";
    ec.dtype = "bfloat16";
    ec.kv_cache_dtype = kv;
    ec.max_num_seqs = 6;
    return Engine::create(ec);
  };
  const Deviation base = teacher_forced(*make("auto"), cases);
  std::printf("pycoder-tiny bf16 cache (cuda) vs the float reference: mean %.2e max %.2e\n", base.mean(), base.max);
  struct Bound {
    const char* kv;
    double mean, max;
  };
  for (const Bound& b : {Bound{"int8", 3e-2, 0.2}, Bound{"fp8", 1e-1, 0.65}}) {
    auto engine = make(b.kv);
    const Deviation d = teacher_forced(*engine, cases);
    const double mean_bound = b.mean + base.mean(), max_bound = b.max + base.max;
    std::printf("pycoder-tiny --kv-cache-dtype %s (cuda, bf16) vs the float reference: mean %.2e max %.2e (bounds %.2e / %.2f)\n",
                b.kv, d.mean(), d.max, mean_bound, max_bound);
    EXPECT_GT(d.mean(), 0.0) << b.kv;
    EXPECT_LE(d.mean(), mean_bound) << b.kv;
    EXPECT_LE(d.max, max_bound) << b.kv;
    expect_greedy_up_to_margin(*engine, cases, 2 * max_bound, b.kv);
    if (HasFatalFailure()) return;
  }
}

}  // namespace
