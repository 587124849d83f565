// W4A8 checkpoints (compressed-tensors: int4 weights per group or per channel, int8 activations dynamic per
// token; int-quantized as llm-compressor writes its W4A8 preset, or pack-quantized): the config is read as vLLM
// reads it and other schemes are refused naming field and value; `quantize --scheme w4a8` on pycoder-tiny loads
// back on ref and cpu, stays near the float reference, and greedy ids agree between ref and cpu up to near-ties;
// a bad int4 value is an error naming the tensor.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <unistd.h>

#include "io/hf_config.h"
#include "peregrine/engine.h"
#include "peregrine/error.h"
#include "peregrine/quantize.h"
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

std::string ct_group(const std::string& fmt, const std::string& weights, const std::string& acts) {
  return R"({"quant_method":"compressed-tensors","format":")" + fmt + R"(","config_groups":{"group_0":{"targets":["Linear"],"weights":)" +
         weights + R"(,"input_activations":)" + acts + R"(,"format":")" + fmt + R"("}},"ignore":["lm_head"]})";
}

const char* kW4g128 = R"({"num_bits":4,"type":"int","symmetric":true,"strategy":"group","group_size":128,"dynamic":false})";
const char* kW4ch = R"({"num_bits":4,"type":"int","symmetric":true,"strategy":"channel","group_size":null})";
const char* kA8 = R"({"num_bits":8,"type":"int","symmetric":true,"strategy":"token","dynamic":true})";

io::QuantConfig parse(const std::string& text) { return io::parse_quant_config(text, "config.json", "quantization_config."); }

TEST(W4A8Config, ReadsTheSupportedSchemes) {
  for (const char* fmt : {"int-quantized", "pack-quantized"}) {
    io::QuantConfig q = parse(ct_group(fmt, kW4g128, kA8));
    EXPECT_EQ(q.unsupported, "") << fmt;
    EXPECT_EQ(q.bits, 4);
    EXPECT_EQ(q.group_size, 128);
    EXPECT_EQ(q.act_bits, 8);
    EXPECT_EQ(q.format, fmt);
    q = parse(ct_group(fmt, kW4ch, kA8));
    EXPECT_EQ(q.unsupported, "") << fmt;
    EXPECT_EQ(q.group_size, -1);
    EXPECT_EQ(q.act_bits, 8);
  }
  // int4 in int-quantized form without activations is weight-only (W4A16).
  const io::QuantConfig q = parse(ct_group("int-quantized", kW4g128, "null"));
  EXPECT_EQ(q.unsupported, "");
  EXPECT_EQ(q.act_bits, 0);
}

TEST(W4A8Config, RefusesOtherSchemesNamingFieldAndValue) {
  auto has = [](const std::string& config, const std::string& a, const std::string& b) {
    const std::string msg = parse(config).unsupported;
    EXPECT_NE(msg.find("config.json"), std::string::npos) << msg;
    EXPECT_NE(msg.find(a), std::string::npos) << msg;
    EXPECT_NE(msg.find(b), std::string::npos) << msg;
  };
  for (const char* fmt : {"int-quantized", "pack-quantized"}) {
    has(ct_group(fmt, R"({"num_bits":4,"type":"int","symmetric":false,"strategy":"group","group_size":128})", kA8),
        "weights.symmetric", "false");
    has(ct_group(fmt, R"({"num_bits":4,"type":"int","symmetric":true,"strategy":"group","group_size":128,"actorder":"group"})", kA8),
        "weights.actorder", "'group'");
    has(ct_group(fmt, R"({"num_bits":4,"type":"int","symmetric":true,"strategy":"tensor"})", kA8), "weights.strategy", "'tensor'");
    has(ct_group(fmt, R"({"num_bits":4,"type":"int","symmetric":true,"strategy":"group","group_size":0})", kA8),
        "weights.group_size", "0");
    has(ct_group(fmt, kW4g128, R"({"num_bits":8,"type":"int","symmetric":true,"strategy":"tensor","dynamic":false})"),
        "input_activations.dynamic", "false");
    has(ct_group(fmt, kW4g128, R"({"num_bits":8,"type":"int","symmetric":true,"strategy":"tensor","dynamic":true})"),
        "input_activations.strategy", "'tensor'");
    has(ct_group(fmt, kW4g128, R"({"num_bits":8,"type":"int","symmetric":false,"strategy":"token","dynamic":true})"),
        "input_activations.symmetric", "false");
    has(ct_group(fmt, kW4g128, R"({"num_bits":4,"type":"int","symmetric":true,"strategy":"token","dynamic":true})"),
        "input_activations.num_bits", "4");
    has(ct_group(fmt, kW4g128, R"({"num_bits":8,"type":"float","symmetric":true,"strategy":"token","dynamic":true})"),
        "input_activations.type", "'float'");
  }
  has(ct_group("pack-quantized", R"({"num_bits":8,"type":"int","symmetric":true,"strategy":"channel"})", kA8),
      "input_activations", "num_bits 4");
  has(ct_group("int-quantized", R"({"num_bits":2,"type":"int","symmetric":true,"strategy":"channel"})", kA8),
      "weights.num_bits", "2");
}

