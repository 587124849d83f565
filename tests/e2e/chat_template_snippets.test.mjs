// Differential test of the Jinja subset: small templates exercising one feature each (number and JSON
// formats, filters, tests, loops, macros, whitespace control, string methods) are rendered by @huggingface/jinja
// and by `peregrine chat-template --chat-template <inline>` (variables passed with --kwargs); outputs must be
// identical, and where the reference raises an error peregrine must fail too. Needs PEREGRINE_BIN.
import { test } from "node:test";
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Template } from "@huggingface/jinja";

const bin = process.env.PEREGRINE_BIN;

const data = {
  f: { a: 1.5, b: 2.0, c: 1e21, d: 1.5e-7, e: -0.0, g: 123.456, h: 12345678901234, i: 0.1 },
  msgs: [
    { role: "system", content: "sys" },
    { role: "user", content: "  hi  " },
    { role: "assistant", content: "yo", tool_calls: [{ function: { name: "f", arguments: { x: 1 } } }] },
    { role: "user", content: "bye" },
  ],
  d: { b: 2, a: 1, "2": "two", nested: { k: [1, { z: null }] } },
  s: "Héllo wörld 😀 \"q\" \\ \n\t end",
  xs: [3, 1, 2],
  words: ["b", "A", "c", "a"],
};

