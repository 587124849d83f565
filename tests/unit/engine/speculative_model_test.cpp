// Speculative decoding on the real model (pycoder-tiny): greedy output token for token identical to plain
// decoding for every text method, alone and in a batch, on code-completion and code-editing prompts (where the
// output re-types the input, so drafts are accepted), with logprobs equal too. On CUDA (bf16, tensor-core
// attention) the same for requests alone: verification rows run as row-exact pieces (Backend::row_exact_layout).
// The drafters' reduced vocabulary (draft_vocab_size, speculative_token_map) keeps the output identical too.
#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <thread>
#include <unistd.h>

#include "ops/backend.h"
#include "peregrine/engine.h"
#include "peregrine/error.h"
#include "test_fixtures.h"

namespace peregrine {
namespace {

const std::filesystem::path kModel = std::filesystem::path(PEREGRINE_SOURCE_DIR) / "models" / "pycoder-tiny";

std::vector<std::string> prompts() {
  std::vector<std::string> out = {
      "def fibonacci(n):\n    ",
      "class Stack:\n    def __init__(self):\n        self.items = []\n\n    def push(self, item):\n        ",
      "import os\nimport sys\n\ndef main():\n    ",
  };
  // Editing-like prompts: a file, an instruction-like comment, and the file's first lines again.
  auto shared = testing::shared_dir();
  if (shared && std::filesystem::exists(*shared / "data" / "code-dev.json")) {
    std::ifstream in(*shared / "data" / "code-dev.json");
    const auto data = nlohmann::json::parse(in);
    for (size_t i = 0; i < data.size() && out.size() < 8; i += 7) {
      std::string text = data[i]["text"].get<std::string>().substr(0, 900);
      const size_t cut = text.find('\n', 300);
      out.push_back(text + "\n# Rewrite the code above with clearer names.\n" + text.substr(0, cut == std::string::npos ? 300 : cut));
    }
  }
  return out;
}

std::vector<RequestOutput> run(const SpeculativeConfig& spec, const std::vector<std::string>& ps, int max_seqs,
                               const std::string& device = "cpu", const std::filesystem::path& model = kModel,
                               EngineStats* stats = nullptr) {
  EngineConfig c;
  c.model = model.string();
  c.device = device;
  c.max_num_seqs = max_seqs;
  c.max_model_len = 2048;
  c.generation_config = "vllm";
  c.speculative = spec;
  auto engine = Engine::create(c);
  SamplingParams p;
  p.temperature = 0;
  p.max_tokens = 64;
  p.logprobs = 2;
  std::vector<std::vector<int32_t>> ids;
  for (const auto& s : ps) ids.push_back(engine->tokenize(s, true));
  std::vector<RequestOutput> out;
  if (max_seqs == 1) {
    for (const auto& one : ids) out.push_back(engine->generate({one}, p).at(0));
  } else {
    out = engine->generate(ids, p);
  }
  if (stats) {
    // The stats snapshot is published after the step that delivered the last output: wait for it.
    uint64_t tokens = 0;
    for (const RequestOutput& o : out) tokens += o.outputs.at(0).token_ids.size();
    *stats = engine->stats();
    for (int spin = 0; spin < 2000 && stats->generation_tokens < tokens; ++spin) {  // up to 10 s (a loaded CI)
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
      *stats = engine->stats();
    }
  }
  return out;
}

// Each request's tokens and chosen logprobs in got equal plain's; adds up the drafted and accepted tokens.
void expect_same_as_plain(const std::vector<RequestOutput>& got, const std::vector<RequestOutput>& plain,
                          const std::string& what, int* drafted, int* accepted) {
  ASSERT_EQ(got.size(), plain.size()) << what;
  for (size_t i = 0; i < got.size(); ++i) {
    const CompletionOutput& a = got[i].outputs.at(0);
    const CompletionOutput& b = plain[i].outputs.at(0);
    ASSERT_EQ(a.token_ids, b.token_ids) << what << " prompt " << i;
    ASSERT_EQ(a.logprobs.size(), b.logprobs.size());
    for (size_t j = 0; j < a.logprobs.size(); ++j)
      EXPECT_EQ(a.logprobs[j].chosen.logprob, b.logprobs[j].chosen.logprob) << what << " prompt " << i << " token " << j;
    *drafted += a.num_draft_tokens;
    *accepted += a.num_accepted_tokens;
  }
}

TEST(SpeculativeModel, GreedyIdenticalToPlainDecodingForEveryMethod) {
  if (!std::filesystem::exists(kModel / "config.json")) GTEST_SKIP() << kModel << " absent";
  const auto ps = prompts();
  const auto plain = run(SpeculativeConfig{}, ps, 8);
  std::vector<std::string> configs = {R"({"method": "ngram", "num_speculative_tokens": 5, "prompt_lookup_max": 4})",
                                      R"({"method": "lookahead", "num_speculative_tokens": 6})",
                                      R"({"method": "lookahead", "num_speculative_tokens": 5, "num_branches": 3, "max_tree_tokens": 12})",
                                      R"({"method": "self", "draft_num_layers": 3, "num_speculative_tokens": 3})"};
  auto shared = testing::shared_dir();
  if (shared && std::filesystem::exists(*shared / "models" / "pycoder-draft" / "config.json")) {
    configs.push_back(R"({"method": "draft_model", "num_speculative_tokens": 4, "model": ")" +
                      (*shared / "models" / "pycoder-draft").string() + "\"}");
    // A drafter window shorter than every prompt: the drafter starts mid-prompt, at positions from 0.
    configs.push_back(R"({"method": "draft_model", "num_speculative_tokens": 4, "draft_context": 5, "model": ")" +
                      (*shared / "models" / "pycoder-draft").string() + "\"}");
  }
  for (const std::string& json : configs) {
    const SpeculativeConfig spec = SpeculativeConfig::parse(json);
    for (int max_seqs : {1, 8}) {
      const auto got = run(spec, ps, max_seqs);
      int drafted = 0, accepted = 0;
      expect_same_as_plain(got, plain, json + " max_seqs " + std::to_string(max_seqs), &drafted, &accepted);
      if (HasFatalFailure()) return;
      EXPECT_GT(accepted, 0) << json;
      std::printf("%s max_seqs %d: %d drafted, %d accepted\n", json.c_str(), max_seqs, drafted, accepted);
    }
  }
}

