// Determinism on the real model (models/pycoder-tiny, CPU backend): a request's greedy output is identical
// alone, after a prefix-cache hit, in a batch of 64 mixed requests, and in a batch squeezed by preemption.
#include <gtest/gtest.h>

#include <algorithm>
#include <condition_variable>
#include <filesystem>
#include <functional>
#include <fstream>
#include <map>
#include <mutex>
#include <regex>
#include <thread>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include "ops/backend.h"
#include "peregrine/engine.h"
#include "peregrine/error.h"

namespace peregrine {
namespace {

const std::filesystem::path kModel = std::filesystem::path(PEREGRINE_SOURCE_DIR) / "models" / "pycoder-tiny";

std::vector<std::string> code_prompts() {
  const std::string header = "import os\nimport sys\nfrom typing import List, Optional\n\n";
  std::vector<std::string> p;
  const char* bodies[] = {
      "def fibonacci(n):\n    ",
      "class Stack:\n    def __init__(self):\n        ",
      "def read_lines(path: str) -> List[str]:\n    with open(path) as f:\n        ",
      "# parse command line arguments\nimport argparse\nparser = ",
      "def quicksort(items):\n    if len(items) <= 1:\n        return items\n    pivot = ",
      "for i in range(10):\n    print(",
      "x = [1, 2, 3]\ny = ",
      "def main():\n    args = sys.argv[1:]\n    if not args:\n        ",
  };
  for (int i = 0; i < 64; ++i) {
    std::string s = (i % 2 == 0 ? header : std::string()) + bodies[i % 8];
    for (int k = 0; k < i / 8; ++k) {
      s += "# note ";
      s += std::to_string(k);
      s += "\n";
    }
    p.push_back(s);
  }
  return p;
}

SamplingParams greedy(int max_tokens) {
  SamplingParams p;
  p.temperature = 0.0f;
  p.max_tokens = max_tokens;
  p.ignore_eos = true;
  return p;
}

std::vector<int32_t> run_alone(Engine& engine, const std::vector<int32_t>& prompt, int max_tokens,
                               int* cached_tokens = nullptr) {
  auto out = engine.generate(std::vector<std::vector<int32_t>>{prompt}, greedy(max_tokens));
  if (cached_tokens) *cached_tokens = out[0].num_cached_tokens;
  return out[0].outputs[0].token_ids;
}

// Runs all 64 prompts at once: the checked ones greedy, the rest sampled with other settings.
std::vector<std::vector<int32_t>> run_batch(Engine& engine, const std::vector<std::vector<int32_t>>& prompts,
                                            const std::vector<int>& checked, int max_tokens) {
  std::vector<std::vector<int32_t>> results(prompts.size());
  std::mutex m;
  std::condition_variable cv;
  size_t remaining = prompts.size();
  for (size_t i = 0; i < prompts.size(); ++i) {
    const bool is_checked = std::find(checked.begin(), checked.end(), static_cast<int>(i)) != checked.end();
    SamplingParams p = greedy(max_tokens);
    if (!is_checked) {
      p.temperature = 0.9f;
      p.top_k = 40;
      p.seed = i;
      p.max_tokens = 4 + static_cast<int>(i % 29);
      p.n = i % 5 == 0 ? 2 : 1;
    }
    std::string id = "batch-";
    id += std::to_string(i);
    engine.add_request(id, prompts[i], p, [&, i](RequestOutput&& out) {
      std::lock_guard<std::mutex> lock(m);
      for (auto& c : out.outputs) {
        if (c.index == 0) results[i].insert(results[i].end(), c.token_ids.begin(), c.token_ids.end());
      }
      if (out.finished && --remaining == 0) cv.notify_one();
    });
  }
  std::unique_lock<std::mutex> lock(m);
  cv.wait(lock, [&] { return remaining == 0; });
  return results;
}

class EngineModelTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!std::filesystem::exists(kModel / "model.safetensors")) GTEST_SKIP() << "no model at " << kModel;
  }
};