std::unique_ptr<Engine> make_engine(const fs::path& dir, const std::string& device) {
  EngineConfig ec;
  ec.model = dir.string();
  ec.device = device;
  ec.max_num_batched_tokens = 1024;
  ec.max_num_seqs = 6;
  ec.generation_config = "vllm";
  return Engine::create(ec);
}

fs::path scratch_dir(const std::string& name) {
  const fs::path d = fs::temp_directory_path() / ("peregrine-w4a8-" + name + "-" + std::to_string(::getpid()));
  fs::remove_all(d);
  return d;
}

// quantize --scheme w4a8 (rtn) on pycoder-tiny, then both backends on the checkpoint, beside W4A16 (the same int4
// weights without activation quantization) and int8 W8A8 (the same activation quantization on 8-bit weights).
// Bounds, from what this test measured on 2026-12-01 (AVX-512 VNNI VM, printed below): against the float
// reference, teacher-forced over every top-5 entry, W4A16 moves pycoder-tiny's logprobs by 0.383 on average with
// group 128 and 0.459 per channel (int4 RTN costs this small model +3.8% perplexity), int8 W8A8 by 0.067, W4A8 by
// 0.382 (g128) and 0.461 (per channel): the int8 activations add next to nothing on top of the int4 weights. The
// test holds W4A8 within 1.15x its W4A16 counterpart + 0.05. ref and cpu compute the same op with different float
// rounding, and an activation whose scaled value sits at a rounding boundary takes the neighbouring int8 code on
// one of them; through 6 layers their chosen-token logprobs then differ by up to 0.060 (W4A8 g128), 0.053 (per
// channel), 0.039 (W8A8 int8: the same effect). So the difference must stay below 0.1, and greedy ids must agree
// step by step until the first step whose cpu top-2 margin is below kTie = 0.2 (twice that bound: no larger
// margin can flip).
TEST(W4A8Model, QuantizeRoundTripOnPycoderTiny) {
  PEREGRINE_REQUIRE_SHARED(shared);
  const fs::path dense = peregrine::testing::source_dir() / "models" / "pycoder-tiny";
  const fs::path ref_path = shared / "models" / "pycoder-tiny.reference.json";
  if (!fs::exists(ref_path) || !fs::exists(dense / "config.json")) GTEST_SKIP() << ref_path << " or " << dense << " absent";
  const json ref = read_json(ref_path);
  json cases = json::array();
  for (size_t i = 0; i < 6 && i < ref["cases"].size(); ++i) cases.push_back(ref["cases"][i]);
  std::vector<std::vector<int32_t>> prompts;
  for (const json& c : cases) prompts.push_back(c["prompt_ids"].get<std::vector<int32_t>>());
  SamplingParams sp;
  sp.max_tokens = 24;
  sp.temperature = 0;
  sp.ignore_eos = true;
  sp.logprobs = 2;
  constexpr double kTie = 0.2;

  struct Variant {
    const char* name;
    const char* scheme;
    int64_t group;
    const char* format;
    bool with_ref;
  };
  std::map<std::string, double> mean;
  for (const Variant& v : {Variant{"w4a16-g128", "w4a16", 128, "", false}, Variant{"w4a16-channel", "w4a16", -1, "", false},
                           Variant{"w8a8-int8", "w8a8-int8", -1, "", true},
                           Variant{"w4a8-g128-int", "w4a8", 128, "int-quantized", true},
                           Variant{"w4a8-channel-pack", "w4a8", -1, "pack-quantized", true}}) {
    SCOPED_TRACE(v.name);
    const fs::path out = scratch_dir(v.name);
    QuantizeConfig qc;
    qc.model = dense.string();
    qc.out = out.string();
    qc.scheme = v.scheme;
    qc.group_size = v.group;
    qc.format = v.format;
    const QuantizeReport r = quantize_model(qc);
    EXPECT_EQ(r.quantized_linears, 42);
    const bool w4a8 = std::string(v.scheme) == "w4a8";
    if (w4a8) {
      const json q = read_json(out / "config.json")["quantization_config"];
      EXPECT_EQ(q["format"], v.format);
      const json& g = q["config_groups"]["group_0"];
      EXPECT_EQ(g["weights"]["num_bits"], 4);
      EXPECT_EQ(g["weights"]["strategy"], v.group > 0 ? "group" : "channel");
      EXPECT_EQ(g["input_activations"]["num_bits"], 8);
      EXPECT_EQ(g["input_activations"]["strategy"], "token");
      EXPECT_EQ(g["input_activations"]["dynamic"], true);
    }
    auto cpu = make_engine(out, "cpu");
    const Deviation d = teacher_forced(*cpu, cases);
    mean[v.name] = d.mean();
    std::printf("pycoder-tiny %s (cpu) vs the float reference: mean %.3f max %.2f over %lld entries\n", v.name,
                d.mean(), d.max, static_cast<long long>(d.count));
    EXPECT_GT(d.mean(), 1e-3) << "the weights were not quantized";
    const std::vector<RequestOutput> a = cpu->generate(prompts, sp);
    for (size_t i = 0; i < prompts.size(); ++i) {
      const std::vector<int32_t>& ids = a[i].outputs[0].token_ids;
      ASSERT_EQ(ids.size(), 24u);
      // Sane: not one token repeated throughout.
      EXPECT_LT(std::count(ids.begin(), ids.end(), ids[0]), 24) << "prompt " << i;
    }
    if (v.with_ref) {
      auto refb = make_engine(out, "ref");
      const std::vector<RequestOutput> b = refb->generate(prompts, sp);
      int compared = 0;
      double max_lp = 0;
      for (size_t i = 0; i < prompts.size(); ++i) {
        const CompletionOutput& x = a[i].outputs[0];
        const CompletionOutput& y = b[i].outputs[0];
        for (size_t s = 0; s < x.token_ids.size(); ++s) {
          const auto& top = x.logprobs[s].top;
          ASSERT_GE(top.size(), 2u);
          if (top[0].logprob - top[1].logprob < kTie) break;  // a near-tie: the two may part from here on
          ASSERT_EQ(x.token_ids[s], y.token_ids[s]) << v.name << " prompt " << i << " step " << s << " (cpu margin "
                                                    << top[0].logprob - top[1].logprob << ")";
          max_lp = std::max(max_lp, static_cast<double>(std::fabs(x.logprobs[s].chosen.logprob - y.logprobs[s].chosen.logprob)));
          ++compared;
        }
      }
      std::printf("  greedy ref vs cpu: %d steps equal before the first near-tie (< %.2f), max |logprob diff| %.3f\n",
                  compared, kTie, max_lp);
      EXPECT_GT(compared, 20);
      EXPECT_LE(max_lp, 0.1);
    }
    fs::remove_all(out);
  }
  EXPECT_LE(mean["w4a8-g128-int"], 1.15 * mean["w4a16-g128"] + 0.05);
  EXPECT_LE(mean["w4a8-channel-pack"], 1.15 * mean["w4a16-channel"] + 0.05);
}