// On the CPU the LM head's verify rows are computed as the walk over the drafts reaches them (rows past a rejected
// draft never are): output and logprobs identical to plain decoding, and to every row computed with the step
// (PEREGRINE_LAZY_VERIFY=0), with fixed-length chains and with trees.
TEST(SpeculativeModel, VerifyRowsOnDemandKeepGreedyOutput) {
  if (!std::filesystem::exists(kModel / "config.json")) GTEST_SKIP() << kModel << " absent";
  const auto ps = prompts();
  const auto plain = run(SpeculativeConfig{}, ps, 8);
  for (const char* json : {R"({"method": "ngram", "num_speculative_tokens": 8, "prompt_lookup_max": 4, "adaptive": false})",
                           R"({"method": "lookahead", "num_speculative_tokens": 5, "num_branches": 3, "max_tree_tokens": 12, "adaptive": false})"}) {
    const SpeculativeConfig spec = SpeculativeConfig::parse(json);
    const bool tree = std::string(json).find("max_tree_tokens") != std::string::npos;
    for (int max_seqs : {1, 8}) {
      if (tree && max_seqs == 1) continue;  // trees alone: GreedyIdenticalToPlainDecodingForEveryMethod
      const std::string what = std::string(json) + " max_seqs " + std::to_string(max_seqs);
      EngineStats lazy_stats, eager_stats;
      const auto lazy = run(spec, ps, max_seqs, "cpu", kModel, &lazy_stats);
      ::setenv("PEREGRINE_LAZY_VERIFY", "0", 1);
      const auto eager = run(spec, ps, max_seqs, "cpu", kModel, &eager_stats);
      ::unsetenv("PEREGRINE_LAZY_VERIFY");
      int drafted = 0, accepted = 0;
      expect_same_as_plain(lazy, plain, what, &drafted, &accepted);
      expect_same_as_plain(eager, plain, what + " (eager rows)", &drafted, &accepted);
      if (HasFatalFailure()) return;
      EXPECT_GT(lazy_stats.spec_lazy_rounds, 0u) << what;
      EXPECT_GT(lazy_stats.spec_lazy_rows, 0u) << what;
      EXPECT_EQ(eager_stats.spec_lazy_rounds, 0u) << what;
      // ngram drafts from each request's own tokens: the same drafts either way, for requests run one at a time. In
      // a batch, how many drafts a step takes depends on what else the step holds (the token budget shared with
      // the prefills of requests still arriving), which timing may change; the lookahead trie learns from every
      // request in the order their steps ran. Those are not compared (a flaky assertion otherwise).
      if (!tree && max_seqs == 1) {
        EXPECT_EQ(lazy_stats.spec_num_accepted_tokens, eager_stats.spec_num_accepted_tokens) << what;
      }
      // The later rounds computed fewer rows than the steps deferred (at least one per draft past the first rows).
      EXPECT_LT(lazy_stats.spec_lazy_rows, lazy_stats.spec_num_draft_tokens) << what;
      std::printf("%s: %llu verify steps, %llu drafts, %llu rows in %llu later rounds\n", what.c_str(),
                  static_cast<unsigned long long>(lazy_stats.spec_num_drafts),
                  static_cast<unsigned long long>(lazy_stats.spec_num_draft_tokens),
                  static_cast<unsigned long long>(lazy_stats.spec_lazy_rows),
                  static_cast<unsigned long long>(lazy_stats.spec_lazy_rounds));
    }
  }
}

