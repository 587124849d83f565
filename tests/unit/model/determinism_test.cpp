// Determinism: a request's greedy tokens and logprobs are bit-identical whether it runs alone, inside a batch
// of other requests, or with its prompt split into small prefill chunks.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "engine/device_setup.h"
#include "engine/simple_generate.h"
#include "io/hf_config.h"
#include "model/model.h"
#include "ops/backend.h"
#include "test_fixtures.h"

using namespace peregrine;

namespace {

std::vector<engine::SimpleGenerateResult> run(const std::filesystem::path& dir, const std::string& device,
                                              const std::vector<std::vector<int32_t>>& prompts, int budget) {
  io::ModelConfig config = io::load_model_config(dir);
  auto choice = engine::resolve_device(device, "auto", config.torch_dtype);
  auto backend = engine::create_backend(choice, 0);
  model::ModelOptions mo;
  mo.activation_dtype = choice.activation_dtype;
  mo.max_num_batched_tokens = budget;
  mo.max_num_seqs = static_cast<int>(prompts.size());
  auto model = model::load_model(dir, *backend, mo);
  engine::SimpleGenerateOptions go;
  go.max_tokens = 24;
  go.sampler.temperature = 0;
  go.sampler.num_logprobs = 3;
  go.ignore_eos = true;
  go.kv_dtype = choice.kv_dtype;
  return engine::simple_generate(*model, prompts, go, budget);
}

class Determinism : public ::testing::TestWithParam<std::string> {};

TEST_P(Determinism, BatchAndChunkingDoNotChangeGreedyOutput) {
  PEREGRINE_REQUIRE_SHARED(shared);
  const std::string device = GetParam();
  if (device == "cuda" && !ops::cuda_available()) GTEST_SKIP() << "no CUDA GPU visible";
  const auto dir = shared / "models" / "pycoder-tiny";
  std::ifstream in(shared / "models" / "pycoder-tiny.reference.json");
  auto ref = nlohmann::json::parse(in);
  std::vector<std::vector<int32_t>> prompts;
  for (int i = 0; i < 12; ++i) prompts.push_back(ref["cases"][i]["prompt_ids"].get<std::vector<int32_t>>());
  auto together = run(dir, device, prompts, 512);
  auto chunked = run(dir, device, prompts, 7);
  for (size_t i = 0; i < prompts.size(); i += 5) {
    auto alone = run(dir, device, {prompts[i]}, 512);
    for (const auto* other : {&together[i], &chunked[i]}) {
      ASSERT_EQ(other->token_ids, alone[0].token_ids) << "prompt " << i;
      for (size_t s = 0; s < alone[0].samples.size(); ++s)
        EXPECT_EQ(other->samples[s].top_logprobs, alone[0].samples[s].top_logprobs) << "prompt " << i << " step " << s;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Devices, Determinism, ::testing::Values("cpu", "cuda"));

}  // namespace
