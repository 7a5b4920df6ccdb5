// The packed-weights cache (LOOM_PACK_CACHE, model/packing.h): the first load writes a cache file,
// the next one maps it instead of packing, and both compute the same logits as a load without the
// cache. A cache file that does not match (corrupt header, wrong size, another model file) is
// ignored and replaced, never used.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "context/context.h"
#include "model/model.h"
#include "test_util.h"

namespace {

using namespace loom;
namespace fs = std::filesystem;

std::vector<float> last_logits(std::shared_ptr<const Model> m) {
  ContextParams cp;
  cp.n_ctx = 64;
  cp.n_threads = 1;
  auto ctx = Context::create(m, cp);
  EXPECT_TRUE(ctx.has_value()) << ctx.status().message();
  const std::vector<int32_t> ids = m->vocab().tokenize("Once upon a time", true, false);
  EXPECT_TRUE((*ctx)->decode(Batch::from_tokens(ids, 0)).is_ok());
  auto l = (*ctx)->logits(-1);
  return std::vector<float>(l->begin(), l->end());
}

class PackCache : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::path(testing::TempDir()) / ("loom-pack-cache-" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    ::setenv("LOOM_PACK_CACHE", dir_.c_str(), 1);
  }
  void TearDown() override {
    ::unsetenv("LOOM_PACK_CACHE");
    fs::remove_all(dir_);
  }
  std::vector<fs::path> files() const {
    std::vector<fs::path> out;
    if (fs::exists(dir_))
      for (const auto& e : fs::directory_iterator(dir_)) out.push_back(e.path());
    return out;
  }
  fs::path dir_;
};

TEST_F(PackCache, SecondLoadMapsTheCacheAndComputesTheSame) {
  const std::string path = test::shared_path("models/synth-llama-tiny-q4_0.gguf");
  ::unsetenv("LOOM_PACK_CACHE");
  auto plain = Model::load(path);
  ASSERT_TRUE(plain.has_value()) << plain.status().message();
  const std::vector<float> want = last_logits(*plain);
  ::setenv("LOOM_PACK_CACHE", dir_.c_str(), 1);

  auto first = Model::load(path);
  ASSERT_TRUE(first.has_value());
  EXPECT_FALSE((*first)->packed_from_cache());
  EXPECT_EQ(last_logits(*first), want);  // while the cache file is written in the background
  (*first).reset();                      // the last reference: joins the writer
  const auto written = files();
  if (written.empty()) GTEST_SKIP() << "no packed kernels on this CPU: nothing to cache";
  ASSERT_EQ(written.size(), 1u);
  EXPECT_EQ(written[0].extension(), ".lpk");

  auto second = Model::load(path);
  ASSERT_TRUE(second.has_value());
  EXPECT_TRUE((*second)->packed_from_cache());
  EXPECT_EQ(last_logits(*second), want);
  EXPECT_EQ((*second)->decode_weight_bytes(), (*plain)->decode_weight_bytes());

  // A corrupt header and a truncated file are ignored: the weights are packed again and the file
  // is written anew.
  for (int damage = 0; damage < 2; ++damage) {
    if (damage == 0) {
      std::fstream f(written[0], std::ios::in | std::ios::out | std::ios::binary);
      f.seekp(20);
      f.put('#');
    } else {
      fs::resize_file(written[0], fs::file_size(written[0]) - 4096);
    }
    {
      auto again = Model::load(path);
      ASSERT_TRUE(again.has_value());
      EXPECT_FALSE((*again)->packed_from_cache()) << "damage " << damage;
      EXPECT_EQ(last_logits(*again), want);
    }
    auto mapped = Model::load(path);
    EXPECT_TRUE((*mapped)->packed_from_cache()) << "rewritten after damage " << damage;
  }
  // Another model gets its own file; LOOM_PACK_CACHE=0 turns the cache off.
  {
    auto other = Model::load(test::shared_path("models/synth-llama-tiny-q8_0.gguf"));
    ASSERT_TRUE(other.has_value());
    EXPECT_FALSE((*other)->packed_from_cache());
  }
  EXPECT_EQ(files().size(), 2u);
  ::setenv("LOOM_PACK_CACHE", "0", 1);
  auto off = Model::load(path);
  EXPECT_FALSE((*off)->packed_from_cache());
}

}  // namespace
