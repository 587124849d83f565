// EngineCore tests on FakeModel/FakeCodec: greedy outputs independent of batch composition, chunking,
// preemption and prefix-cache hits; stop conditions; streaming hold-back; n > 1; logprobs; aborts.
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <random>
#include <set>

#include "engine/engine_core.h"
#include "unit/engine/fake_model.h"

namespace peregrine::engine {
namespace {

using testing::expected_greedy;
using testing::FakeCodec;
using testing::FakeModel;
using testing::kFakeEos;
using testing::kFakeVocab;

struct CoreOptions {
  int num_blocks = 256;
  int block_size = 4;
  int budget = 64;
  int max_seqs = 16;
  bool caching = true;
  int max_model_len = 256;
  int device_sampling = 0;  // 1: plain requests are sampled by the backend's sampling op (ref backend)
};

std::unique_ptr<EngineCore> make_core(const CoreOptions& o, FakeModel** model_out = nullptr) {
  auto runner = testing::make_fake_runner(o.num_blocks, o.block_size, o.max_seqs, o.budget, o.max_model_len, model_out);
  EngineCoreConfig c;
  c.max_model_len = o.max_model_len;
  c.max_num_seqs = o.max_seqs;
  c.max_num_batched_tokens = o.budget;
  c.block_size = o.block_size;
  c.num_blocks = o.num_blocks;
  c.enable_prefix_caching = o.caching;
  c.eos_token_ids = {kFakeEos};
  c.device_sampling = o.device_sampling;
  ModelInfo info;
  info.vocab_size = kFakeVocab;
  return std::make_unique<EngineCore>(std::move(runner), std::make_shared<FakeCodec>(), c, info);
}

// Collects deltas per request id.
struct Collector {
  std::map<std::string, std::vector<RequestOutput>> deltas;
  OutputCallback callback_for(const std::string& id) {
    return [this, id](RequestOutput&& out) { deltas[id].push_back(std::move(out)); };
  }
  // Concatenated tokens / text of completion `index`.
  std::vector<int32_t> tokens(const std::string& id, int index = 0) const {
    std::vector<int32_t> t;
    for (const auto& d : deltas.at(id))
      for (const auto& c : d.outputs) {
        if (c.index == index) t.insert(t.end(), c.token_ids.begin(), c.token_ids.end());
      }
    return t;
  }
  std::string text(const std::string& id, int index = 0) const {
    std::string s;
    for (const auto& d : deltas.at(id))
      for (const auto& c : d.outputs) {
        if (c.index == index) s += c.text;
      }
    return s;
  }
  const CompletionOutput& last(const std::string& id, int index = 0) const {
    const CompletionOutput* found = nullptr;
    for (const auto& d : deltas.at(id))
      for (const auto& c : d.outputs) {
        if (c.index == index) found = &c;
      }
    return *found;
  }
  bool finished(const std::string& id) const { return !deltas.at(id).empty() && deltas.at(id).back().finished; }
};

void run(EngineCore& core, int max_steps = 100000) {
  for (int i = 0; i < max_steps && core.has_unfinished(); ++i) core.step();
  ASSERT_FALSE(core.has_unfinished());
}

std::vector<int32_t> random_prompt(std::mt19937& rng, int len) {
  std::vector<int32_t> p(static_cast<size_t>(len));
  for (auto& t : p) t = 2 + static_cast<int32_t>(rng() % (kFakeVocab - 2));
  return p;
}

SamplingParams greedy(int max_tokens) {
  SamplingParams p;
  p.temperature = 0.0f;
  p.max_tokens = max_tokens;
  return p;
}

TEST(EngineCore, GreedyAloneMatchesTheReference) {
  auto core = make_core({});
  Collector col;
  std::vector<int32_t> prompt{5, 6, 7, 8, 9, 10, 11};
  core->add_request("a", prompt, greedy(20), col.callback_for("a"), 0.0);
  run(*core);
  EXPECT_EQ(col.tokens("a"), expected_greedy(prompt, 20));
  EXPECT_TRUE(col.finished("a"));
  EXPECT_EQ(col.deltas["a"].front().prompt_token_ids, prompt);
  EXPECT_EQ(core->stats().num_used_kv_blocks, 0);
}

TEST(EngineCore, StatsSplitStepsIntoPromptAndDecodeSteps) {
  auto core = make_core({});
  Collector col;
  core->add_request("a", {5, 6, 7, 8, 9, 10, 11}, greedy(20), col.callback_for("a"), 0.0);
  run(*core);
  const EngineStats s = core->stats();
  EXPECT_EQ(s.num_prompt_steps, 1u);  // the whole prompt, which samples the first token
  EXPECT_EQ(s.prompt_step_prompt_tokens, 7u);
  EXPECT_EQ(s.num_decode_steps, 19u);
  EXPECT_EQ(s.num_prompt_steps + s.num_decode_steps, s.num_steps);
  EXPECT_EQ(s.decode_step_rows, 19u);
  EXPECT_EQ(s.decode_step_context, 19u * 7u + 19u * 20u / 2u);  // the j-th decode step attends to 7 + j keys
  EXPECT_GT(s.prompt_step_seconds, 0.0);
  EXPECT_GT(s.decode_step_seconds, 0.0);
}

TEST(EngineCore, GreedyIsTheSameInABatchOf64WithChunkingPreemptionAndCacheHits) {
  std::mt19937 rng(7);
  std::vector<std::vector<int32_t>> prompts;
  std::vector<int> lengths;
  for (int i = 0; i < 64; ++i) {
    // Some prompts share long prefixes so the prefix cache is hit mid-run.
    auto p = random_prompt(rng, 1 + static_cast<int>(rng() % 40));
    if (i % 4 == 1) p.insert(p.begin(), prompts[0].begin(), prompts[0].end());
    prompts.push_back(p);
    lengths.push_back(1 + static_cast<int>(rng() % 30));
  }
  // Small budget (chunked prefill) and few blocks (preemption) both exercised; sampled on the host and by the
  // backend's sampling op.
  for (int num_blocks : {400, 70}) {
    for (bool caching : {true, false}) {
     for (int device : {0, 1}) {
      auto core = make_core({.num_blocks = num_blocks, .block_size = 4, .budget = 24, .max_seqs = 64, .caching = caching,
                             .device_sampling = device});
      Collector col;
      for (int i = 0; i < 64; ++i) {
        SamplingParams p = i % 3 == 0 ? greedy(lengths[i]) : SamplingParams{};
        if (i % 3 != 0) {  // sampled neighbours with other settings share the batch
          p.temperature = 0.8f;
          p.top_p = 0.9f;
          p.max_tokens = lengths[i];
          p.seed = static_cast<uint64_t>(i);
        }
        core->add_request(std::to_string(i), prompts[i], p, col.callback_for(std::to_string(i)), 0.0);
      }
      run(*core);
      for (int i = 0; i < 64; i += 3) {
        EXPECT_EQ(col.tokens(std::to_string(i)), expected_greedy(prompts[i], lengths[i]))
            << "request " << i << " blocks " << num_blocks << " caching " << caching;
      }
      if (num_blocks == 70) {
        EXPECT_GT(core->stats().num_preemptions, 0u);
      }
      if (caching) {
        EXPECT_GT(core->stats().prefix_cache_hits, 0u);
      }
      EXPECT_EQ(core->stats().num_used_kv_blocks, 0);
      EXPECT_EQ(core->stats().backend_sampled_tokens > 0, device == 1);
     }
    }
  }
}

TEST(EngineCore, SeededSamplingIsReproducibleAcrossBatches) {
 for (int device : {0, 1}) {
  std::vector<int32_t> prompt{3, 4, 5, 6, 7, 8};
  SamplingParams p;
  p.temperature = 1.0f;
  p.top_k = 20;
  p.max_tokens = 15;
  p.seed = 42;
  auto core1 = make_core({.device_sampling = device});
  Collector c1;
  core1->add_request("x", prompt, p, c1.callback_for("x"), 0.0);
  run(*core1);
  auto core2 = make_core({.device_sampling = device});
  Collector c2;
  std::mt19937 rng(3);
  for (int i = 0; i < 10; ++i) {
    core2->add_request(testing::make_id("n", i), random_prompt(rng, 9), greedy(12), c2.callback_for(testing::make_id("n", i)),
                       0.0);
  }
  core2->add_request("x", prompt, p, c2.callback_for("x"), 0.0);
  run(*core2);
  EXPECT_EQ(c1.tokens("x"), c2.tokens("x")) << "device sampling " << device;
 }
}

// Backend sampling takes only requests that need nothing on the host; the others (logprobs, logit_bias) are sampled
// on the host in the same steps, and every request's tokens are what it gets alone. Penalties are the op's too.
TEST(EngineCore, DeviceSamplingLeavesLogprobsAndLogitBiasToTheHost) {
  std::mt19937 rng(11);
  std::vector<std::vector<int32_t>> prompts;
  for (int i = 0; i < 6; ++i) prompts.push_back(random_prompt(rng, 5 + i));
  auto params = [](int i) {
    SamplingParams p;
    p.max_tokens = 12;
    p.seed = 100 + static_cast<uint64_t>(i);
    p.temperature = i % 2 ? 0.9f : 0.0f;
    if (i == 1) p.top_k = 7;
    if (i == 2) p.logprobs = 2;
    if (i == 3) p.repetition_penalty = 1.3f;
    if (i == 4) p.logit_bias = {{7, 2.0f}};
    if (i == 5) p.min_p = 0.1f;
    return p;
  };
  std::vector<std::vector<int32_t>> alone;
  for (int i = 0; i < 6; ++i) {
    auto core = make_core({.device_sampling = 1});
    Collector col;
    core->add_request("r", prompts[i], params(i), col.callback_for("r"), 0.0);
    run(*core);
    alone.push_back(col.tokens("r"));
    ASSERT_EQ(alone.back().size(), 12u);
  }
  EXPECT_EQ(alone[0], expected_greedy(prompts[0], 12));
  EXPECT_EQ(alone[2], expected_greedy(prompts[2], 12));
  auto core = make_core({.device_sampling = 1});
  Collector col;
  for (int i = 0; i < 6; ++i) core->add_request(testing::make_id("r", i), prompts[i], params(i),
                                                col.callback_for(testing::make_id("r", i)), 0.0);
  run(*core);
  for (int i = 0; i < 6; ++i) EXPECT_EQ(col.tokens(testing::make_id("r", i)), alone[i]) << "request " << i;
  EXPECT_EQ(core->stats().backend_sampled_tokens, 4u * 12u);  // all but the logprobs and logit_bias requests
  size_t logprobs = 0;
  for (const auto& d : col.deltas.at(testing::make_id("r", 2)))
    for (const auto& c : d.outputs) logprobs += c.logprobs.size();
  EXPECT_EQ(logprobs, 12u);
}

// Greedy with repetition, presence and frequency penalties: the backend's op gives the host sampler's tokens.
TEST(EngineCore, DevicePenaltiesMatchTheHostsInGreedy) {
  std::mt19937 rng(21);
  for (int i = 0; i < 4; ++i) {
    const auto prompt = random_prompt(rng, 6 + 3 * i);
    SamplingParams p = greedy(20);
    // Strong enough to move the fake model's preferred token (~3.5 above the rest, which lie in [0, 1)).
    p.repetition_penalty = i == 1 ? 6.0f : i == 3 ? 4.0f : 1.0f;
    p.presence_penalty = i == 2 ? 3.5f : i == 3 ? 2.0f : 0.0f;
    p.frequency_penalty = i == 0 ? 4.0f : i == 3 ? 1.0f : 0.0f;
    std::vector<int32_t> got[2];
    for (int device : {0, 1}) {
      auto core = make_core({.device_sampling = device});
      Collector col;
      core->add_request("p", prompt, p, col.callback_for("p"), 0.0);
      run(*core);
      got[device] = col.tokens("p");
      EXPECT_EQ(core->stats().backend_sampled_tokens, device ? 20u : 0u);
    }
    EXPECT_EQ(got[1], got[0]) << "case " << i;
    EXPECT_NE(got[0], expected_greedy(prompt, 20)) << "case " << i << ": the penalties should change the output";
  }
}

TEST(EngineCore, StopsAtEosUnlessIgnored) {
  // Context longer than 60 makes the fake model emit eos.
  std::mt19937 rng(11);
  auto prompt = random_prompt(rng, 58);
  auto core = make_core({});
  Collector col;
  core->add_request("eos", prompt, greedy(30), col.callback_for("eos"), 0.0);
  SamplingParams ignore = greedy(8);
  ignore.ignore_eos = true;
  core->add_request("ignore", prompt, ignore, col.callback_for("ignore"), 0.0);
  run(*core);
  auto expect = expected_greedy(prompt, 30);
  ASSERT_EQ(expect.back(), kFakeEos);
  EXPECT_EQ(col.tokens("eos"), expect);
  EXPECT_EQ(col.last("eos").finish_reason, FinishReason::kStop);
  EXPECT_FALSE(col.last("eos").stop_token_id.has_value());
  EXPECT_EQ(col.tokens("ignore").size(), 8u);
  EXPECT_EQ(col.last("ignore").finish_reason, FinishReason::kLength);
}

TEST(EngineCore, MinTokensSuppressesEos) {
  std::mt19937 rng(11);
  auto prompt = random_prompt(rng, 58);
  auto core = make_core({});
  Collector col;
  SamplingParams p = greedy(30);
  p.min_tokens = 6;
  core->add_request("m", prompt, p, col.callback_for("m"), 0.0);
  run(*core);
  auto toks = col.tokens("m");
  ASSERT_GE(toks.size(), 7u);
  for (size_t i = 0; i < 6; ++i) EXPECT_NE(toks[i], kFakeEos);
}

TEST(EngineCore, StopTokenIdsAndMaxTokens) {
  std::vector<int32_t> prompt{9, 9, 9};
  auto expect = expected_greedy(prompt, 10);
  auto core = make_core({});
  Collector col;
  SamplingParams p = greedy(10);
  p.stop_token_ids = {expect[3]};
  core->add_request("s", prompt, p, col.callback_for("s"), 0.0);
  core->add_request("l", prompt, greedy(4), col.callback_for("l"), 0.0);
  run(*core);
  // Stops at the first occurrence of the stop token; its id is reported, its text is not in the output.
  auto first = std::find(expect.begin(), expect.end(), expect[3]) - expect.begin();
  EXPECT_EQ(col.tokens("s"), std::vector<int32_t>(expect.begin(), expect.begin() + first + 1));
  EXPECT_EQ(col.last("s").stop_token_id, expect[3]);
  FakeCodec codec;
  EXPECT_EQ(col.text("s"), codec.decode(std::vector<int32_t>(expect.begin(), expect.begin() + first), true));
  EXPECT_EQ(col.tokens("l").size(), 4u);
  EXPECT_EQ(col.last("l").finish_reason, FinishReason::kLength);
}

TEST(EngineCore, StopStringsAreHeldBackAndCut) {
  std::vector<int32_t> prompt{20, 21, 22};
  FakeCodec codec;
  auto expect = expected_greedy(prompt, 40, false);
  const std::string full = codec.decode(expect, true);
  // Stop at a 3-character string that occurs in the middle of the greedy text.
  const std::string stop = full.substr(10, 3);
  const size_t cut = full.find(stop);
  auto core = make_core({});
  Collector col;
  SamplingParams p = greedy(40);
  p.stop = {"zzzzzz-never", stop};
  core->add_request("s", prompt, p, col.callback_for("s"), 0.0);
  run(*core);
  EXPECT_EQ(col.text("s"), full.substr(0, cut));
  EXPECT_EQ(col.last("s").stop_string, stop);
  EXPECT_EQ(col.last("s").finish_reason, FinishReason::kStop);
  // No delta ever streamed text past the cut (the stop string's start was held back).
  std::string streamed;
  for (const auto& d : col.deltas["s"]) {
    for (const auto& c : d.outputs) {
      streamed += c.text;
      EXPECT_LE(streamed.size(), cut) << "text past the stop string was streamed";
    }
  }
  // include_stop_str_in_output keeps it.
  auto core2 = make_core({});
  Collector col2;
  p.include_stop_str_in_output = true;
  core2->add_request("s", prompt, p, col2.callback_for("s"), 0.0);
  run(*core2);
  EXPECT_EQ(col2.text("s"), full.substr(0, cut + stop.size()));
}

TEST(EngineCore, ParallelSamplingSharesPromptBlocks) {
  std::mt19937 rng(5);
  auto prompt = random_prompt(rng, 30);
  FakeModel* model = nullptr;
  auto core = make_core({.caching = false}, &model);
  Collector col;
  SamplingParams p;
  p.n = 3;
  p.temperature = 1.0f;
  p.max_tokens = 10;
  p.seed = 9;
  core->add_request("n3", prompt, p, col.callback_for("n3"), 0.0);
  core->step();  // the first sequence computes the prompt
  // Its 7 full prompt blocks are now shared by the other two sequences.
  EXPECT_EQ(core->stats().num_used_kv_blocks, 8);
  core->step();
  // Siblings computed only the prompt's last 2 tokens plus nothing else: 8 + 2 private blocks.
  EXPECT_EQ(core->stats().num_used_kv_blocks, 10);
  run(*core);
  std::set<std::vector<int32_t>> distinct;
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(col.tokens("n3", i).size(), 10u);
    distinct.insert(col.tokens("n3", i));
  }
  EXPECT_GT(distinct.size(), 1u);  // seeds differ per completion
  EXPECT_EQ(core->stats().num_used_kv_blocks, 0);
}

TEST(EngineCore, LogprobsAreRawLogSoftmax) {
  std::vector<int32_t> prompt{7, 8, 9, 10, 11};
  auto core = make_core({});
  Collector col;
  SamplingParams p = greedy(3);
  p.logprobs = 2;
  p.prompt_logprobs = 1;
  p.repetition_penalty = 1.3f;  // edits must not leak into reported logprobs
  core->add_request("lp", prompt, p, col.callback_for("lp"), 0.0);
  run(*core);
  auto logsoftmax = [](std::vector<int32_t> ctx, int32_t tok) {
    std::vector<float> l(kFakeVocab);
    testing::fake_logits(ctx, l.data());
    double m = *std::max_element(l.begin(), l.end()), s = 0;
    for (float v : l) s += std::exp(v - m);
    return static_cast<float>(l[static_cast<size_t>(tok)] - m - std::log(s));
  };
  const auto& first = col.deltas["lp"].front();
  ASSERT_EQ(first.prompt_logprobs.size(), prompt.size());
  for (size_t i = 1; i < prompt.size(); ++i) {
    std::vector<int32_t> ctx(prompt.begin(), prompt.begin() + static_cast<ptrdiff_t>(i));
    EXPECT_NEAR(first.prompt_logprobs[i].chosen.logprob, logsoftmax(ctx, prompt[i]), 1e-4);
    EXPECT_EQ(first.prompt_logprobs[i].top.size(), 1u);
  }
  std::vector<PositionLogprobs> lps;
  for (const auto& d : col.deltas["lp"])
    for (const auto& c : d.outputs) lps.insert(lps.end(), c.logprobs.begin(), c.logprobs.end());
  auto toks = col.tokens("lp");
  ASSERT_EQ(lps.size(), toks.size());
  std::vector<int32_t> ctx = prompt;
  for (size_t i = 0; i < toks.size(); ++i) {
    EXPECT_NEAR(lps[i].chosen.logprob, logsoftmax(ctx, toks[i]), 1e-4);
    ASSERT_EQ(lps[i].top.size(), 2u);
    EXPECT_GE(lps[i].top[0].logprob, lps[i].top[1].logprob);
    ctx.push_back(toks[i]);
  }
}

TEST(EngineCore, AbortFreesBlocksAndReportsAbort) {
  auto core = make_core({});
  Collector col;
  core->add_request("a", {4, 5, 6, 7, 8, 9}, greedy(100), col.callback_for("a"), 0.0);
  core->step();
  core->step();
  EXPECT_GT(core->stats().num_used_kv_blocks, 0);
  core->abort_request("a");
  EXPECT_FALSE(core->has_unfinished());
  EXPECT_EQ(core->stats().num_used_kv_blocks, 0);
  EXPECT_TRUE(col.finished("a"));
  EXPECT_EQ(col.last("a").finish_reason, FinishReason::kAbort);
}

// An abort between steps while other requests run: the aborted request is delivered once and never touched again
// (it used to stay listed for the next step's delivery after being freed: ASan's heap-use-after-free).
TEST(EngineCore, AbortBetweenStepsWhileOthersRun) {
  auto core = make_core({});
  Collector col;
  const std::vector<int32_t> pa{4, 5, 6, 7, 8, 9}, pb{7, 8, 9};
  core->add_request("a", pa, greedy(100), col.callback_for("a"), 0.0);
  core->add_request("b", pb, greedy(20), col.callback_for("b"), 0.0);
  core->step();
  core->step();
  core->abort_request("a");
  EXPECT_TRUE(col.finished("a"));
  const size_t a_deltas = col.deltas["a"].size();
  run(*core);
  EXPECT_EQ(col.deltas["a"].size(), a_deltas);
  EXPECT_EQ(col.last("a").finish_reason, FinishReason::kAbort);
  EXPECT_EQ(col.tokens("b"), expected_greedy(pb, 20));
  EXPECT_EQ(core->stats().num_used_kv_blocks, 0);
}

TEST(EngineCore, ValidationNamesTheProblem) {
  auto core = make_core({.max_model_len = 32});
  auto message = [&](std::vector<int32_t> prompt, SamplingParams p) -> std::string {
    try {
      core->validate(prompt, p);
    } catch (const Error& e) {
      return e.message();
    }
    return "";
  };
  EXPECT_NE(message({}, greedy(4)).find("empty"), std::string::npos);
  EXPECT_NE(message({1000}, greedy(4)).find("out of the vocabulary"), std::string::npos);
  EXPECT_NE(message(std::vector<int32_t>(30, 3), greedy(4)).find("maximum context length is 32"), std::string::npos);
  EXPECT_NE(message(std::vector<int32_t>(32, 3), greedy(1)).find("maximum context length"), std::string::npos);
  SamplingParams bad = greedy(4);
  bad.top_p = 1.5f;
  EXPECT_NE(message({3}, bad).find("top_p"), std::string::npos);
  EXPECT_EQ(message({3}, greedy(4)), "");
}

}  // namespace
}  // namespace peregrine::engine