// A reduced draft vocabulary (draft_vocab_size: chosen by frequency; speculative_token_map: a fixed set) changes
// only what can be drafted: output identical to plain decoding, with a subset that holds most of what the text
// uses, a tiny one that leaves out nearly every token, and token map files (whitespace-separated and JSON).
TEST(SpeculativeModel, ReducedDraftVocabularyKeepsGreedyOutput) {
  if (!std::filesystem::exists(kModel / "config.json")) GTEST_SKIP() << kModel << " absent";
  const auto ps = prompts();
  const auto plain = run(SpeculativeConfig{}, ps, 8);
  const auto dir = std::filesystem::temp_directory_path() / ("peregrine_spec_map_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  {
    std::ofstream words(dir / "first3000.txt");
    for (int t = 0; t < 3000; ++t) words << t << (t % 20 == 19 ? '\n' : ' ');
    nlohmann::json list = nlohmann::json::array();
    for (int t = 0; t < 500; ++t) list.push_back(t);
    std::ofstream(dir / "first500.json") << list.dump();
  }
  const std::string self = R"({"method": "self", "draft_num_layers": 3, "num_speculative_tokens": 3, )";
  std::vector<std::pair<std::string, int>> configs = {  // config, max_seqs
      {self + R"("draft_vocab_size": 0})", 8},  // the whole vocabulary (the default is a subset)
      {self + R"("draft_vocab_size": 4096})", 8},  // (at max_seqs 1: the self run of GreedyIdenticalToPlainDecodingForEveryMethod)
      {self + R"("draft_vocab_size": 16})", 8},  // 64 rows: nearly every token left out
      {self + R"("speculative_token_map": ")" + (dir / "first500.json").string() + "\"}", 8},
  };
  auto shared = testing::shared_dir();
  if (shared && std::filesystem::exists(*shared / "models" / "pycoder-draft" / "config.json")) {
    const std::string draft = R"({"method": "draft_model", "num_speculative_tokens": 4, "model": ")" +
                              (*shared / "models" / "pycoder-draft").string() + "\", ";
    configs.push_back({draft + R"("draft_vocab_size": 2048})", 8});
    configs.push_back({draft + R"("draft_vocab_size": 1})", 8});
    configs.push_back({draft + R"("speculative_token_map": ")" + (dir / "first3000.txt").string() + "\"}", 8});
  }
  for (const auto& [json, max_seqs] : configs) {
    const auto got = run(SpeculativeConfig::parse(json), ps, max_seqs);
    int drafted = 0, accepted = 0;
    expect_same_as_plain(got, plain, json + " max_seqs " + std::to_string(max_seqs), &drafted, &accepted);
    if (HasFatalFailure()) return;
    EXPECT_GT(drafted, 0) << json;
    if (json.find("4096") != std::string::npos || json.find("2048") != std::string::npos) {
      EXPECT_GT(accepted, 0) << json;
    }
    std::printf("%s max_seqs %d: %d drafted, %d accepted\n", json.c_str(), max_seqs, drafted, accepted);
  }
  std::filesystem::remove_all(dir);
}

// GGUF models as llama.cpp wrote them (../shared/models/gguf): self-speculation with a reduced draft vocabulary cuts
// the file's own LM head by rows (Q4_0, and the Q4_K mix's head; RunnerLogitsSubset checks Q8_0's rows) and keeps
// greedy output identical.
TEST(SpeculativeModel, ReducedDraftVocabularyOnGgufHeads) {
  auto shared = testing::shared_dir();
  if (!shared || !std::filesystem::exists(*shared / "models" / "gguf")) GTEST_SKIP() << "no ../shared/models/gguf";
  const auto ps = prompts();
  for (const char* file : {"pycoder-tiny-q4_0.gguf", "pycoder-tiny-q4_k.gguf"}) {
    const std::filesystem::path model = *shared / "models" / "gguf" / file;
    const auto plain = run(SpeculativeConfig{}, ps, 8, "cpu", model);
    for (const char* json :
         {R"({"method": "self", "draft_num_layers": 3, "num_speculative_tokens": 3, "draft_vocab_size": 512})",
          R"({"method": "self", "draft_num_layers": 2, "num_speculative_tokens": 4})"}) {
      const auto got = run(SpeculativeConfig::parse(json), ps, 8, "cpu", model);
      int drafted = 0, accepted = 0;
      expect_same_as_plain(got, plain, std::string(file) + " " + json, &drafted, &accepted);
      if (HasFatalFailure()) return;
      EXPECT_GT(drafted, 0) << file << " " << json;
      std::printf("%s %s: %d drafted, %d accepted\n", file, json, drafted, accepted);
    }
  }
}

