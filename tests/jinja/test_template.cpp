// Unit tests of the template interpreter: one construct or filter per case, with expected
// renderings produced by Python Jinja2 under transformers' settings (tests/jinja/gen_unit_cases.py
// writes tests/jinja/data/unit_cases.json), plus robustness and API checks.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <chrono>
#include <cstdio>

#include "jinja/template.h"
#include "test_util.h"

namespace loom::test {
namespace {

using nlohmann::ordered_json;
constexpr int64_t kNowUtc = 1753531200;  // 2025-07-26T12:00:00Z, as the generator uses

Expected<std::string> render(const std::string& src, const ordered_json& ctx = ordered_json::object(),
                             jinja::RenderOptions opts = {}) {
  auto t = jinja::Template::parse(src);
  if (!t) return t.status();
  if (!opts.now_unix) opts.now_unix = kNowUtc;
  return t->render(ctx, opts);
}

TEST(ChatUnit, JinjaReferenceCases) {
  const auto data = ordered_json::parse(read_text_file(std::string(LOOM_SOURCE_DIR) + "/tests/jinja/data/unit_cases.json"));
  int passed = 0, total = 0;
  for (const auto& c : data["cases"]) {
    const std::string name = c["name"];
    SCOPED_TRACE(name + ": " + c["template"].get<std::string>());
    ++total;
    const ordered_json& ctx = c.contains("context") ? c["context"] : data["default_context"];
    auto r = render(c["template"], ctx);
    if (c.value("expect_error", false)) {
      EXPECT_FALSE(r.has_value()) << "Jinja2 fails (" << c["error"].get<std::string>() << "), we rendered: " << *r;
      if (!r.has_value()) ++passed;
      continue;
    }
    ASSERT_TRUE(r.has_value()) << r.status().message();
    EXPECT_EQ(*r, c["output"].get<std::string>());
    if (*r == c["output"].get<std::string>()) ++passed;
  }
  std::printf("chat unit reference cases: %d/%d pass\n", passed, total);
}
}  // namespace
}  // namespace loom::test

