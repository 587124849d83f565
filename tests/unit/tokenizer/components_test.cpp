// Unit tests of the tokenizer's components, each on a small tokenizer.json built in code.
#include <gtest/gtest.h>

#include <fstream>
#include <random>

#include "core/status.h"
#include "tokenizer/added_tokens.h"
#include "tokenizer/byte_level.h"
#include "tokenizer/fast_split.h"
#include "tokenizer/pre_tokenizers.h"
#include "tokenizer/regex.h"
#include "tokenizer/unicode.h"
#include "unit/tokenizer/test_util.h"

namespace peregrine::tokenizer {
namespace {

using testing::byte_level_json;
using testing::make;
using testing::sentencepiece_json;
using Ids = std::vector<int32_t>;

// --- BPE model -------------------------------------------------------------------------------------------

TEST(Bpe, ByteLevelMergesByRank) {
  // "Ġ" is the byte-level character of ' '.
  auto tok = make(byte_level_json({"a", "b", "c", "ab", "abc", "\xC4\xA0", "\xC4\xA0" "a", "bc"},
                                  {"a b", "ab c", "\xC4\xA0 a", "b c"}));
  EXPECT_EQ(tok->encode("ab abc"), (Ids{3, 5, 4}));  // "Ġabc": a+b first (rank 0), then ab+c; Ġ stays alone
  EXPECT_EQ(tok->encode("bc"), (Ids{7}));
  EXPECT_EQ(tok->encode("cab"), (Ids{2, 3}));
  EXPECT_EQ(tok->decode(Ids{3, 5, 4}), "ab abc");
}

TEST(Bpe, LeftmostWinsOnEqualRank) {
  auto tok = make(byte_level_json({"a", "aa"}, {"a a"}));
  EXPECT_EQ(tok->encode("aaa"), (Ids{1, 0}));
  EXPECT_EQ(tok->encode("aaaa"), (Ids{1, 1}));
}

TEST(Bpe, LongWordUsesHeapPathWithSameResult) {
  auto tok = make(byte_level_json({"a", "b", "ab", "abab"}, {"a b", "ab ab"}));
  std::string word;
  Ids expected;
  for (int i = 0; i < 300; ++i) word += "ab";
  for (int i = 0; i < 150; ++i) expected.push_back(3);
  EXPECT_EQ(tok->encode(word), expected);
  EXPECT_EQ(tok->encode(word + "a"), [&] { Ids e = expected; e.push_back(0); return e; }());
}

TEST(Bpe, IgnoreMergesTakesWholeWord) {
  auto j = byte_level_json({"a", "b", "c", "ab", "abc"}, {"a b"});  // no merge produces "abc"
  EXPECT_EQ(make(j)->encode("abc"), (Ids{3, 2}));
  j["model"]["ignore_merges"] = true;
  EXPECT_EQ(make(j)->encode("abc"), (Ids{4}));
}

TEST(Bpe, MergesAsPairsFormat) {
  auto j = byte_level_json({"a", "b", "ab"}, {});
  j["model"]["merges"] = nlohmann::json::array({nlohmann::json::array({"a", "b"})});
  EXPECT_EQ(make(j)->encode("ab"), (Ids{2}));
}

TEST(Bpe, ByteFallbackAndUnk) {
  auto tok = make(sentencepiece_json({"\xE2\x96\x81", "h", "i", "\xE2\x96\x81h", "\xE2\x96\x81hi"},
                                     {"\xE2\x96\x81 h", "\xE2\x96\x81h i"}));
  // "▁hi" merges fully; "é" is not in the vocabulary -> bytes C3 A9 -> <0xC3> <0xA9>.
  EXPECT_EQ(tok->encode("hi"), (Ids{1, 263}));
  EXPECT_EQ(tok->encode("hi\xC3\xA9", false), (Ids{263, 3 + 0xC3, 3 + 0xA9}));
  EXPECT_EQ(tok->decode(tok->encode("hi\xC3\xA9")), "hi\xC3\xA9");
  // Without byte fallback, unknown characters become one fused <unk>.
  auto j = sentencepiece_json({"\xE2\x96\x81", "h", "i"}, {});
  j["model"]["byte_fallback"] = false;
  EXPECT_EQ(make(j)->encode("h\xC3\xA9\xC3\xA8i", false), (Ids{259, 260, 0, 261}));
  j["model"]["fuse_unk"] = false;
  EXPECT_EQ(make(j)->encode("h\xC3\xA9\xC3\xA8i", false), (Ids{259, 260, 0, 0, 261}));
}

TEST(Bpe, ContinuingSubwordPrefixAndEndOfWordSuffix) {
  nlohmann::json v = {{"a", 0}, {"##b</w>", 1}, {"ab</w>", 2}, {"c</w>", 3}, {"##c</w>", 4}};
  nlohmann::json j = {{"normalizer", nullptr}, {"pre_tokenizer", {{"type", "WhitespaceSplit"}}}, {"post_processor", nullptr},
                      {"decoder", nullptr}, {"added_tokens", nlohmann::json::array()},
                      {"model", {{"type", "BPE"}, {"vocab", v}, {"merges", {"a ##b</w>"}}, {"continuing_subword_prefix", "##"},
                                 {"end_of_word_suffix", "</w>"}}}};
  auto tok = make(j);
  EXPECT_EQ(tok->encode("ab"), (Ids{2}));  // "a" + "##b</w>" merge into "ab</w>"
  EXPECT_EQ(tok->encode("c"), (Ids{3}));
  EXPECT_EQ(tok->encode("ac"), (Ids{0, 4}));
}

// --- Normalizers ---------------------------------------------------------------------------------------------

std::string normalized(const nlohmann::json& normalizer, const std::string& text) {
  // Identity vocabulary of single bytes: decode(encode) shows the normalized text.
  std::vector<std::string> vocab;
  for (int b = 0; b < 256; ++b) vocab.push_back(bytes_to_byte_level(std::string(1, static_cast<char>(b))));
  auto j = byte_level_json(vocab, {});
  j["pre_tokenizer"]["use_regex"] = false;
  j["normalizer"] = normalizer;
  auto tok = make(j);
  return tok->decode(tok->encode(text));
}

TEST(Normalizers, UnicodeForms) {
  EXPECT_EQ(normalized({{"type", "NFC"}}, "Cafe\xCC\x81"), "Caf\xC3\xA9");
  EXPECT_EQ(normalized({{"type", "NFD"}}, "Caf\xC3\xA9"), "Cafe\xCC\x81");
  EXPECT_EQ(normalized({{"type", "NFKC"}}, "\xEF\xAC\x81 \xE2\x91\xA0 \xEF\xBD\xB6"), "fi 1 \xE3\x82\xAB");  // ﬁ ① ｶ
  EXPECT_EQ(normalized({{"type", "NFKD"}}, "\xE2\x84\xAB"), "A\xCC\x8A");                               // Å (Angstrom)
}

TEST(Normalizers, ReplacePrependStripLowercaseSequence) {
  EXPECT_EQ(normalized({{"type", "Replace"}, {"pattern", {{"String", "  "}}}, {"content", "_"}}, "a   b"), "a_ b");
  EXPECT_EQ(normalized({{"type", "Replace"}, {"pattern", {{"Regex", "\\s+"}}}, {"content", " "}}, "a \t\n b"), "a b");
  EXPECT_EQ(normalized({{"type", "Prepend"}, {"prepend", ">"}}, "x"), ">x");
  EXPECT_EQ(normalized({{"type", "Strip"}, {"strip_left", true}, {"strip_right", false}}, " \t x "), "x ");
  EXPECT_EQ(normalized({{"type", "Strip"}, {"strip_left", true}, {"strip_right", true}}, "\xE3\x80\x80x \n"), "x");
  EXPECT_EQ(normalized({{"type", "Lowercase"}}, "HeLLo \xC3\x89\xCE\xA3"), "hello \xC3\xA9\xCF\x82");  // É Σ (final)
  EXPECT_EQ(normalized({{"type", "Sequence"},
                        {"normalizers", {{{"type", "Lowercase"}}, {{"type", "Prepend"}, {"prepend", "#"}}}}},
                       "AB"),
            "#ab");
  EXPECT_EQ(normalized({{"type", "StripAccents"}}, "e\xCC\x81"), "e");
}

// --- Pre-tokenizers ------------------------------------------------------------------------------------------

std::vector<std::string> pieces(const nlohmann::json& config, const std::string& text) {
  auto pre = make_pre_tokenizer(config);
  PreTokens pt{text, {Span{0, static_cast<uint32_t>(text.size()), true}}};
  pre->pre_tokenize(pt);
  std::vector<std::string> out;
  for (const Span& s : pt.spans) out.emplace_back(pt.view(s));
  return out;
}
using Strs = std::vector<std::string>;

TEST(PreTokenizers, SplitBehaviors) {
  auto split = [](const char* behavior, bool invert) {
    return nlohmann::json{{"type", "Split"}, {"pattern", {{"String", "-"}}}, {"behavior", behavior}, {"invert", invert}};
  };
  std::string t = "a-b--c-";
  EXPECT_EQ(pieces(split("Removed", false), t), (Strs{"a", "b", "c"}));
  EXPECT_EQ(pieces(split("Isolated", false), t), (Strs{"a", "-", "b", "-", "-", "c", "-"}));
  EXPECT_EQ(pieces(split("MergedWithPrevious", false), t), (Strs{"a-", "b-", "-", "c-"}));
  EXPECT_EQ(pieces(split("MergedWithNext", false), t), (Strs{"a", "-b", "-", "-c", "-"}));
  EXPECT_EQ(pieces(split("Contiguous", false), t), (Strs{"a", "-", "b", "--", "c", "-"}));
  // invert: the pattern matches what to keep.
  nlohmann::json inv = {{"type", "Split"}, {"pattern", {{"Regex", "\\w+"}}}, {"behavior", "Removed"}, {"invert", true}};
  EXPECT_EQ(pieces(inv, "hi, you!"), (Strs{"hi", "you"}));
}

TEST(PreTokenizers, SplitRegexLlama3) {
  nlohmann::json j = {{"type", "Split"},
                      {"pattern", {{"Regex", "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"}}},
                      {"behavior", "Isolated"}, {"invert", false}};
  EXPECT_EQ(pieces(j, "I'M here  12345\n\nok"), (Strs{"I", "'M", " here", " ", " ", "123", "45", "\n\n", "ok"}));
}

TEST(PreTokenizers, ByteLevelPrefixAndRegex) {
  nlohmann::json j = {{"type", "ByteLevel"}, {"add_prefix_space", true}, {"use_regex", true}};
  EXPECT_EQ(pieces(j, "hi there"), (Strs{"\xC4\xA0hi", "\xC4\xA0there"}));
}

TEST(PreTokenizers, MetaspaceSchemes) {
  auto ms = [](const char* scheme, bool split) {
    return nlohmann::json{{"type", "Metaspace"}, {"replacement", "\xE2\x96\x81"}, {"prepend_scheme", scheme}, {"split", split}};
  };
  EXPECT_EQ(pieces(ms("always", true), "a b"), (Strs{"\xE2\x96\x81" "a", "\xE2\x96\x81" "b"}));
  EXPECT_EQ(pieces(ms("never", true), "a b"), (Strs{"a", "\xE2\x96\x81" "b"}));
  EXPECT_EQ(pieces(ms("first", false), "a b"), (Strs{"\xE2\x96\x81" "a\xE2\x96\x81" "b"}));
}

TEST(PreTokenizers, DigitsPunctuationWhitespace) {
  EXPECT_EQ(pieces({{"type", "Digits"}, {"individual_digits", true}}, "a12b"), (Strs{"a", "1", "2", "b"}));
  EXPECT_EQ(pieces({{"type", "Digits"}, {"individual_digits", false}}, "a12b"), (Strs{"a", "12", "b"}));
  EXPECT_EQ(pieces({{"type", "Punctuation"}}, "hi!?x"), (Strs{"hi", "!", "?", "x"}));
  EXPECT_EQ(pieces({{"type", "Punctuation"}, {"behavior", "Contiguous"}}, "hi!?x"), (Strs{"hi", "!?", "x"}));
  EXPECT_EQ(pieces({{"type", "WhitespaceSplit"}}, " a  b\tc "), (Strs{"a", "b", "c"}));
  EXPECT_EQ(pieces({{"type", "Whitespace"}}, "hi, you"), (Strs{"hi", ",", "you"}));
  EXPECT_EQ(pieces({{"type", "Sequence"}, {"pretokenizers", {{{"type", "WhitespaceSplit"}}, {{"type", "Digits"}}}}}, "a1 b"),
            (Strs{"a", "1", "b"}));
}

TEST(Regex, OnigurumaWhiteSpaceAndHex) {
  // \s is Unicode White_Space, which includes U+0085 (PCRE2's \s does not).
  Pattern p = Pattern::regex("\\s+");
  size_t b, e;
  ASSERT_TRUE(p.find("a\xC2\x85" "b", 0, b, e));
  EXPECT_EQ(b, 1u);
  EXPECT_EQ(e, 3u);
  Pattern h = Pattern::regex("\\h+");
  ASSERT_TRUE(h.find("zz0aF9q", 0, b, e));
  EXPECT_EQ(std::string("zz0aF9q").substr(b, e - b), "0aF9");
  EXPECT_THROW(Pattern::regex("(unclosed"), Error);
}

// --- Added tokens --------------------------------------------------------------------------------------------

nlohmann::json added(int id, const char* content, bool special, bool lstrip = false, bool rstrip = false,
                     bool single_word = false, bool normalized = false) {
  return {{"id", id}, {"content", content}, {"special", special}, {"lstrip", lstrip}, {"rstrip", rstrip},
          {"single_word", single_word}, {"normalized", normalized}};
}

std::unique_ptr<Tokenizer> with_added(nlohmann::json tokens, nlohmann::json normalizer = nullptr) {
  std::vector<std::string> vocab;
  for (int b = 0; b < 256; ++b) vocab.push_back(bytes_to_byte_level(std::string(1, static_cast<char>(b))));
  auto j = byte_level_json(vocab, {});
  j["pre_tokenizer"]["use_regex"] = false;
  j["added_tokens"] = std::move(tokens);
  j["normalizer"] = std::move(normalizer);
  return make(j);
}

TEST(AddedTokens, LongestLeftmostMatch) {
  auto tok = with_added({added(300, "<a>", true), added(301, "<a><b>", true), added(302, "b>", false)});
  EXPECT_EQ(tok->encode("x<a><b>y"), (Ids{'x', 301, 'y'}));
  EXPECT_EQ(tok->encode("<a>b>"), (Ids{300, 302}));
  EXPECT_EQ(tok->decode(Ids{'x', 301, 302}), "xb>");  // special skipped
  EXPECT_EQ(tok->decode(Ids{'x', 301, 302}, false), "x<a><b>b>");
  EXPECT_TRUE(tok->is_special(300));
  EXPECT_FALSE(tok->is_special(302));
  EXPECT_EQ(tok->token_to_id("<a><b>"), 301);
  EXPECT_EQ(tok->vocab_size(), 303);
}

TEST(AddedTokens, LstripRstripSingleWord) {
  auto tok = with_added({added(300, "<m>", true, /*lstrip=*/true, /*rstrip=*/true), added(301, "tok", false, false, false, /*single_word=*/true)});
  EXPECT_EQ(tok->encode("a  <m>  b"), (Ids{'a', 300, 'b'}));
  EXPECT_EQ(tok->encode("tok x"), (Ids{301, ' ', 'x'}));
  EXPECT_EQ(tok->encode("atok"), (Ids{'a', 't', 'o', 'k'}));
  EXPECT_EQ(tok->encode("tok_"), (Ids{'t', 'o', 'k', '_'}));
}

TEST(AddedTokens, NormalizedTokensMatchAfterNormalization) {
  auto tok = with_added({added(300, "HI", false, false, false, false, /*normalized=*/true)}, {{"type", "Lowercase"}});
  EXPECT_EQ(tok->encode("xHIx"), (Ids{'x', 300, 'x'}));
  EXPECT_EQ(tok->encode("xhix"), (Ids{'x', 300, 'x'}));
}

// --- Post-processors and configuration -----------------------------------------------------------------------

TEST(PostProcessors, TemplateAndConfigFlags) {
  auto j = sentencepiece_json({"\xE2\x96\x81", "h"}, {});
  EXPECT_EQ(make(j)->encode("h"), (Ids{1, 259, 260}));
  EXPECT_EQ(make(j)->encode("h", false), (Ids{259, 260}));
  nlohmann::json cfg = {{"tokenizer_class", "LlamaTokenizerFast"}, {"bos_token", "<s>"}, {"eos_token", "</s>"},
                        {"add_bos_token", false}, {"add_eos_token", true}};
  EXPECT_EQ(make(j, cfg)->encode("h"), (Ids{259, 260, 2}));
  // ByteLevel post-processor leaves ids alone; Bert-style adds cls/sep.
  auto b = byte_level_json({"a", "[CLS]", "[SEP]"}, {});
  b["post_processor"] = {{"type", "Sequence"},
                         {"processors", {{{"type", "ByteLevel"}}, {{"type", "BertProcessing"}, {"cls", {"[CLS]", 1}}, {"sep", {"[SEP]", 2}}}}}};
  EXPECT_EQ(make(b)->encode("a"), (Ids{1, 0, 2}));
}

TEST(Config, SpecialTokensAndGenerationEos) {
  auto j = sentencepiece_json({"\xE2\x96\x81"}, {});
  nlohmann::json cfg = {{"bos_token", {{"__type", "AddedToken"}, {"content", "<s>"}}}, {"eos_token", "</s>"}, {"pad_token", nullptr}};
  auto tok = Tokenizer::from_json(j.dump(), cfg.dump(), R"({"eos_token_id": [2, 0], "bos_token_id": 1})");
  EXPECT_EQ(tok->bos_id(), 1);
  EXPECT_EQ(tok->eos_id(), 2);
  EXPECT_EQ(tok->bos_token(), "<s>");
  EXPECT_EQ(tok->eos_token(), "</s>");
  EXPECT_FALSE(tok->pad_id().has_value());
  EXPECT_EQ(tok->eos_ids(), (Ids{2, 0}));
  EXPECT_TRUE(tok->add_bos_token());
}

// --- Decoders ------------------------------------------------------------------------------------------------

TEST(Decoders, SentencePieceChain) {
  auto tok = make(sentencepiece_json({"\xE2\x96\x81", "h", "\xE2\x96\x81h"}, {"\xE2\x96\x81 h"}));
  EXPECT_EQ(tok->decode(Ids{261, 261}), "h h");          // leading space stripped once
  EXPECT_EQ(tok->decode(Ids{259, 261}), " h");           // "▁▁h" -> "  h" -> " h"
  EXPECT_EQ(tok->decode(Ids{3 + 0xE4, 3 + 0xBD, 3 + 0xA0}), "\xE4\xBD\xA0");  // byte fallback -> 你
  EXPECT_EQ(tok->decode(Ids{3 + 0xE4, 260}), "\xEF\xBF\xBDh");                 // truncated sequence -> U+FFFD
  EXPECT_EQ(tok->decode(Ids{1, 261}, false), "<s> h");
}

TEST(Decoders, CleanUpTokenizationSpaces) {
  EXPECT_EQ(clean_up_tokenization("a , b . c ' d do n't I 'm"), "a, b. c'd don't I'm");
}

// --- Errors --------------------------------------------------------------------------------------------------

TEST(Errors, InvalidUtf8NamesByteOffset) {
  auto tok = make(byte_level_json({"a"}, {}));
  try {
    tok->encode(std::string("aa\xE4\xBD", 4));
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    EXPECT_NE(e.message().find("byte offset 2"), std::string::npos) << e.message();
  }
  EXPECT_THROW(tok->encode("\xC0\x80"), Error);        // overlong
  EXPECT_THROW(tok->encode("\xED\xA0\x80"), Error);    // surrogate
  EXPECT_THROW(tok->encode("\xF4\x90\x80\x80"), Error);  // > U+10FFFF
  EXPECT_NO_THROW(tok->encode("\xF0\x9F\x98\x80"));
}

TEST(Errors, MalformedOrUnsupportedJson) {
  EXPECT_THROW(Tokenizer::from_json("{", ""), Error);
  EXPECT_THROW(Tokenizer::from_json(R"({"model": {"type": "Unigram", "vocab": []}})", ""), Error);
  auto j = byte_level_json({"a"}, {});
  j["normalizer"] = {{"type", "NoSuchNormalizer"}};
  try {
    make(j);
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kUnsupported);
  }
  EXPECT_THROW(Tokenizer::load("/nonexistent/dir"), Error);
}

TEST(Unicode, LossyDecoderMatchesOneShot) {
  std::string bytes = "a\xE4\xBD\xA0\xE4\xBD" "b\xFF\xF0\x9F\x98\x80\xC3";
  std::string expected = utf8_lossy(bytes);
  EXPECT_EQ(expected, "a\xE4\xBD\xA0\xEF\xBF\xBD" "b\xEF\xBF\xBD\xF0\x9F\x98\x80\xEF\xBF\xBD");
  for (size_t cut = 0; cut <= bytes.size(); ++cut) {
    Utf8LossyDecoder d;
    std::string out;
    d.feed(bytes.substr(0, cut), out);
    d.feed(bytes.substr(cut), out);
    d.finish(out);
    EXPECT_EQ(out, expected) << "cut " << cut;
  }
}

}  // namespace
}  // namespace peregrine::tokenizer

