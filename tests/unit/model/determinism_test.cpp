// Determinism: a request's greedy tokens and logprobs are bit-identical whether it runs alone, inside a batch
// of other requests, with its prompt split into small prefill chunks, or with its prompt's first blocks served from
// the prefix cache.
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <memory>
#include <optional>
#include <nlohmann/json.hpp>
#include <string>

#include "ops/backend.h"
#include "peregrine/engine.h"
#include "test_fixtures.h"

using namespace peregrine;

namespace {

// Greedy tokens and top-3 logprobs of each prompt, and how many of its prompt tokens the prefix cache served.
struct Greedy {
  std::vector<int32_t> token_ids;
  std::vector<std::vector<std::pair<int32_t, float>>> top;
  int cached_tokens = 0;
};

std::unique_ptr<Engine> make_engine(const std::filesystem::path& dir, const std::string& device, int budget,
                                    int max_seqs, bool prefix_caching) {
  EngineConfig ec;
  ec.model = dir.string();
  ec.device = device;
  ec.max_num_batched_tokens = budget;
  ec.max_num_seqs = max_seqs;
  ec.enable_prefix_caching = prefix_caching;
  ec.generation_config = "vllm";
  return Engine::create(ec);
}

std::vector<Greedy> generate(Engine& engine, const std::vector<std::vector<int32_t>>& prompts, int max_tokens = 24) {
  SamplingParams sp;
  sp.max_tokens = max_tokens;
  sp.temperature = 0;
  sp.logprobs = 3;
  sp.ignore_eos = true;
  std::vector<Greedy> runs;
  for (const RequestOutput& r : engine.generate(prompts, sp)) {
    Greedy one;
    one.token_ids = r.outputs.at(0).token_ids;
    for (const PositionLogprobs& pos : r.outputs.at(0).logprobs) {
      one.top.emplace_back();
      for (const TokenLogprob& t : pos.top) one.top.back().emplace_back(t.token_id, t.logprob);
    }
    one.cached_tokens = r.num_cached_tokens;
    runs.push_back(std::move(one));
  }
  return runs;
}

// Through a fresh engine with the given token budget per step, no prefix cache.
std::vector<Greedy> run(const std::filesystem::path& dir, const std::string& device,
                        const std::vector<std::vector<int32_t>>& prompts, int budget) {
  auto engine = make_engine(dir, device, budget, static_cast<int>(prompts.size()), false);
  return generate(*engine, prompts);
}

void expect_same(const Greedy& other, const Greedy& alone, const std::string& what) {
  ASSERT_EQ(other.token_ids, alone.token_ids) << what;
  for (size_t s = 0; s < alone.top.size(); ++s) EXPECT_EQ(other.top[s], alone.top[s]) << what << " step " << s;
}

// On CUDA the guarantee is vLLM's batch-invariant mode's (VLLM_BATCH_INVARIANT=1: every M on the split-K cuBLASLt
// path; by default M <= 16 runs the skinny kernel, whose rows differ from larger M's in their last bits). Set for the
// test's lifetime on CUDA, restored after.
class BatchInvariantMode {
 public:
  explicit BatchInvariantMode(const std::string& device) : on_(device == "cuda") {
    if (!on_) return;
    const char* old = std::getenv("VLLM_BATCH_INVARIANT");
    if (old) old_ = old;
    had_ = old != nullptr;
    setenv("VLLM_BATCH_INVARIANT", "1", 1);
  }
  ~BatchInvariantMode() {
    if (!on_) return;
    if (had_) setenv("VLLM_BATCH_INVARIANT", old_.c_str(), 1);
    else unsetenv("VLLM_BATCH_INVARIANT");
  }
  BatchInvariantMode(const BatchInvariantMode&) = delete;
  BatchInvariantMode& operator=(const BatchInvariantMode&) = delete;

 private:
  bool on_, had_ = false;
  std::string old_;
};

// The prompt ids of the pycoder-tiny reference fixture's cases `which`.
std::vector<std::vector<int32_t>> reference_prompts(const std::filesystem::path& shared, const std::vector<int>& which) {
  std::ifstream in(shared / "models" / "pycoder-tiny.reference.json");
  const auto ref = nlohmann::json::parse(in);
  std::vector<std::vector<int32_t>> prompts;
  for (int i : which) prompts.push_back(ref["cases"][i]["prompt_ids"].get<std::vector<int32_t>>());
  return prompts;
}

// Each case on one device (the parameter), with pycoder-tiny from ../shared, in batch-invariant mode on CUDA.
class Determinism : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    PEREGRINE_REQUIRE_SHARED(found);
    if (device == "cuda" && !ops::cuda_available()) GTEST_SKIP() << "no CUDA GPU visible";
    shared = found;
    dir = shared / "models" / "pycoder-tiny";
    mode.emplace(device);
  }

  const std::string device = GetParam();
  std::filesystem::path shared, dir;
  std::optional<BatchInvariantMode> mode;
};

TEST_P(Determinism, BatchAndChunkingDoNotChangeGreedyOutput) {
  const auto prompts = reference_prompts(shared, {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11});
  auto together = run(dir, device, prompts, 512);
  auto chunked = run(dir, device, prompts, 7);
  for (size_t i = 0; i < prompts.size(); i += 5) {
    auto alone = run(dir, device, {prompts[i]}, 512);
    expect_same(together[i], alone[0], "prompt " + std::to_string(i) + " in a batch");
    expect_same(chunked[i], alone[0], "prompt " + std::to_string(i) + " chunked");
  }
}

// Prefix-cache hits: a prompt whose first blocks an earlier request left in the cache gives the greedy tokens and
// logprobs it gives alone without a cache, in a batch of hits and alone on the warm engine.
TEST_P(Determinism, PrefixCacheHitsDoNotChangeGreedyOutput) {
  const auto prompts = reference_prompts(shared, {3, 4, 7, 13, 16});  // 72-184 tokens: several 16-token blocks
  std::vector<std::vector<int32_t>> prefixes;
  for (const auto& p : prompts) prefixes.emplace_back(p.begin(), p.begin() + p.size() * 3 / 4);
  std::vector<Greedy> alone;
  for (const auto& p : prompts) alone.push_back(run(dir, device, {p}, 512).at(0));

  auto engine = make_engine(dir, device, 512, static_cast<int>(prompts.size()), true);
  generate(*engine, prefixes, 1);  // leaves each prompt's first three quarters in the cache
  const auto hits = generate(*engine, prompts);
  for (size_t i = 0; i < prompts.size(); ++i) {
    EXPECT_GE(hits[i].cached_tokens, 16) << "prompt " << i << " found nothing cached";
    expect_same(hits[i], alone[i], "prompt " + std::to_string(i) + " hit in a batch");
  }
  for (size_t i = 0; i < prompts.size(); i += 2) {  // the whole prompt cached now, up to its last whole block
    const auto again = generate(*engine, {prompts[i]});
    EXPECT_GE(again[0].cached_tokens, hits[i].cached_tokens) << "prompt " << i;
    expect_same(again[0], alone[i], "prompt " + std::to_string(i) + " hit alone");
  }
}

INSTANTIATE_TEST_SUITE_P(Devices, Determinism, ::testing::Values("cpu", "cuda"));

}  // namespace
