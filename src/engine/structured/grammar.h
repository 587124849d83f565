// Grammar: the one form every constraint compiles to (JSON Schema, regex, choice, EBNF/Lark): a context-free
// grammar over bytes. A rule is a list of alternatives; an alternative a sequence of elements; an element a byte
// class (a set of bytes) or a reference to a rule. Repetition and options are helper rules built by GrammarBuilder
// (x* = R ::= x R | ""), and the matcher calls rules in tail position without growing its stack, so a loop
// never deepens it. Left recursion is refused (check()), so every closure the matcher computes is finite.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace peregrine::engine::structured {

struct ByteSet {
  std::array<uint64_t, 4> bits{};
  void set(int b) { bits[static_cast<size_t>(b) >> 6] |= uint64_t{1} << (b & 63); }
  void set_range(int lo, int hi) {
    for (int b = lo; b <= hi; ++b) set(b);
  }
  bool test(int b) const { return (bits[static_cast<size_t>(b) >> 6] >> (b & 63)) & 1; }
  bool empty() const { return (bits[0] | bits[1] | bits[2] | bits[3]) == 0; }
  bool operator==(const ByteSet& o) const { return bits == o.bits; }
  static ByteSet of(int b) {
    ByteSet s;
    s.set(b);
    return s;
  }
};

// One element of a sequence: a byte class (cls >= 0) or a rule reference (rule >= 0).
struct Element {
  int32_t cls = -1;
  int32_t rule = -1;
};

using Sequence = std::vector<Element>;

struct Rule {
  std::string name;
  std::vector<Sequence> alts;
};

struct Grammar {
  std::vector<ByteSet> classes;
  std::vector<Rule> rules;
  int root = -1;

  // Throws Error(kInvalidArgument, field) for an undefined or empty rule, left recursion, or a grammar too large.
  void check(const std::string& field) const;
  std::string to_string() const;  // for tests and error messages
};

// Builds grammars; every helper returns an Element for use in sequences.
class GrammarBuilder {
 public:
  GrammarBuilder();
  Grammar& grammar() { return g_; }
  Grammar take(int root);

  int new_rule(std::string name);  // an empty rule (alternatives added later)
  void add_alt(int rule, Sequence seq);
  Element ref(int rule) const { return Element{-1, rule}; }
  Element cls(const ByteSet& set);
  Element byte(uint8_t b) { return cls(ByteSet::of(b)); }
  // A literal byte string: one element (a byte, or a rule for longer strings; "" is an empty rule).
  Element literal(std::string_view s);
  Element seq(Sequence s, const char* name = "seq");       // a rule with this one alternative
  Element alt(std::vector<Sequence> alts, const char* name = "alt");
  Element empty();
  Element optional(Element e);
  Element star(Element e);
  Element plus(Element e);
  // e{min,max}; max < 0 = unbounded. Throws when the expansion would be too large.
  Element repeat(Element e, int64_t min, int64_t max, const std::string& field);
  // Any UTF-8 code point in [lo, hi] (ranges split into valid UTF-8 byte sequences).
  void add_codepoint_range(std::vector<Sequence>& alts, uint32_t lo, uint32_t hi);
  Element codepoints(const std::vector<std::pair<uint32_t, uint32_t>>& ranges, const char* name = "chars");

  size_t num_rules() const { return g_.rules.size(); }
  static constexpr size_t kMaxRules = 200000;

 private:
  Grammar g_;
  std::unordered_map<std::string, int> class_index_;
  std::unordered_map<std::string, int> literal_rules_;
  int empty_rule_ = -1;
};

// Code point sets for regex classes: sorted, merged ranges.
using CodepointRanges = std::vector<std::pair<uint32_t, uint32_t>>;
CodepointRanges normalize_ranges(CodepointRanges r);
CodepointRanges complement_ranges(const CodepointRanges& r);  // within [0, 0x10FFFF] minus surrogates

// Compiles a regular expression (Python `re` / ECMAScript subset: literals, escapes \d \w \s \D \W \S \xHH \uHHHH,
// classes, ., groups (capturing, (?:), named), |, * + ? {n} {n,} {n,m} and lazy forms; ^ and $ at the ends) into
// a rule of `b` matching the whole text. json_string: the text is the content of a JSON string, so characters that
// JSON must escape are produced escaped. Throws Error(kInvalidArgument, field) for what it cannot honour
// (backreferences, lookaround, anchors inside).
// anchored_start/end false: the pattern may match anywhere (JSON Schema "pattern" semantics), so any text may come
// before/after it.
Element compile_regex(GrammarBuilder& b, std::string_view pattern, bool json_string, const std::string& field,
                      bool search_semantics = false);

// EBNF (GBNF: `root ::= ...`) or Lark (`start: ...`, terminals, %import common) grammar text to a Grammar.
Grammar compile_ebnf(std::string_view text, const std::string& field);

}  // namespace peregrine::engine::structured
