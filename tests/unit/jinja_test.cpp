// The chat-template interpreter construct by construct, each expected text checked
// against Python's jinja2 3.1 under Hugging Face's settings (trim_blocks, lstrip_blocks,
// loop controls), and every error path: syntax, unsupported constructs, runtime errors,
// raise_exception, and each render limit.
#include <gtest/gtest.h>

#include <string>

#include "base/error.h"
#include "serve/chat_template.h"

namespace moeflow::serve {
namespace {

std::string render(const std::string& source, ChatTemplateInput in = {}) {
  if (in.messages.empty()) in.messages = {{"user", "hi"}};
  if (in.bos_token.empty()) in.bos_token = "<s>";
  if (in.eos_token.empty()) in.eos_token = "</s>";
  return ChatTemplate::parse(source).render(in);
}

// The message of the InputError that parsing or rendering throws ("" if none).
std::string error_of(const std::string& source, const ChatTemplate::Limits* limits = nullptr) {
  try {
    ChatTemplate t = ChatTemplate::parse(source);
    if (limits) t.set_limits(*limits);
    ChatTemplateInput in;
    in.messages = {{"user", "hi"}};
    t.render(in);
  } catch (const InputError& e) {
    return e.what();
  }
  return "";
}

#define EXPECT_ERROR_HAS(source, needle)                                        \
  do {                                                                         \
    const std::string err_ = error_of(source);                                 \
    EXPECT_NE(err_.find(needle), std::string::npos) << "error was: " << err_; \
  } while (0)

TEST(Jinja, TextAndOutput) {
  EXPECT_EQ(render("plain text"), "plain text");
  EXPECT_EQ(render("{{ 'a' }}{{ 1 }}{{ none }}{{ true }}{{ undefined_name }}|"), "a1NoneTrue|");
  EXPECT_EQ(render("{{ bos_token }}{{ eos_token }} {{ add_generation_prompt }} {{ tools is none }}"), "<s></s> True True");
}

TEST(Jinja, PythonStrAndReprOfValues) {
  EXPECT_EQ(render("{{ 1.0 }} {{ 1e16 }} {{ 0.0001 }} {{ 0.00001 }} {{ 1/3 }} {{ 0.1 + 0.2 }} {{ 1e300 * 1e300 }}"),
            "1.0 1e+16 0.0001 1e-05 0.3333333333333333 0.30000000000000004 inf");
  EXPECT_EQ(render("{{ [1,'a',none, true, 1.5] }} {{ {'a': (1,)} }} {{ ('a','b') }}"),
            "[1, 'a', None, True, 1.5] {'a': (1,)} ('a', 'b')");
  EXPECT_EQ(render(R"({{ {'a': 'it\'s'} }} {{ ['a"b', "c'd", 'e\'f"'] }} {{ ['x\ny'] }})"),
            R"({'a': "it's"} ['a"b', "c'd", 'e\'f"'] ['x\ny'])");
}

TEST(Jinja, IfElifElse) {
  const char* t = "{% if messages[0]['role'] == 'system' %}sys{% elif messages[0].role == 'user' %}usr{% else %}other{% endif %}";
  EXPECT_EQ(render(t), "usr");
  ChatTemplateInput in;
  in.messages = {{"system", "x"}};
  EXPECT_EQ(render(t, in), "sys");
  in.messages = {{"tool", "x"}};
  EXPECT_EQ(render(t, in), "other");
}

TEST(Jinja, ForLoopVariables) {
  EXPECT_EQ(render("{% for i in [1,2,3] if i > 1 %}{{ loop.index }}/{{ loop.length }}/{{ loop.first }}/{{ loop.last }}/"
                   "{{ loop.revindex }}/{{ loop.index0 }};{% endfor %}"),
            "1/2/True/False/2/0;2/2/False/True/1/1;");
  EXPECT_EQ(render("{% for i in [] %}x{% else %}empty{% endfor %}"), "empty");
  EXPECT_EQ(render("{% for a, b in [(1,2),(3,4)] %}{{a}}{{b}}{% endfor %}"), "1234");
  EXPECT_EQ(render("{% for k, v in {'a':1, 'b':2}.items() %}{{ k }}={{ v }};{% endfor %}"), "a=1;b=2;");
  EXPECT_EQ(render("{% for c in 'hé' %}[{{ c }}]{% endfor %}"), "[h][é]");
  EXPECT_EQ(render("{% for x in undefined_var %}a{% endfor %}ok"), "ok");
  EXPECT_EQ(render("{% for x in [1] %}{{ loop.previtem is defined }}{{ loop.nextitem is defined }}{% endfor %}"),
            "FalseFalse");
}

TEST(Jinja, ForElseRunsUnlessAnIterationCompletedItsBody) {
  // jinja2's rule (its compiled loop clears the flag at the end of the body), which
  // differs from Python's for-else.
  EXPECT_EQ(render("{% for i in range(2) %}{{ i }}{% continue %}{% else %}E{% endfor %}"), "01E");
  EXPECT_EQ(render("{% for i in range(2) %}{{ i }}{% break %}{% else %}E{% endfor %}"), "0E");
  EXPECT_EQ(render("{% for i in range(2) %}{{ i }}{% if i == 1 %}{% break %}{% endif %}{% else %}E{% endfor %}"), "01");
  EXPECT_EQ(render("{% for i in [1] if false %}x{% else %}E{% endfor %}"), "E");
}

TEST(Jinja, UnpackingTakesAnyIterable) {
  EXPECT_EQ(render("{% for a, b in messages %}{{ a }}|{{ b }}{% endfor %}"), "role|content");
  EXPECT_EQ(render("{% set a, b = 'xy' %}{{ b }}{{ a }}"), "yx");
  EXPECT_EQ(render("{{ (none, [][0]) }} {{ x is sequence }}"), "(None, Undefined) True");
}

TEST(Jinja, DictKeysFollowPythonHashing) {
  // Small dicts search linearly, larger ones by hash: both treat 1, 1.0 and True alike.
  EXPECT_EQ(render("{{ {1: 'a', 1.0: 'b', true: 'c', 'x': 1}|length }} {{ {1: 'a'}[true] }} {{ {2.0: 'z'}[2] }}"),
            "2 a z");
  std::string big = "{% set d = {";
  for (int i = 0; i < 40; ++i) big += std::to_string(i) + ": 'v" + std::to_string(i) + "', ";
  big += "'k': 1} %}{{ d|length }} {{ d[39] }} {{ d[1.0] }} {{ d[true] }} {{ d['k'] }} {{ d.get(40, 'none') }}";
  EXPECT_EQ(render(big), "41 v39 v1 v1 1 none");
}

TEST(Jinja, LoopCycle) {
  EXPECT_EQ(render("{% for i in range(5) %}{{ loop.cycle('a', 'b') }}{% endfor %}"), "ababa");
}

TEST(Jinja, BreakAndContinue) {
  EXPECT_EQ(render("{% for i in range(10) %}{% if i == 2 %}{% continue %}{% endif %}{% if i == 5 %}{% break %}"
                   "{% endif %}{{ i }}{% endfor %}"),
            "0134");
}

TEST(Jinja, ScopingFollowsJinja2) {
  // A set inside a loop body is local to that iteration; an if-block shares the scope.
  EXPECT_EQ(render("{% set x = 0 %}{% for i in range(3) %}{{ x }}{% set x = x + 1 %}{{x}};{% endfor %}{{ x }}"),
            "01;01;01;0");
  EXPECT_EQ(render("{% if true %}{% set z = 3 %}{% endif %}{{ z }}"), "3");
  EXPECT_EQ(render("{% set ns = namespace(a=1) %}{% for i in range(3) %}{% set ns.a = ns.a + i %}{% endfor %}"
                   "{{ ns.a }} {{ ns }}"),
            "4 <Namespace {'a': 4}>");
}

TEST(Jinja, SetForms) {
  EXPECT_EQ(render("{% set a, b = 1, 2 %}{{ a }}{{ b }}{% set t = 1, 2 %}{{ t }}"), "12(1, 2)");
  EXPECT_EQ(render("{% set s %}  inner {{ 1 }} {% endset %}[{{ s }}]{% set s2 | trim %}  inner  {% endset %}[{{ s2 }}]"),
            "[  inner 1 ][inner]");
}

TEST(Jinja, MacrosAndFilterBlocks) {
  EXPECT_EQ(render("{% macro f(a, b=2) %}{{ a }}-{{ b }}-{{ g }}{% endmacro %}{% set g = 7 %}{{ f(1) }}{{ f(1, b=3) }}"),
            "1-2-71-3-7");
  EXPECT_EQ(render("{% macro greet(name) -%}\nHello {{ name }}!\n{%- endmacro %}\n{{ greet('bob') }}|{{ greet(name='al') }}"),
            "Hello bob!|Hello al!");
  EXPECT_EQ(render("{% filter upper %}abc{{ 'd' }}{% endfilter %}"), "ABCD");
}

TEST(Jinja, WhitespaceControlAndHfBlockSettings) {
  EXPECT_EQ(render("  {% if true %}\n  hi\n  {% endif %}\n"), "  hi\n");
  EXPECT_EQ(render("line1\n    {% if true %}\n    indented\n    {% endif %}\nend"), "line1\n    indented\nend");
  EXPECT_EQ(render("{%- if true -%}\n   a\n{%- endif -%}\n   b   "), "ab   ");
  EXPECT_EQ(render("{{ 'x' }}\n{{ 'y' }}\n{% if true %}z{% endif %}\nw"), "x\ny\nzw");
  EXPECT_EQ(render("{# comment #}\na {#- strip -#}   b\n  {# c #}\nd"), "ab\nd");
  EXPECT_EQ(render("{%+ if true %}  keep{% endif %}\n  {%+ if true %}x{% endif %}"), "  keep  x");
  EXPECT_EQ(render("{%- for message in messages -%}\n  {{- message.role }}: {{ message['content'] -}}\n{% endfor %}"),
            "user: hi");
  EXPECT_EQ(render("a\r\nb\n"), "a\nb");  // newlines normalised, one trailing newline dropped
  EXPECT_EQ(render("{% raw %}{{ not rendered }}{% endraw %}"), "{{ not rendered }}");
}

TEST(Jinja, Filters) {
  EXPECT_EQ(render("{{ 'Hello'|lower }} {{ 'Hello'|upper }} {{ '  x  '|trim }} {{ 'xxhixx'|trim('x') }} "
                   "{{ 'a.b'|replace('.', '!') }} {{ 'ab'|capitalize }} {{ 'hello world'|title }}"),
            "hello HELLO x hi a!b Ab Hello World");
  EXPECT_EQ(render("{{ x|default('d') }} {{ ''|default('d') }} {{ ''|d('d', true) }} {{ none|default('d') }}"),
            "d  d None");
  EXPECT_EQ(render("{{ 'abc'|list }} {{ {'a':1}|items|list }} {{ [3,1]|first }} {{ 'héllo'|length }} {{ 'héllo'|last }}"),
            "['a', 'b', 'c'] [('a', 1)] 3 5 o");
  EXPECT_EQ(render("{{ [1,2]|join(',') }} {{ ['a','b']|join }} {{ [{'a':1},{'a':2}]|map(attribute='a')|join(',') }} "
                   "{{ [1,2,3]|map('string')|join('-') }}"),
            "1,2 ab 1,2 1-2-3");
  EXPECT_EQ(render("{{ messages | selectattr('role', 'equalto', 'user') | list | length }} "
                   "{{ messages|rejectattr('role','equalto','user')|list }} {{ [1,0,2]|select|list }}"),
            "1 [] [1, 2]");
  EXPECT_EQ(render("{{ '12'|int + 1 }} {{ 'x'|int }} {{ 3.7|int }} {{ '1.5'|float }} {{ 2|float }} {{ -3|abs }}"),
            "13 0 3 1.5 2.0 3");
  EXPECT_EQ(render("{{ [3,1,2]|sort }} {{ ['b','A','c']|sort }} {{ [1,2,3]|reverse|list }} {{ 'abc'|reverse }} "
                   "{{ [1,2,2,3]|unique|list }} {{ [1,2,3]|sum }} {{ [1,5,2]|max }}"),
            "[1, 2, 3] ['A', 'b', 'c'] [3, 2, 1] cba [1, 2, 3] 6 5");
  EXPECT_EQ(render("{{ \"line1\\nline2\\n\\nline4\"|indent(2) }}|{{ \"a\\nb\"|indent(2, true) }}"),
            "line1\n  line2\n\n  line4|  a\n  b");
  EXPECT_EQ(render("{{ none|string }}{{ 1|string }}{{ 'x'|safe }} {{ undefined_var|length }}"), "None1x 0");
}

TEST(Jinja, LazyFiltersBehaveAsJinja2Generators) {
  // select, map, items, reverse ... return generators in jinja2: always true, no length,
  // not subscriptable, not a sequence; |list makes a list.
  EXPECT_EQ(render("{{ 'T' if []|select else 'F' }} {{ 'T' if {}|items else 'F' }} {{ 'T' if []|reverse else 'F' }} "
                   "{{ ([1]|map('string'))[0] }}| {{ [1]|select is sequence }} {{ [1]|select is iterable }} "
                   "{{ 2 in [1,2]|select }} {{ ([1]|select|list)[0] }} {{ [1,2]|select|first }}"),
            "T T T | False True True 1 1");
  EXPECT_ERROR_HAS("{{ [1,2]|select|length }}", "object of type 'generator' has no len()");
  EXPECT_ERROR_HAS("{{ [1,2]|select|last }}", "'generator' object is not reversible");
  EXPECT_ERROR_HAS("{{ [1,2]|select|tojson }}", "'generator' is not JSON serializable");
}

TEST(Jinja, ToJsonAsHuggingFace) {
  // json.dumps(ensure_ascii=False), keys in insertion order (not jinja2's sorted, HTML-safe tojson).
  EXPECT_EQ(render(R"({{ {'b': 1, 'a': [1, 2.5, none, true, 'é<\n"']}|tojson }})"),
            R"({"b": 1, "a": [1, 2.5, null, true, "é<\n\""]})");
  EXPECT_EQ(render("{{ {'b':1}|tojson(indent=2) }} {{ [[1,[]],{}]|tojson(indent=2) }}"),
            "{\n  \"b\": 1\n} [\n  [\n    1,\n    []\n  ],\n  {}\n]");
  EXPECT_EQ(render("{{ messages|tojson }}"), R"([{"role": "user", "content": "hi"}])");
  EXPECT_EQ(render("{{ {'b':1,'a':2}|tojson(sort_keys=true) }} {{ 'é'|tojson(ensure_ascii=true) }}"),
            R"({"a": 2, "b": 1} "\u00e9")");
}

TEST(Jinja, Tests) {
  EXPECT_EQ(render("{{ 'x' is string }} {{ none is none }} {{ {} is mapping }} {{ [] is sequence }} {{ 'a' is iterable }} "
                   "{{ 3 is number }} {{ 3 is integer }} {{ 3.0 is float }} {{ true is boolean }} {{ x is undefined }}"),
            "True True True True True True True True True True");
  EXPECT_EQ(render("{{ 5 is odd }} {{ 5 is even }} {{ 'abc' is lower }} {{ 'ABC' is upper }} {{ none is not none }} "
                   "{{ 5 is divisibleby 5 }} {{ 1 is equalto 1 }} {{ true is true }} {{ 0 is false }}"),
            "True False True True False True True True False");
}

TEST(Jinja, OperatorsAndPrecedence) {
  EXPECT_EQ(render("{{ 7 // 2 }} {{ -7 // 2 }} {{ -7 % 3 }} {{ 2 ** 10 }} {{ 7 / 2 }} {{ 2 ** -1 }} {{ 7.5 // 2 }}"),
            "3 -4 2 1024 3.5 0.5 3.0");
  EXPECT_EQ(render("{{ - 3 ** 2 }} {{ 2 ** 3 ** 2 }} {{ 10 - 2 - 3 }} {{ 1 + 2 * 3 }} {{ 'a' ~ 1 ~ none }}"),
            "9 64 5 7 a1None");
  EXPECT_EQ(render("{{ 1 and 2 }} {{ 0 or 'x' }} {{ none or [] }} {{ not 1 }} {{ not none is none }}"),
            "2 x [] False False");
  EXPECT_EQ(render("{{ 1 < 2 < 3 }} {{ 3 > 2 > 2 }} {{ 1 == 1.0 }} {{ 'a' in 'cat' }} {{ 1 in [1] }} "
                   "{{ 'k' in {'k':1} }} {{ 'z' not in 'abc' }} {{ [1,2] < [1,3] }}"),
            "True False True True True True True True");
  EXPECT_EQ(render("{{ [1, 2] + [3] }} {{ 'ab' * 3 }} {{ [0] * 3 }} {{ 3 * 'x' }}"), "[1, 2, 3] ababab [0, 0, 0] xxx");
  EXPECT_EQ(render("{{ 'a' if false }}|{{ 'a' if true else 'b' }}|{{ 'x' if none else 'y' if 1 else 'z' }}"), "|a|y");
}

TEST(Jinja, SubscriptsSlicesAndMethods) {
  EXPECT_EQ(render("{{ [1,2,3][::-1] }} {{ 'abcdef'[1:-1:2] }} {{ [1,2,3,4][1:] }} {{ [1,2,3,4][:-1] }} {{ 'héllo'[1:3] }}"),
            "[3, 2, 1] bd [2, 3, 4] [1, 2, 3] él");
  EXPECT_EQ(render("{{ [1,2,3][2::9223372036854775807] }} {{ 'abc'[1::-9223372036854775807] }} {{ [1][-9223372036854775807:] }}"),
            "[3] b [1]");
  EXPECT_EQ(render("{{ [1,2][5] }}|{{ 'abc'[-1] }}|{{ {'a': {'b': 'c'}}.a.b }}|{{ [[1, 2]][0][1] }}|{{ [1,2].0 }}"),
            "|c|c|2|1");
  EXPECT_EQ(render("{{ 'a b  c'.split() }} {{ 'a,b,c'.split(',', 1) }} {{ '  a b '.split(none, 1) }} {{ ' x '.strip() }}"),
            "['a', 'b', 'c'] ['a', 'b,c'] ['a', 'b '] x");
  EXPECT_EQ(render("{{ messages[0].content.startswith('h') }} {{ 'abc'.endswith(('x','c')) }} {{ 'xxaxx'.rstrip('x') }} "
                   "{{ 'a-b-c'.replace('-', '+', 1) }} {{ 'ab'.upper() }} {{ 'Ab Cd'.title() }} {{ 'x\\u3000'.strip()|length }}"),
            "True True xxa a+b-c AB Ab Cd 1");
  EXPECT_EQ(render("{{ [1, 2, 1].count(1) }} {{ (1, 'a').index('a') }} {{ [1].append is defined }}"), "2 1 False");
  EXPECT_ERROR_HAS("{{ [1].index(5) }}", "list.index(): 5 is not in the list");
  EXPECT_EQ(render("{{ {'a':1}.get('a') }} {{ {'a':1}.get('b') }} {{ {'a':1}.get('b', 5) }} {{ {'a':1, 'b': 2}.keys()|list }}"),
            "1 None 5 ['a', 'b']");
  EXPECT_EQ(render("{{ range(5)|list }} {{ range(1, 10, 3)|list }} {{ range(5, 0, -2)|list }} {{ dict(a=1) }}"),
            "[0, 1, 2, 3, 4] [1, 4, 7] [5, 3, 1] {'a': 1}");
  EXPECT_EQ(render("{{ range(9223372036854775806, 9223372036854775807)|list }} {{ range(3, 3)|list }} "
                   "{{ range(-9223372036854775807, 9223372036854775807, 9223372036854775807)|list }}"),
            "[9223372036854775806] [] [-9223372036854775807, 0]");
}

TEST(Jinja, UnicodeStringsIndexByCodePoint) {
  EXPECT_EQ(render("{{ 'é x é'.strip('é') }}|{{ '\u3000a\u3000'.strip()|length }}|{{ 'héllo'[-1] }}{{ 'héllo'[1] }}"
                   "{{ 'héllo'[5] }}|{% for c in 'hé' %}[{{ c }}]{% endfor %}|{{ 'ééxéé'.rstrip('é') }}|{{ '   '.strip() }}|"),
            " x |1|oé|[h][é]|ééx||");
  EXPECT_EQ(render("{{ '日本語テキスト'[2:5] }}|{{ '日本語'[::-1] }}|{{ '日本語'|reverse }}|{{ '🚀x'[0] }}|"
                   "{{ '🚀x'|tojson(ensure_ascii=true) }}"),
            "語テキ|語本日|語本日|🚀|\"\\ud83d\\ude80x\"");
}

TEST(Jinja, StringLiterals) {
  EXPECT_EQ(render(R"({{ '\'' }}{{ "\"" }}{{ 'a' 'b' }}{{ 'a\x41\u00e9\n' }})"), "'\"abaAé\n");
}

