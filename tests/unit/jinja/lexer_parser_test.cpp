// Jinja lexer and parser: whitespace control as transformers configures it, literals, operator precedence, and
// syntax errors reported with line and column (never a crash, even for pathological nesting).
#include <gtest/gtest.h>

#include <string>

#include "test_util.h"

namespace peregrine::jinja::testing {
namespace {

TEST(JinjaLexer, PlainTextAndOneTrailingNewlineDropped) {
  EXPECT_EQ(render("hello"), "hello");
  EXPECT_EQ(render("a\n"), "a");
  EXPECT_EQ(render("a\n\n"), "a\n");
  EXPECT_EQ(render(""), "");
}

TEST(JinjaLexer, TrimBlocksRemovesTheNewlineAfterABlockTag) {
  EXPECT_EQ(render("{% if true %}\nx\n{% endif %}\ny"), "x\ny");
  // Not after an expression tag.
  EXPECT_EQ(render("{{ 'a' }}\nb"), "a\nb");
  EXPECT_EQ(render("{# note #}\nb"), "b");
}

TEST(JinjaLexer, LstripBlocksRemovesIndentationBeforeBlockTagsOnly) {
  EXPECT_EQ(render("  {% if true %}x{% endif %}"), "x");
  EXPECT_EQ(render("\t {%- if true %}x{% endif %}"), "x");
  EXPECT_EQ(render("  {{ 'x' }}"), "  x");
  EXPECT_EQ(render("a  {% if true %}x{% endif %}"), "a  x");  // not at the start of the line
}

TEST(JinjaLexer, DashesStripWhitespaceAroundTags) {
  EXPECT_EQ(render("a  \n {%- if true -%} \n b {%- endif %}"), "ab");
  EXPECT_EQ(render("a \n{{- 'b' -}}\n c"), "abc");
  EXPECT_EQ(render("a  {#- comment -#}  b"), "ab");
  // Unicode whitespace counts, as in JavaScript.
  EXPECT_EQ(render("a\u00a0\u3000{{- 'b' }}"), "ab");
}

TEST(JinjaLexer, CommentsRenderNothing) {
  EXPECT_EQ(render("a{# {{ not rendered }} #}b"), "ab");
  EXPECT_EQ(render("{#\nmulti\nline\n#}x"), "x");
}

TEST(JinjaLexer, GenerationTagsAreRemoved) {
  EXPECT_EQ(render("A{% generation %}B{% endgeneration %}C"), "ABC");
  EXPECT_EQ(render("A {%- generation -%} B"), "AB");
  EXPECT_EQ(render("A {% generation %} B"), "A  B");
}

TEST(JinjaLexer, StringLiteralsAndEscapes) {
  EXPECT_EQ(render(R"({{ 'a\nb' }})"), "a\nb");
  EXPECT_EQ(render(R"({{ "tab\there" }})"), "tab\there");
  EXPECT_EQ(render(R"({{ 'it\'s' ~ "\"q\"" }})"), "it's\"q\"");
  EXPECT_EQ(render(R"({{ '\u00e9\x41' }})"), "\xC3\xA9" "A");
  EXPECT_EQ(render(R"({{ '\ud83d\ude00' }})"), "\xF0\x9F\x98\x80");
  EXPECT_EQ(render(R"({{ 'a\d' }})"), "a\\d");  // unknown escapes stay, as in Python
  EXPECT_EQ(render("{{ 'a' 'b' \"c\" }}"), "abc");  // adjacent literals concatenate
  EXPECT_EQ(render("{{ '}}' }}"), "}}");
}

TEST(JinjaLexer, NumberLiterals) {
  EXPECT_EQ(render("{{ 42 }}"), "42");
  EXPECT_EQ(render("{{ 1.5 }}"), "1.5");
  EXPECT_EQ(render("{{ 2.0 }}"), "2.0");
  EXPECT_EQ(render("{{ -3 }}"), "-3");
  EXPECT_EQ(render("{{ [10, 20, 30].1 }}"), "20");
}

TEST(JinjaParser, OperatorPrecedence) {
  EXPECT_EQ(render("{{ 1 + 2 * 3 }}"), "7");
  EXPECT_EQ(render("{{ (1 + 2) * 3 }}"), "9");
  EXPECT_EQ(render("{{ 2 ** 3 ** 2 }}"), "64");  // left-associative, as Jinja
  EXPECT_EQ(render("{{ not 1 == 2 }}"), "true");
  EXPECT_EQ(render("{{ -2 | abs }}"), "2");  // unary minus binds tighter than a filter
  EXPECT_EQ(render("{{ 'a' ~ 1 + 2 }}"), "a12");  // ~ and + share a level, left to right
  EXPECT_EQ(render("{{ 1 < 2 and 3 > 4 or 5 >= 5 }}"), "true");
  EXPECT_EQ(render("{{ 'b' in 'abc' and 'z' not in 'abc' }}"), "true");
  EXPECT_EQ(render("{{ 3 is odd and not 4 is odd }}"), "true");
  EXPECT_EQ(render("{{ [1, 2] | length is even }}"), "true");
}

TEST(JinjaParser, TernaryAndSelectExpressions) {
  EXPECT_EQ(render("{{ 'y' if true else 'n' }}"), "y");
  EXPECT_EQ(render("{{ 'y' if false else 'n' }}"), "n");
  EXPECT_EQ(render("{{ 'y' if false }}"), "");
  EXPECT_EQ(render("{{ 'a' if false else 'b' if false else 'c' }}"), "c");
}

TEST(JinjaParser, ContainerLiterals) {
  EXPECT_EQ(render("{{ [1, 'two', [3]] }}"), R"([1, "two", [3]])");
  EXPECT_EQ(render("{{ {'a': 1, 'b': {'c': none}} }}"), R"({"a": 1, "b": {"c": null}})");
  EXPECT_EQ(render("{{ (1, 2) }}"), "[1, 2]");
  EXPECT_EQ(render("{{ [1, 2,] | length }}"), "2");
  EXPECT_EQ(render("{{ {} }}{{ [] }}"), "{}[]");
}

TEST(JinjaParser, ElifChainsAndNestedBlocks) {
  const std::string t = "{% for x in [1, 2, 3, 4] %}{% if x == 1 %}a{% elif x == 2 %}b{% elif x == 3 %}c"
                        "{% else %}d{% endif %}{% endfor %}";
  EXPECT_EQ(render(t), "abcd");
  std::string many = "{% if x == 0 %}0";
  for (int i = 1; i < 400; ++i) many += "{% elif x == " + std::to_string(i) + " %}" + std::to_string(i);
  many += "{% endif %}";
  EXPECT_EQ(render(many, {{"x", 399}}), "399");  // long elif chains are not recursion
}

TEST(JinjaParserErrors, SyntaxErrorsNameLineAndColumn) {
  Error e = capture_error([] { Template("line one\n{{ 'unterminated }}"); });
  EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(e.message().find("line 2, column 4"), std::string::npos) << e.message();
  EXPECT_NE(e.message().find("unterminated string"), std::string::npos) << e.message();

  e = capture_error([] { Template("ab\n  {% for x in y %}{{ x }}"); });
  EXPECT_NE(e.message().find("line 2, column 3"), std::string::npos) << e.message();
  EXPECT_NE(e.message().find("endfor"), std::string::npos) << e.message();

  e = capture_error([] { Template("{{ a ; b }}"); });
  EXPECT_NE(e.message().find("line 1, column 6"), std::string::npos) << e.message();

  e = capture_error([] { Template("{{ }}"); });
  EXPECT_NE(e.message().find("expected an expression"), std::string::npos) << e.message();

  e = capture_error([] { Template("{% endif %}"); });
  EXPECT_NE(e.message().find("unexpected '{% endif %}'"), std::string::npos) << e.message();

  e = capture_error([] { Template("{% for x in y %}{% endif %}{% endfor %}"); });
  EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);