TEST_F(EngineModelTest, GreedyIsIdenticalAloneCachedBatchedAndPreempted) {
  EngineConfig config;
  config.model = kModel.string();
  config.device = "cpu";
  config.max_model_len = 512;
  config.max_num_batched_tokens = 512;  // several steps of chunked prefill for the batch
  auto engine = Engine::create(config);
  const auto texts = code_prompts();
  std::vector<std::vector<int32_t>> prompts;
  for (const auto& t : texts) prompts.push_back(engine->tokenize(t, true));
  const std::vector<int> checked{0, 9, 22, 37, 51, 63};
  constexpr int kTokens = 24;

  std::map<int, std::vector<int32_t>> alone;
  for (int i : checked) {
    alone[i] = run_alone(*engine, prompts[i], kTokens);
    ASSERT_EQ(alone[i].size(), static_cast<size_t>(kTokens));
    int cached = 0;
    EXPECT_EQ(run_alone(*engine, prompts[i], kTokens, &cached), alone[i]) << "prompt " << i << " after a cache hit";
    EXPECT_GT(cached, 0) << "prompt " << i << " should have hit the prefix cache";
  }
  auto batch = run_batch(*engine, prompts, checked, kTokens);
  for (int i : checked) EXPECT_EQ(batch[i], alone[i]) << "prompt " << i << " in a batch of 64";
  // Stats are published after the step that delivered the last output.
  for (int i = 0; i < 400 && engine->stats().num_used_kv_blocks != 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  EXPECT_EQ(engine->stats().num_used_kv_blocks, 0);

  // A KV cache of 40 blocks (640 tokens) for 64 requests: preemption and recompute, nothing fails.
  EngineConfig small = config;
  small.num_kv_blocks_override = 40;
  small.enable_prefix_caching = false;
  auto squeezed = Engine::create(small);
  auto batch2 = run_batch(*squeezed, prompts, checked, kTokens);
  for (int i : checked) EXPECT_EQ(batch2[i], alone[i]) << "prompt " << i << " with preemption";
  EXPECT_GT(squeezed->stats().num_preemptions, 0u);
}

// CUDA: rows are sampled on the GPU (logits stay there); greedy tokens equal the host sampler's on the same logits,
// and seeded sampled requests are reproducible inside a batch.
TEST_F(EngineModelTest, CudaSamplingOnTheDeviceEqualsTheHostSampler) {
  if (!ops::cuda_available()) GTEST_SKIP() << "no CUDA GPU visible";
  EngineConfig config;
  config.model = kModel.string();
  config.device = "cuda";
  config.dtype = "float32";
  config.max_model_len = 512;
  config.max_num_batched_tokens = 512;
  const std::vector<int> checked{0, 9, 22, 37, 51, 63};
  constexpr int kTokens = 24;
  auto run = [&](bool host) {
    if (host) setenv("PEREGRINE_SAMPLING", "host", 1); else unsetenv("PEREGRINE_SAMPLING");
    auto engine = Engine::create(config);
    unsetenv("PEREGRINE_SAMPLING");
    const auto texts = code_prompts();
    std::vector<std::vector<int32_t>> prompts;
    for (const auto& t : texts) prompts.push_back(engine->tokenize(t, true));
    auto out = run_batch(*engine, prompts, checked, kTokens);
    for (int i = 0; i < 400 && engine->stats().num_used_kv_blocks != 0; ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    return std::make_pair(out, engine->stats().backend_sampled_tokens);
  };
  const auto [on_host, host_count] = run(true);
  const auto [on_device, device_count] = run(false);
  const auto [again, again_count] = run(false);
  EXPECT_EQ(host_count, 0u);
  EXPECT_GT(device_count, 0u);
  for (int i : checked) EXPECT_EQ(on_device[static_cast<size_t>(i)], on_host[static_cast<size_t>(i)]) << "prompt " << i;
  for (size_t i = 0; i < on_device.size(); ++i) EXPECT_EQ(on_device[i], again[i]) << "prompt " << i << " (seeded)";
}

// Structured outputs sampled by the backend's op (token masks go with the rows): greedy constrained outputs equal
// the host sampler's, every output (greedy and sampled, n = 2) parses and has the schema's keys, and the rows were
// sampled by the backend. Unconstrained neighbours share the batch.
void constrained_rows_on_the_backend(const std::string& device) {
  EngineConfig config;
  config.model = kModel.string();
  config.device = device;
  config.dtype = "float32";
  config.max_model_len = 512;
  config.max_num_batched_tokens = 512;
  StructuredOutputsParams schema;
  schema.json = R"({"type": "object", "properties": {"name": {"type": "string", "maxLength": 12},
    "size": {"type": "integer", "minimum": 0, "maximum": 999}, "tags": {"type": "array", "items": {"enum": ["a", "bb", "ccc"]}, "maxItems": 3}},
    "required": ["name", "size", "tags"], "additionalProperties": false})";
  StructuredOutputsParams regex;
  regex.regex = "(def|class) [a-z_]{1,10}\\((x|y|z)?\\):";
  auto run = [&](const char* where) {
    setenv("PEREGRINE_SAMPLING", where, 1);
    auto engine = Engine::create(config);
    unsetenv("PEREGRINE_SAMPLING");
    const auto texts = code_prompts();
    std::vector<std::string> out(24);
    std::mutex m;
    std::condition_variable cv;
    size_t remaining = out.size();
    for (size_t i = 0; i < out.size(); ++i) {
      SamplingParams p;
      p.max_tokens = 96;
      p.temperature = i % 3 == 0 ? 0.0f : 0.8f;
      p.seed = i;
      if (i % 4 == 1) p.top_k = 20;
      if (i % 4 == 2) p.repetition_penalty = 1.2f;
      if (i % 6 == 5) p.n = 2;
      if (i % 8 != 7) p.structured_outputs = i % 2 ? regex : schema;
      std::string id = "s";
      id += std::to_string(i);
      engine->add_request(id, engine->tokenize(texts[i], true), p, [&, i](RequestOutput&& o) {
        std::lock_guard<std::mutex> lock(m);
        for (auto& c : o.outputs) {
          if (c.index == 0) out[i] += c.text;
        }
        if (o.finished && --remaining == 0) cv.notify_one();
      });
    }
    std::unique_lock<std::mutex> lock(m);
    cv.wait(lock, [&] { return remaining == 0; });
    return std::make_pair(out, engine->stats().backend_sampled_tokens);
  };
  const auto [host, host_count] = run("host");
  const auto [backend, backend_count] = run("backend");
  EXPECT_EQ(host_count, 0u);
  EXPECT_GT(backend_count, 24u * 10u);
  const std::regex pattern("(def|class) [a-z_]{1,10}\\((x|y|z)?\\):");
  for (size_t i = 0; i < backend.size(); ++i) {
    if (i % 3 == 0) {
      EXPECT_EQ(backend[i], host[i]) << "greedy request " << i;
    }
    if (i % 8 == 7) continue;
    for (const std::string* text : {&backend[i], &host[i]}) {
      if (i % 2) {
        EXPECT_TRUE(std::regex_match(*text, pattern)) << "request " << i << ": " << *text;
        continue;
      }
      const auto j = nlohmann::json::parse(*text, nullptr, false);
      ASSERT_FALSE(j.is_discarded()) << "request " << i << ": " << *text;
      EXPECT_TRUE(j.contains("name") && j.contains("size") && j.contains("tags")) << *text;
      EXPECT_LE(j["name"].get<std::string>().size(), 12u) << *text;
    }
  }
}

