// Every template × case of shared/golden/chat-templates renders byte-identically to Python
// Jinja2 3.1.6 as transformers configures it (or fails where Jinja2 fails).
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cstdio>
#include <map>

#include "jinja/template.h"
#include "test_util.h"

namespace loom::test {
namespace {

using nlohmann::ordered_json;

// cases.now_utc = 2025-07-26T12:00:00Z
constexpr int64_t kNowUtc = 1753531200;

TEST(ChatGolden, EveryCaseRendersExactly) {
  const std::string dir = shared_path("golden/chat-templates");
  ASSERT_FALSE(dir.empty());
  const auto cases = ordered_json::parse(read_text_file(dir + "/cases.json"));
  const auto expected = ordered_json::parse(read_text_file(dir + "/expected.json"));
  ASSERT_EQ(cases["now_utc"].get<std::string>().rfind("2025-07-26T12:00:00", 0), 0u);
  std::map<std::string, jinja::Template> parsed;
  int outputs = 0, errors = 0, passed = 0;
  for (const auto& e : expected) {
    const std::string tname = e["template"], cname = e["case"];
    SCOPED_TRACE(tname + " / " + cname);
    if (!parsed.count(tname)) {
      auto t = jinja::Template::parse(read_text_file(dir + "/" + tname));
      ASSERT_TRUE(t.has_value()) << t.status().message();
      parsed.emplace(tname, std::move(t).value());
    }
    ordered_json ctx = cases["cases"][cname]["context"];
    ctx["bos_token"] = cases["templates"][tname]["bos_token"];
    ctx["eos_token"] = cases["templates"][tname]["eos_token"];
    jinja::RenderOptions opts;
    opts.now_unix = kNowUtc;
    auto r = parsed.at(tname).render(ctx, opts);
    if (e.value("expect_error", false)) {
      ++errors;
      EXPECT_FALSE(r.has_value()) << "expected an error (" << e["error"].get<std::string>() << "), got:\n" << *r;
      if (!r.has_value()) ++passed;
    } else {
      ++outputs;
      ASSERT_TRUE(r.has_value()) << r.status().message();
      EXPECT_EQ(*r, e["output"].get<std::string>());
      if (*r == e["output"].get<std::string>()) ++passed;
    }
  }
  std::printf("chat golden: %d/%zu cases pass (%d outputs, %d expected errors)\n", passed, expected.size(), outputs, errors);
  EXPECT_EQ(size_t(passed), expected.size());
}

}  // namespace
}  // namespace loom::test