// An int-quantized W4A8 checkpoint whose int8 `weight` holds a value outside [-8, 7] is refused naming the file,
// the tensor and the value; so is a scheme the loader cannot honour (naming the config field).
TEST(W4A8Model, BadCheckpointsAreErrorsNamingWhatIsWrong) {
  PEREGRINE_REQUIRE_SHARED(shared);
  const fs::path dense = peregrine::testing::source_dir() / "models" / "pycoder-tiny";
  if (!fs::exists(dense / "config.json")) GTEST_SKIP() << dense << " absent";
  const fs::path out = scratch_dir("bad");
  QuantizeConfig qc;
  qc.model = dense.string();
  qc.out = out.string();
  qc.scheme = "w4a8";
  quantize_model(qc);
  // Patch one code of layer 0's down_proj to 9.
  const fs::path st = out / "model.safetensors";
  std::fstream f(st, std::ios::in | std::ios::out | std::ios::binary);
  uint64_t len = 0;
  f.read(reinterpret_cast<char*>(&len), 8);
  std::string header(len, '\0');
  f.read(header.data(), static_cast<std::streamsize>(len));
  const json h = json::parse(header);
  const std::string name = "model.layers.0.mlp.down_proj.weight";
  ASSERT_EQ(h[name]["dtype"], "I8");
  const uint64_t off = 8 + len + h[name]["data_offsets"][0].get<uint64_t>() + 3;
  f.seekp(static_cast<std::streamoff>(off));
  const char nine = 9;
  f.write(&nine, 1);
  f.close();
  try {
    make_engine(out, "cpu");
    ADD_FAILURE() << "a code of 9 loaded";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find(name), std::string::npos) << msg;
    EXPECT_NE(msg.find("holds 9"), std::string::npos) << msg;
    EXPECT_NE(msg.find("model.safetensors"), std::string::npos) << msg;
  }
  // A static activation scheme: refused at load naming the field.
  json cfg = read_json(out / "config.json");
  cfg["quantization_config"]["config_groups"]["group_0"]["input_activations"]["dynamic"] = false;
  std::ofstream(out / "config.json") << cfg.dump(2);
  try {
    make_engine(out, "cpu");
    ADD_FAILURE() << "a static activation scheme loaded";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("input_activations.dynamic"), std::string::npos) << msg;
    EXPECT_NE(msg.find("config.json"), std::string::npos) << msg;
  }
  fs::remove_all(out);
}

