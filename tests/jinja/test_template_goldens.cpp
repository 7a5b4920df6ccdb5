// This year's chat templates (Qwen3.5, LFM2 / LFM2.5, SmolLM3, Granite 4, Gemma 4 and its
// interleaved variant, Ministral 3), read from llama.cpp's models/templates/, render
// byte-identically to Python Jinja2 as transformers configures it over the shared cases and loom's
// own (tests/data/chat-templates: expected.json from tools/dev/chat-golden.py, README there). Each
// template's sha256 is recorded: a template that changed in llama.cpp's source is reported as
// such, not compared. Skipped, saying so, where llama.cpp's source is not on this machine
// (scripts/fetch-llama-cpp-src.sh).
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <array>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <sstream>

#include "jinja/template.h"
#include "test_util.h"

namespace loom::test {
namespace {

using nlohmann::ordered_json;

// SHA-256 (FIPS 180-4) of a text, as lowercase hex: the templates' fingerprints.
std::string sha256_hex(const std::string& text) {
  static constexpr uint32_t k[64] = {
      0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5, 0xd807aa98, 0x12835b01,
      0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174, 0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc,
      0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da, 0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147,
      0x06ca6351, 0x14292967, 0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
      0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070, 0x19a4c116, 0x1e376c08,
      0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3, 0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208,
      0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2};
  std::array<uint32_t, 8> h = {0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a,
                               0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19};
  std::string m = text;
  const uint64_t bits = uint64_t(text.size()) * 8;
  m.push_back(char(0x80));
  while (m.size() % 64 != 56) m.push_back(0);
  for (int i = 7; i >= 0; --i) m.push_back(char((bits >> (8 * i)) & 0xff));
  const auto rotr = [](uint32_t x, int n) { return (x >> n) | (x << (32 - n)); };
  for (size_t off = 0; off < m.size(); off += 64) {
    uint32_t w[64];
    for (int i = 0; i < 16; ++i) {
      w[i] = 0;
      for (int j = 0; j < 4; ++j) w[i] = (w[i] << 8) | static_cast<unsigned char>(m[off + 4 * size_t(i) + size_t(j)]);
    }
    for (int i = 16; i < 64; ++i) {
      const uint32_t s0 = rotr(w[i - 15], 7) ^ rotr(w[i - 15], 18) ^ (w[i - 15] >> 3);
      const uint32_t s1 = rotr(w[i - 2], 17) ^ rotr(w[i - 2], 19) ^ (w[i - 2] >> 10);
      w[i] = w[i - 16] + s0 + w[i - 7] + s1;
    }
    auto v = h;
    for (int i = 0; i < 64; ++i) {
      const uint32_t S1 = rotr(v[4], 6) ^ rotr(v[4], 11) ^ rotr(v[4], 25);
      const uint32_t ch = (v[4] & v[5]) ^ (~v[4] & v[6]);
      const uint32_t t1 = v[7] + S1 + ch + k[i] + w[i];
      const uint32_t S0 = rotr(v[0], 2) ^ rotr(v[0], 13) ^ rotr(v[0], 22);
      const uint32_t maj = (v[0] & v[1]) ^ (v[0] & v[2]) ^ (v[1] & v[2]);
      const uint32_t t2 = S0 + maj;
      v = {t1 + t2, v[0], v[1], v[2], v[3] + t1, v[4], v[5], v[6]};
    }
    for (int i = 0; i < 8; ++i) h[size_t(i)] += v[size_t(i)];
  }
  std::string out;
  static constexpr char kHex[] = "0123456789abcdef";
  for (uint32_t x : h)
    for (int i = 28; i >= 0; i -= 4) out.push_back(kHex[(x >> i) & 0xf]);
  return out;
}

TEST(TemplateGoldenSha256, KnownDigests) {
  EXPECT_EQ(sha256_hex(""), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(sha256_hex("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(sha256_hex(std::string(1000, 'a')), "41edece42d63e8d9bf515a9ba6932e1c20cbc9f5a5d134645adb5db1b9737ea3");
}

constexpr int64_t kNowUtc = 1753531200;  // 2025-07-26T12:00:00Z

const ordered_json& expected_file() {
  static const ordered_json e = ordered_json::parse(read_text_file(data_dir() + "/chat-templates/expected.json"));
  return e;
}

const ordered_json& case_file(const std::string& tag) {
  static const ordered_json shared = ordered_json::parse(read_text_file(shared_path("golden/chat-templates/cases.json")));
  static const ordered_json own = ordered_json::parse(read_text_file(data_dir() + "/chat-templates/cases.json"));
  return tag == "shared" ? shared : own;
}

class TemplateGolden : public ::testing::TestWithParam<const char*> {};

TEST_P(TemplateGolden, RendersLikePythonJinja2) {
  const std::string name = GetParam();
  const std::string path = llama_cpp_src() + "/models/templates/" + name;
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    GTEST_SKIP() << path << " not found: llama.cpp's source is fetched by scripts/fetch-llama-cpp-src.sh "
                 << "(or set LOOM_LLAMA_CPP_SRC)";
  }
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string source = ss.str();
  const ordered_json& exp = expected_file();
  ASSERT_TRUE(exp["templates"].contains(name)) << name << " has no goldens: add it to tools/dev/chat-golden.py";
  const ordered_json& info = exp["templates"][name];
  ASSERT_EQ(sha256_hex(source), info["sha256"].get<std::string>())
      << path << " is not the template the goldens were made from: re-run tools/dev/chat-golden.py "
      << "(tests/data/chat-templates/README.md) and review the differences";
  auto t = jinja::Template::parse(source);
  ASSERT_TRUE(t.has_value()) << t.status().message();
  int n = 0, passed = 0, errors = 0;
  for (const ordered_json& e : exp["expected"]) {
    if (e["template"] != name) continue;
    const std::string cname = e["case"];
    SCOPED_TRACE(name + " / " + e["cases"].get<std::string>() + " / " + cname);
    ++n;
    ordered_json ctx = case_file(e["cases"])["cases"][cname]["context"];
    ctx["bos_token"] = info["bos_token"];
    ctx["eos_token"] = info["eos_token"];
    jinja::RenderOptions opts;
    opts.now_unix = kNowUtc;
    auto r = t->render(ctx, opts);
    if (e.value("expect_error", false)) {
      ++errors;
      EXPECT_FALSE(r.has_value()) << "expected an error (" << e["error"].get<std::string>() << "), got:\n" << *r;
      if (!r.has_value()) ++passed;
      continue;
    }
    if (!r.has_value()) {
      ADD_FAILURE() << r.status().message();
      continue;
    }
    const std::string& want = e["output"].get_ref<const std::string&>();
    EXPECT_EQ(*r, want);
    if (*r == want) ++passed;
  }
  std::printf("%s: %d/%d renderings identical (%d expected errors)\n", name.c_str(), passed, n, errors);
  EXPECT_GT(n, 0);
  EXPECT_EQ(passed, n);
}

INSTANTIATE_TEST_SUITE_P(LlamaCppTemplates, TemplateGolden,
                         ::testing::Values("Qwen3.5-4B.jinja", "LFM2.5-Instruct.jinja", "LFM2.5-8B-A1B.jinja",
                                           "HuggingFaceTB-SmolLM3-3B.jinja", "ibm-granite-granite-4.0.jinja",
                                           "ibm-granite-granite-4.1.jinja", "google-gemma-4-31B-it.jinja",
                                           "google-gemma-4-31B-it-interleaved.jinja",
                                           "mistralai-Ministral-3-14B-Reasoning-2512.jinja"),
                         [](const auto& info) { return param_name(info.param); });

}  // namespace
}  // namespace loom::test