  e = capture_error([] { Template("{{ x"); });
  EXPECT_NE(e.message().find("unclosed tag"), std::string::npos) << e.message();

  e = capture_error([] { Template("{# never closed"); });
  EXPECT_NE(e.message().find("unterminated comment"), std::string::npos) << e.message();
}

TEST(JinjaParserErrors, UnsupportedFeaturesAreReportedAsSuch) {
  Error e = capture_error([] { Template("x\n{% include 'other.jinja' %}"); });
  EXPECT_EQ(e.code(), ErrorCode::kUnsupported);
  EXPECT_NE(e.message().find("line 2, column 4"), std::string::npos) << e.message();
  EXPECT_NE(e.message().find("include"), std::string::npos) << e.message();

  e = capture_error([] { Template("{{ x | no_such_filter }}"); });
  EXPECT_EQ(e.code(), ErrorCode::kUnsupported);
  EXPECT_NE(e.message().find("unknown filter 'no_such_filter'"), std::string::npos) << e.message();
  EXPECT_NE(e.message().find("column 8"), std::string::npos) << e.message();

  e = capture_error([] { Template("{% if x is frobnicated %}{% endif %}"); });
  EXPECT_EQ(e.code(), ErrorCode::kUnsupported);
  EXPECT_NE(e.message().find("unknown test 'frobnicated'"), std::string::npos) << e.message();

  e = capture_error([] { Template("{% for x in y recursive %}{% endfor %}"); });
  EXPECT_EQ(e.code(), ErrorCode::kUnsupported);
}

TEST(JinjaParserErrors, BreakOutsideALoop) {
  Error e = capture_error([] { Template("{% break %}"); });
  EXPECT_NE(e.message().find("outside of a for loop"), std::string::npos) << e.message();
  e = capture_error([] { Template("{% for x in y %}{% macro m() %}{% continue %}{% endmacro %}{% endfor %}"); });
  EXPECT_NE(e.message().find("outside of a for loop"), std::string::npos) << e.message();
}

TEST(JinjaParserErrors, InvalidUtf8NamesTheByteOffset) {
  Error e = capture_error([] { Template(std::string("ok\n\xFF bad")); });
  EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(e.message().find("byte offset 3"), std::string::npos) << e.message();
}

TEST(JinjaParserErrors, PathologicalNestingFailsCleanly) {
  const std::string parens = "{{ " + std::string(5000, '(') + "1" + std::string(5000, ')') + " }}";
  EXPECT_NE(capture_error([&] { Template t(parens); }).message().find("nesting exceeds"), std::string::npos);
  std::string nots = "{{ ";
  for (int i = 0; i < 5000; ++i) nots += "not ";
  nots += "x }}";
  EXPECT_NE(capture_error([&] { Template t(nots); }).message().find("nested deeper"), std::string::npos);
  const std::string minus = "{{ " + std::string(5000, '-') + "1 }}";
  EXPECT_NE(capture_error([&] { Template t(minus); }).message().find("nested deeper"), std::string::npos);
  std::string blocks;
  for (int i = 0; i < 3000; ++i) blocks += "{% if true %}";
  EXPECT_NE(capture_error([&] { Template t(blocks); }).message().find("nesting exceeds"), std::string::npos);
  // Moderate nesting is fine.
  EXPECT_EQ(render("{{ " + std::string(50, '(') + "7" + std::string(50, ')') + " }}"), "7");
}

}  // namespace
}  // namespace peregrine::jinja::testing