// Each entry: [template, variables?]. Variables default to `data`.
const snippets = [
  // numbers and printing
  ["{{ f.a }} {{ f.b }} {{ f.c }} {{ f.d }} {{ f.e }} {{ f.g }} {{ f.h }} {{ f.i }}"],
  ["{{ 1.5 }} {{ 3.0 }} {{ 1 / 3 }} {{ 2 ** 0.5 }} {{ 7 / 7 }} {{ 10 // 4 }} {{ 10 % 4 }} {{ -7 % 3 }} {{ 2 ** 10 }}"],
  ["{{ 0.1 + 0.2 }} {{ 1.0 * 3 }} {{ 5 - 7.5 }} {{ -f.a }} {{ +3 }} {{ 1e2 if false else 100.0 }}"],
  ["{{ none }}|{{ undefined_var }}|{{ true }}|{{ false }}|{{ [none, true, 1.0, 'x'] }}|{{ {'a': none} }}"],
  ["{{ f }}"], ["{{ d }}"], ["{{ msgs[2] }}"], ["{{ xs }}{{ [] }}{{ {} }}"],
  // concatenation
  ["{{ 'a' + 1 }}{{ 1 + 'a' }}{{ 'a' + 1.5 }}{{ 'a' + f.b }}{{ 'x' ~ 2.0 ~ true ~ 3 }}"],
  ["{{ 'a' + xs }}|{{ 'a' ~ d }}|{{ xs + [4] }}|{{ 'n' ~ f.c }}"],
  // equality and membership
  ["{{ 1 == 1.0 }}{{ '1' == 1 }}{{ true == 1 }}{{ none == undefined_var }}{{ [1] == [1] }}{{ xs == xs }}{{ '' == 0 }}"],
  ["{{ 'ell' in s }}{{ 2 in xs }}{{ 2.0 in xs }}{{ '2' in xs }}{{ 'a' in d }}{{ 'zz' in d }}{{ 'q' in undefined_var }}"],
  ["{{ 'a' not in 'abc' }}{{ 5 not in xs }}{{ 'x' not in undefined_var }}"],
  ["{% set us = msgs | selectattr('role', 'equalto', 'user') | list %}{% for m in msgs %}{{ m == us[-1] }}{% endfor %}"],
  // logic
  ["{{ 1 and 'x' }}|{{ 0 and 'x' }}|{{ '' or 'y' }}|{{ [] or {} }}|{{ not [] }}|{{ not none }}|{{ xs and d }}"],
  ["{{ 'y' if xs else 'n' }}{{ 'y' if [] else 'n' }}{{ 'only' if false }}|{{ 'a' if 0 else 'b' if 0 else 'c' }}"],
  // strings
  ["{{ s | length }} {{ s | upper }} {{ s | lower }} {{ s | title }} {{ s | capitalize }}"],
  ["{{ u | upper }}|{{ u | lower }}|{{ u.upper() }}|{{ u | capitalize }}|{{ u is lower }}{{ u | lower is lower }}", { u: "àéîõüÿ ÀÉÎÕÜ ßẞ Ωμέγα ΣΑΣ Привет ёЁ Առ ＡＢｃ ĳĲ ŉ İı ǅ ﬁ" }],
  ["{{ '  x y  ' | trim }}|{{ '\\n\\u00a0 x \\u3000' | trim }}|{{ s.strip() }}|{{ '  a'.lstrip() }}|{{ 'a  '.rstrip() }}"],
  ["{{ s.split() }}{{ 'a,b,,c'.split(',') }}{{ 'a b c d'.split(' ', 2) }}{{ '  a  b  '.split(none, 1) }}"],
  ["{{ s.startswith('Hé') }}{{ s.endswith(('x', 'end')) }}{{ s.replace('l', 'L') }}{{ 'aaaa'.replace('a', 'b', 2) }}"],
  ["{{ 'hello world foo_bar 1st'.title() }}|{{ 'éa b'.title() }}|{{ 'abc'.upper() }}|{{ 'ABC'.lower() }}"],
  ["{{ s[0] }}{{ s[-1] }}{{ s[1:4] }}{{ s[::-1] }}{{ s[::3] }}{{ s[100] }}|{{ s[-3:] }}"],
  ["{{ xs[::-1] }}{{ xs[1:] }}{{ xs[:-1] }}{{ xs[-1:0:-1] }}{{ xs[5:] }}{{ xs[0] }}{{ xs[-1] }}{{ xs[7] }}"],
  ["{{ 'abc' | join('-') }}{{ xs | join }}{{ xs | join(', ') }}{{ [1.0, none, true, 'x', [1, 2]] | join('|') }}"],
  ["{{ 'a\\nb\\n\\nc' | indent }}|{{ 'a\\nb' | indent(2) }}|{{ 'a\\nb' | indent(2, true) }}|{{ 'a\\n\\nb' | indent(width=3, first=true, blank=true) }}"],
  ["{{ 'x' | replace('x', 'yy') }}{{ 'a-b' | replace('-', '') }}{{ 'ab' | replace('', '.') }}"],
  // JSON
  ["{{ d | tojson }}"], ["{{ d | tojson(indent=2) }}"], ["{{ msgs | tojson(indent=4) }}"],
  ["{{ s | tojson }}{{ s | tojson(ensure_ascii=true) }}"],
  ["{{ f | tojson }}{{ 1.0 | tojson }}{{ none | tojson }}{{ undefined_var | tojson }}{{ true | tojson }}"],
  ["{{ {'b': 1, 'a': [1, 2], 'c': {}} | tojson(separators=(',', ':')) }}{{ [[], {}, [[]]] | tojson(indent=1) }}"],
  ["{{ {'b': 1, 'a': 2} | tojson(sort_keys=true) }}"],
  ["{{ xs | string }}{{ 1.0 | string }}{{ 2 | string }}{{ true | string }}{{ 'x' | string }}"],
  // sequence filters
  ["{{ xs | first }}{{ xs | last }}{{ xs | length }}{{ xs | reverse }}{{ xs | sort }}{{ xs | sort(reverse=true) }}"],
  ["{{ words | sort }}{{ words | sort(case_sensitive=true) }}{{ words | unique }}{{ [1, 1.0, '1', 2] | unique }}{{ xs | list }}"],
  ["{{ msgs | map(attribute='role') | list }}{{ msgs | map(attribute='nope', default='-') | list }}{{ msgs | map(attribute='tool_calls.0.function.name') | list }}"],
  ["{{ msgs | selectattr('role', 'equalto', 'user') | map(attribute='content') | list }}{{ msgs | rejectattr('role', 'equalto', 'user') | list | length }}"],
  ["{{ msgs | selectattr('tool_calls') | list | length }}{{ msgs | rejectattr('tool_calls') | list | length }}{{ msgs | selectattr('tool_calls', 'defined') | list | length }}"],
  ["{{ msgs | selectattr('role', 'eq', 'system') | list | length }}{{ msgs | selectattr('content', 'string') | list | length }}"],
  ["{{ msgs | sort(attribute='role') | map(attribute='content') | list }}{{ [{'a': 2}, {'a': 1}] | sort(attribute='a') }}"],
  // dict filters and methods
  ["{{ d | items }}{{ d | length }}{{ d | dictsort }}{{ d.keys() }}{{ d.values() | length }}"],
  ["{% for k, v in d.items() %}{{ k }}={{ v }};{% endfor %}{% for k in d %}{{ k }}{% endfor %}"],
  ["{{ d.get('a') }}{{ d.get('zz') }}{{ d.get('zz', 'def') }}{{ d.get('nested').k[1].z is none }}{{ d.nested.k.0 }}"],
  ["{{ {'b': 2, 'A': 1, 'c': 3} | dictsort }}{{ {'b': 2, 'a': 1} | dictsort(by='value', reverse=true) }}"],
  // default and conversions
  ["{{ undefined_var | default('d') }}{{ none | default('d') }}{{ '' | default('d', true) }}{{ 0 | default('d', boolean=true) }}{{ 'x' | default('d') }}"],
  ["{{ '42' | int }}{{ '4.7' | int }}{{ 'x' | int }}{{ '12px' | int }}{{ 3.7 | int }}{{ true | int }}{{ '2.5' | float }}{{ 'x' | float }}{{ 3 | float }}"],
  ["{{ -3 | abs }}{{ -2.5 | abs }}{{ 'x' | safe }}{{ true | string }}"],
  // tests
  ["{{ undefined_var is defined }}{{ undefined_var is undefined }}{{ none is none }}{{ f is mapping }}{{ xs is iterable }}{{ d is iterable }}{{ s is iterable }}"],
  ["{{ xs is sequence }}{{ d is sequence }}{{ s is string }}{{ f.a is number }}{{ f.b is integer }}{{ f.a is integer }}{{ true is boolean }}"],
  ["{{ 3 is odd }}{{ 4 is even }}{{ true is true }}{{ 1 is true }}{{ false is false }}{{ 'abc' is lower }}{{ 'ABC' is upper }}{{ range is callable }}"],
  ["{{ undefined_var is not defined }}{{ xs is not mapping }}{{ not xs is none }}"],
  // loops
  ["{% for x in xs %}{{ loop.index }}{{ loop.index0 }}{{ loop.revindex }}{{ loop.revindex0 }}{{ loop.first }}{{ loop.last }}{{ loop.length }}{{ loop.previtem }}{{ loop.nextitem }};{% endfor %}"],
  ["{% for x in [] %}x{% else %}empty{% endfor %}{% for x in xs if x > 1 %}{{ x }}{{ loop.index }}{% else %}none{% endfor %}"],
  ["{% for x in xs %}{% if x == 1 %}{% continue %}{% endif %}{{ x }}{% endfor %}|{% for x in xs %}{{ x }}{% if x == 1 %}{% break %}{% endif %}{% endfor %}"],
  ["{% for x in xs %}{{ x }}{% continue %}{% else %}E{% endfor %}|{% for x in xs %}{% break %}{% else %}E{% endfor %}"],
  ["{% for a, b in [[1, 2], [3, 4]] %}{{ a + b }}{% endfor %}{% for i in range(3) %}{% for j in range(i) %}{{ i }}{{ j }} {% endfor %}{% endfor %}"],
  ["{% set x = 1 %}{% for i in xs %}{% set x = x + i %}{% endfor %}{{ x }}{% if true %}{% set x = 5 %}{% endif %}{{ x }}"],
  ["{% set ns = namespace(n=0, s='') %}{% for m in msgs %}{% set ns.n = ns.n + 1 %}{% set ns.s = ns.s ~ m.role[0] %}{% endfor %}{{ ns.n }}{{ ns.s }}{{ ns }}"],
  ["{% set ns = namespace() %}{% set ns.a = [1] %}{{ ns.a }}{{ ns.b }}{{ ns['a'] }}"],
  ["{{ (msgs | last).role }}{{ msgs[0]['content'] if msgs else 'none' }}{{ 'abc'[1] }}{{ 5 | string + 'a' }}{{ d.nested.k[1].z.missing }}"],
  ["{% for m in msgs[::-1] %}{% set i = (msgs | length - 1) - loop.index0 %}{{ i }}{{ m.role }},{% endfor %}"],
  // macros and blocks
  ["{% macro f(a, b=2, c='x') %}{{ a }}{{ b }}{{ c }}{% endmacro %}{{ f(1) }}{{ f(1, 3) }}{{ f(1, c='y') }}{{ f(a=0) }}"],
  ["{% macro f(a) %}{{ a }}{{ varargs }}{{ kwargs }}{% endmacro %}{{ f(1, 2, k=3) }}"],
  ["{% macro w() %}[{{ caller() }}]{% endmacro %}{% call w() %}in{{ 1 + 1 }}{% endcall %}"],
  ["{% macro each(xs) %}{% for x in xs %}{{ caller(x, loop.index) }}{% endfor %}{% endmacro %}{% call(v, i) each(['a', 'b']) %}{{ i }}{{ v }}{% endcall %}"],
  ["{% set b %}block {{ 1 }}{% endset %}{{ b }}|{% filter upper %}up {{ 'x' }}{% endfilter %}"],
  ["{% set a, b = 1, 2 %}{{ a }}{{ b }}{% set t = (1, 2) %}{{ t | length }}{{ t[1] }}"],
  // whitespace control
  ["a\n  {% if true %}\n  b\n  {% endif %}\nc\n"],
  ["a  {%- if true -%}  b  {%- endif -%}  c {{- ' d ' -}} e"],
  ["x {# comment #} y {#- c2 -#} z\n{# c3 #}\nw"],
  ["{% for x in xs %}\n  {{ x }}\n{% endfor %}\n"],
  ["  {{ 'keep' }}\n\t{% set y = 1 %}  after\n"],
  ["text {%- generation -%} gen {% endgeneration %} tail"],
  ["{{ 'a' }}\n{{ 'b' }}\n\n"],
  ["{% if true %}{# c #}   {%- endif %}x"],
  ["line1 \n {%- if false %}x{% elif true %}\n  y\n{%- else %}z{% endif %}"],
  ["x{# c #}"], ["a {# c #} {%- if true %}b{% endif %}"], ["{{- 'a' -}}\n\n{{ 'b' }}"], ["{%- set x = 1 -%}\n  {{ x }}  \n"],
  // globals
  ["{{ range(4) }}{{ range(2, 5) }}{{ range(5, 0, -2) }}{{ range(0) }}"],
  ["{{ namespace(a=1).a }}{{ namespace({'x': 2}).x }}"],
  // errors: both must fail
  ["{{ raise_exception('boom') }}"], ["{{ none + 1 }}"], ["{{ undefined_var + 1 }}"], ["{{ xs[0](1) }}"],
  ["{% set d = {} %}{% set d.x = 1 %}"], ["{{ range(1, 2, 0) }}"],
];

