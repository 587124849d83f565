// Jinja filters and tests, with the output formats of @huggingface/jinja (tojson as Python's json.dumps with
// ensure_ascii off, lengths in UTF-16 units, JavaScript number printing).
#include <gtest/gtest.h>

#include <string>

#include "test_util.h"

namespace peregrine::jinja::testing {
namespace {

using nlohmann::ordered_json;

TEST(JinjaFilters, ToJson) {
  const ordered_json context = {
      {"v", ordered_json::parse(R"({"s": "q\"b\\n\n\t\u0001é😀", "n": [1, 2.5, -0.0, 1e-7, 1e21], "e": {}, "l": [], "b": true, "z": null})")}};
  EXPECT_EQ(render("{{ v | tojson }}", context),
            R"({"s": "q\"b\\n\n\t\u0001é😀", "n": [1, 2.5, 0, 1e-7, 1e+21], "e": {}, "l": [], "b": true, "z": null})");
  EXPECT_EQ(render("{{ {'a': [1, {'b': 2}], 'c': {}} | tojson(indent=2) }}"),
            "{\n  \"a\": [\n    1,\n    {\n      \"b\": 2\n    }\n  ],\n  \"c\": {}\n}");
  EXPECT_EQ(render("{{ 'é😀' | tojson(ensure_ascii=true) }}"), R"("\u00e9\ud83d\ude00")");
  EXPECT_EQ(render("{{ {'b': 1, 'a': 2, 'B': 3} | tojson(sort_keys=true) }}"), R"({"a": 2, "b": 1, "B": 3})");
  EXPECT_EQ(render("{{ {'a': [1, 2]} | tojson(separators=(',', ':')) }}"), R"({"a":[1,2]})");
  EXPECT_EQ(render("{{ [1] | tojson(indent=0) }}"), "[1]");
  EXPECT_EQ(render("{{ 'x' | tojson }}{{ none | tojson }}{{ missing | tojson }}{{ 3.0 | tojson }}"), R"("x"nullnull3)");
}

TEST(JinjaFilters, StringFilters) {
  EXPECT_EQ(render("{{ '  a \\n' | trim }}|{{ 'xxaxx' | trim('x') }}|{{ 'ab' | upper }}{{ 'AB' | lower }}"), "a|a|ABab");
  EXPECT_EQ(render("{{ 'hello wORLD-x' | title }}|{{ 'hELLO' | capitalize }}"), "Hello WORLD-X|HELLO");
  EXPECT_EQ(render("{{ 'a-b-c' | replace('-', '+') }}{{ 'aaa' | replace('a', 'b', 1) }}"), "a+b+cbaa");
  EXPECT_EQ(render("{{ 'a\\nb\\n\\nc' | indent }}|{{ 'a\\nb' | indent(2, true) }}|{{ 'a\\n\\nb' | indent(1, blank=true) }}"),
            "a\n    b\n\n    c|  a\n  b|a\n \n b");
  EXPECT_EQ(render("{{ '%s is %d years, %.2f%%' | format('Ann', 42, 1.5) }}|{{ '%5s|%-3s|' | format('ab', 'c') }}"),
            "Ann is 42 years, 1.50%|   ab|c  |");
  EXPECT_EQ(render("{{ '<a href=\"x\">&</a>' | escape }}"), "&lt;a href=&#34;x&#34;&gt;&amp;&lt;/a&gt;");
}

TEST(JinjaFilters, LengthCountsUtf16UnitsLikeJavaScript) {
  EXPECT_EQ(render("{{ 'abc' | length }} {{ '\xF0\x9F\x98\x80' | length }} {{ [1, 2] | count }} {{ {'a': 1} | length }}"),
            "3 2 2 1");
  EXPECT_EQ(render("{{ missing | length }}"), "0");
}

TEST(JinjaFilters, SequenceFilters) {
  EXPECT_EQ(render("{{ [3, 1, 2] | first }}{{ [3, 1, 2] | last }}{{ [] | first }}{{ 'xyz' | last }}"), "32z");
  EXPECT_EQ(render("{{ [1, 2.5, none, 'a', true] | join(',') }}|{{ 'abc' | join('-') }}|{{ ['a', 'b'] | join }}"),
            "1,2.5,,a,true|a-b-c|ab");
  EXPECT_EQ(render("{{ ['b', 'A', 'c'] | sort }}{{ ['b', 'A', 'c'] | sort(case_sensitive=true) }}{{ [2, 1] | sort(reverse=true) }}"),
            R"(["A", "b", "c"]["A", "b", "c"][2, 1])");
  EXPECT_EQ(render("{{ [{'n': 2}, {'n': 1}] | sort(attribute='n') | map(attribute='n') | list }}"), "[1, 2]");
  EXPECT_EQ(render("{{ [1, 2, 1, '1', 2.0] | unique }}{{ [1, 2] | reverse }}{{ 'abc' | reverse }}{{ 'ab' | list }}"),
            R"([1, 2, "1"][2, 1]cba["a", "b"])");
  EXPECT_EQ(render("{{ [3, 1, 2] | min }}{{ [3, 1, 2] | max }}{{ [1, 2, 3.5] | sum }}{{ [] | sum }}{{ 2.567 | round(2) }}"),
            "136.502.57");
  EXPECT_EQ(render("{{ ['a', 'b'] | map('upper') | join }}{{ [{'a': {'b': 1}}, {}] | map(attribute='a.b', default=0) | list }}"),
            "AB[1, 0]");
  EXPECT_NE(render_error("{{ [1, 'a'] | sort }}").message().find("cannot compare"), std::string::npos);
}

TEST(JinjaFilters, SelectAndReject) {
  const ordered_json context = {
      {"m", ordered_json::parse(R"([{"role": "system"}, {"role": "user", "x": 1}, {"role": "user", "x": 0}, {"x": 2}])")}};
  EXPECT_EQ(render("{{ m | selectattr('role', 'equalto', 'user') | list | length }}", context), "2");
  EXPECT_EQ(render("{{ m | selectattr('x') | map(attribute='x') | list }}", context), "[1, 2]");
  // As @huggingface/jinja: a missing attribute never passes the test, so rejectattr keeps those items.
  EXPECT_EQ(render("{{ m | rejectattr('role', 'equalto', 'user') | list | length }}", context), "2");
  EXPECT_EQ(render("{{ m | selectattr('x', 'defined') | list | length }}", context), "3");
  EXPECT_EQ(render("{{ [1, 2, 3, 4] | select('odd') | list }}{{ ['a', 'code', 'b'] | reject('equalto', 'code') | list }}"),
            R"([1, 3]["a", "b"])");
  EXPECT_EQ(render("{{ [0, 1, '', 'x'] | select | list }}"), R"([1, "x"])");
}

TEST(JinjaFilters, DictFilters) {
  const ordered_json context = {{"d", {{"b", 2}, {"a", 1}, {"C", 3}}}};
  EXPECT_EQ(render("{{ d | items | list }}", context), R"([["b", 2], ["a", 1], ["C", 3]])");
  EXPECT_EQ(render("{{ d | dictsort }}", context), R"([["a", 1], ["b", 2], ["C", 3]])");
  EXPECT_EQ(render("{{ d | dictsort(by='value', reverse=true) }}", context), R"([["C", 3], ["b", 2], ["a", 1]])");
  EXPECT_EQ(render("{% for k, v in d | items %}{{ k }}{{ v }}{% endfor %}", context), "b2a1C3");
  EXPECT_EQ(render("{{ missing | items | list }}"), "[]");
}

TEST(JinjaFilters, ConversionFilters) {
  EXPECT_EQ(render("{{ '42' | int }} {{ '12abc' | int }} {{ 'x' | int }} {{ 'x' | int(7) }} {{ 3.9 | int }} {{ true | int }}"),
            "42 12 0 7 3 1");
  EXPECT_EQ(render("{{ '2.5e1x' | float }} {{ 'x' | float }} {{ 2 | float }} {{ -3 | abs }} {{ -2.5 | abs }}"),
            "25.0 0.0 2.0 3 2.5");
  EXPECT_EQ(render("{{ [1, 'a'] | string }}|{{ 1.0 | string }}|{{ true | string }}|{{ none | string }}|{{ {'a': 1} | string }}"),
            R"([1, "a"]|1.0|true|None|{"a": 1})");
  EXPECT_EQ(render("{{ missing | default('d') }}{{ none | default('d') }}{{ '' | default('d', true) }}{{ 0 | d('z') }}"),
            "dd0");
  EXPECT_EQ(render("{{ 'x' | safe }}{{ 0 | bool }}"), "xfalse");
}

TEST(JinjaTests, TypeAndValueTests) {
  const std::string t =
      "{{ x is defined }}{{ y is undefined }}{{ none is none }}{{ 'a' is string }}{{ 1 is number }}"
      "{{ 1.5 is float }}{{ 1 is integer }}{{ true is boolean }}{{ true is true }}{{ false is false }}"
      "{{ {} is mapping }}{{ [] is iterable }}{{ 'a' is iterable }}{{ {} is iterable }}{{ {} is sequence }}"
      "{{ 3 is odd }}{{ 4 is even }}{{ 9 is divisibleby 3 }}{{ 'ab' is lower }}{{ 'AB' is upper }}"
      "{{ 1 is eq 1 }}{{ 1 is equalto(1.0) }}{{ 'a' is ne 'b' }}{{ 2 is gt 1 }}{{ 2 is le 2 }}{{ 'a' is in 'cat' }}"
      "{{ range is callable }}{{ x is not none }}";
  EXPECT_EQ(render(t, {{"x", 1}}),
            "truetruetruetruetruetruetruetruetruetruetruetruetruefalsetruetruetruetruetruetrue"
            "truetruetruetruetruetruetruetrue");
  EXPECT_NE(render_error("{{ 'a' is odd }}").message().find("integer"), std::string::npos);
}

}  // namespace
}  // namespace peregrine::jinja::testing