// A draft vocabulary the engine cannot use is refused at startup, naming the key and the file.
TEST(SpeculativeModel, BadTokenMapIsRefusedNamingTheFile) {
  if (!std::filesystem::exists(kModel / "config.json")) GTEST_SKIP() << kModel << " absent";
  const auto file = std::filesystem::temp_directory_path() / ("peregrine_bad_map_" + std::to_string(::getpid()) + ".json");
  std::ofstream(file) << "[1, 2, 32000]";
  EngineConfig c;
  c.model = kModel.string();
  c.device = "cpu";
  c.max_model_len = 256;
  c.speculative = SpeculativeConfig::parse(R"({"method": "self", "draft_num_layers": 2, "num_speculative_tokens": 2, "speculative_token_map": ")" +
                                           file.string() + "\"}");
  try {
    Engine::create(c);
    ADD_FAILURE() << "accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    EXPECT_NE(e.message().find("speculative_config.speculative_token_map"), std::string::npos) << e.message();
    EXPECT_NE(e.message().find(file.string()), std::string::npos) << e.message();
    EXPECT_NE(e.message().find("32000"), std::string::npos) << e.message();
  }
  std::filesystem::remove(file);
}

TEST(SpeculativeModel, GreedyIdenticalToPlainDecodingOnCuda) {
  if (!ops::cuda_available()) GTEST_SKIP() << "no CUDA GPU visible";
  if (!std::filesystem::exists(kModel / "config.json")) GTEST_SKIP() << kModel << " absent";
  const auto ps = prompts();
  const auto plain = run(SpeculativeConfig{}, ps, 1, "cuda");
  std::vector<std::string> configs = {
      R"({"method": "ngram", "num_speculative_tokens": 5, "prompt_lookup_max": 4})",
      R"({"method": "lookahead", "num_speculative_tokens": 6})",
      R"({"method": "ngram", "num_speculative_tokens": 15, "prompt_lookup_max": 4})",
      R"({"method": "lookahead", "num_speculative_tokens": 5, "num_branches": 3, "max_tree_tokens": 12})",
      R"({"method": "self", "draft_num_layers": 3, "num_speculative_tokens": 3})",  // the default draft vocabulary
      R"({"method": "self", "draft_num_layers": 3, "num_speculative_tokens": 3, "draft_vocab_size": 0})",
      R"({"method": "self", "draft_num_layers": 3, "num_speculative_tokens": 3, "draft_vocab_size": 16})"};
  auto shared = testing::shared_dir();
  if (shared && std::filesystem::exists(*shared / "models" / "pycoder-draft" / "config.json"))
    configs.push_back(R"({"method": "draft_model", "num_speculative_tokens": 4, "draft_vocab_size": 2048, "model": ")" +
                      (*shared / "models" / "pycoder-draft").string() + "\"}");
  for (const std::string& config : configs) {
    const char* json = config.c_str();
    const auto got = run(SpeculativeConfig::parse(json), ps, 1, "cuda");
    int accepted = 0;
    for (size_t i = 0; i < ps.size(); ++i) {
      const CompletionOutput& a = got[i].outputs.at(0);
      const CompletionOutput& b = plain[i].outputs.at(0);
      EXPECT_EQ(a.token_ids, b.token_ids) << json << " prompt " << i;
      if (a.token_ids != b.token_ids) continue;
      for (size_t j = 0; j < a.logprobs.size(); ++j)
        EXPECT_EQ(a.logprobs[j].chosen.logprob, b.logprobs[j].chosen.logprob) << json << " prompt " << i << " token " << j;
      accepted += a.num_accepted_tokens;
    }
    EXPECT_GT(accepted, 0) << json;
    std::printf("cuda %s: %d accepted\n", json, accepted);
  }
}

}  // namespace
}  // namespace peregrine
