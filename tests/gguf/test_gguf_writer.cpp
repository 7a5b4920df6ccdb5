// GgufWriter: writer -> reader round trips of every value type, versions, alignments, files, and
// the writer's own input validation.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>

#include "gguf/gguf.h"
#include "gguf/gguf_writer.h"
#include "gguf_test_images.h"
#include "test_util.h"

namespace loom::gguf {
namespace {

using testing::as_bytes;
using testing::make_small_writer;
using testing::pattern_bytes;
namespace fs = std::filesystem;

bool same_array(const Array& a, const Array& b) {
  if (a.elem_type != b.elem_type || a.count != b.count || a.raw != b.raw || a.strings != b.strings ||
      a.arrays.size() != b.arrays.size()) {
    return false;
  }
  for (size_t i = 0; i < a.arrays.size(); ++i) {
    if (!same_array(a.arrays[i], b.arrays[i])) return false;
  }
  return true;
}

bool same_value(const Value& a, const Value& b) {
  if (a.index() != b.index()) return false;
  return std::visit(
      [&](const auto& x) {
        using T = std::decay_t<decltype(x)>;
        if constexpr (std::is_same_v<T, Array>) return same_array(x, std::get<Array>(b));
        else return x == std::get<T>(b);  // no NaNs in these tests
      },
      a);
}

// Metadata in order, and tensors with identical shape, type and bytes.
void expect_same_content(const GgufFile& a, const GgufFile& b) {
  ASSERT_EQ(a.metadata().size(), b.metadata().size());
  for (size_t i = 0; i < a.metadata().size(); ++i) {
    EXPECT_EQ(a.metadata()[i].key, b.metadata()[i].key);
    EXPECT_TRUE(same_value(a.metadata()[i].value, b.metadata()[i].value)) << a.metadata()[i].key;
  }
  ASSERT_EQ(a.tensors().size(), b.tensors().size());
  for (size_t i = 0; i < a.tensors().size(); ++i) {
    const TensorInfo& x = a.tensors()[i];
    const TensorInfo& y = b.tensors()[i];
    EXPECT_EQ(x.name, y.name);
    EXPECT_EQ(x.type, y.type);
    EXPECT_EQ(x.n_dims, y.n_dims);
    EXPECT_EQ(x.ne, y.ne);
    ASSERT_EQ(x.nbytes, y.nbytes) << x.name;
    EXPECT_EQ(std::memcmp(x.data, y.data, x.nbytes), 0) << x.name;
  }
}

std::string temp_path(const std::string& stem) {
  return (fs::temp_directory_path() / ("loom_gguf_" + stem + "_" + std::to_string(::getpid()) + ".gguf")).string();
}

GgufFile parse(const std::vector<uint8_t>& bytes) {
  auto f = GgufFile::from_bytes(bytes);
  if (!f) ADD_FAILURE() << f.status().message();
  return f ? std::move(f).value() : GgufFile();
}

class RoundTrip : public ::testing::TestWithParam<uint32_t> {};

TEST_P(RoundTrip, EveryValueTypeAndTensor) {
  const uint32_t version = GetParam();
  GgufWriter w = make_small_writer(version);
  const std::vector<uint8_t> image = w.to_bytes();
  GgufFile f = parse(image);
  ASSERT_EQ(f.version(), version);
  EXPECT_EQ(f.alignment(), 32u);
  EXPECT_EQ(f.file_size(), image.size());

  // Every key comes back with its type and value, in insertion order.
  ASSERT_EQ(f.metadata().size(), w.metadata().size());
  for (size_t i = 0; i < w.metadata().size(); ++i) {
    EXPECT_EQ(f.metadata()[i].key, w.metadata()[i].key);
    EXPECT_EQ(type_of(f.metadata()[i].value), type_of(w.metadata()[i].value)) << w.metadata()[i].key;
    EXPECT_TRUE(same_value(f.metadata()[i].value, w.metadata()[i].value)) << w.metadata()[i].key;
  }
  EXPECT_EQ(f.get_uint("t.u8").value(), 200u);
  EXPECT_EQ(f.get_int("t.i8").value(), -100);
  EXPECT_EQ(f.get_int("t.i16").value(), -30000);
  EXPECT_EQ(f.get_uint("t.u32").value(), 4000000000u);
  EXPECT_EQ(f.get_int("t.i32").value(), -2000000000);
  EXPECT_EQ(f.get_uint("t.u64").value(), 18000000000000000000ull);
  EXPECT_FALSE(f.get_int("t.u64"));  // does not fit an int64
  EXPECT_EQ(f.get_int("t.i64").value(), -9000000000000000000ll);
  EXPECT_FALSE(f.get_uint("t.i64"));  // negative
  EXPECT_EQ(f.get_float("t.f32").value(), 1.5);
  EXPECT_EQ(f.get_float("t.f64").value(), -2.25);
  EXPECT_TRUE(f.get_bool("t.bool").value());
  EXPECT_EQ(f.get_string("t.string").value(), "hello \"gguf\"\n");
  EXPECT_EQ(f.get_string("t.empty_string").value(), "");

  const Array* empty = f.get_array("t.arr_empty").value();
  EXPECT_EQ(empty->elem_type, ValueType::kFloat32);
  EXPECT_EQ(empty->count, 0u);
  EXPECT_EQ(f.get_array("t.arr_empty_strings").value()->elem_type, ValueType::kString);
  const Array* strs = f.get_array("t.arr_string").value();
  ASSERT_EQ(strs->strings.size(), 3u);
  EXPECT_EQ(strs->strings[1], "");
  const Array* bools = f.get_array("t.arr_bool").value();
  EXPECT_EQ(bools->number_at(0), 1.0);
  EXPECT_EQ(bools->number_at(1), 0.0);
  EXPECT_EQ(f.get_array("t.arr_f32").value()->number_at(1), -1.25);
  EXPECT_EQ(f.get_array("t.arr_u64").value()->int_at(0), 0);
  EXPECT_EQ(f.get_array("t.arr_i16").value()->int_at(0), -7);

  const Array* nested = f.get_array("t.arr_nested").value();
  ASSERT_EQ(nested->elem_type, ValueType::kArray);
  ASSERT_EQ(nested->arrays.size(), 3u);
  ASSERT_EQ(nested->arrays[0].arrays.size(), 2u);
  EXPECT_EQ(nested->arrays[0].arrays[0].int_at(1), 2);
  EXPECT_EQ(nested->arrays[0].arrays[1].count, 0u);
  EXPECT_EQ(nested->arrays[1].count, 0u);
  EXPECT_EQ(nested->arrays[2].arrays[0].strings, (std::vector<std::string>{"x", ""}));
  EXPECT_EQ(to_string(*f.find("t.arr_nested")), "[[[1, 2], []], [], [[\"x\", \"\"]]]");

  // Tensors: identical bytes, aligned offsets, data section aligned, no bytes past the last one.
  ASSERT_EQ(f.tensors().size(), 4u);
  EXPECT_EQ(f.data_offset() % 32, 0u);
  const std::vector<std::pair<std::string, std::vector<uint8_t>>> want = {{"a.f32", pattern_bytes(64, 1)},
                                                                          {"b.q4_0", pattern_bytes(36, 2)},
                                                                          {"c.f16", pattern_bytes(8, 3)},
                                                                          {"d.last", pattern_bytes(32, 4)}};
  uint64_t end = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    const TensorInfo& t = f.tensors()[i];
    EXPECT_EQ(t.name, want[i].first);
    EXPECT_EQ(t.offset % 32, 0u);
    ASSERT_EQ(t.nbytes, want[i].second.size());
    EXPECT_EQ(std::vector<uint8_t>(t.data, t.data + t.nbytes), want[i].second) << t.name;
    end = std::max(end, f.data_offset() + t.offset + t.nbytes);
  }
  EXPECT_EQ(end, image.size());
  const TensorInfo* q = f.find_tensor("b.q4_0");
  EXPECT_EQ(q->type, TensorType::Q4_0);
  EXPECT_EQ(q->n_dims, 2);
  EXPECT_EQ(q->n_rows(), 2);
  const TensorInfo* last = f.find_tensor("d.last");
  EXPECT_EQ(last->n_dims, 4);
  EXPECT_EQ(last->ne, (std::array<int64_t, 4>{2, 2, 1, 2}));
  EXPECT_EQ(f.find_tensor("c.f16")->n_dims, 1);

