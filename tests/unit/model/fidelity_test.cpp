// Model fidelity against Hugging Face transformers (float32) references: greedy ids, per-step top-5 logprobs and
// prefill top-5, for pycoder-tiny, pycoder-draft and the tiny architecture-variant models in ../shared.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>

#include "ops/backend.h"
#include "peregrine/engine.h"
#include "test_fixtures.h"

namespace fs = std::filesystem;
using nlohmann::json;
using namespace peregrine;

namespace {

struct FidelityCase {
  std::string name;      // folder under models/
  std::string reference; // reference file relative to models/
  std::string device;    // cpu, ref or cuda; "cpu-int8act": the CPU with W4A16 / W8A16 on int8 activations
                         // (its default; plain "cpu" cases run with PEREGRINE_CPU_INT8_ACT=0, the exact op)
  std::string dtype;     // auto (f32 path), bfloat16 or float16 (on the CPU: f32 activations over a KV cache of that type)
  double tolerance;      // logprob bound
};

using TopK = std::vector<std::pair<int32_t, float>>;

// Same ids in the same order, except that neighbours closer than `tol` may swap; logprobs within tol.
double max_error_seen = 0;

void expect_top_close(const json& ref, const TopK& got, double tol, const std::string& where) {
  ASSERT_EQ(got.size(), ref.size()) << where;
  for (size_t i = 0; i < ref.size(); ++i) {
    int32_t ref_id = ref[i][0].get<int32_t>();
    double ref_lp = ref[i][1].get<double>();
    // Find ref_id among ours at i or at a neighbour within a near-tie.
    bool found = false;
    for (size_t j = 0; j < got.size(); ++j) {
      if (got[j].first != ref_id) continue;
      found = j == i || std::fabs(got[j].second - got[i].second) < tol;
      max_error_seen = std::max(max_error_seen, std::fabs(got[j].second - ref_lp));
      EXPECT_NEAR(got[j].second, ref_lp, tol) << where << " token " << ref_id;
    }
    // A 5th-place token may fall just outside our top-5 when tied with the 6th; so may any reference token whose
    // logprob is within the bound of the reference's 5th (the tail swaps places within the bound).
    if (!found && i + 1 == ref.size() && std::fabs(got[i].second - ref_lp) < tol) found = true;
    if (!found && std::none_of(got.begin(), got.end(), [&](const auto& g) { return g.first == ref_id; }) &&
        std::fabs(ref_lp - ref[ref.size() - 1][1].get<double>()) < tol && got.back().second > ref_lp - tol)
      found = true;
    EXPECT_TRUE(found) << where << ": reference token " << ref_id << " (rank " << i << ") missing from our top-5";
  }
}

class Fidelity : public ::testing::TestWithParam<FidelityCase> {};

TEST_P(Fidelity, MatchesTransformers) {
  PEREGRINE_REQUIRE_SHARED(shared);
  const FidelityCase& fc = GetParam();
  max_error_seen = 0;
  if (fc.device == "cuda" && !ops::cuda_available()) GTEST_SKIP() << "no CUDA GPU visible";
  const fs::path dir = shared / "models" / fc.name;
  const fs::path ref_path = shared / "models" / fc.reference;
  if (!fs::exists(ref_path) || !fs::exists(dir / "config.json")) GTEST_SKIP() << ref_path << " or " << dir << " absent";
  std::ifstream in(ref_path);
  const json ref = json::parse(in);
  const json& cases = ref["cases"];

  // Through the Engine, as users run it.
  EngineConfig ec;
  ec.model = dir.string();
  ec.device = fc.device == "cpu-int8act" ? "cpu" : fc.device;
  ec.dtype = fc.dtype;
  ec.max_num_batched_tokens = 1024;
  ec.max_num_seqs = static_cast<int>(cases.size());
  ec.generation_config = "vllm";
  ec.skip_tokenizer_init = !fs::exists(dir / "tokenizer.json");  // the tiny architecture models have none
  if (fc.device == "cpu") setenv("PEREGRINE_CPU_INT8_ACT", "0", 1);
  auto engine = Engine::create(ec);
  unsetenv("PEREGRINE_CPU_INT8_ACT");

  std::vector<std::vector<int32_t>> prompts;
  int max_out = 0;
  for (const auto& c : cases) {
    prompts.push_back(c["prompt_ids"].get<std::vector<int32_t>>());
    max_out = std::max<int>(max_out, static_cast<int>(c["output_ids"].size()));
  }
  SamplingParams sp;
  sp.max_tokens = max_out;
  sp.temperature = 0;
  sp.logprobs = 5;
  sp.prompt_logprobs = 5;
  sp.ignore_eos = true;
  const std::vector<RequestOutput> results = engine->generate(prompts, sp);
  auto top_of = [](const PositionLogprobs& pos) {
    TopK top;
    for (const TokenLogprob& t : pos.top) top.emplace_back(t.token_id, t.logprob);
    return top;
  };

  int compared_steps = 0;
  for (size_t i = 0; i < cases.size(); ++i) {
    const json& c = cases[i];
    const CompletionOutput& r = results[i].outputs.at(0);
    ASSERT_FALSE(results[i].error.has_value()) << *results[i].error;
    const std::string where = fc.name + " case " + std::to_string(i);
    if (c.contains("prefill_top5")) {
      const json& pre = c["prefill_top5"];
      ASSERT_EQ(pre.size(), prompts[i].size()) << where;
      for (size_t p = 0; p + 1 < pre.size(); ++p)
        expect_top_close(pre[p], top_of(results[i].prompt_logprobs[p + 1]), fc.tolerance,
                         where + " prefill position " + std::to_string(p));
    }
    const auto ref_ids = c["output_ids"].get<std::vector<int32_t>>();
    const json& margins = c["top1_margin"];
    const json& top5 = c["top5_logprobs"];  // may cover only the first steps
    for (size_t s = 0; s < ref_ids.size(); ++s) {
      if (s < top5.size() && !top5[s].is_null()) {
        expect_top_close(top5[s], top_of(r.logprobs[s]), fc.tolerance, where + " step " + std::to_string(s));
        ++compared_steps;
      }
      // After a near-tie the two paths may part; ids must agree until then. The fp32 path parts at margins below
      // 1e-3; a lower-precision path at margins within twice its logprob bound (both tokens may move).
      const double parting = fc.tolerance <= 1e-3 ? 1e-3 : 2 * fc.tolerance;
      if (margins[s].get<double>() < parting) break;
      ASSERT_EQ(r.token_ids[s], ref_ids[s]) << where << " step " << s << " (reference margin " << margins[s] << ")";
      if (::testing::Test::HasFailure()) return;
    }
  }
  EXPECT_GT(compared_steps, 0);
  std::printf("%s (%s, %s): largest logprob error %.2e over %d steps (bound %.0e)\n", fc.name.c_str(), fc.device.c_str(),
              fc.dtype.c_str(), max_error_seen, compared_steps, fc.tolerance);
}

std::string case_name(const ::testing::TestParamInfo<FidelityCase>& info) {
  std::string n = info.param.name + "_" + info.param.device + "_" + info.param.dtype;
  for (char& ch : n)
    if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
  return n;
}

INSTANTIATE_TEST_SUITE_P(
    Models, Fidelity,
    ::testing::Values(FidelityCase{"pycoder-tiny", "pycoder-tiny.reference.json", "cpu", "auto", 1e-3},
                      FidelityCase{"pycoder-tiny", "pycoder-tiny.reference.json", "cpu", "bfloat16", 5e-2},
                      // f32 activations over an f16 KV cache: 8.3e-3 measured (the bf16 cache above: 3.2e-2), so
                      // the cache's rounding alone decides whether a bf16 model meets issue 14's 2e-2 bound.
                      FidelityCase{"pycoder-tiny", "pycoder-tiny.reference.json", "cpu", "float16", 2e-2},
                      FidelityCase{"pycoder-draft", "pycoder-draft.reference.json", "cpu", "auto", 1e-3},
                      FidelityCase{"arch/llama3-rope", "arch/llama3-rope/reference.json", "cpu", "auto", 1e-3},
                      FidelityCase{"arch/llama-yarn", "arch/llama-yarn/reference.json", "cpu", "auto", 1e-3},
                      FidelityCase{"arch/llama-linear-mqa", "arch/llama-linear-mqa/reference.json", "cpu", "auto", 1e-3},
                      FidelityCase{"arch/qwen2-bias", "arch/qwen2-bias/reference.json", "cpu", "auto", 1e-3},
                      FidelityCase{"arch/qwen3-qknorm", "arch/qwen3-qknorm/reference.json", "cpu", "auto", 1e-3},
                      FidelityCase{"arch/mistral-swa", "arch/mistral-swa/reference.json", "cpu", "auto", 1e-3},
                      FidelityCase{"arch/llama3-rope", "arch/llama3-rope/reference.json", "ref", "auto", 1e-3},
                      // GPU (run on the device; skipped without one): the bf16 path and the fp32 path. The bf16
                      // path is held within transformers' own bf16 run, which is 1.47e-1 from the same reference
                      // (scripts/device/torch_bf16_fidelity.py, H100, 2026-12-07; Peregrine's: 6.2e-2).
                      FidelityCase{"pycoder-tiny", "pycoder-tiny.reference.json", "cuda", "auto", 1e-1},
                      FidelityCase{"pycoder-tiny", "pycoder-tiny.reference.json", "cuda", "float32", 1e-3},
                      // f16 activations and cache: transformers' own float16 run on the GPU is 1.73e-2 from the same
                      // reference (scripts/device/torch_bf16_fidelity.py, H100, 2026-12-07).
                      FidelityCase{"pycoder-tiny", "pycoder-tiny.reference.json", "cuda", "float16", 2e-2},
                      FidelityCase{"pycoder-draft", "pycoder-draft.reference.json", "cuda", "auto", 1e-1},
                      FidelityCase{"arch/qwen3-qknorm", "arch/qwen3-qknorm/reference.json", "cuda", "float32", 1e-3},
                      FidelityCase{"arch/mistral-swa", "arch/mistral-swa/reference.json", "cuda", "float32", 1e-3},
                      FidelityCase{"arch/llama-yarn", "arch/llama-yarn/reference.json", "cuda", "float32", 1e-3}),
    case_name);

// Quantized checkpoints in their real formats (../shared/models/quant, references from the dequantized weights,
// tolerances from its README: float32 engines 1e-3, bfloat16 8e-2; CUDA runs bf16, not f16, activations).
#define PEREGRINE_QUANT_CASES(folder, half_dtype, half_tol)                                                      \
  FidelityCase{"quant/" folder, "quant/" folder "/reference.json", "cpu", "auto", 1e-3},                        \
      FidelityCase{"quant/" folder, "quant/" folder "/reference.json", "cpu-int8act", "auto", 8e-2},            \
      FidelityCase{"quant/" folder, "quant/" folder "/reference.json", "ref", "auto", 1e-3},                    \
      FidelityCase{"quant/" folder, "quant/" folder "/reference.json", "cuda", "float32", 1e-3},                \
      FidelityCase{"quant/" folder, "quant/" folder "/reference.json", "cuda", half_dtype, half_tol}
INSTANTIATE_TEST_SUITE_P(Quantized, Fidelity,
                         ::testing::Values(PEREGRINE_QUANT_CASES("gptq-w4g32-sym", "bfloat16", 8e-2),
                                           PEREGRINE_QUANT_CASES("gptq-w4g128-actorder-asym", "bfloat16", 8e-2),
                                           PEREGRINE_QUANT_CASES("awq-w4g64", "bfloat16", 8e-2),
                                           PEREGRINE_QUANT_CASES("ct-w4a16-g128", "bfloat16", 8e-2),
                                           PEREGRINE_QUANT_CASES("ct-w4a16-g128-asym", "bfloat16", 8e-2)),
                         case_name);

}  // namespace