TEST_F(EngineModelTest, ConstrainedRowsSampledByTheBackendEqualTheHostSampler) {
  constrained_rows_on_the_backend("cpu");
}

TEST_F(EngineModelTest, ConstrainedRowsSampledOnTheGpuEqualTheHostSampler) {
  if (!ops::cuda_available()) GTEST_SKIP() << "no CUDA GPU visible";
  constrained_rows_on_the_backend("cuda");
}

TEST_F(EngineModelTest, ChatTemplateGivenPerCallReplacesTheEngines) {
  EngineConfig config;
  config.model = kModel.string();
  config.device = "cpu";
  config.max_model_len = 128;
  config.num_kv_blocks_override = 16;
  auto engine = Engine::create(config);
  nlohmann::ordered_json messages = nlohmann::ordered_json::parse(R"([{"role": "user", "content": "hi"}])");
  ChatTemplateOptions options;
  EXPECT_THROW(engine->apply_chat_template(messages, options), Error);  // pycoder-tiny has no template
  // The template text, with the model folder's bos token.
  options.chat_template =
      "{{ bos_token }}{% for m in messages %}<{{ m.role }}>{{ m.content }}{% endfor %}"
      "{% if add_generation_prompt %}<assistant>{% endif %}";
  EXPECT_EQ(engine->apply_chat_template(messages, options), "<s><user>hi<assistant>");
  // Continuing a partly written reply ends the prompt right after it.
  messages.push_back({{"role", "assistant"}, {"content", "def f("}});
  options.add_generation_prompt = false;
  options.continue_final_message = true;
  EXPECT_EQ(engine->apply_chat_template(messages, options), "<s><user>hi<assistant>def f(");
  // A template file works the same; a broken template names the problem.
  const auto file = std::filesystem::temp_directory_path() / "peregrine_engine_test_template.jinja";
  {
    std::ofstream out(file);
    out << "{% for m in messages %}[{{ m.content }}]{% endfor %}";
  }
  options.chat_template = file.string();
  EXPECT_EQ(engine->apply_chat_template(messages, options), "[hi][def f(");
  std::filesystem::remove(file);
  options.chat_template = "{% for m in messages %}";
  EXPECT_THROW(engine->apply_chat_template(messages, options), Error);
}

// The tier tests' engine: a device cache of 24 blocks (384 tokens), so the ~12-block prompts below evict each other.
EngineConfig small_cache_config(const char* device) {
  EngineConfig config;
  config.model = kModel.string();
  config.device = device;
  config.max_model_len = 384;
  config.num_kv_blocks_override = 24;
  return config;
}

// Four prompts of 9-15 blocks each, made of the code prompts.
std::vector<std::vector<int32_t>> long_prompts(Engine& engine) {
  const auto texts = code_prompts();
  std::vector<std::vector<int32_t>> prompts;
  for (int k = 0; k < 4; ++k) {
    std::string t;
    for (int j = 0; j < 7; ++j) t += texts[static_cast<size_t>(k * 8 + j) % texts.size()];
    prompts.push_back(engine.tokenize(t, true));
  }
  return prompts;
}

TEST_F(EngineModelTest, HostTierHitsAreIdenticalToColdRuns) {
  // Prompts of ~12 blocks; a device cache of 24 blocks holds about two of them, so each new one evicts an older
  // one's blocks, which go down to the host tier; asking again hits there.
  EngineConfig config = small_cache_config("cpu");
  config.enable_prefix_caching = false;
  auto cold = Engine::create(config);
  const auto prompts = long_prompts(*cold);
  for (size_t k = 0; k < prompts.size(); ++k) {
    ASSERT_GT(prompts[k].size(), 16u * 9) << "prompt " << k;
  }
  constexpr int kTokens = 12;
  std::vector<std::vector<int32_t>> want;
  for (const auto& p : prompts) want.push_back(run_alone(*cold, p, kTokens));

  config.enable_prefix_caching = true;
  config.kv_offloading_size = 0.05;  // GiB: every block of these prompts fits
  auto tiered = Engine::create(config);
  for (size_t k = 0; k < prompts.size(); ++k) EXPECT_EQ(run_alone(*tiered, prompts[k], kTokens), want[k]) << k;
  EngineStats s = tiered->stats();
  EXPECT_GT(s.kv_offload_blocks_to_host, 0u);
  EXPECT_GT(s.host_kv_blocks_used, 0);
  EXPECT_EQ(s.prefix_cache_host_hits, 0u);
  // Prompt 0's blocks left the device two prompts ago: its second run loads them from the host tier.
  for (size_t k = 0; k < prompts.size(); ++k) {
    int cached = 0;
    EXPECT_EQ(run_alone(*tiered, prompts[k], kTokens, &cached), want[k]) << "prompt " << k << " from the host tier";
    EXPECT_EQ(cached, static_cast<int>((prompts[k].size() - 1) / 16 * 16)) << "prompt " << k;
  }
  s = tiered->stats();
  EXPECT_GE(s.prefix_cache_host_hits, 2u * 16 * 10);
  EXPECT_GT(s.kv_offload_blocks_from_host, 0u);
  EXPECT_EQ(s.kv_offload_bytes_from_host % s.kv_offload_blocks_from_host, 0u);
  EXPECT_LE(s.prefix_cache_host_hits, s.prefix_cache_hits);

  // A host tier of a few blocks: it drops its oldest, and outputs stay exact.
  config.kv_offloading_size = 4.0 * static_cast<double>(s.kv_offload_bytes_from_host / s.kv_offload_blocks_from_host) /
                              (1024.0 * 1024.0 * 1024.0);
  auto tiny = Engine::create(config);
  for (int round = 0; round < 2; ++round)
    for (size_t k = 0; k < prompts.size(); ++k) EXPECT_EQ(run_alone(*tiny, prompts[k], kTokens), want[k]) << k;
  EXPECT_EQ(tiny->stats().host_kv_blocks, 4);
}