  // Writing what was read reproduces the image byte for byte.
  auto again = GgufWriter::from_file(f);
  ASSERT_TRUE(again) << again.status().message();
  EXPECT_EQ(again->to_bytes(), image);
}

INSTANTIATE_TEST_SUITE_P(Versions, RoundTrip, ::testing::Values(2u, 3u));

TEST(GgufWriter, EmptyImage) {
  GgufWriter w;
  const auto image = w.to_bytes();
  EXPECT_EQ(image.size(), 24u);  // header only
  GgufFile f = parse(image);
  EXPECT_EQ(f.version(), 3u);
  EXPECT_TRUE(f.metadata().empty());
  EXPECT_TRUE(f.tensors().empty());
}

TEST(GgufWriter, CustomAlignment) {
  for (uint32_t align : {1u, 8u, 64u, 256u, 4096u}) {
    GgufWriter w;
    ASSERT_TRUE(w.set_string("general.architecture", "llama").is_ok());
    ASSERT_TRUE(w.set_u32("general.alignment", align).is_ok());
    EXPECT_EQ(w.alignment(), align);
    ASSERT_TRUE(w.add_tensor("x", TensorType::F32, {3}, pattern_bytes(12, 5)).is_ok());
    ASSERT_TRUE(w.add_tensor("y", TensorType::Q8_0, {32, 3}, pattern_bytes(3 * 34, 6)).is_ok());
    ASSERT_TRUE(w.add_tensor("z", TensorType::I8, {5}, pattern_bytes(5, 7)).is_ok());
    const auto image = w.to_bytes();
    GgufFile f = parse(image);
    EXPECT_EQ(f.alignment(), align);
    EXPECT_EQ(f.data_offset() % align, 0u);
    EXPECT_EQ(image.size() % align, 0u);  // the last tensor is padded too, as llama.cpp writes
    for (const auto& t : f.tensors()) {
      EXPECT_EQ(t.offset % align, 0u) << align << " " << t.name;
      EXPECT_EQ(std::vector<uint8_t>(t.data, t.data + t.nbytes), pattern_bytes(t.nbytes, t.name == "x"   ? 5
                                                                                         : t.name == "y" ? 6
                                                                                                         : 7));
    }
  }
  // Removing the key restores the default.
  GgufWriter w;
  ASSERT_TRUE(w.set_u32("general.alignment", 64).is_ok());
  EXPECT_TRUE(w.remove("general.alignment"));
  EXPECT_EQ(w.alignment(), 32u);
}

TEST(GgufWriter, WriteFileIsAtomicAndMapsAligned) {
  const std::string path = temp_path("write");
  GgufWriter w = make_small_writer();
  ASSERT_TRUE(w.set_u32("general.alignment", 128).is_ok());
  ASSERT_TRUE(w.write_file(path).is_ok());
  // Overwriting an existing file works (rename replaces it).
  ASSERT_TRUE(w.write_file(path).is_ok());
  auto f = GgufFile::open(path);
  ASSERT_TRUE(f) << f.status().message();
  EXPECT_EQ(test::read_file(path), w.to_bytes());
  for (const auto& t : f->tensors()) {
    // mmap is page aligned, so the offsets make the pointers aligned.
    EXPECT_EQ(reinterpret_cast<uintptr_t>(t.data) % 128, 0u) << t.name;
  }
  // No temporary files left beside the output.
  const std::string stem = fs::path(path).filename().string();
  for (const auto& e : fs::directory_iterator(fs::path(path).parent_path())) {
    const std::string name = e.path().filename().string();
    EXPECT_FALSE(name.starts_with(stem + ".tmp")) << name;
  }
  fs::remove(path);

  Status bad = w.write_file("/nonexistent/dir/x.gguf");
  EXPECT_EQ(bad.code(), StatusCode::kIo);
  EXPECT_NE(bad.message().find("/nonexistent/dir/x.gguf"), std::string::npos);
}

TEST(GgufWriter, MetadataValidation) {
  GgufWriter w;
  ASSERT_TRUE(w.set_u32("k", 1).is_ok());
  Status dup = w.set_string("k", "again");
  EXPECT_EQ(dup.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(dup.message().find("duplicate metadata key 'k'"), std::string::npos);
  EXPECT_EQ(std::get<uint32_t>(*w.find("k")), 1u);
  // Replace = remove + set.
  EXPECT_TRUE(w.remove("k"));
  EXPECT_FALSE(w.remove("k"));
  EXPECT_TRUE(w.set_string("k", "again").is_ok());
  EXPECT_EQ(std::get<std::string>(*w.find("k")), "again");

  EXPECT_NE(w.set_u32("general.alignment", 0).message().find("power of two"), std::string::npos);
  EXPECT_NE(w.set_u32("general.alignment", 3).message().find("power of two"), std::string::npos);
  EXPECT_NE(w.set_u32("general.alignment", 1u << 31).message().find("power of two"), std::string::npos);
  EXPECT_NE(w.set_i32("general.alignment", 32).message().find("must be a u32"), std::string::npos);
  EXPECT_NE(w.set_string("general.alignment", "32").message().find("must be a u32"), std::string::npos);
  EXPECT_EQ(w.find("general.alignment"), nullptr);
  EXPECT_EQ(w.alignment(), 32u);

  EXPECT_EQ(w.set_version(1).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(w.set_version(4).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(w.version(), 3u);
  EXPECT_TRUE(w.set_version(2).is_ok());
  EXPECT_EQ(w.version(), 2u);

  Array a = make_array(std::vector<int32_t>{1, 2, 3});
  a.count = 4;  // disagrees with its bytes
  EXPECT_NE(w.set("bad.count", a).message().find("raw bytes"), std::string::npos);
  Array s = make_array(std::vector<std::string>{"a"});
  s.count = 2;
  EXPECT_NE(w.set("bad.strings", s).message().find("does not match"), std::string::npos);
  Array b = make_array(std::vector<bool>{true});
  b.raw[0] = 2;
  EXPECT_NE(w.set("bad.bool", b).message().find("not 0 or 1"), std::string::npos);
  Array t;
  t.elem_type = static_cast<ValueType>(13);
  EXPECT_NE(w.set("bad.type", t).message().find("unknown array element type 13"), std::string::npos);

  // Nesting: kMaxArrayNesting levels are accepted (and read back), one more is refused.
  Array deep = make_array(std::vector<uint8_t>{9});
  for (int depth = 1; depth < kMaxArrayNesting; ++depth) deep = make_array(std::vector<Array>{deep});
  ASSERT_TRUE(w.set("deep.ok", deep).is_ok());
  Array deeper = make_array(std::vector<Array>{deep});
  EXPECT_NE(w.set("deep.bad", deeper).message().find("nested deeper"), std::string::npos);
  GgufFile f = parse(w.to_bytes());
  EXPECT_EQ(f.version(), 2u);
  const Array* d = f.get_array("deep.ok").value();
  for (int depth = 1; depth < kMaxArrayNesting; ++depth) d = &d->arrays.at(0);
  EXPECT_EQ(d->int_at(0), 9);
}

TEST(GgufWriter, TensorValidation) {
  GgufWriter w;
  const auto f32x8 = as_bytes(std::vector<float>(8, 1.0f));
  ASSERT_TRUE(w.add_tensor("t", TensorType::F32, {8}, f32x8).is_ok());
  auto msg = [&](const Status& s) {
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
    return s.message();
  };
  EXPECT_NE(msg(w.add_tensor("t", TensorType::F32, {8}, f32x8)).find("duplicate tensor name 't'"), std::string::npos);
  EXPECT_NE(msg(w.add_tensor("u", TensorType::F32, {4}, f32x8)).find("needs 16"), std::string::npos);
  EXPECT_NE(msg(w.add_tensor("u", TensorType::F32, {}, f32x8)).find("0 dimensions"), std::string::npos);
  EXPECT_NE(msg(w.add_tensor("u", TensorType::F32, {1, 1, 1, 1, 8}, f32x8)).find("5 dimensions"), std::string::npos);
  EXPECT_NE(msg(w.add_tensor("u", TensorType::F32, {8, 0}, f32x8)).find("invalid dimension 0"), std::string::npos);
  EXPECT_NE(msg(w.add_tensor("u", TensorType::F32, {-8}, f32x8)).find("invalid dimension -8"), std::string::npos);
  EXPECT_NE(msg(w.add_tensor("u", TensorType::F32, {int64_t(1) << 32, int64_t(1) << 32}, f32x8)).find("invalid dimension"),
            std::string::npos);
  EXPECT_NE(msg(w.add_tensor("u", TensorType::Q4_0, {16}, pattern_bytes(9, 0))).find("block size 32"), std::string::npos);
  EXPECT_NE(msg(w.add_tensor("u", static_cast<TensorType>(4), {8}, f32x8)).find("unknown tensor type id 4"),
            std::string::npos);
  EXPECT_NE(msg(w.add_tensor(std::string(64, 'n'), TensorType::F32, {8}, f32x8)).find("name is 64 bytes"),
            std::string::npos);
  EXPECT_TRUE(w.add_tensor(std::string(63, 'n'), TensorType::F32, {8}, f32x8).is_ok());
  EXPECT_EQ(w.tensor_count(), 2u);
  EXPECT_TRUE(w.remove_tensor("t"));
  EXPECT_FALSE(w.remove_tensor("t"));
  EXPECT_TRUE(w.add_tensor("t", TensorType::Q8_0, {64}, pattern_bytes(68, 1)).is_ok());
  GgufFile f = parse(w.to_bytes());
  ASSERT_EQ(f.tensors().size(), 2u);
  EXPECT_EQ(f.tensors()[1].name, "t");
  EXPECT_EQ(f.tensors()[1].type, TensorType::Q8_0);
}

TEST(GgufWriter, CopiesSurviveTheOriginal) {
  std::vector<uint8_t> image;
  {
    GgufWriter a = make_small_writer();
    GgufWriter b = a;  // b's tensor data must not point into a
    a = GgufWriter();
    image = b.to_bytes();
  }
  EXPECT_EQ(image, testing::make_small_image());
}

TEST(GgufWriter, FromFileStories260KRoundTrip) {
  const std::string src = test::shared_path("models/stories260K.gguf");
  auto orig = GgufFile::open(src);
  ASSERT_TRUE(orig) << orig.status().message();
  auto w = GgufWriter::from_file(*orig);
  ASSERT_TRUE(w) << w.status().message();
  EXPECT_EQ(w->version(), 3u);
  EXPECT_EQ(w->tensor_count(), 48u);

  const std::vector<uint8_t> image = w->to_bytes();
  GgufFile copy = parse(image);
  expect_same_content(*orig, copy);
  EXPECT_EQ(copy.data_offset(), orig->data_offset());
  for (size_t i = 0; i < copy.tensors().size(); ++i) {
    EXPECT_EQ(copy.tensors()[i].offset, orig->tensors()[i].offset) << copy.tensors()[i].name;
  }
  // The file follows the same layout rules, so the copy is byte-identical.
  EXPECT_EQ(image, test::read_file(src));

  // Through a file, after the source is gone; then modified the way tests patch real models.
  const std::string path = temp_path("stories_copy");
  {
    GgufWriter w2 = std::move(w).value();
    orig = Status(StatusCode::kInternal, "dropped");  // the writer keeps the mapping alive
    ASSERT_TRUE(w2.remove("llama.block_count"));
    ASSERT_TRUE(w2.set_u32("llama.block_count", 4).is_ok());
    ASSERT_TRUE(w2.remove_tensor("blk.4.ffn_up.weight"));
    ASSERT_TRUE(w2.write_file(path).is_ok());
  }
  auto mod = GgufFile::open(path);
  ASSERT_TRUE(mod) << mod.status().message();
  EXPECT_EQ(mod->get_int("llama.block_count").value(), 4);
  EXPECT_EQ(mod->tensors().size(), 47u);
  EXPECT_EQ(mod->find_tensor("blk.4.ffn_up.weight"), nullptr);
  const TensorInfo* emb = mod->find_tensor("token_embd.weight");
  const TensorInfo* emb0 = copy.find_tensor("token_embd.weight");
  ASSERT_NE(emb, nullptr);
  EXPECT_EQ(std::memcmp(emb->data, emb0->data, emb0->nbytes), 0);
  fs::remove(path);
}

TEST(GgufWriter, FromFileRefusesWhatItCannotWrite) {
  // The reader tolerates a u64 general.alignment; llama.cpp and this writer insist on u32.
  testing::RawGguf r;
  r.header(1, 1).key("general.alignment", ValueType::kUint64).u64(64).tensor_info("w", {8}, 0, 0).pad_to(64).zeros(32);
  GgufFile f = parse(r.bytes);
  EXPECT_EQ(f.alignment(), 64u);
  auto w = GgufWriter::from_file(f);
  ASSERT_FALSE(w);
  EXPECT_NE(w.status().message().find("general.alignment must be a u32"), std::string::npos);
}

TEST(GgufWriter, FromFileOtherModels) {
  for (const char* rel : {"models/llama-2-tiny-random.gguf", "models/synth-llama-tiny-q4_0.gguf"}) {
    auto orig = GgufFile::open(test::shared_path(rel));
    ASSERT_TRUE(orig) << orig.status().message();
    auto w = GgufWriter::from_file(*orig);
    ASSERT_TRUE(w) << w.status().message();
    GgufFile copy = parse(w->to_bytes());
    expect_same_content(*orig, copy);
  }
}

}  // namespace
}  // namespace loom::gguf
