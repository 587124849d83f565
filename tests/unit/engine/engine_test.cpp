// Engine (public API, loop thread) tests on FakeModel: offline generate (one SamplingParams per prompt, batches
// beyond the queue limit, polling and cancellation), streaming from several threads, abort, queue limit and
// shutdown ending in-flight requests.
#include <gtest/gtest.h>

#include <atomic>
#include <condition_variable>
#include <mutex>
#include <span>
#include <stdexcept>
#include <thread>

#include "engine/engine_core.h"
#include "peregrine/engine.h"
#include "unit/engine/fake_model.h"

namespace peregrine::engine {
namespace {

using testing::expected_greedy;

std::unique_ptr<Engine> make_engine(int max_queued = 4096, int max_seqs = 16) {
  auto runner = testing::make_fake_runner(256, 4, max_seqs, 64, 256);
  EngineCoreConfig c;
  c.max_model_len = 256;
  c.max_num_seqs = max_seqs;
  c.max_num_batched_tokens = 64;
  c.block_size = 4;
  c.num_blocks = 256;
  c.eos_token_ids = {testing::kFakeEos};
  c.max_queued_requests = max_queued;
  ModelInfo info;
  info.vocab_size = testing::kFakeVocab;
  auto core = std::make_unique<EngineCore>(std::move(runner), std::make_shared<testing::FakeCodec>(), c, info);
  return std::make_unique<Engine>(std::move(core));
}

// Holds the engine loop inside an output callback until released, so a request stays live for as long as a test
// needs (the fake model would otherwise finish it within a millisecond, before the test's next statement).
class Gate {
 public:
  void block() {
    std::unique_lock<std::mutex> lock(m_);
    reached_ = true;
    cv_.notify_all();
    cv_.wait(lock, [&] { return open_; });
  }
  void wait_reached() {
    std::unique_lock<std::mutex> lock(m_);
    cv_.wait(lock, [&] { return reached_; });
  }
  void open() {
    std::lock_guard<std::mutex> lock(m_);
    open_ = true;
    cv_.notify_all();
  }

