// Determinism: a request's greedy tokens and logprobs are bit-identical whether it runs alone, inside a batch
// of other requests, or with its prompt split into small prefill chunks.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "ops/backend.h"
#include "peregrine/engine.h"
#include "test_fixtures.h"

using namespace peregrine;

namespace {

// Greedy tokens and top-3 logprobs of each prompt, through the Engine with the given token budget per step.
struct Run {
  std::vector<int32_t> token_ids;
  std::vector<std::vector<std::pair<int32_t, float>>> top;
};

std::vector<Run> run(const std::filesystem::path& dir, const std::string& device,
                     const std::vector<std::vector<int32_t>>& prompts, int budget) {
  EngineConfig ec;
  ec.model = dir.string();
  ec.device = device;
  ec.max_num_batched_tokens = budget;
  ec.max_num_seqs = static_cast<int>(prompts.size());
  ec.enable_prefix_caching = false;
  ec.generation_config = "vllm";
  auto engine = Engine::create(ec);
  SamplingParams sp;
  sp.max_tokens = 24;
  sp.temperature = 0;
  sp.logprobs = 3;
  sp.ignore_eos = true;
  std::vector<Run> runs;
  for (const RequestOutput& r : engine->generate(prompts, sp)) {
    Run one;
    one.token_ids = r.outputs.at(0).token_ids;
    for (const PositionLogprobs& pos : r.outputs.at(0).logprobs) {
      one.top.emplace_back();
      for (const TokenLogprob& t : pos.top) one.top.back().emplace_back(t.token_id, t.logprob);
    }
    runs.push_back(std::move(one));
  }
  return runs;
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
      for (size_t s = 0; s < alone[0].top.size(); ++s)
        EXPECT_EQ(other->top[s], alone[0].top[s]) << "prompt " << i << " step " << s;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Devices, Determinism, ::testing::Values("cpu", "cuda"));

}  // namespace
