// `loom template --template FILE.jinja --context FILE.json`: prints the rendering exactly (no
// newline added), errors on stderr with exit 1, bad flags exit 2.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <fstream>
#include <string>

#include "test_util.h"

namespace loom::test {
namespace {

using nlohmann::ordered_json;

class TempFile {
 public:
  explicit TempFile(const std::string& content) {
    char path[] = "/tmp/loom_tmpl_XXXXXX";
    int fd = mkstemp(path);
    if (fd >= 0) close(fd);
    path_ = path;
    std::ofstream(path_, std::ios::binary) << content;
  }
  ~TempFile() { std::remove(path_.c_str()); }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

TEST(TemplateCli, RendersGoldenCasesExactly) {
  const std::string dir = shared_path("golden/chat-templates");
  ASSERT_FALSE(dir.empty());
  const auto cases = ordered_json::parse(read_text_file(dir + "/cases.json"));
  const auto expected = ordered_json::parse(read_text_file(dir + "/expected.json"));
  int checked = 0;
  for (const auto& e : expected) {
    const std::string tname = e["template"], cname = e["case"];
    SCOPED_TRACE(tname + " / " + cname);
    ordered_json ctx = cases["cases"][cname]["context"];
    ctx["bos_token"] = cases["templates"][tname]["bos_token"];
    ctx["eos_token"] = cases["templates"][tname]["eos_token"];
    TempFile ctx_file(ctx.dump());
    // --now: strftime_now() at cases.now_utc (2025-07-26T12:00:00Z)
    auto r = run_loom("template --template " + quote(dir + "/" + tname) + " --context " + quote(ctx_file.path()) +
                      " --now 1753531200");
    if (e.value("expect_error", false)) {
      EXPECT_EQ(r.exit_code, 1);
      EXPECT_TRUE(r.out.empty());
      EXPECT_FALSE(r.err.empty());
    } else {
      EXPECT_EQ(r.exit_code, 0) << r.err;
      EXPECT_EQ(r.out, e["output"].get<std::string>());
      EXPECT_TRUE(r.err.empty()) << r.err;
    }
    ++checked;
  }
  EXPECT_EQ(size_t(checked), expected.size());
}

TEST(TemplateCli, NowFlagFixesStrftimeNow) {
  TempFile tmpl("{{ strftime_now('%d %B %Y') }}");
  TempFile ctx("{}");
  auto r = run_loom("template --template " + quote(tmpl.path()) + " --context " + quote(ctx.path()) + " --now 0");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "01 January 1970");
}

TEST(TemplateCli, NoNewlineAddedAndKeyOrderKept) {
  TempFile tmpl("{{ d|tojson }}|{{ x is defined }}|{{ y is none }}");
  TempFile ctx(R"({"d": {"b": 1, "a": "é"}, "y": null})");
  auto r = run_loom("template --template " + quote(tmpl.path()) + " --context " + quote(ctx.path()));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, R"({"b": 1, "a": "é"}|False|True)");
}

TEST(TemplateCli, RaiseExceptionGoesToStderr) {
  TempFile tmpl("before{{ raise_exception('roles must alternate') }}");
  TempFile ctx("{}");
  auto r = run_loom("template --template " + quote(tmpl.path()) + " --context " + quote(ctx.path()));
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_TRUE(r.out.empty());
  EXPECT_NE(r.err.find("roles must alternate"), std::string::npos) << r.err;
}

TEST(TemplateCli, SyntaxErrorNamesTheLine) {
  TempFile tmpl("ok\n{% for x in xs %}\n{{ x ");
  TempFile ctx("{}");
  auto r = run_loom("template --template " + quote(tmpl.path()) + " --context " + quote(ctx.path()));
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("line 3"), std::string::npos) << r.err;
}

TEST(TemplateCli, BadInputs) {
  TempFile tmpl("x");
  TempFile bad_json("{not json");
  TempFile not_object("[1, 2]");
  auto r = run_loom("template --template " + quote(tmpl.path()) + " --context " + quote(bad_json.path()));
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("JSON"), std::string::npos) << r.err;
  r = run_loom("template --template " + quote(tmpl.path()) + " --context " + quote(not_object.path()));
  EXPECT_EQ(r.exit_code, 1);
  r = run_loom("template --template /nonexistent/t.jinja --context " + quote(not_object.path()));
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_FALSE(r.err.empty());
  r = run_loom("template --template " + quote(tmpl.path()));
  EXPECT_EQ(r.exit_code, 2);
  r = run_loom("template --template " + quote(tmpl.path()) + " --context x --bogus-flag");
  EXPECT_EQ(r.exit_code, 2);
}

}  // namespace
}  // namespace loom::test
