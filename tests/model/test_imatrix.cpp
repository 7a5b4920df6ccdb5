// Importance-matrix files (model/imatrix.h): real files from llama-imatrix in both formats
// (tests/data/imatrix/, made from stories260K; commands in tests/data/imatrix/README.md), the
// values llama-quantize derives from them, and hostile variants built in memory (truncated,
// corrupt, huge or negative lengths and counts, NaN), which must be refused, never crash.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "base/file_util.h"
#include "gguf/gguf.h"
#include "gguf/gguf_writer.h"
#include "model/imatrix.h"

namespace loom::model {
namespace {

std::string data_path(const std::string& name) { return std::string(LOOM_SOURCE_DIR) + "/tests/data/imatrix/" + name; }

std::vector<uint8_t> file_bytes(const std::string& name) {
  auto b = read_file_bytes(data_path(name));
  EXPECT_TRUE(b.has_value()) << data_path(name);
  return b ? *b : std::vector<uint8_t>{};
}

// ---- real files ---------------------------------------------------------------------------------

TEST(Imatrix, RealGgufFile) {
  auto m = read_imatrix(data_path("stories260K-imatrix.gguf"));
  ASSERT_TRUE(m.has_value()) << m.status().message();
  EXPECT_FALSE(m->legacy);
  EXPECT_EQ(m->chunk_size, 64);
  EXPECT_GT(m->chunk_count, 0);
  ASSERT_EQ(m->datasets.size(), 1u);
  EXPECT_NE(m->datasets[0].find("stories-text.txt"), std::string::npos);
  // stories260K: 5 layers x 7 matrices (the output matrix is tied to token_embd, which is not
  // a matmul input and has no entry).
  EXPECT_EQ(m->entries.size(), 35u);
  const std::vector<float>* q = m->find("blk.0.attn_q.weight");
  ASSERT_NE(q, nullptr);
  EXPECT_EQ(q->size(), 64u);
  const std::vector<float>* down = m->find("blk.4.ffn_down.weight");
  ASSERT_NE(down, nullptr);
  EXPECT_EQ(down->size(), 172u);
  EXPECT_EQ(m->find("token_embd.weight"), nullptr);

  // Each value is in_sum2 / round(count) of the raw tensors, computed in float.
  auto f = gguf::GgufFile::open(data_path("stories260K-imatrix.gguf"));
  ASSERT_TRUE(f.has_value());
  for (const auto& [name, values] : m->entries) {
    const gguf::TensorInfo* s = f->find_tensor(name + ".in_sum2");
    const gguf::TensorInfo* c = f->find_tensor(name + ".counts");
    ASSERT_TRUE(s && c) << name;
    ASSERT_EQ(c->n_elements(), 1) << name;
    float count;
    std::memcpy(&count, c->data, 4);
    ASSERT_GT(count, 0.0f);
    for (size_t i = 0; i < values.size(); ++i) {
      float sum;
      std::memcpy(&sum, s->data + 4 * i, 4);
      EXPECT_EQ(values[i], sum / float(std::lround(count))) << name << " " << i;
      EXPECT_GE(values[i], 0.0f);
    }
  }

  auto t = m->for_tensor("blk.0.attn_q.weight", 64, 1);
  ASSERT_TRUE(t.has_value());
  EXPECT_EQ(*t, q->data());
  auto missing = m->for_tensor("blk.9.attn_q.weight", 64, 1);
  ASSERT_TRUE(missing.has_value());
  EXPECT_EQ(*missing, nullptr);
  auto wrong = m->for_tensor("blk.0.attn_q.weight", 64, 2);
  ASSERT_FALSE(wrong.has_value());
  EXPECT_NE(wrong.status().message().find("is different from tensor size"), std::string::npos);
}

TEST(Imatrix, RealLegacyFileMatchesGguf) {
  // The same run saved in both formats: the .dat stores (sum / count) * ncall per entry, which
  // divided by ncall again is the GGUF value up to float rounding.
  auto g = read_imatrix(data_path("stories260K-imatrix.gguf"));
  auto d = read_imatrix(data_path("stories260K-imatrix.dat"));
  ASSERT_TRUE(g.has_value()) << g.status().message();
  ASSERT_TRUE(d.has_value()) << d.status().message();
  EXPECT_TRUE(d->legacy);
  EXPECT_EQ(d->chunk_size, 0);
  EXPECT_EQ(d->chunk_count, g->chunk_count);
  EXPECT_EQ(d->datasets, g->datasets);
  ASSERT_EQ(d->entries.size(), g->entries.size());
  for (const auto& [name, values] : g->entries) {
    const std::vector<float>* v = d->find(name);
    ASSERT_NE(v, nullptr) << name;
    ASSERT_EQ(v->size(), values.size()) << name;
    for (size_t i = 0; i < values.size(); ++i) {
      EXPECT_NEAR((*v)[i], values[i], 1e-5f * std::fabs(values[i]) + 1e-30f) << name << " " << i;
    }
  }
}

TEST(Imatrix, MissingFile) {
  auto m = read_imatrix(data_path("no-such-file.dat"));
  ASSERT_FALSE(m.has_value());
}

// ---- legacy format, built in memory -------------------------------------------------------------

struct Dat {
  std::vector<uint8_t> b;
  Dat& i32(int32_t v) {
    const auto* p = reinterpret_cast<const uint8_t*>(&v);
    b.insert(b.end(), p, p + 4);
    return *this;
  }
  Dat& f32(float v) {
    const auto* p = reinterpret_cast<const uint8_t*>(&v);
    b.insert(b.end(), p, p + 4);
    return *this;
  }
  Dat& str(const std::string& s) {
    b.insert(b.end(), s.begin(), s.end());
    return *this;
  }
  Dat& entry(const std::string& name, int32_t ncall, const std::vector<float>& v) {
    i32(int32_t(name.size())).str(name).i32(ncall).i32(int32_t(v.size()));
    for (float x : v) f32(x);
    return *this;
  }
};

Expected<Imatrix> parse(const Dat& d) { return parse_imatrix(d.b, "test.dat"); }

TEST(ImatrixLegacy, ValuesDividedByNcall) {
  Dat d;
  d.i32(3).entry("a.weight", 4, {8.0f, 2.0f, 1.0f}).entry("b.weight", 0, {5.0f}).entry("c.weight", -3, {7.0f, 9.0f});
  d.i32(12).i32(4).str("data");
  auto m = parse(d);
  ASSERT_TRUE(m.has_value()) << m.status().message();
  EXPECT_TRUE(m->legacy);
  EXPECT_EQ(*m->find("a.weight"), (std::vector<float>{2.0f, 0.5f, 0.25f}));
  EXPECT_EQ(*m->find("b.weight"), (std::vector<float>{5.0f}));  // ncall <= 0: as stored
  EXPECT_EQ(*m->find("c.weight"), (std::vector<float>{7.0f, 9.0f}));
  EXPECT_EQ(m->chunk_count, 12);
  EXPECT_EQ(m->datasets, (std::vector<std::string>{"data"}));
}

TEST(ImatrixLegacy, TrailerIsOptionalAndPartialTrailerIgnored) {
  Dat base;
  base.i32(1).entry("a", 2, {4.0f});
  auto m = parse(base);
  ASSERT_TRUE(m.has_value());
  EXPECT_EQ(m->chunk_count, 0);
  EXPECT_TRUE(m->datasets.empty());
  Dat t = base;
  t.i32(5).i32(100).str("short");  // dataset length beyond the end: kept out
  m = parse(t);
  ASSERT_TRUE(m.has_value());
  EXPECT_EQ(m->chunk_count, 5);
  EXPECT_TRUE(m->datasets.empty());
  Dat u = base;
  u.b.push_back(7);  // fewer than 4 trailer bytes
  m = parse(u);
  ASSERT_TRUE(m.has_value());
  EXPECT_EQ(m->chunk_count, 0);
}

TEST(ImatrixLegacy, NamesCutAtNulAndLaterDuplicatesWin) {
  Dat d;
  d.i32(2).entry(std::string("x.weight\0junk", 13), 1, {1.0f}).entry("x.weight", 1, {2.0f, 3.0f});
  auto m = parse(d);
  ASSERT_TRUE(m.has_value());
  ASSERT_EQ(m->entries.size(), 1u);
  EXPECT_EQ(*m->find("x.weight"), (std::vector<float>{2.0f, 3.0f}));
}

TEST(ImatrixLegacy, HostileInputRefused) {
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  std::vector<std::pair<const char*, Dat>> cases;
  cases.push_back({"empty", Dat{}});
  cases.push_back({"short count", Dat{{1, 0}}});
  cases.push_back({"zero entries", Dat{}.i32(0)});
  cases.push_back({"negative entries", Dat{}.i32(-1)});
  cases.push_back({"huge entries", Dat{}.i32(INT32_MAX).entry("a", 1, {1.0f})});
  cases.push_back({"negative name length", Dat{}.i32(1).i32(-1).str("abcdefghijkl")});
  cases.push_back({"int-min name length", Dat{}.i32(1).i32(INT32_MIN).str("abcdefghijkl")});
  cases.push_back({"name past end", Dat{}.i32(1).i32(1000).str("abcdefghijkl")});
  cases.push_back({"zero values", Dat{}.i32(1).i32(1).str("a").i32(1).i32(0).f32(1)});
  cases.push_back({"negative values", Dat{}.i32(1).i32(1).str("a").i32(1).i32(-5).f32(1)});
  cases.push_back({"huge values", Dat{}.i32(1).i32(1).str("a").i32(1).i32(INT32_MAX).f32(1)});
  cases.push_back({"values past end", Dat{}.i32(1).i32(1).str("a").i32(1).i32(3).f32(1).f32(2)});
  cases.push_back({"missing second entry", Dat{}.i32(2).entry("a", 1, {1.0f}).i32(0).i32(0).i32(0).i32(0)});
  cases.push_back({"NaN", Dat{}.i32(1).entry("a", 1, {1.0f, nan})});
  cases.push_back({"inf", Dat{}.i32(1).entry("a", 1, {inf})});
  cases.push_back({"-inf", Dat{}.i32(1).entry("a", 0, {-inf})});
  for (const auto& [what, d] : cases) {
    auto m = parse(d);
    EXPECT_FALSE(m.has_value()) << what;
    if (!m) {
      EXPECT_EQ(m.status().code(), StatusCode::kCorrupt) << what << ": " << m.status().message();
    }
  }
}

// ---- GGUF format, built in memory ---------------------------------------------------------------

std::span<const uint8_t> f32_bytes(const std::vector<float>& v) {
  return {reinterpret_cast<const uint8_t*>(v.data()), v.size() * 4};
}

gguf::GgufWriter gguf_base(bool metadata = true) {
  gguf::GgufWriter w;
  EXPECT_TRUE(w.set_string("general.type", "imatrix").is_ok());
  if (metadata) {
    EXPECT_TRUE(w.set_string_array("imatrix.datasets", {"set"}).is_ok());
    EXPECT_TRUE(w.set_u32("imatrix.chunk_count", 3).is_ok());
    EXPECT_TRUE(w.set_u32("imatrix.chunk_size", 512).is_ok());
  }
  return w;
}

void add(gguf::GgufWriter& w, const std::string& name, const std::vector<float>& sums, int64_t ne0,
         const std::vector<float>& counts) {
  ASSERT_TRUE(w.add_tensor(name + ".in_sum2", TensorType::F32, {ne0, int64_t(sums.size()) / ne0}, f32_bytes(sums)).is_ok());
  ASSERT_TRUE(w.add_tensor(name + ".counts", TensorType::F32, {1, int64_t(counts.size())}, f32_bytes(counts)).is_ok());
}

Expected<Imatrix> parse(const gguf::GgufWriter& w) { return parse_imatrix(w.to_bytes(), "test.gguf"); }

TEST(ImatrixGguf, ValuesPerExpert) {
  auto w = gguf_base();
  // Two experts of 3 values: counts 4 and 0 (an expert never routed to: values 1); a count of
  // 2.4 rounds to 2, a negative one counts as none.
  add(w, "blk.0.ffn_up_exps.weight", {8, 4, 2, 9, 9, 9}, 3, {4.0f, 0.0f});
  add(w, "blk.0.attn_q.weight", {3, 5}, 2, {2.4f});
  add(w, "blk.0.attn_k.weight", {3, 5}, 2, {-2.0f});
  ASSERT_TRUE(w.add_tensor("unrelated", TensorType::F32, {2}, f32_bytes({1.0f, 2.0f})).is_ok());
  auto m = parse(w);
  ASSERT_TRUE(m.has_value()) << m.status().message();
  EXPECT_FALSE(m->legacy);
  EXPECT_EQ(m->chunk_count, 3);
  EXPECT_EQ(m->chunk_size, 512);
  EXPECT_EQ(m->datasets, (std::vector<std::string>{"set"}));
  EXPECT_EQ(m->entries.size(), 3u);
  EXPECT_EQ(*m->find("blk.0.ffn_up_exps.weight"), (std::vector<float>{2, 1, 0.5f, 1, 1, 1}));
  EXPECT_EQ(*m->find("blk.0.attn_q.weight"), (std::vector<float>{1.5f, 2.5f}));
  EXPECT_EQ(*m->find("blk.0.attn_k.weight"), (std::vector<float>{1, 1}));
  auto e = m->for_tensor("blk.0.ffn_up_exps.weight", 3, 2);
  ASSERT_TRUE(e.has_value());
  EXPECT_NE(*e, nullptr);
}

TEST(ImatrixGguf, DatasetsOfAnotherTypeIgnored) {
  gguf::GgufWriter w;
  ASSERT_TRUE(w.set_i32_array("imatrix.datasets", {1, 2}).is_ok());
  ASSERT_TRUE(w.set_u32("imatrix.chunk_count", 1).is_ok());
  ASSERT_TRUE(w.set_u32("imatrix.chunk_size", 1).is_ok());
  add(w, "a", {1}, 1, {1});
  auto m = parse(w);
  ASSERT_TRUE(m.has_value()) << m.status().message();
  EXPECT_TRUE(m->datasets.empty());
}

TEST(ImatrixGguf, HostileInputRefused) {
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  struct Case {
    const char* what;
    std::function<void(gguf::GgufWriter&)> edit;
    bool metadata = true;
  };
  const std::vector<Case> cases = {
      {"no tensors", [](gguf::GgufWriter&) {}},
      {"no metadata", [](gguf::GgufWriter& w) { add(w, "a", {1}, 1, {1}); }, false},
      {"sums without counts",
       [](gguf::GgufWriter& w) {
         ASSERT_TRUE(w.add_tensor("a.in_sum2", TensorType::F32, {2}, f32_bytes({1, 2})).is_ok());
       }},
      {"counts without sums",
       [](gguf::GgufWriter& w) { ASSERT_TRUE(w.add_tensor("a.counts", TensorType::F32, {1}, f32_bytes({1})).is_ok()); }},
      {"f16 counts",
       [](gguf::GgufWriter& w) {
         ASSERT_TRUE(w.add_tensor("a.in_sum2", TensorType::F32, {2}, f32_bytes({1, 2})).is_ok());
         const uint16_t one = 0x3c00;
         ASSERT_TRUE(w.add_tensor("a.counts", TensorType::F16, {1}, {reinterpret_cast<const uint8_t*>(&one), 2}).is_ok());
       }},
      {"sums not a multiple of counts",
       [](gguf::GgufWriter& w) {
         add(w, "a", {1, 2, 3}, 3, {1, 1});
       }},
      {"NaN count",
       [&](gguf::GgufWriter& w) {
         add(w, "a", {1, 2}, 2, {nan});
       }},
      {"inf count",
       [&](gguf::GgufWriter& w) {
         add(w, "a", {1, 2}, 2, {inf});
       }},
      {"huge count",
       [](gguf::GgufWriter& w) {
         add(w, "a", {1, 2}, 2, {1e30f});
       }},
      {"NaN sum",
       [&](gguf::GgufWriter& w) {
         add(w, "a", {1, nan}, 2, {1});
       }},
      {"inf sum",
       [&](gguf::GgufWriter& w) {
         add(w, "a", {inf, 1}, 2, {1});
       }},
      {"negative chunk count",
       [](gguf::GgufWriter& w) {
         w.remove("imatrix.chunk_count");
         ASSERT_TRUE(w.set_i32("imatrix.chunk_count", -1).is_ok());
         add(w, "a", {1}, 1, {1});
       }},
      {"string chunk size",
       [](gguf::GgufWriter& w) {
         w.remove("imatrix.chunk_size");
         ASSERT_TRUE(w.set_string("imatrix.chunk_size", "big").is_ok());
         add(w, "a", {1}, 1, {1});
       }},
  };
  for (const Case& c : cases) {
    auto w = gguf_base(c.metadata);
    c.edit(w);
    auto m = parse(w);
    EXPECT_FALSE(m.has_value()) << c.what;
    if (!m) {
      EXPECT_EQ(m.status().code(), StatusCode::kCorrupt) << c.what << ": " << m.status().message();
    }
  }
}

// ---- truncation and corruption of the real files ------------------------------------------------

TEST(Imatrix, TruncatedRealFilesNeverCrash) {
  for (const char* name : {"stories260K-imatrix.gguf", "stories260K-imatrix.dat"}) {
    const std::vector<uint8_t> full = file_bytes(name);
    ASSERT_FALSE(full.empty());
    const bool gguf = std::memcmp(full.data(), "GGUF", 4) == 0;
    for (size_t n = 0; n < full.size(); n += (n < 64 || n + 64 > full.size() ? 1 : 37)) {
      auto m = parse_imatrix(std::span<const uint8_t>(full.data(), n), name);
      // A truncated GGUF parses only when just the last tensor's alignment padding is cut; a
      // .dat cut inside its optional trailer still parses.
      if (m && gguf) {
        EXPECT_GT(n + 32, full.size()) << name << " cut to " << n << " bytes";
      }
    }
    auto whole = parse_imatrix(full, name);
    EXPECT_TRUE(whole.has_value()) << name;
  }
}

TEST(Imatrix, CorruptedRealFilesNeverCrash) {
  std::mt19937 rng(27);
  for (const char* name : {"stories260K-imatrix.gguf", "stories260K-imatrix.dat"}) {
    const std::vector<uint8_t> full = file_bytes(name);
    ASSERT_FALSE(full.empty());
    for (int iter = 0; iter < 400; ++iter) {
      std::vector<uint8_t> b = full;
      const int flips = 1 + int(rng() % 8);
      for (int k = 0; k < flips; ++k) {
        const size_t at = rng() % b.size();
        b[at] = (iter % 3 == 0) ? uint8_t(0xff) : uint8_t(rng());
      }
      auto m = parse_imatrix(b, name);
      if (m) {
        for (const auto& [n, v] : m->entries) {
          for (float x : v) ASSERT_TRUE(std::isfinite(x)) << name << " " << n;
        }
      }
    }
  }
}

}  // namespace
}  // namespace loom::model