TEST(Jinja, StrftimeNowUsesTheGivenClock) {
  ChatTemplateInput in;
  in.now_unix_seconds = 1721952000;  // 2024-07-26 00:00:00 UTC
  EXPECT_EQ(render("{{ strftime_now('%d %b %Y') }}", in), "26 Jul 2024");
}

TEST(JinjaErrors, SyntaxErrorsNameLineAndColumn) {
  EXPECT_ERROR_HAS("a\n{% if x %}never closed", "line 2, column 1: '{% if %}' is never closed");
  EXPECT_ERROR_HAS("{% for x in y %}", "'{% for %}' is never closed");
  EXPECT_ERROR_HAS("{{ x ", "line 1, column 1: unclosed '{{' tag");
  EXPECT_ERROR_HAS("{# open", "unclosed comment");
  EXPECT_ERROR_HAS("x {% endif %}", "line 1, column 3: unexpected '{% endif %}'");
  EXPECT_ERROR_HAS("{{ 'abc }}", "unterminated string literal");
  EXPECT_ERROR_HAS("{{ 1 + }}", "expected an expression");
  EXPECT_ERROR_HAS("{{ a $ b }}", "unexpected character '$'");
  EXPECT_ERROR_HAS("{{ (1, 2 }}", "line 1, column 10: unbalanced '}'");
  EXPECT_ERROR_HAS("{% break %}", "'{% break %}' outside a loop");
  EXPECT_ERROR_HAS("{% frobnicate %}", "unknown tag '{% frobnicate %}'");
}