// A host-tier hit against a device-tier hit of the same prefix (the loaded blocks must be the blocks that went
// down): on CUDA a cached prefix changes how the prompt is computed (CUDA is not batch-invariant yet), so this is
// the exact check there.
void host_tier_hits_equal_device_hits(const char* device) {
  EngineConfig config = small_cache_config(device);
  config.dtype = "float32";
  config.kv_offloading_size = 0.05;
  auto engine = Engine::create(config);
  const auto prompts = long_prompts(*engine);
  constexpr int kTokens = 12;
  for (int round = 0; round < 2; ++round) {
    for (size_t k = 0; k < prompts.size(); ++k) {
      run_alone(*engine, prompts[k], kTokens);  // cold (round 0) or from the host tier (round 1): now on the device
      int cached = 0;
      const auto device_hit = run_alone(*engine, prompts[k], kTokens, &cached);
      ASSERT_EQ(cached, static_cast<int>((prompts[k].size() - 1) / 16 * 16));
      // The other prompts push this one's blocks down; then it is served from the host tier.
      for (size_t j = 1; j < prompts.size(); ++j) run_alone(*engine, prompts[(k + j) % prompts.size()], kTokens);
      const uint64_t host_before = engine->stats().prefix_cache_host_hits;
      EXPECT_EQ(run_alone(*engine, prompts[k], kTokens, &cached), device_hit) << "prompt " << k << " round " << round;
      EXPECT_EQ(cached, static_cast<int>((prompts[k].size() - 1) / 16 * 16));
      EXPECT_GT(engine->stats().prefix_cache_host_hits, host_before) << "prompt " << k;
    }
  }
}

TEST_F(EngineModelTest, HostTierHitsEqualDeviceHits) { host_tier_hits_equal_device_hits("cpu"); }

TEST_F(EngineModelTest, HostTierHitsEqualDeviceHitsOnCuda) {
  if (!ops::cuda_available()) GTEST_SKIP() << "no CUDA GPU visible";
  host_tier_hits_equal_device_hits("cuda");
}

// The same with the hits that run alone waiting for their whole loads before the step (PEREGRINE_KV_LAYERED_LOADS=0;
// by default they wait layer by layer).
TEST_F(EngineModelTest, HostTierHitsEqualDeviceHitsOnCudaWithWholeLoads) {
  if (!ops::cuda_available()) GTEST_SKIP() << "no CUDA GPU visible";
  setenv("PEREGRINE_KV_LAYERED_LOADS", "0", 1);
  host_tier_hits_equal_device_hits("cuda");
  unsetenv("PEREGRINE_KV_LAYERED_LOADS");
}