namespace loom::test {
namespace {

// ---- deliberate deviation: list.append works (transformers' sandbox refuses it; llama.cpp allows) ----

TEST(ChatUnit, ListAppendOnNamespaceList) {
  auto r = render(
      "{% set ns = namespace(xs=[]) %}{% for i in range(3) %}{% set _ = ns.xs.append(i * 2) %}{% endfor %}"
      "{{ ns.xs }}{% do ns.xs.append('x') %}{{ ns.xs|length }}");
  ASSERT_TRUE(r.has_value()) << r.status().message();
  EXPECT_EQ(*r, "[0, 2, 4]4");
}

// llama.cpp's leniency (RenderOptions::lenient, what serving uses) where Jinja2 raises; strict by
// default, as the goldens hold.
TEST(ChatUnit, LenientModeRendersWhereJinja2Raises) {
  jinja::RenderOptions lenient;
  lenient.lenient = true;
  const ordered_json ctx = ordered_json::parse(R"({"tools": null, "m": {"a": 1}})");
  struct Case {
    const char* src;
    const char* lenient_out;
  } cases[] = {
      {"{{ 'a' + functions }}|", "a|"},  // firefunction v2
      {"{{ functions + 'b' }}", "b"},
      {"{{ (tools | selectattr('type', 'equalto', 'x') | list | length) }}", "0"},  // functionary v3.1
      {"{% for t in tools %}x{% endfor %}none", "none"},
      {"[{{ missing.attr.deeper }}][{{ missing['k'] }}]", "[][]"},
      {"{{ m.a }}{{ m.b.c }}", "1"},
  };
  for (const Case& c : cases) {
    EXPECT_FALSE(render(c.src, ctx).has_value()) << c.src << ": Jinja2 raises, so does the strict mode";
    auto r = render(c.src, ctx, lenient);
    ASSERT_TRUE(r.has_value()) << c.src << ": " << r.status().message();
    EXPECT_EQ(*r, c.lenient_out) << c.src;
  }
  // What Jinja2 renders is the same in both modes.
  EXPECT_EQ(*render("{{ x is defined }}{{ y | default('d') }}", ctx, lenient), "Falsed");
  EXPECT_FALSE(render("{{ 1 + 'a' }}", ctx, lenient).has_value());
}

TEST(ChatUnit, CyclicListPrintsAndFailsToSerializeWithoutCrashing) {
  auto r = render("{% set ns = namespace(l=[]) %}{% do ns.l.append(ns.l) %}{{ ns.l|length }}");
  ASSERT_TRUE(r.has_value()) << r.status().message();
  EXPECT_EQ(*r, "1");
  EXPECT_FALSE(render("{% set ns = namespace(l=[]) %}{% do ns.l.append(ns.l) %}{{ ns.l|tojson }}").has_value());
  EXPECT_TRUE(render("{% set ns = namespace(l=[]) %}{% do ns.l.append(ns.l) %}{{ ns.l }}").has_value());
  EXPECT_TRUE(render("{% set ns = namespace(l=[]) %}{% do ns.l.append(ns.l) %}{{ ns.l == ns.l }}").has_value());
}

// ---- errors carry positions and messages ----

TEST(ChatErrors, SyntaxErrorsNameLineAndColumn) {
  auto t = jinja::Template::parse("line one\n{% if x %}\n  {{ 1 + }}\n{% endif %}");
  ASSERT_FALSE(t.has_value());
  EXPECT_NE(t.status().message().find("line 3"), std::string::npos) << t.status().message();
  EXPECT_NE(t.status().message().find("column"), std::string::npos) << t.status().message();

  t = jinja::Template::parse("a\nb {% for x in y %}\n");
  ASSERT_FALSE(t.has_value());
  EXPECT_NE(t.status().message().find("line 2"), std::string::npos) << t.status().message();
  EXPECT_NE(t.status().message().find("endfor"), std::string::npos) << t.status().message();

  t = jinja::Template::parse("{{ 'unterminated }}");
  ASSERT_FALSE(t.has_value());
  EXPECT_NE(t.status().message().find("unterminated string"), std::string::npos) << t.status().message();
}

TEST(ChatErrors, MalformedTemplatesNeverCrash) {
  const char* bad[] = {"{%",
                       "{{",
                       "{#",
                       "{% if %}",
                       "{% for %}",
                       "{% for x %}",
                       "{% for x in %}{% endfor %}",
                       "{% set %}",
                       "{% set x %}",
                       "{% macro %}",
                       "{% macro m( %}",
                       "{% endmacro %}",
                       "{{ a[ }}",
                       "{{ a[1:2:3:4] }}",
                       "{{ a. }}",
                       "{{ a | }}",
                       "{{ a is }}",
                       "{{ (1, }}",
                       "{{ {1: } }}",
                       "{{ [1, 2 }}",
                       "{{ ) }}",
                       "{{ ] }}",
                       "{{ } }}",
                       "{% if x %}{% elif %}{% endif %}",
                       "{% if x %}{% else %}{% else %}{% endif %}",
                       "{% call %}{% endcall %}",
                       "{% filter %}x{% endfilter %}",
                       "{% raw %}never closed",
                       "{{ 'a' 1 }}",
                       "{{ x y }}",
                       "{% include 'x' %}",
                       "{% extends 'x' %}",
                       "{% for x in y recursive %}{% endfor %}",
                       "{{ 99999999999999999999999 }}",
                       "{{ '\\x4' }}",
                       "\xff\xfe{{ '\xc3' }}",
                       "{{ a(*b) }}",
                       "{{ a(x=1, 2) }}",
                       "{% continue %}"};
  for (const char* src : bad) {
    SCOPED_TRACE(src);
    auto t = jinja::Template::parse(src);
    if (!t.has_value()) {
      EXPECT_FALSE(t.status().message().empty());
      continue;
    }
    (void)t->render(ordered_json::object());  // whatever it gives, it returns
  }
}

TEST(ChatErrors, RuntimeErrorsAreStatuses) {
  auto r = render("x\n{{ 1|nosuchfilter }}");
  ASSERT_FALSE(r.has_value());
  EXPECT_NE(r.status().message().find("nosuchfilter"), std::string::npos);
  EXPECT_NE(r.status().message().find("line 2"), std::string::npos) << r.status().message();

  r = render("{{ raise_exception('Conversation roles must alternate') }}");
  ASSERT_FALSE(r.has_value());
  EXPECT_EQ(r.status().message(), "Conversation roles must alternate");

  r = render("{{ none + 'a' }}");
  ASSERT_FALSE(r.has_value());
  EXPECT_NE(r.status().message().find("NoneType"), std::string::npos) << r.status().message();

  r = render("{{ x.y }}");
  ASSERT_FALSE(r.has_value());
  EXPECT_NE(r.status().message().find("'x' is undefined"), std::string::npos) << r.status().message();
}

// ---- limits: hostile templates end with an error, quickly ----

TEST(ChatLimits, DeepExpressionNesting) {
  std::string deep = "{{ " + std::string(100000, '(') + "1" + std::string(100000, ')') + " }}";
  auto t = jinja::Template::parse(deep);
  ASSERT_FALSE(t.has_value());
  EXPECT_NE(t.status().message().find("nested too deeply"), std::string::npos) << t.status().message();

  std::string blocks;
  for (int i = 0; i < 5000; ++i) blocks += "{% if true %}";
  t = jinja::Template::parse(blocks);
  EXPECT_FALSE(t.has_value());

  std::string nots = "{{ ";
  for (int i = 0; i < 100000; ++i) nots += "not ";
  EXPECT_FALSE(jinja::Template::parse(nots + "x }}").has_value());
  std::string negs = "{{ " + std::string(100000, '-') + "1 }}";
  EXPECT_FALSE(jinja::Template::parse(negs).has_value());
  std::string lists = "{{ " + std::string(100000, '[') + std::string(100000, ']') + " }}";
  EXPECT_FALSE(jinja::Template::parse(lists).has_value());
}

TEST(ChatLimits, InfiniteRecursion) {
  auto r = render("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}");
  ASSERT_FALSE(r.has_value());
  EXPECT_NE(r.status().message().find("call depth"), std::string::npos) << r.status().message();
  r = render("{% macro a() %}{{ b() }}{% endmacro %}{% macro b() %}{{ a() }}{% endmacro %}{{ a() }}");
  EXPECT_FALSE(r.has_value());
}

TEST(ChatLimits, HugeLoopsHitTheStepLimit) {
  const auto t0 = std::chrono::steady_clock::now();
  jinja::RenderOptions opts;
  opts.max_steps = 200000;
  auto r = render("{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}", ordered_json::object(),
                  opts);
  ASSERT_FALSE(r.has_value());
  EXPECT_NE(r.status().message().find("step limit"), std::string::npos) << r.status().message();
  // With the default limits too, a nested loop of 10^10 iterations stops (within a few seconds).
  r = render("{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}");
  EXPECT_FALSE(r.has_value());
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 30.0);
}

TEST(ChatLimits, OutputAndMemoryAreBounded) {
  jinja::RenderOptions opts;
  opts.max_output_bytes = 1 << 20;
  auto r = render("{% for i in range(1000000) %}0123456789{% endfor %}", ordered_json::object(), opts);
  ASSERT_FALSE(r.has_value());
  EXPECT_NE(r.status().message().find("output"), std::string::npos) << r.status().message();

  r = render("{{ 'x' * 1000000000 }}");
  EXPECT_FALSE(r.has_value());
  r = render("{{ [1] * 1000000000 }}");
  EXPECT_FALSE(r.has_value());
  r = render("{{ range(1000000000000)|length }}");
  EXPECT_FALSE(r.has_value());
  // Strings doubled in a loop: the per-string limit stops them.
  r = render("{% set ns = namespace(s='ab') %}{% for i in range(100) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}");
  EXPECT_FALSE(r.has_value());
  // Many large strings kept alive: the total-bytes budget stops them.
  opts = {};
  opts.max_total_bytes = 64 << 20;
  r = render(
      "{% set ns = namespace(l=[]) %}{% set s = 'x' * 1000000 %}"
      "{% for i in range(1000) %}{% do ns.l.append(s ~ i) %}{% endfor %}",
      ordered_json::object(), opts);
  ASSERT_FALSE(r.has_value());
  EXPECT_NE(r.status().message().find("bytes"), std::string::npos) << r.status().message();
  r = render("{{ ('a' * 1000000)|replace('a', 'bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb') }}");
  EXPECT_FALSE(r.has_value());
}

TEST(ChatLimits, LinearScansCountAgainstTheStepLimit) {
  jinja::RenderOptions opts;
  opts.max_steps = 100000;
  const char* scans[] = {
      "{% set big = range(100000)|list %}{% for i in range(100000) %}{% if -1 in big %}{% endif %}{% endfor %}",
      "{% set s = 'a' * 1000000 %}{% for i in range(100000) %}{% if 'b' in s %}{% endif %}{% endfor %}",
      "{% set s = 'a' * 1000000 %}{% for i in range(100000) %}{% if s[-1] == 'b' %}{% endif %}{% endfor %}",
      "{% set big = range(100000)|list %}{% for i in range(100000) %}{% if big == big %}{% endif %}{% endfor %}",
      "{% set big = range(100000)|list %}{% for i in range(100000) %}{{ big|length }}{% endfor %}",
  };
  for (const char* src : scans) {
    SCOPED_TRACE(src);
    auto r = render(src, ordered_json::object(), opts);
    ASSERT_FALSE(r.has_value());
    EXPECT_NE(r.status().message().find("step limit"), std::string::npos) << r.status().message();
  }
}

TEST(ChatLimits, DeepContextIsAnError) {
  std::string deep(1000, '[');
  deep += std::string(1000, ']');
  auto t = jinja::Template::parse("{{ x }}");
  ASSERT_TRUE(t.has_value());
  auto r = t->render(ordered_json{{"x", ordered_json::parse(deep)}});
  ASSERT_FALSE(r.has_value());
  EXPECT_NE(r.status().message().find("nested"), std::string::npos) << r.status().message();
}

TEST(ChatApi, LargeDictsStayFast) {
  ordered_json big = ordered_json::object();
  for (int i = 0; i < 20000; ++i) big[std::string("k").append(std::to_string(i))] = i;
  auto r = render("{% set ns = namespace(n=0) %}{% for k in d %}{% set ns.n = ns.n + d[k] %}{% endfor %}{{ ns.n }}",
                  ordered_json{{"d", big}});
  ASSERT_TRUE(r.has_value()) << r.status().message();
  EXPECT_EQ(*r, std::to_string(int64_t(19999) * 20000 / 2));
}

// ---- API ----

TEST(ChatApi, ParseOnceRenderManyTimes) {
  auto t = jinja::Template::parse("{% for m in messages %}<{{ m.role }}>{{ m.content }}{% endfor %}");
  ASSERT_TRUE(t.has_value());
  const jinja::Template copy = *t;
  for (int i = 0; i < 3; ++i) {
    ordered_json ctx = {{"messages", {{{"role", "user"}, {"content", std::to_string(i)}}}}};
    auto r = copy.render(ctx);
    ASSERT_TRUE(r.has_value());
    EXPECT_EQ(*r, "<user>" + std::to_string(i));
  }
}

TEST(ChatApi, KeyOrderAndUndefinedVersusNull) {
  auto t = jinja::Template::parse("{{ d|tojson }} {{ a is defined }} {{ a is none }} {{ b is defined }}");
  ASSERT_TRUE(t.has_value());
  auto ctx = ordered_json::parse(R"({"d": {"z": 1, "a": 2}, "a": null})");
  auto r = t->render(ctx);
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(*r, R"({"z": 1, "a": 2} True True False)");
  // The nlohmann::json overload works too (its objects are sorted).
  auto r2 = t->render(nlohmann::json::parse(R"({"d": {"z": 1, "a": 2}})"));
  ASSERT_TRUE(r2.has_value());
  EXPECT_EQ(*r2, R"({"a": 2, "z": 1} False False False)");
  EXPECT_FALSE(t->render(ordered_json::array()).has_value());
}

TEST(ChatApi, StrftimeNowUsesTheInjectedTimeOrTheClock) {
  jinja::RenderOptions opts;
  opts.now_unix = 0;
  auto r = render("{{ strftime_now('%Y-%m-%d %H:%M:%S %A') }}", ordered_json::object(), opts);
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(*r, "1970-01-01 00:00:00 Thursday");
  auto t = jinja::Template::parse("{{ strftime_now('%Y') }}");
  auto now = t->render(ordered_json::object());
  ASSERT_TRUE(now.has_value());
  EXPECT_EQ(now->size(), 4u);
}

}  // namespace
}  // namespace loom::test