// quantize --scheme w4a8 refuses what it cannot write, by name.
// Sequential GPTQ: each layer input's statistics are captured again once every projection before it is quantized
// (q/k/v, o, gate/up, down, layer after layer), so the calibration runs once per layer input.
TEST(W4A8Model, GptqCalibratesEachLayerInputAfterTheProjectionsBeforeIt) {
  const fs::path dense = peregrine::testing::source_dir() / "models" / "pycoder-tiny";
  if (!fs::exists(dense / "config.json")) GTEST_SKIP() << dense << " absent";
  const fs::path text = scratch_dir("gptq-text") / "calibration.py";
  fs::create_directories(text.parent_path());
  {
    std::ofstream f(text);
    for (int i = 0; i < 40; ++i) f << "def f" << i << "(x):\n    return x * " << i << " + 1\n\n";
  }
  QuantizeConfig qc;
  qc.model = dense.string();
  qc.out = scratch_dir("gptq-seq").string();
  qc.scheme = "w4a16";
  qc.method = "gptq";
  qc.calibration = text.string();
  qc.calibration_tokens = 96;
  qc.calibration_context = 48;
  qc.gptq_sequential = true;
  std::map<std::string, size_t> totals;
  qc.on_progress = [&](const std::string& what, size_t, size_t total) { totals[what] = total; };
  const QuantizeReport r = quantize_model(qc);
  EXPECT_EQ(r.quantized_linears, 42);
  EXPECT_EQ(r.calibration_tokens, 96);
  EXPECT_EQ(totals["calibrating"], size_t{6 * 4 * 2});  // 6 layers x 4 inputs, 2 windows each
}

TEST(W4A8Model, QuantizeRefusesBadArguments) {
  const fs::path dense = peregrine::testing::source_dir() / "models" / "pycoder-tiny";
  if (!fs::exists(dense / "config.json")) GTEST_SKIP() << dense << " absent";
  auto refused = [&](QuantizeConfig qc, const std::string& what) {
    qc.model = dense.string();
    qc.out = scratch_dir("refused").string();
    try {
      quantize_model(qc);
      ADD_FAILURE() << "accepted: " << what;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
    }
  };
  QuantizeConfig qc;
  qc.scheme = "w4a8";
  qc.symmetric = false;
  refused(qc, "--asymmetric");
  qc = QuantizeConfig{};
  qc.scheme = "w4a8";
  qc.format = "marlin-24";
  refused(qc, "--format 'marlin-24'");
  qc = QuantizeConfig{};
  qc.scheme = "w8a8-int8";
  qc.format = "pack-quantized";
  refused(qc, "--format 'pack-quantized'");
  qc = QuantizeConfig{};
  qc.scheme = "w4a8";
  qc.group_size = 100;
  refused(qc, "--group-size 100");
  qc = QuantizeConfig{};
  qc.gptq_sequential = true;
  refused(qc, "--gptq-sequential: --method is 'rtn'");
}

}  // namespace