test("snippets render identically", { skip: bin ? false : "PEREGRINE_BIN is not set" }, () => {
  const dir = mkdtempSync(join(tmpdir(), "peregrine-snippets-"));
  try {
    const messagesFile = join(dir, "messages.json");
    writeFileSync(messagesFile, "[]");
    const failures = [];
    for (const [source, variables = data] of snippets) {
      const context = { ...variables, messages: [], tools: null, add_generation_prompt: false };
      let expected;
      let referenceError;
      try {
        expected = new Template(source).render(context);
      } catch (e) {
        referenceError = e;
      }
      const result = spawnSync(
        bin,
        ["chat-template", "--chat-template", source, "--messages", messagesFile, "--kwargs", JSON.stringify(variables)],
        { encoding: "utf8" },
      );
      if (referenceError) {
        if (result.status === 0) failures.push(`${JSON.stringify(source)}: reference failed (${referenceError.message}) but peregrine printed ${JSON.stringify(result.stdout)}`);
      } else if (result.status !== 0) {
        failures.push(`${JSON.stringify(source)}: peregrine failed: ${result.stderr.trim()}`);
      } else if (result.stdout !== expected) {
        failures.push(`${JSON.stringify(source)}:\n  expected ${JSON.stringify(expected)}\n  actual   ${JSON.stringify(result.stdout)}`);
      }
    }
    assert.deepEqual(failures, [], failures.join("\n"));
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});