TEST(JinjaErrors, UnsupportedConstructsAreNamed) {
  EXPECT_ERROR_HAS("{{ x|frobnicate }}", "line 1, column 6: unknown filter 'frobnicate'");
  EXPECT_ERROR_HAS("{{ x is frobnicated }}", "unknown test 'frobnicated'");
  EXPECT_ERROR_HAS("{% include 'x.j2' %}", "'{% include %}' is not supported");
  EXPECT_ERROR_HAS("{% extends 'x.j2' %}", "'{% extends %}' is not supported");
  EXPECT_ERROR_HAS("{% for x in y recursive %}{% endfor %}", "recursive loops");
  EXPECT_ERROR_HAS("{{ f(*args) }}", "'*args' and '**kwargs'");
  EXPECT_ERROR_HAS("{{ '%s' % 1 }}", "string formatting with '%' is not supported");
}

TEST(JinjaErrors, RuntimeErrorsNamePosition) {
  EXPECT_ERROR_HAS("{{ raise_exception('Conversation roles must alternate') }}",
                   "line 1, column 19: raise_exception: Conversation roles must alternate");
  EXPECT_ERROR_HAS("{{ x.y }}", "'x' is undefined");
  EXPECT_ERROR_HAS("{{ messages[0].nope.deeper }}", "'dict object' has no attribute 'nope'");
  EXPECT_ERROR_HAS("{{ 'a' + 1 }}", "unsupported operand type(s) for +: 'str' and 'int'");
  EXPECT_ERROR_HAS("{{ 1 < 'a' }}", "'<' not supported between instances of 'int' and 'str'");
  EXPECT_ERROR_HAS("{{ undefined_var|tojson }}", "not JSON serializable");
  EXPECT_ERROR_HAS("{{ 1 / 0 }}", "division by zero");
  EXPECT_ERROR_HAS("{{ 9223372036854775807 + 1 }}", "integer overflow");
  EXPECT_ERROR_HAS("{% set x = 1 %}{% set x.a = 2 %}", "not a namespace()");
  EXPECT_ERROR_HAS("{% for a, b in [1] %}{% endfor %}", "cannot unpack");
  EXPECT_ERROR_HAS("{{ nothing() }}", "'nothing' is undefined");
}