 private:
  std::mutex m_;
  std::condition_variable cv_;
  bool reached_ = false, open_ = false;
};

// Stats are published after the step that delivered the last output: waits (up to 2 s) until nothing runs.
EngineStats idle_stats(Engine& engine) {
  for (int i = 0; i < 400; ++i) {
    const EngineStats s = engine.stats();
    if (s.num_running + s.num_waiting == 0) return s;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return engine.stats();
}

SamplingParams greedy(int max_tokens) {
  SamplingParams p;
  p.temperature = 0.0f;
  p.max_tokens = max_tokens;
  return p;
}

// /metrics race: a server answers from the final callback, so by then the stats must no longer count the request
// as running (and must count it as finished). They were published only after the step, so a client that read
// /metrics right after its response saw num_requests_running = 1.
TEST(Engine, StatsAreCurrentWhenTheFinalCallbackRuns) {
  auto engine = make_engine();
  std::mutex m;
  std::condition_variable cv;
  bool done = false;
  EngineStats at_final;
  engine->add_request("r", {5, 6, 7}, greedy(4), [&](RequestOutput&& out) {
    if (!out.finished) return;
    EngineStats s = engine->stats();
    std::lock_guard<std::mutex> lock(m);
    at_final = s;
    done = true;
    cv.notify_all();
  });
  std::unique_lock<std::mutex> lock(m);
  cv.wait(lock, [&] { return done; });
  EXPECT_EQ(at_final.num_running, 0);
  EXPECT_EQ(at_final.num_waiting, 0);
  EXPECT_EQ(at_final.requests_finished_length, 1u);
  EXPECT_EQ(at_final.e2e_seconds.count, 1u);
  EXPECT_EQ(at_final.num_used_kv_blocks, 0);
}

TEST(Engine, GenerateReturnsEveryPromptInOrder) {
  auto engine = make_engine();
  std::vector<std::vector<int32_t>> prompts;
  for (int i = 0; i < 20; ++i) prompts.push_back({2 + i, 3 + i, 4 + i});
  auto results = engine->generate(prompts, greedy(9));
  ASSERT_EQ(results.size(), 20u);
  for (size_t i = 0; i < prompts.size(); ++i) {
    EXPECT_EQ(results[i].prompt_token_ids, prompts[i]);
    EXPECT_EQ(results[i].outputs[0].token_ids, expected_greedy(prompts[i], 9));
    EXPECT_TRUE(results[i].finished);
  }
  // Text prompts go through the tokenizer (FakeCodec adds <s>).
  auto text = engine->generate(std::vector<std::string>{"hello"}, greedy(3));
  EXPECT_EQ(text[0].prompt_token_ids, engine->tokenize("hello", true));
}

TEST(Engine, ConcurrentSubmittersGetTheirOwnStreams) {
  auto engine = make_engine();
  std::atomic<int> mismatches{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int r = 0; r < 10; ++r) {
        std::vector<int32_t> prompt{2 + t, 10 + r, 20};
        std::mutex m;
        std::condition_variable cv;
        bool done = false;
        std::vector<int32_t> got;
        engine->add_request(testing::make_id(testing::make_id("t", t) + "-", r), prompt, greedy(7),
                            [&](RequestOutput&& out) {
                              std::lock_guard<std::mutex> lock(m);
                              for (auto& c : out.outputs) got.insert(got.end(), c.token_ids.begin(), c.token_ids.end());
                              if (out.finished) {
                                done = true;
                                cv.notify_one();
                              }
                            });
        std::unique_lock<std::mutex> lock(m);
        cv.wait(lock, [&] { return done; });
        if (got != expected_greedy(prompt, 7)) ++mismatches;
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(mismatches.load(), 0);
}

TEST(Engine, DuplicateIdsAndInvalidRequestsAreRefused) {
  auto engine = make_engine();
  std::atomic<bool> finished{false};
  Gate gate;
  engine->add_request("dup", {3, 4}, greedy(200), [&](RequestOutput&& o) {
    if (o.finished) finished = true;
    else gate.block();  // "dup" stays live while the loop waits here
  });
  gate.wait_reached();
  EXPECT_THROW(engine->add_request("dup", {3, 4}, greedy(2), nullptr), Error);
  EXPECT_THROW(engine->add_request("bad", {}, greedy(2), nullptr), Error);
  engine->abort_request("dup");
  gate.open();
  for (int i = 0; i < 400 && !finished; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  EXPECT_TRUE(finished);
  // Stats are published after the step that delivered the final output.
  for (int i = 0; i < 400 && engine->stats().num_used_kv_blocks != 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  EXPECT_EQ(engine->stats().num_used_kv_blocks, 0);
}

TEST(Engine, QueueLimitRefusesWithUnavailable) {
  auto engine = make_engine(/*max_queued=*/2, /*max_seqs=*/1);
  int refused = 0;
  for (int i = 0; i < 30; ++i) {
    try {
      engine->add_request(testing::make_id("q", i), {3, 4, 5}, greedy(200), nullptr);
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kUnavailable);
      ++refused;
    }
  }
  EXPECT_GT(refused, 0);
}

TEST(Engine, ShutdownEndsInFlightRequests) {
  auto engine = make_engine();
  std::atomic<int> finals{0};
  Gate gate;
  std::atomic<bool> gated{false};
  for (int i = 0; i < 5; ++i) {
    engine->add_request(testing::make_id("s", i), {3, 4, 5}, greedy(250), [&](RequestOutput&& o) {
      if (o.finished) {
        EXPECT_EQ(o.outputs.back().finish_reason, FinishReason::kAbort);
        ++finals;
      } else if (!gated.exchange(true)) {
        gate.block();  // hold the loop so no request can finish on its own before the shutdown
      }
    });
  }
  gate.wait_reached();
  std::thread stopper([&] { engine->shutdown(); });
  std::this_thread::sleep_for(std::chrono::milliseconds(50));  // the stop flag is set at once; the loop is held
  gate.open();
  stopper.join();
  EXPECT_EQ(finals.load(), 5);
  EXPECT_THROW(engine->add_request("late", {3}, greedy(2), nullptr), Error);
}

TEST(Engine, GenerateTakesOneSamplingParamsPerPrompt) {
  auto engine = make_engine();
  std::vector<std::vector<int32_t>> prompts{{2, 3, 4}, {5, 6, 7}, {8, 9, 10}};
  std::vector<SamplingParams> params{greedy(3), greedy(7), greedy(5)};
  params[1].n = 2;
  GenerateOptions options;
  options.request_ids = {"a", "b", "c"};
  auto results = engine->generate(prompts, params, options);
  ASSERT_EQ(results.size(), 3u);
  for (size_t i = 0; i < prompts.size(); ++i) {
    EXPECT_EQ(results[i].request_id, options.request_ids[i]);
    ASSERT_EQ(results[i].outputs.size(), static_cast<size_t>(params[i].n));
    for (const CompletionOutput& c : results[i].outputs) {
      EXPECT_EQ(c.token_ids, expected_greedy(prompts[i], *params[i].max_tokens)) << "prompt " << i;
    }
  }
  // Neither one params for all nor one per prompt.
  EXPECT_THROW(engine->generate(prompts, std::span<const SamplingParams>(params.data(), 2)), Error);
  options.request_ids = {"a"};
  EXPECT_THROW(engine->generate(prompts, params, options), Error);
}

TEST(Engine, GenerateRunsBatchesLargerThanTheWaitingQueue) {
  // Two waiting requests at most: generate submits as requests finish instead of overflowing the queue.
  auto engine = make_engine(/*max_queued=*/2, /*max_seqs=*/2);
  std::vector<std::vector<int32_t>> prompts;
  for (int i = 0; i < 40; ++i) prompts.push_back({2 + i % 7, 3 + i, 4});
  size_t last_polled = 0;
  GenerateOptions options;
  options.poll_interval = std::chrono::milliseconds(0);
  options.poll = [&](size_t finished) {
    EXPECT_GE(finished, last_polled);
    last_polled = finished;
  };
  const SamplingParams p = greedy(6);
  auto results = engine->generate(prompts, std::span<const SamplingParams>(&p, 1), options);
  ASSERT_EQ(results.size(), prompts.size());
  for (size_t i = 0; i < prompts.size(); ++i) EXPECT_EQ(results[i].outputs[0].token_ids, expected_greedy(prompts[i], 6));
  EXPECT_EQ(last_polled, prompts.size());  // the last call reports the whole batch
}

TEST(Engine, GenerateAbortsTheBatchWhenPollThrows) {
  // One live request at a time and 50 long ones: the first poll comes long before the batch could end.
  auto engine = make_engine(/*max_queued=*/2, /*max_seqs=*/1);
  std::vector<std::vector<int32_t>> prompts(50, std::vector<int32_t>{3, 4, 5});
  SamplingParams p = greedy(250);
  p.ignore_eos = true;
  GenerateOptions options;
  options.poll_interval = std::chrono::milliseconds(1);
  options.poll = [](size_t) { throw std::runtime_error("interrupted"); };
  EXPECT_THROW(engine->generate(prompts, std::span<const SamplingParams>(&p, 1), options), std::runtime_error);
  // Every submitted request has ended (generate waited for its abort), and the engine keeps working.
  const EngineStats s = idle_stats(*engine);
  // The poll may come just after the live request finished and before the next was submitted (the fake model runs
  // 250 tokens in about a millisecond): then nothing is left to abort. Either way the batch ended early.
  EXPECT_GE(s.requests_finished_abort + s.requests_finished_length, 1u);
  EXPECT_LT(s.requests_finished_length, 50u);
  EXPECT_LE(s.requests_finished_abort, 1u);
  EXPECT_EQ(s.num_running + s.num_waiting, 0);
  auto again = engine->generate(std::vector<std::vector<int32_t>>{{3, 4, 5}}, greedy(4));
  EXPECT_EQ(again[0].outputs[0].token_ids, expected_greedy({3, 4, 5}, 4));
}

TEST(Engine, GenerateRefusesABadPromptAfterEndingTheOthers) {
  auto engine = make_engine(/*max_queued=*/2, /*max_seqs=*/1);
  std::vector<std::vector<int32_t>> prompts{{3, 4}, {5, 6}, {}, {7, 8}};
  SamplingParams p = greedy(200);
  p.ignore_eos = true;
  try {
    engine->generate(prompts, std::span<const SamplingParams>(&p, 1));
    FAIL() << "an empty prompt was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    EXPECT_NE(e.message().find("prompt"), std::string::npos) << e.message();
  }
  const EngineStats s = idle_stats(*engine);
  EXPECT_EQ(s.num_running + s.num_waiting, 0);
  EXPECT_EQ(engine->generate(std::vector<std::vector<int32_t>>{{3, 4}}, greedy(3))[0].outputs[0].token_ids,
            expected_greedy({3, 4}, 3));
}

TEST(SamplingParams, VocabularyChecksWaitForTheModel) {
  auto message = [](const SamplingParams& p, int vocab) -> std::string {
    try {
      p.validate(vocab);
    } catch (const Error& e) {
      return e.message();
    }
    return "";
  };
  SamplingParams p;
  p.logit_bias = {{50000, 1.0f}};
  p.stop_token_ids = {7};
  EXPECT_EQ(message(p, 0), "");  // vocabulary not known yet (the Python SamplingParams checks at construction)
  EXPECT_EQ(message(p, 1000), "logit_bias: token id 50000 is out of the vocabulary [0, 1000)");
  p.logit_bias = {{-1, 1.0f}};
  EXPECT_EQ(message(p, 0), "logit_bias: token id -1 is negative");
  p.logit_bias.clear();
  p.stop_token_ids = {-3};
  EXPECT_EQ(message(p, 0), "stop_token_ids: token id -3 is negative");
  EXPECT_EQ(message(p, 1000), "stop_token_ids: token id -3 is out of the vocabulary [0, 1000)");
}

}  // namespace
}  // namespace peregrine::engine
