// The IQ1/IQ2/IQ3, TQ1_0/TQ2_0, MXFP4, Q1_0 and Q2_0 weight types (issue 27) against llama.cpp on
// the same files: tests/data/quant-golden/ holds llama.cpp's goldens of the synthetic kq llama
// (n_embd 256) quantized by real llama-quantize with kq-imatrix.gguf, each type in its
// llama-quantize mix and --pure (tools/dev/make-quant-goldens.sh; README.md there). The quantized
// files themselves are not kept: SHA256SUMS names them (and holds their digests), and this test
// reads them from the folder named by LOOM_QUANT_GOLDEN_DIR — llama-quantize's files or loom
// quantize's byte-identical ones. Without it every case is skipped.
//
// Teacher-forced, as test_kquant_golden: the golden greedy ids are fed one by one and every step's
// logits (the first one the last-prompt logits) are compared with *.steps.f32 within
// 3e-2 * max|golden| (the k-quants' tolerance: these synthetic models amplify single rounding
// flips of the 8-bit activation quantization; ../shared/golden/README.md). Greedy ids are compared
// up to the first step whose golden top-1/top-2 margin is below 2 * tolerance * max|golden|.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "model_test_util.h"
#include "quant/quant.h"

namespace loom::test {
namespace {

constexpr float kTolerance = 3e-2f;

std::string golden_dir() { return data_dir() + "/quant-golden"; }

// The file names SHA256SUMS lists ("kq-iq1_m-mix.gguf", ...), in its order.
std::vector<std::string> listed_files() {
  std::vector<std::string> names;
  std::ifstream in(golden_dir() + "/SHA256SUMS");
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream ls(line);
    std::string digest, name;
    if (ls >> digest >> name) names.push_back(name);
  }
  return names;
}

class QuantGoldenNew : public ::testing::TestWithParam<std::string> {};

TEST_P(QuantGoldenNew, TeacherForcedStepsMatchLlamaCpp) {
  const std::string file = GetParam();
  const std::string stem = file.substr(0, file.rfind(".gguf"));
  const char* dir = std::getenv("LOOM_QUANT_GOLDEN_DIR");
  if (!dir || !*dir) {
    GTEST_SKIP() << "LOOM_QUANT_GOLDEN_DIR is not set: point it at a folder holding the files of "
                    "tests/data/quant-golden/SHA256SUMS ("
                 << file << " among them), as llama-quantize (tools/dev/make-quant-goldens.sh) or loom quantize write them";
  }
  const std::string path = std::string(dir) + "/" + file;
  ASSERT_TRUE(std::filesystem::exists(path)) << path << " is missing (LOOM_QUANT_GOLDEN_DIR=" << dir << ")";

  auto loaded = Model::load(path);
  ASSERT_TRUE(loaded.has_value()) << file << ": " << loaded.status().message();
  const std::shared_ptr<const Model> model = *loaded;

  const auto g = load_json(golden_dir() + "/" + stem + ".json");
  ASSERT_EQ(g["model"].get<std::string>(), stem);
  ASSERT_EQ(g["n_vocab"].get<size_t>(), size_t(model->hparams().n_vocab));
  for (const auto& run : g["runs"]) check_teacher_forced(model, run, golden_dir(), stem, kTolerance, /*check_last=*/true);
}

// The goldens and SHA256SUMS agree: every listed file has its golden, and the list names every
// new type (in a mix or pure).
TEST(QuantGoldenNewData, EveryListedFileHasGoldens) {
  const std::vector<std::string> names = listed_files();
  ASSERT_FALSE(names.empty()) << golden_dir() + "/SHA256SUMS";
  for (const std::string& f : names) {
    const std::string stem = f.substr(0, f.rfind(".gguf"));
    EXPECT_TRUE(std::filesystem::exists(golden_dir() + "/" + stem + ".json")) << stem;
  }
  for (const char* t :
       {"iq1_s", "iq1_m", "iq2_xxs", "iq2_xs", "iq2_s", "iq3_xxs", "iq3_s", "tq1_0", "tq2_0", "mxfp4_moe", "q1_0", "q2_0"}) {
    const bool listed = std::any_of(names.begin(), names.end(),
                                    [&](const std::string& n) { return n.rfind(std::string("kq-") + t + "-", 0) == 0; });
    EXPECT_TRUE(listed) << t;
  }
}

INSTANTIATE_TEST_SUITE_P(Files, QuantGoldenNew, ::testing::ValuesIn(listed_files()),
                         [](const auto& info) { return param_name(info.param); });

}  // namespace
}  // namespace loom::test
