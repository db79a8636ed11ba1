// The Jinja interpreter and chat templates: every golden chat fixture rendered with the real Qwen3
// template, then hand-written snippets whose expected text follows the Jinja2 documentation
// (trim_blocks + lstrip_blocks, Python printing rules), then errors and JSON.
#include <doctest/doctest.h>

#include <fstream>
#include <sstream>
#include <string>

#include "core/error.h"
#include "models/chat_template.h"
#include "models/jinja.h"
#include "models/json_value.h"

using namespace hearth;

namespace {

const std::string kShared = HEARTH_SHARED_DIR;

std::string slurp(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  REQUIRE_MESSAGE(f.good(), "cannot open ", path);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

std::string render(const std::string& tmpl, const std::string& ctx = "{}") {
  return jinja::Template::parse(tmpl).render(Json::parse(ctx));
}

// The message of the hearth::Error that rendering (or parsing) throws, or "" if none.
std::string render_error(const std::string& tmpl, const std::string& ctx = "{}") {
  try {
    render(tmpl, ctx);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

struct Case {
  const char* tmpl;
  const char* ctx;
  const char* want;
};

void check_cases(const Case* cases, size_t n) {
  for (size_t k = 0; k < n; ++k) {
    INFO("template: ", cases[k].tmpl);
    std::string got;
    try {
      got = render(cases[k].tmpl, cases[k].ctx);
    } catch (const Error& e) {
      got = std::string("error: ") + e.what();
    }
    CHECK(got == cases[k].want);
  }
}

}  // namespace

TEST_SUITE("jinja") {
  TEST_CASE("Qwen3 chat template reproduces every golden chat fixture") {
    Json config = Json::parse(slurp(kShared + "/qwen3-tokenizer/tokenizer_config.json"));
    ChatTemplate tmpl = ChatTemplate::from_tokenizer_config(config);
    CHECK(tmpl.bos_token() == "");  // Qwen3 has none, so bos_token stays undefined
    CHECK(tmpl.eos_token() == "<|im_end|>");
    std::ifstream lines(kShared + "/fixtures/tokenizer/chat.jsonl");
    REQUIRE(lines.good());
    std::string line;
    int cases = 0, with_tools = 0;
    while (std::getline(lines, line)) {
      if (line.empty()) continue;
      Json c = Json::parse(line);
      ChatOptions opt;
      opt.add_generation_prompt = c.at("add_generation_prompt").as_bool();
      if (const Json* et = c.find("enable_thinking"); et && !et->is_null())
        opt.enable_thinking = et->as_bool();
      if (const Json* tools = c.find("tools")) {
        opt.tools = *tools;
        ++with_tools;
      }
      INFO("case ", c.at("name").as_string());
      CHECK(tmpl.render(c.at("messages"), opt) == c.at("text").as_string());
      ++cases;
    }
    CHECK(cases == 48);
    CHECK(with_tools >= 5);
  }

  TEST_CASE("whitespace control with trim_blocks and lstrip_blocks") {
    static const Case cases[] = {
        // trim_blocks eats the newline after a block tag; lstrip_blocks the indentation before it.
        {"a\n{% if true %}\nb\n{% endif %}\nc", "{}", "a\nb\nc"},
        {"a\n  {% if true %}\n  b\n  {% endif %}\nc\n", "{}", "a\n  b\nc"},
        // Only one trailing newline of the template is dropped (keep_trailing_newline=False).
        {"x\n\n", "{}", "x\n"},
        {"{{ 'a' }}\n", "{}", "a"},
        // Variables are neither lstripped nor trimmed.
        {"a\n  {{ 1 }}\n  {# c #}\nb", "{}", "a\n  1\nb"},
        // `-` strips all whitespace, newlines included, on its side.
        {"a  {%- if true -%}  b  {%- endif -%}  c", "{}", "abc"},
        {"{{- 'x' -}}  \n  {{ 'y' }}", "{}", "xy"},
        {"a {#- c -#} b", "{}", "ab"},
        // `+` turns lstrip_blocks / trim_blocks off for one tag.
        {"a\n  {%+ if true %}b{% endif %}", "{}", "a\n  b"},
        {"a {%+ if true +%}\n b{% endif %}", "{}", "a \n b"},
        // lstrip applies only when the tag starts its line.
        {"x {% if true %}y{% endif %}", "{}", "x y"},
        {"\t{% if true %}\tx\n\t{% endif %}\ty", "{}", "\tx\n\ty"},
        {"{% for i in [1,2] %}\n  {{ i }}\n{% endfor %}\n", "{}", "  1\n  2\n"},
        {"{% for i in [1,2] -%}\n  {{ i }}\n{%- endfor %}", "{}", "12"},
        {"<ul>\n{% for item in items %}\n    <li>{{ item }}</li>\n{% endfor %}\n</ul>",
         R"({"items": ["a", "b"]})", "<ul>\n    <li>a</li>\n    <li>b</li>\n</ul>"},
        {"a {# comment #}\nb\n{# full line #}\nc\n    {# indented #}\nd", "{}", "a b\nc\nd"},
        {"l1\n    {%- set x = 1 %}\n  {{ x }}", "{}", "l1  1"},
        // \r\n and \r become \n, as jinja2 normalises newlines.
        {"x\r\ny\r\n", "{}", "x\ny"},
        {"{% raw %}{{ x }}{% endraw %}", "{}", "{{ x }}"},
        {"a\n  {% raw %}\n{{ x }}\n  {% endraw %}\nb", "{}", "a\n\n{{ x }}\nb"},
    };
    check_cases(cases, std::size(cases));
  }

  TEST_CASE("expressions follow Python semantics") {
    static const Case cases[] = {
        {"{{ 1 + 2 * 3 }} {{ (1 + 2) * 3 }} {{ 7 / 2 }} {{ 7 // 2 }} {{ 7 % 3 }} {{ 2 ** 10 }}",
         "{}", "7 9 3.5 3 1 1024"},
        {"{{ -7 // 2 }} {{ -7 % 3 }} {{ 7 // -2 }} {{ 7.0 // 2 }} {{ 4 / 2 }}", "{}",
         "-4 2 -4 3.0 2.0"},
        {"{{ 1.0 }} {{ 1.5e3 }} {{ 3 * 1.0 }} {{ 0.1 + 0.2 }} {{ 1e100 }} {{ 1e16 }} {{ 1e15 }}",
         "{}", "1.0 1500.0 3.0 0.30000000000000004 1e+100 1e+16 1000000000000000.0"},
        {"{{ 1/3 }} {{ 10 ** -2 }} {{ 1.5e-7 }} {{ 1_000 }} {{ true + 1 }}", "{}",
         "0.3333333333333333 0.01 1.5e-07 1000 2"},
        // jinja2 parses `**` left-associatively and unary minus binds tighter than it.
        {"{{ 2 ** 3 ** 2 }} {{ -2 ** 2 }} {{ -(1 + 2) }} {{ +3 }}", "{}", "64 4 -3 3"},
        {"{{ 'a' ~ 1 ~ none ~ true ~ 1.5 }} {{ 'ab' * 3 }} {{ [1] * 2 }} {{ [1, 2] + [3] }}", "{}",
         "a1NoneTrue1.5 ababab [1, 1] [1, 2, 3]"},
        {"{{ true }} {{ false }} {{ none }} {{ True }} {{ None }} {{ False }}", "{}",
         "True False None True None False"},
        {"{{ 1 if true else 2 }} {{ 1 if false else 2 }} [{{ 1 if false }}]", "{}", "1 2 []"},
        {"{{ 1 if 2 > 1 else 3 if 0 else 4 }} {{ 0 if 0 else 3 if 0 else 4 }}", "{}", "1 4"},
        // and/or return an operand, as in Python.
        {"{{ not true }} {{ true and false }} {{ 0 or 'x' }} {{ '' and 1 }}| {{ 1 and 2 }}", "{}",
         "False False x | 2"},
        {"{{ 1 < 2 < 3 }} {{ 3 > 2 > 2 }} {{ 'a' < 'b' }} {{ 'B' < 'a' }} {{ 1 == 1.0 }} {{ 1 != 2 "
         "}}",
         "{}", "True False True True True True"},
        {"{{ [1, 2] == [1, 2] }} {{ (1, 2) == [1, 2] }} {{ [1, 2] < [1, 3] }} {{ 2 >= 2.0 }}", "{}",
         "True False True True"},
        {"{{ 'a' in 'cat' }} {{ 1 in [1, 2] }} {{ 'k' in {'k': 1} }} {{ 3 not in [1] }} {{ 'x' not "
         "in 'abc' }}",
         "{}", "True True True True True"},
        // `~` binds looser than `*` but tighter than `+`.
        {"{{ not 1 == 2 }} {{ not 1 in [1] }} {{ 'a' ~ 'b' * 2 }} {{ [1, 2, 3]|length > 2 }}", "{}",
         "True False abb True"},
        {"{{ 'a' 'b' ~ 'c' }}", "{}", "abc"},
        // Containers print as Python repr: single quotes unless the text holds one.
        {"{{ [1, 'a', none, true, 1.5] }} {{ {'a': [1, {'b': none}]} }} {{ (1,) }} {{ ('a', 2) }} "
         "{{ () }}",
         "{}", "[1, 'a', None, True, 1.5] {'a': [1, {'b': None}]} (1,) ('a', 2) ()"},
        {R"({{ x }})",
         R"({"x": {"a": "it's", "b": "say \"hi\"", "c": "both ' \"", "d": "nl\n\t\u0001é"}})",
         R"({'a': "it's", 'b': 'say "hi"', 'c': 'both \' "', 'd': 'nl\n\t\x01é'})"},
        {R"({{ "\n\t\x41\u00e9\\" }}|{{ '\d' }}|{{ 'it\'s' }})", "{}", "\n\tAé\\|\\d|it's"},
        {"{{ x }} {{ y }} {{ z }}", R"({"x": 1e-7, "y": 100.0, "z": -0.0})", "1e-07 100.0 -0.0"},
    };
    check_cases(cases, std::size(cases));
  }

  TEST_CASE("subscripts, slices, attributes and undefined values") {
    static const Case cases[] = {
        {"{{ xs[0] }} {{ xs[-1] }} {{ xs[1:] }} {{ xs[:-1] }} {{ xs[::-1] }} {{ xs[::2] }} [{{ "
         "xs[5] }}]",
         R"({"xs": [1, 2, 3, 4]})", "1 4 [2, 3, 4] [1, 2, 3] [4, 3, 2, 1] [1, 3] []"},
        {"{{ xs[-10:10] }} {{ xs[3:1] }} {{ xs[3:1:-1] }} {{ xs[-1:-5:-2] }}",
         R"({"xs": [1, 2, 3, 4]})", "[1, 2, 3, 4] [] [4, 3] [4, 2]"},
        // Strings index by code point.
        {"{{ 'hello'[1:3] }} {{ 'héllo'[::-1] }} {{ 'héllo'[1] }} {{ 'héllo'|length }}", "{}",
         "el olléh é 5"},
        {"{{ a.b.c }} {{ a['b'].c }} {{ l.0 }} {{ l.0.1 }}",
         R"({"a": {"b": {"c": "deep"}}, "l": [[1, 2]]})", "deep deep [1, 2] 2"},
        // Attribute access falls back to items; a missing member is undefined, printed empty.
        {"{{ m.role }} {{ m['role'] }} [{{ m.missing }}] {{ m.missing is defined }} {{ m.missing "
         "is none }}",
         R"({"m": {"role": "user"}})", "user user [] False False"},
        {"{{ u }}|{{ u is defined }}|{{ u|default(1) }}|{% if u %}t{% else %}f{% endif %}|"
         "{% for x in u %}x{% endfor %}|{{ u ~ 'a' }}|{{ u|length }}|{{ u == none }}",
         "{}", "|False|1|f||a|0|False"},
        {"[{{ n.attr }}] {{ n.attr is defined }} [{{ 'abc'.nope }}] [{{ [1][3] }}]",
         R"({"n": null})", "[] False [] []"},
    };
    check_cases(cases, std::size(cases));
    // Using an undefined value beyond printing or testing it is an error, as in jinja2.
    CHECK(render_error("{{ u.attr }}").find("'u' is undefined") != std::string::npos);
    CHECK(render_error("{{ u + 1 }}").find("'u' is undefined") != std::string::npos);
    CHECK(render_error("{{ u() }}").find("'u' is undefined") != std::string::npos);
    CHECK(render_error("{{ m.nope.deeper }}", R"({"m": {}})").find("has no attribute 'nope'") !=
          std::string::npos);
    CHECK(render_error("{{ 1 < 'a' }}").find("not supported between") != std::string::npos);
    CHECK(render_error("{{ 'a' + 1 }}").find("concatenate") != std::string::npos);
    CHECK(render_error("{{ 1 / 0 }}").find("division by zero") != std::string::npos);
    CHECK(render_error("{{ 'a' in 1 }}").find("not iterable") != std::string::npos);
  }

  TEST_CASE("statements: if, for, set, namespace, macros, call, filter, with") {
    static const Case cases[] = {
        {"{% if false %}a{% elif true %}b{% else %}c{% endif %}{% if 0 %}a{% elif '' %}b{% else "
         "%}c{% endif %}",
         "{}", "bc"},
        {"{% for x in 'abc' %}{{ loop.index }}{{ loop.index0 }}{{ loop.revindex }}{{ "
         "loop.revindex0 }}"
         "{{ loop.first }}{{ loop.last }}{{ loop.length }}|{% endfor %}",
         "{}", "1032TrueFalse3|2121FalseFalse3|3210FalseTrue3|"},
        {"{% for x in [] %}x{% else %}empty{% endfor %}", "{}", "empty"},
        // The loop filter runs first, so loop.length counts the kept items.
        {"{% for x in [1, 2, 3, 4] if x is even %}{{ x }}:{{ loop.index }}/{{ loop.length }} {% "
         "endfor %}",
         "{}", "2:1/2 4:2/2 "},
        {"{% for k, v in m.items() %}{{ k }}={{ v }};{% endfor %}{% for k in m %}{{ k }}{% endfor "
         "%}",
         R"({"m": {"role": "user", "content": "hi"}})", "role=user;content=hi;rolecontent"},
        {"{% for a, b in [[1, 2], [3, 4]] %}{{ a + b }}{% endfor %}", "{}", "37"},
        {"{% for x in [1, 2, 3] %}{% if x == 2 %}{% continue %}{% endif %}{{ x }}{% endfor %}|"
         "{% for x in [1, 2, 3] %}{% if x == 2 %}{% break %}{% endif %}{{ x }}{% endfor %}",
         "{}", "13|1"},
        {"{% for x in [1, 2] %}{% for y in [3, 4] %}{{ loop.index }}{{ x }}{{ y }} {% endfor %}"
         "{{ loop.index }};{% endfor %}",
         "{}", "113 214 1;123 224 2;"},
        {"{% for x in [1, 2, 3] %}{{ loop.previtem }}-{{ loop.nextitem }}-{{ loop.cycle('a', 'b') "
         "}} "
         "{% endfor %}",
         "{}", "-2-a 1-3-b 2--a "},
        // A for loop scopes its assignments; if does not.
        {"{% set x = 1 %}{% for i in [1] %}{% set x = 2 %}{{ x }}{% endfor %}{{ x }}", "{}", "21"},
        {"{% set x = 1 %}{% if true %}{% set x = 2 %}{% endif %}{{ x }}", "{}", "2"},
        {"{% set ns = namespace(n=0, found=false) %}{% for i in range(5) %}{% set ns.n = ns.n + i "
         "%}"
         "{% endfor %}{{ ns.n }} {{ ns.found }}",
         "{}", "10 False"},
        {"{% set a, b = 1, 2 %}{{ a }}{{ b }} {% set t = 1, 2 %}{{ t }}", "{}", "12 (1, 2)"},
        {"{% set x %}hello {{ 1 }}{% endset %}[{{ x }}]{% set y | upper %}shout{% endset %}{{ y }}",
         "{}", "[hello 1]SHOUT"},
        {"{% macro m(a, b=2) %}{{ a }}-{{ b }}{% endmacro %}{{ m(1) }} {{ m(1, 3) }} {{ m(b=5, "
         "a=4) }} [{{ m() }}]",
         "{}", "1-2 1-3 4-5 [-2]"},
        {"{% macro m(a) %}{{ a }}{{ varargs }}{{ kwargs }}{% endmacro %}{{ m(1, 2, 3, k=4) }}",
         "{}", "1(2, 3){'k': 4}"},
        {"{% macro f(n) %}{% if n > 0 %}{{ n }}{{ f(n - 1) }}{% endif %}{% endmacro %}{{ f(3) }}",
         "{}", "321"},
        // Macros look names up when called.
        {"{% set g = 'G' %}{% macro f() %}{{ g }}{% endmacro %}{% set g = 'H' %}{{ f() }}", "{}",
         "H"},
        {"{% macro wrap() %}<{{ caller() }}>{% endmacro %}{% call wrap() %}inner{% endcall %}",
         "{}", "<inner>"},
        {"{% macro wrap() %}<{{ caller(5) }}>{% endmacro %}{% call(x) wrap() %}v={{ x }}{% endcall "
         "%}",
         "{}", "<v=5>"},
        {"{% filter upper %}abc{{ 'd' }}{% endfilter %}", "{}", "ABCD"},
        {"{% with a = 1, b = 2 %}{{ a + b }}{% endwith %}[{{ a }}]", "{}", "3[]"},
        {"{{ range(3)|list }} {{ range(1, 7, 2)|list }} {{ range(5, 0, -2)|list }}", "{}",
         "[0, 1, 2] [1, 3, 5] [5, 3, 1]"},
        {"{{ dict(a=1, b=2) }} {{ namespace(a=1).a }}", "{}", "{'a': 1, 'b': 2} 1"},
    };
    check_cases(cases, std::size(cases));
  }

  TEST_CASE("filters") {
    const char* users =
        R"({"users": [{"name": "b", "age": 3, "tags": ["x"]}, {"name": "A", "age": 1},
                      {"name": "c", "age": 2, "tags": []}]})";
    const Case cases[] = {
        {"{{ xs|length }} {{ 'héllo'|length }} {{ {'a': 1}|count }}", R"({"xs": [1, 2]})", "2 5 1"},
        {"{{ '  a b  '|trim }}|{{ 'xxaxx'|trim('x') }}|{{ 'Hello World'|upper }}|{{ 'Hello'|lower "
         "}}",
         "{}", "a b|a|HELLO WORLD|hello"},
        // The title filter capitalises after spaces and brackets; str.title() after any non-letter.
        {"{{ 'hello wORLD-x(y'|title }}|{{ \"it's\".title() }}|{{ 'hELLO'|capitalize }}", "{}",
         "Hello World-X(Y|It'S|Hello"},
        {"{{ x|default('d') }} {{ none|default('d') }} {{ ''|default('d', true) }} {{ 0|d('z', "
         "boolean=true) }}",
         "{}", "d None d z"},
        {"{{ [1, 2, 3]|join(',') }} {{ ['a', 'b']|join }} {{ users|join(', ', attribute='name') }}",
         users, "1,2,3 ab b, A, c"},
        {"{{ [1, 2, 3]|first }} {{ [1, 2, 3]|last }} {{ 'abc'|first }} [{{ []|first }}]", "{}",
         "1 3 a []"},
        {"{{ 'abc'|list }} {{ {'a': 1, 'b': 2}|list }} {{ {'a': 1}|items|list }}", "{}",
         "['a', 'b', 'c'] ['a', 'b'] [('a', 1)]"},
        {"{{ 1|string }}{{ none|string }} {{ '42'|int + 1 }} {{ '4.7'|int }} {{ 'x'|int }} {{ "
         "'x'|int(7) }}"
         " {{ 3.9|int }}",
         "{}", "1None 43 4 0 7 3"},
        {"{{ '1.5'|float }} {{ 2|float }} {{ 'x'|float }} {{ -3|abs }} {{ -2.5|abs }}", "{}",
         "1.5 2.0 0.0 3 2.5"},
        // round() is Python's: half to even on the binary value, int stays int.
        {"{{ 2.5|round }} {{ 3.5|round }} {{ 2.675|round(2) }} {{ 2.1|round(0, 'ceil') }} {{ "
         "5|round }}"
         " {{ 1250|round(-2) }}",
         "{}", "2.0 4.0 2.67 3.0 5 1200"},
        {"{{ 'aaa'|replace('a', 'b') }} {{ 'aaa'|replace('a', 'b', 2) }}", "{}", "bbb bba"},
        {"{{ users|selectattr('age', 'gt', 1)|map(attribute='name')|list }} "
         "{{ users|rejectattr('tags')|map(attribute='name')|join }} "
         "{{ users|selectattr('tags', 'defined')|map(attribute='name')|list }}",
         users, "['b', 'c'] Ac ['b', 'c']"},
        {"{{ [1, 2, 3, 4]|select('odd')|list }} {{ [1, 2, 3, 4]|reject('odd')|list }} {{ [0, 1, "
         "'']|select|list }}",
         "{}", "[1, 3] [2, 4] [1]"},
        {"{{ ['a', 'b']|map('upper')|list }} {{ users|map(attribute='missing', default='z')|list "
         "}}",
         users, "['A', 'B'] ['z', 'z', 'z']"},
        {"{{ [3, 1, 2, 1]|unique|list }} {{ ['a', 'A', 'b']|unique|list }}", "{}",
         "[3, 1, 2] ['a', 'b']"},
        {"{{ [1, 2, 3]|reverse|list }} {{ 'abc'|reverse }} {{ [3, 1, 2]|sort }} {{ ['b', 'A', "
         "'c']|sort }}"
         " {{ users|sort(attribute='age', reverse=true)|map(attribute='name')|join }}",
         users, "[3, 2, 1] cba [1, 2, 3] ['A', 'b', 'c'] bcA"},
        {"{{ '<a>&\"\\''|escape }} {{ '<b>'|safe }} {{ '<b>'|safe|escape }}", "{}",
         "&lt;a&gt;&amp;&#34;&#39; <b> <b>"},
        {"{{ 'a\nb\n\nc'|indent }}|{{ 'a\nb'|indent(2, true) }}|{{ 'a\n\nb'|indent(2, blank=true) "
         "}}",
         "{}", "a\n    b\n\n    c|  a\n  b|a\n  \n  b"},
        {"{{ 'hello big world, ok_1 2'|wordcount }} {{ [1, 2, 3]|sum }} {{ [3, 1, 2]|min }} {{ [3, "
         "1, 2]|max }}",
         "{}", "5 6 1 3"},
        {"{{ {'b': 1, 'a': 2}|dictsort }} {{ '%s-%d'|format('a', 3) }} {{ 'hello world "
         "foo'|truncate(9) }}",
         "{}", "[('a', 2), ('b', 1)] a-3 hello..."},
    };
    check_cases(cases, std::size(cases));
  }

  TEST_CASE("tests") {
    static const Case cases[] = {
        {"{{ x is defined }} {{ y is defined }} {{ y is undefined }} {{ none is none }} {{ x is "
         "not none }}",
         R"({"x": 1})", "True False True True True"},
        {"{{ 1 is number }}{{ 1.0 is number }}{{ '1' is number }} {{ 1 is integer }}{{ true is "
         "integer }}"
         "{{ 1.0 is integer }} {{ 1.0 is float }}",
         "{}", "TrueTrueFalse TrueFalseFalse True"},
        {"{{ 'a' is string }}{{ 1 is string }} {{ {} is mapping }}{{ [] is mapping }} {{ [] is "
         "iterable }}"
         "{{ 1 is iterable }} {{ 'x' is sequence }}{{ 1 is sequence }}",
         "{}", "TrueFalse TrueFalse TrueFalse TrueFalse"},
        {"{{ true is boolean }}{{ 1 is boolean }} {{ true is true }}{{ 1 is true }} {{ false is "
         "false }}"
         "{{ 0 is false }}",
         "{}", "TrueFalse TrueFalse TrueFalse"},
        {"{{ 2 is equalto 2 }}{{ 2 is eq(3) }}{{ 2 is ne 2 }} {{ 1 is in [1] }}{{ 3 is in [1] }} "
         "{{ 3 is odd }}"
         "{{ 3 is even }} {{ 9 is divisibleby 3 }}",
         "{}", "TrueFalseFalse TrueFalse TrueFalse True"},
    };
    check_cases(cases, std::size(cases));
  }

  TEST_CASE("string, list and dict methods") {
    static const Case cases[] = {
        {"{{ 'a,b,,c'.split(',') }} {{ ' a  b '.split() }} {{ 'a b c'.split(' ', 1) }} {{ "
         "'a,b,c'.rsplit(',', 1) }}",
         "{}", "['a', 'b', '', 'c'] ['a', 'b'] ['a', 'b c'] ['a,b', 'c']"},
        {"{{ 'xxhixx'.strip('x') }} [{{ '  hi  '.lstrip() }}] [{{ '  hi  '.rstrip() }}] {{ "
         "'\n\nhi\n'.strip('\n') }}",
         "{}", "hi [hi  ] [  hi] hi"},
        {"{{ 'Hello'.startswith('He') }} {{ 'Hello'.endswith('lo') }} {{ 'Hello'.startswith(('x', "
         "'H')) }}",
         "{}", "True True True"},
        {"{{ 'hello'.upper() }} {{ 'HeLLo'.lower() }} {{ 'hello world'.title() }} {{ "
         "'hello'.replace('l', 'L', 1) }}"
         " {{ 'héllo'.find('l') }} {{ 'hello'.find('z') }} {{ 'hello'.count('l') }}",
         "{}", "HELLO hello Hello World heLlo 2 -1 2"},
        {"{{ '{} and {}'.format(1, 'b') }} {{ '{name}!'.format(name='n') }} {{ "
         "'{:>4}|{:.2f}'.format('a', 3.14159) }}",
         "{}", "1 and b n!    a|3.14"},
        {"{{ ', '.join(['a', 'b']) }} {{ '%s and %d' % ('a', 2) }}", "{}", "a, b a and 2"},
        {"{{ [1, 2, 1].count(1) }} {{ [1, 2, 3].index(2) }} {{ m.get('role') }} {{ m.get('x', 'd') "
         "}} {{ m.get('x') }}"
         " {{ m.keys()|list }} {{ m.values()|list }} {{ m.items()|list }}",
         R"({"m": {"role": "user"}})", "2 1 user d None ['role'] ['user'] [('role', 'user')]"},
    };
    check_cases(cases, std::size(cases));
    // The sandbox is immutable: mutating methods are refused.
    CHECK(render_error("{{ xs.append(1) }}", R"({"xs": []})").find("unsafe") != std::string::npos);
    CHECK(render_error("{{ d.update({}) }}", R"({"d": {}})").find("unsafe") != std::string::npos);
  }

  TEST_CASE("tojson is Python's json.dumps") {
    const char* ctx =
        R"({"x": {"q": "say \"hi\"\n\\", "é": ["ü", 1, 1.5, true, null], "e": {}, "l": []}})";
    CHECK(render("{{ x|tojson }}", ctx) ==
          R"({"q": "say \"hi\"\n\\", "é": ["ü", 1, 1.5, true, null], "e": {}, "l": []})");
    CHECK(render("{{ x|tojson(indent=2) }}", R"({"x": {"a": [1, {"b": 2}], "e": {}}})") ==
          "{\n  \"a\": [\n    1,\n    {\n      \"b\": 2\n    }\n  ],\n  \"e\": {}\n}");
    CHECK(render("{{ x|tojson(sort_keys=true) }}|{{ x|tojson(separators=(',', ':')) }}|"
                 "{{ x|tojson(ensure_ascii=true) }}",
                 R"({"x": {"b": "é😀", "a": 1}})") ==
          R"({"a": 1, "b": "é😀"}|{"b":"é😀","a":1}|{"b": "\u00e9\ud83d\ude00", "a": 1})");
    // Control characters use \u escapes; U+2028 and HTML characters stay as they are.
    CHECK(render("{{ s|tojson }}", R"({"s": "\u0001\u001f\u2028<&>'"})") ==
          "\"\\u0001\\u001f\u2028<&>'\"");
    CHECK(render("{{ 1.0|tojson }} {{ 1e20|tojson }} {{ (1, 2)|tojson }} {{ {1: 2, none: 3, 2.5: "
                 "4}|tojson }}") == R"(1.0 1e+20 [1, 2] {"1": 2, "null": 3, "2.5": 4})");
    // True == 1 in Python, so the later key replaces the value but keeps the first spelling.
    CHECK(render("{{ {1: 2, true: 4} }}") == "{1: 4}");
    CHECK(render_error("{{ u|tojson }}").find("not JSON serializable") != std::string::npos);
  }

  TEST_CASE("syntax errors name line and column") {
    CHECK(render_error("line1\n  {{ foo( }}") ==
          "template line 2 column 11: unexpected '}', expected ')'");
    CHECK(render_error("ab\n{% frobnicate %}") ==
          "template line 2 column 4: Encountered unknown tag 'frobnicate'.");
    CHECK(render_error("{% for x in y %}{% endif %}")
              .find("template line 1 column 20: Encountered unknown "
                    "tag 'endif'") == 0);
    CHECK(
        render_error("{% if x %}").find("template line 1 column 11: Unexpected end of template") ==
        0);
    CHECK(render_error("{{ 1 + }}").find("template line 1 column 8: ") == 0);
    CHECK(render_error("x\n\n  {# never closed").find("template line 3 column 3: ") == 0);
    CHECK(render_error("{% break %}").find("template line 1 column 4: ") == 0);
    // Columns count characters, not bytes.
    CHECK(render_error("é{{ @ }}").find("template line 1 column 5: ") == 0);
    CHECK_THROWS_AS(jinja::Template::parse("{% macro m(a=1, b) %}{% endmacro %}"), Error);
  }

  TEST_CASE("runtime errors name line and column; raise_exception surfaces its message") {
    CHECK(render_error("a\n{{ raise_exception('Roles must alternate') }}") ==
          "template line 2 column 4: Roles must alternate");
    CHECK(render_error("{% if messages[0].role != 'system' %}{{ raise_exception('no system: ' ~ "
                       "messages[0].role) }}{% endif %}",
                       R"({"messages": [{"role": "user"}]})")
              .find("no system: user") != std::string::npos);
    CHECK(render_error("\n\n   {{ 1 + 'a' }}").find("template line 3 column 9: ") == 0);
    CHECK(render_error("{{ x|nosuchfilter }}").find("No filter named 'nosuchfilter'") !=
          std::string::npos);
  }

  TEST_CASE("chat template context") {
    const char* tmpl =
        "{{ bos_token is defined }} {{ eos_token }} {{ tools is none }} {{ add_generation_prompt "
        "}} "
        "{{ enable_thinking is defined }} {{ custom }} {{ messages|length }}";
    Json messages = Json::parse(R"([{"role": "user", "content": "hi"}])");
    ChatOptions opt;
    opt.add_generation_prompt = false;
    opt.extra = Json::parse(R"({"custom": "c"})");
    // Like transformers: no bos token means bos_token is undefined; absent tools are None.
    CHECK(apply_chat_template(tmpl, messages, opt, "", "</s>") ==
          "False </s> True False False c 1");
    opt.enable_thinking = false;
    opt.tools = Json::parse(R"([{"type": "function"}])");
    CHECK(apply_chat_template(tmpl, messages, opt, "<s>", "</s>") ==
          "True </s> False False True c 1");
    opt.extra = Json::parse(R"({"messages": []})");
    CHECK_THROWS_AS(apply_chat_template(tmpl, messages, opt, "", ""), Error);
    // {% generation %} (transformers' assistant-mask tag) renders its body.
    CHECK(render("{% generation %}gen {{ 1 }}{% endgeneration %}") == "gen 1");
  }

  TEST_CASE("Json parses and dumps like Python's json module") {
    Json j = Json::parse(R"({"b": 1, "a": [true, null, 1.5, -2, "x\u00e9\n"], "b": 3, "f": 1.0})");
    // A repeated key keeps its first position and its last value, as a Python dict does.
    CHECK(j.dump_python() == R"({"b": 3, "a": [true, null, 1.5, -2, "xé\n"], "f": 1.0})");
    CHECK(j.at("a").at(2).as_double() == 1.5);
    CHECK(j.at("a").at(3).as_int() == -2);
    CHECK(j.at("f").is_float());
    CHECK(Json::parse("[]").dump_python(2) == "[]");
    CHECK(Json::parse(R"({"a": [1, 2]})").dump_python(2) == "{\n  \"a\": [\n    1,\n    2\n  ]\n}");
    CHECK(Json(1e16).dump_python() == "1e+16");
    CHECK(Json(0.0001).dump_python() == "0.0001");
    CHECK(Json(123456.789).dump_python() == "123456.789");
    CHECK(Json::parse("[1, 1.0]") == Json::parse("[1.0, 1]"));
    CHECK_THROWS_AS(Json::parse("{\"a\": }"), Error);
    CHECK_THROWS_AS(j.at("zzz"), Error);
    CHECK_THROWS_AS(j.at("b").as_string(), Error);
  }

  TEST_CASE("a render's total work and sizes are bounded, with errors naming the line") {
    // Each range is under the sandbox's MAX_RANGE, the whole is 10^10 steps.
    const std::string nested =
        "{% for i in range(100000) %}\n{% for j in range(100000) %}{{ '' }}{% endfor %}"
        "{% endfor %}";
    jinja::Limits few;
    few.max_steps = 100000;
    std::string e;
    try {
      jinja::Template::parse(nested).render(Json::parse("{}"), few);
    } catch (const Error& err) {
      e = err.what();
    }
    CHECK(e.find("budget of 100000 steps") != std::string::npos);
    CHECK(e.find("template line 2") != std::string::npos);
    // The default budget stops it too (in a second or two).
    CHECK(render_error(nested).find("budget of 5000000 steps") != std::string::npos);
    // A string that doubles every iteration.
    e = render_error(
        "{% set ns = namespace(s='ab') %}{% for i in range(64) %}\n\n"
        "{% set ns.s = ns.s ~ ns.s %}{% endfor %}");
    CHECK(e.find("grew past 16777216 bytes or items") != std::string::npos);
    CHECK(e.find("template line 3") != std::string::npos);
    // So does a list.
    e = render_error(
        "{% set ns = namespace(l=[1]) %}{% for i in range(64) %}"
        "{% set ns.l = ns.l + ns.l %}{% endfor %}");
    CHECK(e.find("grew past") != std::string::npos);
    // Output that grows a piece at a time.
    jinja::Limits small;
    small.max_output = 1000;
    const jinja::Template t = jinja::Template::parse("{% for i in range(10000) %}xy{% endfor %}");
    CHECK_THROWS_WITH_AS(t.render(Json::parse("{}"), small),
                         doctest::Contains("output grew past 1000 bytes"), Error);
    CHECK(t.render(Json::parse("{}")).size() == 20000);
    // Loops with empty bodies cost their iterations.
    CHECK(render_error("{% for a in range(99999) %}{% for b in range(99999) %}{% endfor %}"
                       "{% endfor %}")
              .find("budget of 5000000 steps") != std::string::npos);
    // A large string copied over and over, each copy under the value limit.
    e = render_error(
        "{% set big = 'x' * 10000000 %}{% for i in range(1000) %}"
        "{% set c = big ~ '' %}{% endfor %}");
    CHECK(e.find("more than 1073741824 bytes or items of values in all") != std::string::npos);
    // Python's str * n is refused before it allocates.
    CHECK(render_error("{{ 'x' * 100000000 }}").find("MemoryError") != std::string::npos);
    // So are format widths and precisions past the value limit (fuzz_jinja: '%1999999999d' % 2
    // built a 2 GB string; digits past int64 overflowed), while large legal ones still work.
    for (const char* tmpl :
         {"{{ '%1999999999d' % 2 }}", "{{ '%.999999999f' % 2.5 }}",
          "{{ '%99999999999999999999999d' % 2 }}", "{{ '{:>999999999}'.format(1) }}",
          "{{ '{:.99999999999999999999}'.format(1.5) }}", "{{ 'a'.center(999999999) }}",
          "{{ 'a'.rjust(999999999) }}", "{{ '1'.zfill(999999999) }}",
          "{{ ('a\n' * 1000) | indent(99999) }}",
          // tojson's indent (fuzz_jinja, pass 4: indent 299999999999 asked for 300 GB), and one
          // under the limit repeated on every line of a deep value.
          "{{ 1 | tojson(indent=299999999999) }}",
          "{{ ([[[[[1, 2, 3]]]]] * 40) | tojson(indent=9999999) }}"}) {
      const std::string t = tmpl, e = render_error(t);
      CAPTURE(t);
      CAPTURE(e);
      CHECK(e.find("MemoryError") != std::string::npos);
    }
    CHECK(render("{{ '%5d|%-4s|%.2f' % (42, 'ab', 3.14159) }}") == "   42|ab  |3.14");
    CHECK(render("{{ '{:>6}'.format('x') }}{{ 'y'.center(3) }}{{ '7'.zfill(3) }}") ==
          "     x y 007");
    CHECK(render("{{ '%100000d' % 1 }}").size() == 100000);
    // A format spec's type is spliced into a printf format: only known types, ending the spec
    // (fuzz_jinja, pass 5: '{:t...}'.format(2) passed "%.*t" to snprintf).
    for (const char* tmpl : {"{{ '{:t}'.format(2) }}", "{{ '{:s}'.format(2.5) }}",
                             "{{ '{:f%s}'.format(2) }}", "{{ '{:.3fx}'.format(2) }}",
                             "{{ '{:,}'.format(1234) }}", "{{ '{:d\u0164}'.format(1) }}"}) {
      const std::string t = tmpl, e = render_error(t);
      CAPTURE(t);
      CAPTURE(e);
      CHECK(e.find("ValueError") != std::string::npos);
    }
    CHECK(render("{{ '{:.2e}|{:x}|{:>5.1f}|{:g}|{:.0%}|{:n}'.format(1234.5, 255, 2.25, 0.5, 0.25, "
                 "3) }}") == "1.23e+03|ff|  2.2|0.5|25%|3");
    // A conditional key without else (fuzz_jinja: a null child reached by the parser's check of
    // tuple subscripts).
    CHECK(render("{{ 'hello'[0 if 4] }}") == "h");
    CHECK_NOTHROW(render_error("{{ 'hello'[0 if 0] }}"));
    CHECK(render("{{ 'hello'[1 if 0 else 2] }}") == "l");
  }
}
