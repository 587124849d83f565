// GGUF models against llama.cpp (../shared/models/gguf/reference.json), through the Engine as users run them:
// greedy ids equal llama.cpp's up to its near-ties (the first differing step must be one where the top-1 margin,
// llama.cpp's or ours, is below the README's threshold), and top-5 log-probs close before any divergence.
// Two references per file: llama.cpp on an exact f32 dequantization of the file (what exact dequantization + float
// math gives: threshold 1e-2) and llama.cpp's native run (its CPU kernels quantize activations too: 0.1).
#include <gtest/gtest.h>

#include <cmath>
#include <unistd.h>

#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>

#include "ops/backend.h"
#include "peregrine/engine.h"
#include "peregrine/error.h"
#include "test_fixtures.h"

namespace fs = std::filesystem;
using nlohmann::json;
using namespace peregrine;

namespace {

struct GgufCase {
  std::string file;
  std::string device;
  int cases;   // how many of the 8 prompts
  int tokens;  // generated per prompt
  // Against llama.cpp on the exact dequantization: the near-tie threshold and the log-prob bound. The ref backend
  // computes exactly (1e-2 and 5e-3); the CPU kernels round activations to int8 blocks as llama.cpp's do, so they
  // carry llama.cpp's own activation noise (README: thresholds 0.1, log-prob max ~0.5).
  double exact_threshold = 1e-2;
  double logprob_bound = 5e-3;
};

std::string case_name(const ::testing::TestParamInfo<GgufCase>& info) {
  std::string n = info.param.file.substr(std::string("pycoder-tiny-").size());
  n = n.substr(0, n.find('.'));
  return n + "_" + info.param.device;
}

class GgufModel : public ::testing::TestWithParam<GgufCase> {};

const json& reference(const fs::path& dir) {
  static json ref = [&] {
    std::ifstream in(dir / "reference.json");
    return json::parse(in);
  }();
  return ref;
}

// Steps that agree before the first divergence; fails when the divergence is not a near-tie.
int compare_greedy(const std::vector<int32_t>& ours, const std::vector<double>& our_margin, const json& ref,
                   double threshold, const std::string& where) {
  const auto ids = ref["output_ids"].get<std::vector<int32_t>>();
  const auto margins = ref["top1_margin"].get<std::vector<double>>();
  for (size_t s = 0; s < ours.size() && s < ids.size(); ++s) {
    if (ours[s] == ids[s]) continue;
    EXPECT_TRUE(margins[s] < threshold || our_margin[s] < threshold)
        << where << ": step " << s << " gives " << ours[s] << ", llama.cpp " << ids[s] << " with margins " << margins[s]
        << " (llama.cpp) and " << our_margin[s] << " (ours), both above " << threshold;
    return static_cast<int>(s);
  }
  return static_cast<int>(std::min(ours.size(), ids.size()));
}

TEST_P(GgufModel, MatchesLlamaCpp) {
  PEREGRINE_REQUIRE_SHARED(shared);
  const GgufCase& gc = GetParam();
  const fs::path dir = shared / "models" / "gguf";
  const fs::path path = dir / gc.file;
  if (!fs::exists(path)) GTEST_SKIP() << path << " absent";
  if (gc.device == "cuda" && !ops::cuda_available()) GTEST_SKIP() << "no CUDA GPU visible";
  const json& ref = reference(dir);
  const json& file_ref = ref["files"][gc.file];

  EngineConfig ec;
  ec.model = path.string();
  ec.device = gc.device;
  ec.max_num_batched_tokens = 512;
  ec.max_num_seqs = gc.cases;
  ec.max_model_len = 256;
  ec.generation_config = "vllm";
  ec.skip_tokenizer_init = true;  // prompts as ids (the README: llama.cpp's SPM tokenization is not HF's)
  std::unique_ptr<Engine> engine;
  try {
    engine = Engine::create(ec);
  } catch (const Error& e) {
    if (gc.device == "cuda" && e.code() == ErrorCode::kUnsupported) GTEST_SKIP() << e.what();
    throw;
  }

  std::vector<std::vector<int32_t>> prompts;
  for (int i = 0; i < gc.cases; ++i) prompts.push_back(ref["cases"][i]["prompt_ids"].get<std::vector<int32_t>>());
  SamplingParams sp;
  sp.max_tokens = gc.tokens;
  sp.temperature = 0;
  sp.logprobs = 5;
  sp.ignore_eos = true;  // llama.cpp's references continue through EOS
  const std::vector<RequestOutput> results = engine->generate(prompts, sp);

  int exact_prefix = 0, native_prefix = 0, compared = 0;
  double max_lp_error = 0;
  for (int i = 0; i < gc.cases; ++i) {
    ASSERT_FALSE(results[i].error.has_value()) << *results[i].error;
    const CompletionOutput& out = results[i].outputs.at(0);
    ASSERT_EQ(static_cast<int>(out.token_ids.size()), gc.tokens);
    std::vector<double> margin;
    for (const PositionLogprobs& p : out.logprobs) margin.push_back(p.top.at(0).logprob - p.top.at(1).logprob);
    const std::string where = gc.file + " on " + gc.device + ", case " + std::to_string(i);
    const json& exact = file_ref["results_dequantized_f32"][i];
    const int agree = compare_greedy(out.token_ids, margin, exact, gc.exact_threshold, where + " vs exact dequantization");
    native_prefix += compare_greedy(out.token_ids, margin, file_ref["results"][i], 0.1, where + " vs llama.cpp native");
    exact_prefix += agree;
    // Log-probs of the shared tokens before the divergence: llama.cpp's f32 math on the same values.
    for (int s = 0; s < agree; ++s) {
      for (const auto& pair : exact["topk_logprobs"][s]) {
        const int32_t id = pair[0].get<int32_t>();
        for (const TokenLogprob& t : out.logprobs[s].top) {
          if (t.token_id != id) continue;
          const double err = std::fabs(t.logprob - pair[1].get<double>());
          max_lp_error = std::max(max_lp_error, err);
          EXPECT_LT(err, gc.logprob_bound) << where << " step " << s << " token " << id;
          ++compared;
        }
      }
    }
  }
  EXPECT_GT(compared, gc.cases * 4);
  RecordProperty("exact_prefix_steps", exact_prefix);
  std::printf("%s on %s: of %d steps, %d agree with llama.cpp on the exact dequantization and %d with llama.cpp "
              "native before any (near-tie) divergence; max |d logprob| %.2e over %d tokens\n",
              gc.file.c_str(), gc.device.c_str(), gc.cases * gc.tokens, exact_prefix, native_prefix, max_lp_error, compared);
}

// The ref backend is plain loops (slow): a few prompts and tokens there.
INSTANTIATE_TEST_SUITE_P(Ref, GgufModel,
                         ::testing::Values(GgufCase{"pycoder-tiny-q8_0.gguf", "ref", 2, 6},
                                           GgufCase{"pycoder-tiny-q4_0.gguf", "ref", 2, 6},
                                           GgufCase{"pycoder-tiny-q4_k.gguf", "ref", 2, 6}),
                         case_name);
// CUDA (skips without a GPU; scripts/device/gguf_check.sh runs it on the H200).
INSTANTIATE_TEST_SUITE_P(Cuda, GgufModel,
                         ::testing::Values(GgufCase{"pycoder-tiny-q8_0.gguf", "cuda", 8, 32, 0.1, 0.5},
                                           GgufCase{"pycoder-tiny-q4_0.gguf", "cuda", 8, 32, 0.1, 0.5},
                                           GgufCase{"pycoder-tiny-q4_k.gguf", "cuda", 8, 32, 0.1, 0.5}),
                         case_name);
// The CPU kernels: every prompt, every step.
INSTANTIATE_TEST_SUITE_P(Cpu, GgufModel,
                         ::testing::Values(GgufCase{"pycoder-tiny-q8_0.gguf", "cpu", 8, 32, 0.1, 0.5},
                                           GgufCase{"pycoder-tiny-q4_0.gguf", "cpu", 8, 32, 0.1, 0.5},
                                           GgufCase{"pycoder-tiny-q4_k.gguf", "cpu", 8, 32, 0.1, 0.5}),
                         case_name);

TEST(GgufModelErrors, ShapeThatDisagreesWithTheMetadataIsNamed) {
  PEREGRINE_REQUIRE_SHARED(shared);
  const fs::path src = shared / "models" / "gguf" / "pycoder-tiny-q8_0.gguf";
  if (!fs::exists(src)) GTEST_SKIP();
  // The same file with llama.feed_forward_length 1024 -> 1056: every ffn tensor then disagrees.
  std::ifstream in(src, std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const std::string key = "llama.feed_forward_length";
  const size_t at = bytes.find(key);
  ASSERT_NE(at, std::string::npos);
  uint32_t v = 0;
  std::memcpy(&v, bytes.data() + at + key.size() + 4, 4);
  ASSERT_EQ(v, 1024u);
  v = 1056;
  std::memcpy(bytes.data() + at + key.size() + 4, &v, 4);
  const fs::path bad = fs::temp_directory_path() / ("peregrine_gguf_bad_" + std::to_string(::getpid()) + ".gguf");
  std::ofstream(bad, std::ios::binary) << bytes;
  EngineConfig ec;
  ec.model = bad.string();
  ec.device = "ref";
  ec.skip_tokenizer_init = true;
  ec.max_model_len = 64;
  try {
    Engine::create(ec);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kFormatError);
    EXPECT_NE(std::string(e.what()).find(bad.string() + ": tensor 'blk.0.ffn_gate.weight' has ne [384, 1024], expected [384, 1056]"),
              std::string::npos) << e.what();
  }
  fs::remove(bad);
}

TEST(GgufModelErrors, UnsupportedBlockTypeIsNamed) {
  PEREGRINE_REQUIRE_SHARED(shared);
  const fs::path src = shared / "models" / "gguf" / "pycoder-tiny-q8_0.gguf";
  if (!fs::exists(src)) GTEST_SKIP();
  // blk.0.ffn_down.weight (rows of 1024) relabelled Q2_K: a type the reader knows the layout of but Peregrine
  // does not compute on.
  std::ifstream in(src, std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const std::string name = "blk.0.ffn_down.weight";
  const size_t at = bytes.find(name);
  ASSERT_NE(at, std::string::npos);
  const size_t type_at = at + name.size() + 4 + 16;
  uint32_t type = 0;
  std::memcpy(&type, bytes.data() + type_at, 4);
  ASSERT_EQ(type, 8u);  // Q8_0
  type = 10;            // Q2_K
  std::memcpy(bytes.data() + type_at, &type, 4);
  const fs::path bad = fs::temp_directory_path() / ("peregrine_gguf_q2k_" + std::to_string(::getpid()) + ".gguf");
  std::ofstream(bad, std::ios::binary) << bytes;
  EngineConfig ec;
  ec.model = bad.string();
  ec.device = "cpu";
  ec.skip_tokenizer_init = true;
  ec.max_model_len = 64;
  try {
    Engine::create(ec);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kUnsupported);
    EXPECT_NE(std::string(e.what()).find(bad.string() + ": tensor 'blk.0.ffn_down.weight' has type Q2_K"), std::string::npos)
        << e.what();
  }
  fs::remove(bad);
}

}  // namespace