TEST_F(EngineModelTest, DiskTierSurvivesARestartAndDropsABadFile) {
  const auto dir = std::filesystem::temp_directory_path() / ("peregrine_kv_dir_" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  EngineConfig config = small_cache_config("cpu");
  config.enable_prefix_caching = false;
  auto cold = Engine::create(config);
  const auto prompts = long_prompts(*cold);
  constexpr int kTokens = 8;
  std::vector<std::vector<int32_t>> want;
  for (const auto& p : prompts) want.push_back(run_alone(*cold, p, kTokens));
  cold.reset();

  config.enable_prefix_caching = true;
  config.kv_offloading_size = 0.002;  // GiB: a few blocks, so the host tier drops and the disk tier serves
  config.kv_cache_dir = dir.string();
  {
    auto first = Engine::create(config);
    for (int round = 0; round < 2; ++round)
      for (size_t k = 0; k < prompts.size(); ++k) EXPECT_EQ(run_alone(*first, prompts[k], kTokens), want[k]) << k;
    const EngineStats s = first->stats();
    EXPECT_GT(s.kv_disk_bytes_written, 0u);
    EXPECT_GT(s.prefix_cache_disk_hits, 0u) << "the second round should read blocks back from disk";
  }  // shut down: the queued writes finish
  // A restart with the same model finds the blocks; one file corrupted meanwhile is dropped, not served.
  std::vector<std::filesystem::path> files;
  for (const auto& sub : std::filesystem::directory_iterator(dir))
    for (const auto& f : std::filesystem::directory_iterator(sub.path())) files.push_back(f.path());
  ASSERT_GT(files.size(), 4u);
  {
    std::fstream f(files[0], std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(-3, std::ios::end);
    f.put('\x11');
  }
  auto second = Engine::create(config);
  EXPECT_EQ(second->stats().kv_disk_blocks_at_start, files.size());
  int prompts_hit = 0;
  for (size_t k = 0; k < prompts.size(); ++k) {
    int cached = 0;
    EXPECT_EQ(run_alone(*second, prompts[k], kTokens, &cached), want[k]) << "prompt " << k << " after the restart";
    prompts_hit += cached > 0 ? 1 : 0;
  }
  // The corrupted block ends its prompt's run there (at its first block: no hit at all for that one).
  EXPECT_GE(prompts_hit, 3);
  const EngineStats s = second->stats();
  EXPECT_GT(s.prefix_cache_disk_hits, 0u);
  EXPECT_LE(s.kv_disk_dropped_bad, 1u);  // the corrupted file, if a lookup reached it
  second.reset();
  std::filesystem::remove_all(dir);
}

// Token ids of a made-up prompt (distinct for each seed): the filler requests that push a prefix off the device.
std::vector<int32_t> made_up_prompt(int seed, int length) {
  std::vector<int32_t> p(static_cast<size_t>(length));
  for (int i = 0; i < length; ++i) p[static_cast<size_t>(i)] = 100 + (seed * 7919 + i * 131) % 31000;
  return p;
}

// A fresh folder under the temp directory for a disk tier, removed again at the end of its scope (declare it before
// the engines that use it).
struct TempKvDir {
  std::filesystem::path path;
  explicit TempKvDir(const std::string& name)
      : path(std::filesystem::temp_directory_path() / (name + "_" + std::to_string(::getpid()))) {
    std::filesystem::remove_all(path);
  }
  ~TempKvDir() { std::filesystem::remove_all(path); }
};

// Greedy outputs of prompts, each alone, from config's engine with prefix caching off: the cold runs to compare with.
std::vector<std::vector<int32_t>> cold_runs(EngineConfig config, const std::vector<std::vector<int32_t>>& prompts,
                                            int max_tokens) {
  config.enable_prefix_caching = false;
  auto cold = Engine::create(config);
  std::vector<std::vector<int32_t>> out;
  for (const auto& p : prompts) out.push_back(run_alone(*cold, p, max_tokens));
  return out;
}

// Copies ahead of need with the whole device pool as the window (PEREGRINE_KV_COPY_AHEAD): blocks go down while
// still cached on the device, their evictions then find them held and copy nothing, and every hit from the host
// tier is still the cold run's output (on CUDA: the device hit's, see above), round after round.
void copied_ahead_hits_are_exact(const char* device) {
  EngineConfig config = small_cache_config(device);
  config.dtype = "float32";
  const auto prompts = long_prompts(*Engine::create(config));
  constexpr int kTokens = 12;
  std::vector<std::vector<int32_t>> want;
  {
    config.kv_offloading_size = 0.05;
    auto engine = Engine::create(config);  // the default window: 6 blocks here
    for (const auto& p : prompts) {
      run_alone(*engine, p, kTokens);
      want.push_back(run_alone(*engine, p, kTokens));  // a device hit
    }
  }
  if (std::string(device) == "cpu") {
    EXPECT_EQ(want, cold_runs(config, prompts, kTokens));  // CPU: exact
  }
  setenv("PEREGRINE_KV_COPY_AHEAD", "24", 1);
  auto engine = Engine::create(config);
  unsetenv("PEREGRINE_KV_COPY_AHEAD");
  // Round 0 runs cold (on CUDA not the device hit's output: compare from round 1, all host-tier hits, on).
  const bool cuda = std::string(device) == "cuda";
  for (int round = 0; round < 3; ++round) {
    for (size_t k = 0; k < prompts.size(); ++k) {
      const auto out = run_alone(*engine, prompts[k], kTokens);
      if (round > 0 || !cuda) {
        EXPECT_EQ(out, want[k]) << "prompt " << k << " round " << round;
      }
    }
  }
  const EngineStats s = engine->stats();
  EXPECT_GT(s.prefix_cache_host_hits, 2u * 16 * 10);
  EXPECT_GT(s.kv_offload_blocks_ahead, 0u);
  EXPECT_GT(s.kv_offload_evicted_held, 0u) << "evictions of blocks copied ahead should copy nothing";
  EXPECT_EQ(s.num_used_kv_blocks, 0);
}

TEST_F(EngineModelTest, BlocksCopiedAheadGiveExactHostTierHits) { copied_ahead_hits_are_exact("cpu"); }

TEST_F(EngineModelTest, BlocksCopiedAheadGiveExactHostTierHitsOnCuda) {
  if (!ops::cuda_available()) GTEST_SKIP() << "no CUDA GPU visible";
  copied_ahead_hits_are_exact("cuda");
}

// The engine of the disk-tier tests: a device cache of 64 blocks (1,024 tokens), a host tier of 8 blocks, a disk
// tier under `dir` bounded to `disk_gb`.
EngineConfig big_prefix_config(const std::filesystem::path& dir, double disk_gb) {
  EngineConfig config;
  config.model = kModel.string();
  config.device = "cpu";
  config.max_model_len = 1024;
  config.num_kv_blocks_override = 64;
  // 8.5 blocks of pycoder-tiny's f32 KV (6 layers x K, V x 16 tokens x 2 heads x 64 x 4 bytes = 96 KiB a block).
  config.kv_offloading_size = 8.5 * 98304.0 / (1024.0 * 1024.0 * 1024.0);
  config.kv_cache_dir = dir.string();
  config.kv_cache_disk_gb = disk_gb;
  return config;
}

// An engine of big_prefix_config that ran a 44-block prefix once, then three filler prompts of the same length: the
// first two push the prefix off the device, the third pushes the blocks the first filler left in the host tier, so
// the prefix's blocks can only be on disk (or queued for it). With the prefix's cold output.
struct PrefixOnDisk {
  std::unique_ptr<Engine> engine;
  std::vector<int32_t> prefix, want;
};
PrefixOnDisk prefix_pushed_to_disk(const EngineConfig& config, int max_tokens) {
  PrefixOnDisk p;
  p.prefix = made_up_prompt(1, 44 * 16 + 5);
  p.want = cold_runs(config, {p.prefix}, max_tokens)[0];
  p.engine = Engine::create(config);
  EXPECT_EQ(run_alone(*p.engine, p.prefix, max_tokens), p.want);
  for (int f = 0; f < 3; ++f) run_alone(*p.engine, made_up_prompt(2 + f, 44 * 16 + 5), max_tokens);
  return p;
}

// The disk tier behind a host tier much smaller than the prefix (the H200 tier bench's failure, here on the CPU):
// a 44-block prefix is pushed off a 64-block device cache by filler prompts, past an 8-block host tier; asked again,
// every one of its full blocks comes back from the tiers, and the greedy output is the cold run's.
TEST_F(EngineModelTest, APrefixLargerThanTheHostTierComesBackWholeFromTheDisk) {
  const TempKvDir dir("peregrine_kv_big");
  constexpr int kTokens = 8;
  const PrefixOnDisk p = prefix_pushed_to_disk(big_prefix_config(dir.path, 1.0), kTokens);
  Engine* engine = p.engine.get();
  const std::vector<int32_t>& prefix = p.prefix;
  const std::vector<int32_t>& want = p.want;
  ASSERT_EQ(engine->stats().host_kv_blocks, 8);
  const EngineStats before = engine->stats();
  int cached = 0;
  EXPECT_EQ(run_alone(*engine, prefix, kTokens, &cached), want);
  const EngineStats after = engine->stats();
  const int full = 44 * 16;
  std::printf("tier repro: %d of %d prefix tokens cached: %llu from the host tier, %llu from the disk tier; disk "
              "holds %llu blocks (%llu bytes written)\n",
              cached, full,
              static_cast<unsigned long long>((after.prefix_cache_host_hits - before.prefix_cache_host_hits) -
                                              (after.prefix_cache_disk_hits - before.prefix_cache_disk_hits)),
              static_cast<unsigned long long>(after.prefix_cache_disk_hits - before.prefix_cache_disk_hits),
              static_cast<unsigned long long>(after.kv_disk_blocks),
              static_cast<unsigned long long>(after.kv_disk_bytes_written));
  EXPECT_EQ(cached, full) << "the whole prefix should come back from the tiers";
  EXPECT_EQ(after.prefix_cache_host_hits - before.prefix_cache_host_hits, static_cast<uint64_t>(full))
      << "every cached token from below the device";
  EXPECT_GE(after.prefix_cache_disk_hits - before.prefix_cache_disk_hits, static_cast<uint64_t>(full - 8 * 16))
      << "all but what the host tier holds from the disk";
  EXPECT_GT(after.kv_disk_blocks_past_host, 0u);
  EXPECT_EQ(after.kv_disk_dropped_writes, 0u);
  // Asked once more it is a device hit, still exact.
  EXPECT_EQ(run_alone(*engine, prefix, kTokens, &cached), want);
  EXPECT_EQ(cached, full);
}

// The same with copies ahead to the disk (PEREGRINE_KV_AHEAD_TO_DISK=1: the window goes to the disk through the
// ring, the host tier being small beside it): every block comes back, the output is the cold run's.
TEST_F(EngineModelTest, APrefixComesBackWholeFromTheDiskWithCopiesAheadToTheDisk) {
  const TempKvDir dir("peregrine_kv_ahead");
  constexpr int kTokens = 8;
  setenv("PEREGRINE_KV_AHEAD_TO_DISK", "1", 1);
  const PrefixOnDisk p = prefix_pushed_to_disk(big_prefix_config(dir.path, 1.0), kTokens);
  unsetenv("PEREGRINE_KV_AHEAD_TO_DISK");
  int cached = 0;
  EXPECT_EQ(run_alone(*p.engine, p.prefix, kTokens, &cached), p.want);
  EXPECT_EQ(cached, 44 * 16);
  const EngineStats s = p.engine->stats();
  EXPECT_GT(s.kv_offload_blocks_ahead, 0u) << "an 8-block host tier: the copy-ahead window goes to the disk";
  EXPECT_EQ(s.kv_disk_dropped_bad, 0u);
}

// The same with the prefix evicted only just before it is asked for: the host tier then holds its first blocks (a
// chain's earlier blocks are the ones it keeps) and the disk the rest, some perhaps still queued for writing.
TEST_F(EngineModelTest, ARecentlyEvictedPrefixComesBackFromTheHostAndTheDisk) {
  const TempKvDir dir("peregrine_kv_recent");
  EngineConfig config = big_prefix_config(dir.path, 1.0);
  constexpr int kTokens = 8;
  const std::vector<int32_t> prefix = made_up_prompt(1, 44 * 16 + 5);
  const std::vector<int32_t> want = cold_runs(config, {prefix}, kTokens)[0];
  auto engine = Engine::create(config);
  EXPECT_EQ(run_alone(*engine, prefix, kTokens), want);
  // One filler as long as the device cache: every block of the prefix leaves the device in that allocation.
  run_alone(*engine, made_up_prompt(9, 63 * 16 + 8), 1);
  const EngineStats before = engine->stats();
  int cached = 0;
  EXPECT_EQ(run_alone(*engine, prefix, kTokens, &cached), want);
  const EngineStats after = engine->stats();
  const uint64_t lower = after.prefix_cache_host_hits - before.prefix_cache_host_hits;
  const uint64_t disk = after.prefix_cache_disk_hits - before.prefix_cache_disk_hits;
  EXPECT_EQ(cached, 44 * 16);
  EXPECT_EQ(lower, 44u * 16);
  EXPECT_EQ(lower - disk, 8u * 16) << "the host tier should hold the prefix's first 8 blocks";
}

// Several requests sharing a prefix that is coming back from the disk tier: one load brings it up, the others wait
// for its blocks instead of loading or computing them again, and every output is its cold run's.
TEST_F(EngineModelTest, RequestsSharingAPrefixWhileItComesBackFromTheDiskAreExact) {
  const TempKvDir dir("peregrine_kv_shared");
  EngineConfig config = big_prefix_config(dir.path, 1.0);
  constexpr int kTokens = 6;
  const std::vector<int32_t> prefix = made_up_prompt(1, 40 * 16);
  std::vector<std::vector<int32_t>> prompts;
  for (int k = 0; k < 4; ++k) {
    std::vector<int32_t> p = prefix;
    for (int i = 0; i < 3 + k; ++i) p.push_back(500 + 37 * k + i);
    prompts.push_back(std::move(p));
  }
  const std::vector<std::vector<int32_t>> want = cold_runs(config, prompts, kTokens);
  auto engine = Engine::create(config);
  EXPECT_EQ(run_alone(*engine, prompts[0], kTokens), want[0]);
  for (int f = 0; f < 3; ++f) run_alone(*engine, made_up_prompt(30 + f, 44 * 16 + 5), kTokens);
  const EngineStats before = engine->stats();
  const auto outs = engine->generate(prompts, greedy(kTokens));
  ASSERT_EQ(outs.size(), prompts.size());
  for (size_t k = 0; k < prompts.size(); ++k) {
    EXPECT_EQ(outs[k].outputs[0].token_ids, want[k]) << "prompt " << k;
    EXPECT_EQ(outs[k].num_cached_tokens, 40 * 16) << "prompt " << k;
  }
  const EngineStats after = engine->stats();
  EXPECT_EQ(after.prefix_cache_disk_hits - before.prefix_cache_disk_hits, 40u * 16) << "the prefix is read once";
}

// Waits (up to `seconds`) until done() holds, polling the engine's published stats.
bool wait_until(const std::function<bool()>& done, double seconds) {
  const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  while (!done()) {
    if (std::chrono::steady_clock::now() > end) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return true;
}

// A request aborted while its prefix is being read back from the disk tier: its device blocks and host slots are
// held only until the reads end (here they fail: every block file was swapped for a FIFO, so each read waits until
// the test opens its writer end and then finds it empty), with no further request to drive the engine; nothing
// stays held, the failed blocks are dropped as bad and never served, and the prefix then computes exactly.
TEST_F(EngineModelTest, AnAbortWhileItsBlocksComeBackFromTheDiskLeavesNothingHeld) {
  const TempKvDir dir("peregrine_kv_abort");
  constexpr int kTokens = 8;
  const PrefixOnDisk p = prefix_pushed_to_disk(big_prefix_config(dir.path, 1.0), kTokens);
  Engine* engine = p.engine.get();
  const std::vector<int32_t>& prefix = p.prefix;
  const std::vector<int32_t>& want = p.want;
  // Idle, the engine still hands every evicted block to the disk: the queue drains without another request.
  ASSERT_TRUE(wait_until([&] { return engine->stats().kv_disk_blocks_queued == 0; }, 30));
  std::vector<std::filesystem::path> fifos;
  for (const auto& sub : std::filesystem::directory_iterator(dir.path))
    for (const auto& f : std::filesystem::directory_iterator(sub.path())) {
      if (f.path().extension() != ".kv") continue;
      std::filesystem::remove(f.path());
      ASSERT_EQ(::mkfifo(f.path().c_str(), 0644), 0) << f.path();
      fifos.push_back(f.path());
    }
  ASSERT_GT(fifos.size(), 30u);
  // Opens the writer end of every FIFO a read is waiting on (and closes it: the read finds it empty).
  auto unblock_reads = [&] {
    for (const auto& p : fifos) {
      const int fd = ::open(p.c_str(), O_WRONLY | O_NONBLOCK);
      if (fd >= 0) ::close(fd);
    }
  };
  std::mutex m;
  std::condition_variable cv;
  bool finished = false;
  engine->add_request("victim", prefix, greedy(kTokens), [&](RequestOutput&& out) {
    std::lock_guard<std::mutex> lock(m);
    if (out.finished) finished = true;
    cv.notify_all();
  });
  const bool loading = wait_until([&] { return engine->stats().kv_blocks_loading > 0; }, 30);
  EXPECT_TRUE(loading) << "the prefix's blocks should be loading from the disk tier";
  EXPECT_GT(engine->stats().host_kv_blocks_pinned, 0);
  engine->abort_request("victim");
  {
    std::unique_lock<std::mutex> lock(m);
    EXPECT_TRUE(cv.wait_for(lock, std::chrono::seconds(30), [&] { return finished; }));
  }
  EXPECT_GT(engine->stats().kv_blocks_loading, 0) << "the reads are still waiting on their FIFOs";
  const bool released = wait_until(
      [&] {
        unblock_reads();
        const EngineStats s = engine->stats();
        return s.kv_blocks_loading == 0 && s.host_kv_blocks_pinned == 0;
      },
      30);
  EXPECT_TRUE(released) << "blocks held after the abort with no request running";
  const EngineStats s = engine->stats();
  EXPECT_EQ(s.num_used_kv_blocks, 0);
  EXPECT_EQ(s.num_free_kv_blocks, s.num_kv_blocks);
  EXPECT_GE(s.kv_disk_dropped_bad, 1u);
  for (const auto& p : fifos) std::filesystem::remove(p);  // reads of the rest now fail at once (absent files)
  int cached = 0;
  EXPECT_EQ(run_alone(*engine, prefix, kTokens, &cached), want) << "the prefix after the failed reads";
  EXPECT_LT(cached, 44 * 16) << "blocks whose reads failed must be recomputed, not served";
  wait_until([&] {
    unblock_reads();
    return engine->stats().kv_blocks_loading == 0;
  }, 10);
}

// A disk tier bounded far below what goes through it (a full disk): it drops its oldest files and goes on; every
// output is the cold run's, no bad block is ever met, and it stays within its bound.
TEST_F(EngineModelTest, AFullDiskTierDropsItsOldestAndOutputsStayExact) {
  const TempKvDir dir("peregrine_kv_full");
  const double file_bytes = 56 + 16 * 4 + 98304;
  EngineConfig config = big_prefix_config(dir.path, 24 * file_bytes / 1e9);  // 24 blocks of a 44-block prefix
  constexpr int kTokens = 8;
  std::vector<std::vector<int32_t>> prompts;
  for (int k = 0; k < 4; ++k) prompts.push_back(made_up_prompt(20 + k, 44 * 16 + 5));
  const std::vector<std::vector<int32_t>> want = cold_runs(config, prompts, kTokens);
  auto engine = Engine::create(config);
  for (int round = 0; round < 3; ++round)
    for (size_t k = 0; k < prompts.size(); ++k) EXPECT_EQ(run_alone(*engine, prompts[k], kTokens), want[k]) << k;
  const EngineStats s = engine->stats();
  EXPECT_GT(s.kv_disk_bytes_written, static_cast<uint64_t>(24 * file_bytes));
  EXPECT_LE(s.kv_disk_blocks, 24u);
  EXPECT_EQ(s.kv_disk_dropped_bad, 0u);
  EXPECT_EQ(s.kv_disk_dropped_writes, 0u);
}

// A quantized KV cache (fp8, int8: codes plus one scale per token and KV head) through the prefix cache and both
// tiers: hits from the device, the host and the disk give the same tokens as cold runs (the blocks carry their
// scales), and the disk tier's identity includes the KV dtype (an auto-dtype engine on the same folder finds none).
TEST_F(EngineModelTest, QuantizedKvCacheGoesThroughTheTiers) {
  for (const char* kv : {"fp8", "int8"}) {
    const auto dir = std::filesystem::temp_directory_path() / ("peregrine_qkv_dir_" + std::to_string(::getpid()) + kv);
    std::filesystem::remove_all(dir);
    EngineConfig config = small_cache_config("cpu");
    config.kv_cache_dtype = kv;
    config.enable_prefix_caching = false;
    auto cold = Engine::create(config);
    const auto prompts = long_prompts(*cold);
    constexpr int kTokens = 8;
    std::vector<std::vector<int32_t>> want;
    for (const auto& p : prompts) want.push_back(run_alone(*cold, p, kTokens));
    cold.reset();
    config.enable_prefix_caching = true;
    config.kv_offloading_size = 0.0004;  // GiB: a few quantized blocks, so the disk tier serves too
    config.kv_cache_dir = dir.string();
    {
      auto tiered = Engine::create(config);
      for (int round = 0; round < 2; ++round)
        for (size_t k = 0; k < prompts.size(); ++k) EXPECT_EQ(run_alone(*tiered, prompts[k], kTokens), want[k]) << kv << " " << k;
      const EngineStats s = tiered->stats();
      EXPECT_GT(s.prefix_cache_host_hits + s.prefix_cache_disk_hits, 0u) << kv;
      EXPECT_GT(s.kv_disk_bytes_written, 0u) << kv;
    }
    {
      EngineConfig plain = config;
      plain.kv_cache_dtype = "auto";
      auto other = Engine::create(plain);
      EXPECT_EQ(other->stats().kv_disk_blocks_at_start, 0u) << "a float-KV engine must not see " << kv << " blocks";
    }
    auto again = Engine::create(config);
    EXPECT_GT(again->stats().kv_disk_blocks_at_start, 0u) << kv;
    for (size_t k = 0; k < prompts.size(); ++k) EXPECT_EQ(run_alone(*again, prompts[k], kTokens), want[k]) << kv << " restart " << k;
    EXPECT_GT(again->stats().prefix_cache_disk_hits, 0u) << kv;
    again.reset();
    std::filesystem::remove_all(dir);
  }
}

}  // namespace
}  // namespace peregrine