// --- Fast pre-tokenizer matchers agree with PCRE2 ------------------------------------------------------------

namespace peregrine::tokenizer {
namespace {

std::vector<std::string> split_with(const std::string& pattern, const std::string& text, bool force_regex) {
  PreTokens pt{text, {Span{0, static_cast<uint32_t>(text.size()), true}}};
  if (force_regex) {
    split_spans(pt, Pattern::regex(pattern), SplitBehavior::kIsolated, false);
  } else {
    auto pre = make_pre_tokenizer({{"type", "Split"}, {"pattern", {{"Regex", pattern}}}, {"behavior", "Isolated"}, {"invert", false}});
    pre->pre_tokenize(pt);
  }
  std::vector<std::string> out;
  for (const Span& s : pt.spans) out.emplace_back(pt.view(s));
  return out;
}

TEST(FastSplit, MatchesPcre2OnRandomText) {
  const std::string llama3 = R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
  const std::string qwen2 = R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
  ASSERT_NE(fast_split_kind(llama3), FastSplitKind::kNone);
  ASSERT_NE(fast_split_kind(qwen2), FastSplitKind::kNone);
  const std::vector<std::string> pool = {
      "a", "Z", "s", "S", "t", "T", "r", "e", "E", "v", "m", "l", "L", "d", "'", "'", " ", " ", " ", "\t", "\n", "\r",
      "\v", "\f", "1", "9", "0", ".", ",", "!", "(", "_", "-", "\xC5\xBF" /* ſ */, "\xC3\xA9", "\xCC\x81" /* combining */,
      "\xE4\xBD\xA0", "\xE3\x80\x80" /* ideographic space */, "\xC2\xA0", "\xC2\x85", "\xE2\x80\xA8", "\xE2\x80\x8B",
      "\xD9\xA3" /* Arabic-Indic 3 */, "\xE2\x85\xAB" /* Roman numeral */, "\xF0\x9F\x98\x80", "\xE2\x80\x8D", "\xEF\xBC\x91"};
  std::mt19937 rng(7);
  for (int round = 0; round < 4000; ++round) {
    std::string text;
    int len = 1 + static_cast<int>(rng() % 24);
    for (int k = 0; k < len; ++k) text += pool[rng() % pool.size()];
    for (const auto* p : {&llama3, &qwen2})
      ASSERT_EQ(split_with(*p, text, false), split_with(*p, text, true)) << nlohmann::json(text).dump();
  }
  std::ifstream f(std::string(PEREGRINE_SOURCE_DIR) + "/tests/data/tokenizer_corpus.json");
  for (const auto& text : nlohmann::json::parse(f).get<std::vector<std::string>>())
    for (const auto* p : {&llama3, &qwen2}) ASSERT_EQ(split_with(*p, text, false), split_with(*p, text, true)) << text;
}

}  // namespace
}  // namespace peregrine::tokenizer
