// Structured outputs: regex, JSON Schema, EBNF/Lark grammars, the matcher against a naive reference, and the token
// mask (trie walk + cache) against trying every token byte by byte, on random states.
#include <gtest/gtest.h>

#include <chrono>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>

#include "engine/structured/structured.h"
#include "peregrine/error.h"

namespace peregrine::engine::structured {
namespace {

using Json = nlohmann::ordered_json;

bool full_match(const Grammar& g, std::string_view s) {
  GrammarAutomaton a(g);
  const int32_t st = a.run(a.initial(), s);
  return st >= 0 && a.accepting(st);
}

bool viable(const Grammar& g, std::string_view s) {
  GrammarAutomaton a(g);
  return a.run(a.initial(), s) >= 0;
}

// A naive reference: explicit stacks of frames (no interning, no tail calls, no DFA).
struct NaiveFrame {
  int rule, alt, pos;
};
using NaiveStack = std::vector<NaiveFrame>;

void naive_settle(const Grammar& g, NaiveStack st, std::vector<NaiveStack>& out, int budget) {
  if (budget <= 0) return;
  if (st.empty()) {
    out.push_back(st);
    return;
  }
  NaiveFrame f = st.back();
  const Sequence& s = g.rules[static_cast<size_t>(f.rule)].alts[static_cast<size_t>(f.alt)];
  if (f.pos == static_cast<int>(s.size())) {
    st.pop_back();
    if (!st.empty()) st.back().pos++;
    naive_settle(g, st, out, budget - 1);
    return;
  }
  const Element e = s[static_cast<size_t>(f.pos)];
  if (e.cls >= 0) {
    out.push_back(st);
    return;
  }
  for (size_t a = 0; a < g.rules[static_cast<size_t>(e.rule)].alts.size(); ++a) {
    NaiveStack n = st;
    n.push_back({e.rule, static_cast<int>(a), 0});
    naive_settle(g, n, out, budget - 1);
  }
}

// 0: dead, 1: viable prefix, 2: complete.
int naive_run(const Grammar& g, std::string_view text) {
  std::vector<NaiveStack> cur;
  for (size_t a = 0; a < g.rules[static_cast<size_t>(g.root)].alts.size(); ++a) {
    naive_settle(g, {{g.root, static_cast<int>(a), 0}}, cur, 400);
  }
  for (char c : text) {
    std::vector<NaiveStack> next;
    for (const NaiveStack& st : cur) {
      if (st.empty()) continue;
      const NaiveFrame& f = st.back();
      const Element e = g.rules[static_cast<size_t>(f.rule)].alts[static_cast<size_t>(f.alt)][static_cast<size_t>(f.pos)];
      if (!g.classes[static_cast<size_t>(e.cls)].test(static_cast<uint8_t>(c))) continue;
      NaiveStack n = st;
      n.back().pos++;
      naive_settle(g, n, next, 400);
    }
    if (next.size() > 20000) return -1;  // too ambiguous for the naive reference
    cur = std::move(next);
    if (cur.empty()) return 0;
  }
  for (const NaiveStack& st : cur) {
    if (st.empty()) return 2;
  }
  return 1;
}

TEST(StructuredRegex, MatchesWholeText) {
  const Grammar g = regex_grammar("[a-c]+(x|yz)?\\d{2,3}", "regex");
  EXPECT_TRUE(full_match(g, "ab12"));
  EXPECT_TRUE(full_match(g, "cyz123"));
  EXPECT_FALSE(full_match(g, "cyz1234"));
  EXPECT_FALSE(full_match(g, "d12"));
  EXPECT_TRUE(viable(g, "abx"));
  EXPECT_FALSE(full_match(g, "abx"));
  const Grammar u = regex_grammar("é[^a]\\.", "regex");
  EXPECT_TRUE(full_match(u, "é€."));
  EXPECT_FALSE(full_match(u, "éa."));
  EXPECT_FALSE(full_match(u, "é\xFF."));
  EXPECT_TRUE(full_match(regex_grammar("^(?:[A-Z]{2}|(?P<n>[0-9]))$", "regex"), "7"));
}

TEST(StructuredRegex, RefusesWhatItCannotHonour) {
  for (const char* bad : {"(a)\\1", "a(?=b)", "(?i)abc", "a\\b", "[z-a]", "(ab", "ab)", "*a", "a{3,2}"}) {
    try {
      regex_grammar(bad, "structured_outputs.regex");
      ADD_FAILURE() << bad;
    } catch (const Error& e) {
      EXPECT_EQ(e.field(), "structured_outputs.regex") << bad;
    }
  }
}

TEST(StructuredJsonSchema, AcceptsValidAndRefusesInvalid) {
  const Json schema = Json::parse(R"({
    "type": "object",
    "properties": {
      "name": {"type": "string", "minLength": 1, "maxLength": 5},
      "age": {"type": "integer", "minimum": 0, "maximum": 130},
      "tags": {"type": "array", "items": {"enum": ["a", "b"]}, "maxItems": 2},
      "kind": {"anyOf": [{"type": "null"}, {"$ref": "#/$defs/k"}]},
      "score": {"type": "number", "minimum": -1.5, "maximum": 2}
    },
    "required": ["name", "age"],
    "$defs": {"k": {"const": "x"}}
  })");
  const Grammar g = json_schema_grammar(schema, "schema");
  EXPECT_TRUE(full_match(g, R"({"name":"bo","age":7})"));
  EXPECT_TRUE(full_match(g, R"({"name": "bo", "age": 130, "tags": ["a", "b"], "kind": null, "score": -1})"));
  EXPECT_TRUE(full_match(g, R"({"name":"bo","age":0,"kind":"x","score":1.25})"));
  EXPECT_FALSE(full_match(g, R"({"age":7,"name":"bo"})"));  // schema order
  EXPECT_FALSE(full_match(g, R"({"name":"","age":7})"));
  EXPECT_FALSE(full_match(g, R"({"name":"bobobo","age":7})"));
  EXPECT_FALSE(full_match(g, R"({"name":"bo","age":131})"));
  EXPECT_FALSE(full_match(g, R"({"name":"bo","age":7,"tags":["a","b","a"]})"));
  EXPECT_FALSE(full_match(g, R"({"name":"bo","age":7,"score":2.5})"));
  EXPECT_FALSE(full_match(g, R"({"name":"bo"})"));
  EXPECT_FALSE(full_match(g, R"({"name":"bo","age":7,"extra":1})"));
}

TEST(StructuredJsonSchema, RecursionAndFormats) {
  const Json tree = Json::parse(R"({"$ref": "#/$defs/node", "$defs": {"node": {"type": "object",
      "properties": {"v": {"type": "integer"}, "kids": {"type": "array", "items": {"$ref": "#/$defs/node"}}},
      "required": ["v", "kids"]}}})");
  const Grammar g = json_schema_grammar(tree, "schema");
  EXPECT_TRUE(full_match(g, R"({"v":1,"kids":[{"v":2,"kids":[]},{"v":-3,"kids":[{"v":4,"kids":[]}]}]})"));
  EXPECT_FALSE(full_match(g, R"({"v":1,"kids":[{"v":2}]})"));
  const Grammar d = json_schema_grammar(Json::parse(R"({"type":"string","format":"date-time"})"), "schema");
  EXPECT_TRUE(full_match(d, R"("2024-02-28T13:05:00Z")"));
  EXPECT_FALSE(full_match(d, R"("2024-02-30T13:05:00Z")"));
  const Grammar p = json_schema_grammar(Json::parse(R"({"type":"string","pattern":"^a\"b$"})"), "schema");
  EXPECT_TRUE(full_match(p, R"("a\"b")"));
}