TEST(JinjaLimits, EachBoundIsAnInputError) {
  ChatTemplate::Limits small;
  small.max_loop_iterations = 100;
  EXPECT_NE(error_of("{% for i in range(101) %}{% endfor %}", &small).find("iterations (limit)"), std::string::npos);
  EXPECT_EQ(error_of("{% for i in range(100) %}{% endfor %}", &small), "");

  ChatTemplate::Limits out;
  out.max_output_bytes = 10;
  EXPECT_NE(error_of("{{ 'x' * 11 }}", &out).find("rendered text exceeds the limit of 10 bytes"), std::string::npos);

  ChatTemplate::Limits str;
  str.max_string_bytes = 1000;
  EXPECT_NE(error_of("{% set ns = namespace(s='x') %}{% for i in range(20) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}", &str)
                .find("exceeds the string limit"),
            std::string::npos);

  ChatTemplate::Limits steps;
  steps.max_steps = 1000;
  EXPECT_NE(error_of("{% for i in range(1000) %}{{ i }}{% endfor %}", &steps).find("steps (limit)"), std::string::npos);

  // Recursion: a macro calling itself hits the depth bound, not the C++ stack.
  EXPECT_NE(error_of("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}").find("deeper than 256 levels"),
            std::string::npos);
  // Exponential fan-out ends at the step bound (a small one, to keep the test fast under ASan).
  ChatTemplate::Limits fan_out;
  fan_out.max_steps = 200'000;
  EXPECT_NE(error_of("{% macro f(n) %}{% if n < 60 %}{{ f(n + 1) }}{{ f(n + 1) }}{% endif %}{% endmacro %}{{ f(0) }}",
                     &fan_out)
                .find("evaluation exceeded 200000 steps (limit)"),
            std::string::npos);
  EXPECT_NE(error_of("{{ range(100000000) }}").find("exceeds the limit"), std::string::npos);
  EXPECT_NE(error_of("{% set ns = namespace(l=[]) %}{% for i in range(100) %}{% set ns.l = [ns.l] %}{% endfor %}")
                .find("nested deeper than 32 levels"),
            std::string::npos);
  EXPECT_NE(error_of("{% set ns = namespace() %}{% set ns.x = ns %}").find("cannot hold another namespace"),
            std::string::npos);
}

TEST(JinjaLimits, DeepNestingIsRefusedAtParse) {
  EXPECT_NE(error_of("{{ " + std::string(5000, '(') + "1" + std::string(5000, ')') + " }}").find("nesting deeper than"), std::string::npos);
  std::string chain = "{{ 1";
  for (int i = 0; i < 5000; ++i) chain += " + 1";
  EXPECT_NE(error_of(chain + " }}").find("nesting deeper than"), std::string::npos);
  std::string ifs;
  for (int i = 0; i < 500; ++i) ifs += "{% if true %}";
  EXPECT_NE(error_of(ifs).find("nesting deeper than"), std::string::npos);
}

}  // namespace
}  // namespace moeflow::serve
