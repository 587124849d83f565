// Engine (public API, loop thread) tests on FakeModel: offline generate, streaming from several threads,
// abort, queue limit and shutdown ending in-flight requests.
#include <gtest/gtest.h>

#include <atomic>
#include <condition_variable>
#include <mutex>
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

}  // namespace
}  // namespace peregrine::engine