TEST(StructuredJsonSchema, RefusesUnsupportedKeywordsNamingTheField) {
  for (const char* s : {R"({"type":"array","uniqueItems":true})", R"({"not":{"type":"string"}})",
                        R"({"$ref":"#/nope"})", R"({"type":"number","multipleOf":0.5})", R"({"type":"foo"})",
                        R"({"$ref":"https://example.com/s.json"})"}) {
    try {
      json_schema_grammar(Json::parse(s), "response_format.json_schema.schema");
      ADD_FAILURE() << s;
    } catch (const Error& e) {
      EXPECT_EQ(e.field(), "response_format.json_schema.schema") << s;
      EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    }
  }
}

TEST(StructuredEbnf, GbnfAndLark) {
  const Grammar g = compile_ebnf(R"G(
    root ::= greeting " " name ("!" | "?")*   # a comment
    greeting ::= "hi" | "hello"
    name ::= [A-Z] [a-z]{1,8}
  )G", "grammar");
  EXPECT_TRUE(full_match(g, "hello Bob!!"));
  EXPECT_FALSE(full_match(g, "hey Bob"));
  const Grammar l = compile_ebnf(R"G(
    ?start: expr
    expr: term (("+"|"-") term)*
    term: NUMBER | "(" expr ")"
    %import common.NUMBER
  )G", "grammar");
  EXPECT_TRUE(full_match(l, "1+(2-3.5)"));
  EXPECT_FALSE(full_match(l, "1+"));
  EXPECT_THROW(compile_ebnf("root ::= root \"a\" | \"b\"", "grammar"), Error);  // left recursion
  EXPECT_THROW(compile_ebnf("root ::= s \"x\"\ns ::= root | \"b\"", "grammar"), Error);  // through a tail call
  // Loops over nullable items only call in tail position: the stack cannot grow, so they are fine.
  EXPECT_TRUE(full_match(regex_grammar("(a*)*b", "regex"), "aab"));
  EXPECT_TRUE(full_match(compile_ebnf("root ::= x \"!\"\nx ::= x?", "grammar"), "!"));
  EXPECT_THROW(compile_ebnf("start: WS\n%import common.WS\n%ignore WS", "grammar"), Error);
  EXPECT_THROW(compile_ebnf("root ::= undefined", "grammar"), Error);
}

// Random strings over a small alphabet: the matcher (interned stacks, tail calls, DFA) agrees with the naive
// stack simulation on every prefix.
TEST(StructuredMatcher, AgreesWithNaiveReference) {
  std::vector<Grammar> grammars;
  grammars.push_back(regex_grammar("(ab|a)*b?c{0,3}", "r"));
  grammars.push_back(compile_ebnf("root ::= \"[\" (v (\",\" v)*)? \"]\"\nv ::= \"a\" | root", "g"));
  grammars.push_back(json_schema_grammar(Json::parse(R"({"type":"object","properties":{"a":{"type":"array","items":{"type":"integer","maximum":12}},"b":{"type":"boolean"}}})"), "s"));
  const std::string alphabet = "ab[],c{}\"1:2-0ta ";
  std::mt19937 rng(7);
  for (const Grammar& g : grammars) {
    GrammarAutomaton a(g);
    for (int trial = 0; trial < 300; ++trial) {
      std::string s;
      int32_t st = a.initial();
      for (int k = 0; k < 14; ++k) {
        // Mostly follow allowed bytes so deep states are reached.
        std::vector<char> ok;
        for (char c : alphabet) {
          if (a.next(st, static_cast<uint8_t>(c)) >= 0) ok.push_back(c);
        }
        const char c = !ok.empty() && rng() % 4 != 0 ? ok[rng() % ok.size()] : alphabet[rng() % alphabet.size()];
        s += c;
        st = a.next(st, static_cast<uint8_t>(c));
        const int naive = naive_run(g, s);
        if (naive < 0) break;
        ASSERT_EQ(st >= 0, naive > 0) << s;
        if (st < 0) break;
        ASSERT_EQ(a.accepting(st), naive == 2) << s;
      }
    }
  }
}

std::shared_ptr<const TokenVocab> random_vocab(std::mt19937& rng, int size, const std::string& alphabet) {
  std::vector<std::string> bytes;
  for (int b = 0; b < 256; ++b) bytes.push_back(std::string(1, static_cast<char>(b)));
  while (static_cast<int>(bytes.size()) < size) {
    std::string s;
    const int len = 2 + static_cast<int>(rng() % 6);
    for (int i = 0; i < len; ++i) s += alphabet[rng() % alphabet.size()];
    bytes.push_back(s);
  }
  // Multi-byte characters, whole and cut, with and without quotes (plain-token fast path and its exceptions).
  for (const char* u : {"é", "ab€", "\xE2\x82", "\xAC", "😀", "\xF0\x9F", "é\"", "\\u00e9", "ü ", "\xED\xA0\x80"}) bytes.push_back(u);
  bytes.push_back("");  // a special token
  bytes.push_back("");  // eos
  return std::make_shared<TokenVocab>(bytes, std::vector<int32_t>{static_cast<int32_t>(bytes.size() - 1)});
}

// The fast mask (trie walk, cached per state) equals trying every token byte by byte, on random states reached by
// sampling allowed tokens; the texts produced end as valid JSON for the schema.
TEST(StructuredMask, FastMaskEqualsReferenceOnRandomStates) {
  std::mt19937 rng(11);
  const std::string alphabet = "{}[]\",:0123456789abcdefnulltrue -.";
  auto vocab = random_vocab(rng, 3000, alphabet);
  const char* schemas[] = {
      R"({"type":"object","properties":{"id":{"type":"integer"},"name":{"type":"string","maxLength":6},"ok":{"type":"boolean"},"xs":{"type":"array","items":{"type":"number"},"maxItems":3}},"required":["id","name"]})",
      R"({"type":"array","items":{"anyOf":[{"type":"null"},{"type":"string","enum":["a","bc"]},{"type":"integer","minimum":-5,"maximum":50}]},"minItems":1,"maxItems":4})",
      R"({})",
      R"({"type":"object","properties":{"s":{"type":"string"},"p":{"type":"string","pattern":"^[a-zé€]{0,5}$"}}})"};
  for (const char* s : schemas) {
    CompiledGrammar cg(json_schema_grammar(Json::parse(s), "schema"), vocab);
    std::vector<uint64_t> mask(vocab->mask_words());
    for (int run = 0; run < 20; ++run) {
      int32_t st = cg.initial();
      std::string text;
      for (int step = 0; step < 40 && st != CompiledGrammar::kDone && st >= 0; ++step) {
        cg.fill_mask(st, mask.data());
        ASSERT_EQ(mask, cg.reference_mask(st)) << s << " after " << text;
        std::vector<int32_t> allowed;
        for (int32_t t = 0; t < vocab->size(); ++t) {
          if ((mask[static_cast<size_t>(t) >> 6] >> (t & 63)) & 1) allowed.push_back(t);
        }
        ASSERT_FALSE(allowed.empty());
        // Prefer ending once complete so that texts finish.
        int32_t t = allowed[rng() % allowed.size()];
        if (cg.accepting(st) && step > 20) t = vocab->eos_ids()[0];
        st = cg.advance(st, t);
        ASSERT_NE(st, GrammarAutomaton::kDead);
        if (st != CompiledGrammar::kDone) text += vocab->bytes(t);
      }
      if (st == CompiledGrammar::kDone) {
        EXPECT_FALSE(Json::parse(text, nullptr, false).is_discarded()) << text;
      }
    }
  }
}

// The DFA built at compile time (GrammarAutomaton::explore) changes nothing: the same masks and states as the lazy
// automaton along random walks; finite schemas are built whole, recursive ones stop at the budget and go on lazily.
TEST(StructuredMask, PrecomputedDfaEqualsTheLazyOne) {
  std::mt19937 rng(5);
  auto vocab = random_vocab(rng, 2000, "{}[]\",:0123456789abcdefnulltrue -.");
  const char* schemas[] = {
      R"({"type":"object","properties":{"id":{"type":"integer","minimum":0,"maximum":300},"name":{"type":"string","maxLength":5},"xs":{"type":"array","items":{"enum":["a","bc",null]},"maxItems":3}},"required":["id","name","xs"],"additionalProperties":false})",
      R"({"type":"array","items":{"type":"boolean"},"minItems":1})",
      R"({})"};
  for (const char* s : schemas) {
    const Grammar g = json_schema_grammar(Json::parse(s), "schema");
    CompiledGrammar pre(g, vocab), lazy(g, vocab, 0);
    EXPECT_FALSE(lazy.fully_precomputed());
    EXPECT_EQ(lazy.num_states(), 1u);
    if (std::string(s) != "{}") {
      EXPECT_TRUE(pre.fully_precomputed()) << s;
    } else {
      EXPECT_FALSE(pre.fully_precomputed()) << "any JSON nests without bound";
    }
    const size_t built = pre.num_states();
    std::vector<uint64_t> a(vocab->mask_words()), b(vocab->mask_words());
    for (int run = 0; run < 10; ++run) {
      int32_t sp = pre.initial(), sl = lazy.initial();
      for (int step = 0; step < 30 && sp >= 0; ++step) {
        pre.fill_mask(sp, a.data());
        lazy.fill_mask(sl, b.data());
        ASSERT_EQ(a, b) << s;
        std::vector<int32_t> allowed;
        for (int32_t t = 0; t < vocab->size(); ++t) {
          if ((a[static_cast<size_t>(t) >> 6] >> (t & 63)) & 1) allowed.push_back(t);
        }
        const int32_t t = allowed[rng() % allowed.size()];
        sp = pre.advance(sp, t);
        sl = lazy.advance(sl, t);
        ASSERT_EQ(sp < 0, sl < 0);
      }
    }
    if (pre.fully_precomputed()) {
      EXPECT_EQ(pre.num_states(), built) << "a whole DFA gains no state later";
    }
  }
  // The budget bounds the states built.
  GrammarAutomaton any(json_schema_grammar(Json::parse("{}"), "schema"));
  EXPECT_FALSE(any.explore(50, std::chrono::steady_clock::now() + std::chrono::seconds(10)));
  EXPECT_LE(any.num_states(), 50u + 256u);  // the last row built may add up to one state per byte
  EXPECT_FALSE(any.explore(100000, std::chrono::steady_clock::now()));  // past the deadline: stops at once
}

TEST(StructuredCache, SharesCompiledGrammars) {
  std::mt19937 rng(3);
  auto vocab = random_vocab(rng, 400, "ab");
  GrammarCache cache(2);
  StructuredOutputsParams a;
  a.regex = "a+b";
  StructuredOutputsParams c;
  c.choice = std::vector<std::string>{"yes", "no"};
  auto g1 = cache.get(a, vocab);
  EXPECT_EQ(g1, cache.get(a, vocab));
  EXPECT_NE(g1, cache.get(c, vocab));
  StructuredOutputsParams bad;
  bad.regex = "(";
  bad.field = "guided_regex";
  try {
    cache.get(bad, vocab);
    ADD_FAILURE();
  } catch (const Error& e) {
    EXPECT_EQ(e.field(), "guided_regex");
  }
}

}  // namespace
}  // namespace peregrine::engine::structured
