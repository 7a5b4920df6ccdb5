// Robustness of the GGUF reader against malformed input: every truncation, a catalogue of corrupted
// headers, and deterministic random mutation. Also built with ASan+UBSan (test_gguf_fuzz_asan), where
// any out-of-bounds read or undefined behaviour in the reader aborts the test.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "gguf/gguf.h"
#include "gguf/gguf_writer.h"
#include "gguf_test_images.h"
#include "test_util.h"

namespace loom::gguf {
namespace {

using testing::make_small_image;
using testing::RawGguf;

constexpr uint32_t kU8 = static_cast<uint32_t>(ValueType::kUint8);
constexpr uint32_t kU32 = static_cast<uint32_t>(ValueType::kUint32);
constexpr uint32_t kStr = static_cast<uint32_t>(ValueType::kString);
constexpr uint32_t kArr = static_cast<uint32_t>(ValueType::kArray);
constexpr uint32_t kBoolT = static_cast<uint32_t>(ValueType::kBool);
constexpr uint32_t kF32 = 0;  // tensor type ids
constexpr uint32_t kQ4_0 = 2;

bool mentions_position(const std::string& m) {
  return m.find("offset") != std::string::npos || m.find("truncated") != std::string::npos ||
         m.find("past the end") != std::string::npos;
}

// Parses every proper prefix of `image` whose length is produced by `lengths`, expecting a refusal
// that says where the data ran out. Returns the number of prefixes tried.
template <typename Lengths>
size_t expect_truncations_refused(const std::vector<uint8_t>& image, Lengths lengths) {
  size_t tried = 0, failures = 0;
  lengths([&](size_t len) {
    ++tried;
    auto f = GgufFile::from_bytes(std::span<const uint8_t>(image.data(), len));
    if (f) {
      if (++failures <= 5) ADD_FAILURE() << "prefix of " << len << " bytes was accepted";
    } else if (!mentions_position(f.status().message())) {
      if (++failures <= 5) ADD_FAILURE() << "prefix of " << len << ": " << f.status().message();
    }
  });
  EXPECT_EQ(failures, 0u);
  return tried;
}

TEST(GgufFuzz, EveryTruncationOfSmallImage) {
  for (uint32_t version : {2u, 3u}) {
    const std::vector<uint8_t> image = make_small_image(version);
    ASSERT_TRUE(GgufFile::from_bytes(image)) << "the full image must parse";
    const size_t n = expect_truncations_refused(image, [&](auto&& f) {
      for (size_t len = 0; len < image.size(); ++len) f(len);
    });
    EXPECT_EQ(n, image.size());
  }
}

TEST(GgufFuzz, TruncationsOfStories260K) {
  const std::vector<uint8_t> image = test::read_file(test::shared_path("models/stories260K.gguf"));
  ASSERT_EQ(image.size(), 1185504u);
  ASSERT_TRUE(GgufFile::from_bytes(image));
  // Every length through the header (14289 bytes) and on to 64 KiB, then a stride through the rest
  // (all those prefixes fail the same final bounds check). Under ASan each prefix past the header
  // costs a full, slow header parse, so 16..64 KiB is strided there to keep the run short.
#ifdef LOOM_GGUF_FUZZ_ASAN
  const size_t stride_16k_64k = 7;
#else
  const size_t stride_16k_64k = 1;
#endif
  const size_t n = expect_truncations_refused(image, [&](auto&& f) {
    for (size_t len = 0; len < 16 * 1024; ++len) f(len);
    for (size_t len = 16 * 1024; len < 64 * 1024; len += stride_16k_64k) f(len);
    for (size_t len = 64 * 1024; len < image.size(); len += 4093) f(len);
    // The very last bytes matter most: a one-byte-short file must not pass.
    for (size_t len = image.size() - 64; len < image.size(); ++len) f(len);
  });
  EXPECT_GT(n, 16 * 1024u);
}

// ---- corrupted headers ----

void expect_refused(const std::vector<uint8_t>& bytes, const std::string& needle, StatusCode code = StatusCode::kCorrupt) {
  auto f = GgufFile::from_bytes(bytes);
  ASSERT_FALSE(f) << "accepted; expected an error mentioning \"" << needle << "\"";
  EXPECT_EQ(f.status().code(), code) << f.status().message();
  EXPECT_NE(f.status().message().find(needle), std::string::npos)
      << "message \"" << f.status().message() << "\" does not mention \"" << needle << "\"";
}

// One F32 tensor of 8 elements at offset 0, correctly padded: the base the tensor cases perturb.
std::vector<uint8_t> one_tensor(const std::vector<uint64_t>& ne, uint32_t type, uint64_t offset, size_t data_bytes = 32) {
  RawGguf r;
  r.header(1, 0).tensor_info("w", ne, type, offset).pad_to(32).zeros(data_bytes);
  return r.bytes;
}

TEST(GgufCorrupt, BaselinesParse) {
  ASSERT_TRUE(GgufFile::from_bytes(one_tensor({8}, kF32, 0)));
  RawGguf r;
  r.header(0, 1).key("a", ValueType::kUint32).u32(7);
  ASSERT_TRUE(GgufFile::from_bytes(r.bytes));
}

TEST(GgufCorrupt, Magic) {
  RawGguf r;
  r.u32(0x46554748).u32(3).u64(0).u64(0);
  expect_refused(r.bytes, "bad magic");
  std::vector<uint8_t> gguf_be = {'F', 'U', 'G', 'G', 0, 0, 0, 3};
  gguf_be.resize(24);
  expect_refused(gguf_be, "bad magic");
}

TEST(GgufCorrupt, Version) {
  for (uint32_t v : {0u, 4u, 0x03000000u, 0xFFFFFFFFu}) {
    RawGguf r;
    r.header(0, 0, v);
    expect_refused(r.bytes, "unknown GGUF version " + std::to_string(v));
  }
  RawGguf v1;
  v1.header(0, 0, 1);
  expect_refused(v1.bytes, "version 1", StatusCode::kUnsupported);
}

TEST(GgufCorrupt, HugeCounts) {
  for (uint64_t n : {uint64_t(1000), uint64_t(1) << 40, ~uint64_t(0)}) {
    RawGguf t;
    t.header(n, 0).zeros(64);
    expect_refused(t.bytes, "tensor count " + std::to_string(n));
    RawGguf k;
    k.header(0, n).zeros(64);
    expect_refused(k.bytes, "metadata count " + std::to_string(n));
  }
}

TEST(GgufCorrupt, HugeStringLengths) {
  RawGguf key;
  key.header(0, 1).u64(~uint64_t(0)).zeros(16);
  expect_refused(key.bytes, "metadata key length");
  RawGguf val;
  val.header(0, 1).key("s", ValueType::kString).u64(uint64_t(1) << 62).zeros(16);
  expect_refused(val.bytes, "string value length 4611686018427387904 runs past the end");
  RawGguf name;
  name.header(1, 0).u64(1000).zeros(40);
  expect_refused(name.bytes, "tensor name length 1000");
  RawGguf elem;
  elem.header(0, 1).key("a", ValueType::kArray).u32(kStr).u64(2).str("ok").u64(1u << 20).zeros(8);
  expect_refused(elem.bytes, "array string length");
}

TEST(GgufCorrupt, HugeArrayCounts) {
  for (uint32_t elem : {kU8, kU32, kStr, kArr, kBoolT}) {
    RawGguf r;
    r.header(0, 1).key("a", ValueType::kArray).u32(elem).u64(uint64_t(1) << 61).zeros(64);
    expect_refused(r.bytes, "array length 2305843009213693952");
  }
  // Nested: the inner count is checked against what remains too.
  RawGguf n;
  n.header(0, 1).key("a", ValueType::kArray).u32(kArr).u64(1).u32(kU32).u64(~uint64_t(0)).zeros(8);
  expect_refused(n.bytes, "array length");
}

TEST(GgufCorrupt, UnknownValueTypes) {
  for (uint32_t t : {13u, 100u, 0xFFFFFFFFu}) {
    RawGguf r;
    r.header(0, 1).str("k").u32(t).zeros(16);
    expect_refused(r.bytes, "unknown value type " + std::to_string(t) + " for key 'k'");
    RawGguf a;
    a.header(0, 1).key("k", ValueType::kArray).u32(t).u64(0);
    expect_refused(a.bytes, "unknown array element type " + std::to_string(t));
  }
}

TEST(GgufCorrupt, ArrayNesting) {
  auto nested = [](int levels) {
    RawGguf r;
    r.header(0, 1).key("deep", ValueType::kArray);
    for (int i = 1; i < levels; ++i) r.u32(kArr).u64(1);
    r.u32(kU8).u64(1).u8(42);
    return r.bytes;
  };
  auto ok = GgufFile::from_bytes(nested(kMaxArrayNesting));
  ASSERT_TRUE(ok) << ok.status().message();
  expect_refused(nested(kMaxArrayNesting + 1), "nested deeper than " + std::to_string(kMaxArrayNesting));
  // Far deeper nesting is refused at the limit, without recursing through it.
  expect_refused(nested(100000), "nested deeper");
}

TEST(GgufCorrupt, BoolValues) {
  RawGguf r;
  r.header(0, 1).key("b", ValueType::kBool).u8(2);
  expect_refused(r.bytes, "bool value 2 is not 0 or 1");
  RawGguf a;
  a.header(0, 1).key("b", ValueType::kArray).u32(kBoolT).u64(3).u8(1).u8(0).u8(255);
  expect_refused(a.bytes, "bool value 255");
}

TEST(GgufCorrupt, TensorDims) {
  RawGguf five;
  five.header(1, 0).tensor_info("w", {8, 1, 1, 1, 1}, kF32, 0).pad_to(32).zeros(32);
  expect_refused(five.bytes, "5 dimensions");
  RawGguf huge_ndims;
  huge_ndims.header(1, 0).str("w").u32(0xFFFFFFFF).zeros(64);
  expect_refused(huge_ndims.bytes, "4294967295 dimensions");
  expect_refused(one_tensor({8, 0}, kF32, 0), "invalid dimension 0");
  expect_refused(one_tensor({uint64_t(1) << 32, uint64_t(1) << 32}, kF32, 0), "invalid dimension 4294967296");
  expect_refused(one_tensor({uint64_t(1) << 63}, kF32, 0), "invalid dimension 9223372036854775808");
  expect_refused(one_tensor({3, 5, 7, uint64_t(1) << 60}, kF32, 0), "invalid dimension");
  // The element count fits int64 but its byte size does not fit uint64.
  expect_refused(one_tensor({uint64_t(1) << 31, uint64_t(1) << 31}, kF32, 0), "too large");
}

TEST(GgufCorrupt, TensorTypes) {
  for (uint32_t t : {4u, 5u, 31u, 43u, 1000u, 0xFFFFFFFFu}) {
    expect_refused(one_tensor({8}, t, 0), "unknown type id " + std::to_string(t));
  }
  expect_refused(one_tensor({16, 2}, kQ4_0, 0), "row length 16 is not a multiple of the q4_0 block size 32");
  expect_refused(one_tensor({8}, 12 /* q4_k */, 0), "q4_k block size 256");
}

TEST(GgufCorrupt, TensorOffsets) {
  expect_refused(one_tensor({8}, kF32, 4), "data offset 4 is not a multiple of the alignment 32");
  expect_refused(one_tensor({8}, kF32, 32), "runs past the end");
  expect_refused(one_tensor({8}, kF32, uint64_t(1) << 63), "runs past the end");
  expect_refused(one_tensor({9}, kF32, 0), "runs past the end");  // 36 bytes, 32 present
  // Tensor infos end, but the padding before the data section is missing.
  RawGguf r;
  r.header(1, 0).tensor_info("w", {8}, kF32, 0);
  expect_refused(r.bytes, "tensor data section starts at 64");
}

TEST(GgufCorrupt, Duplicates) {
  RawGguf t;
  t.header(2, 0).tensor_info("w", {8}, kF32, 0).tensor_info("w", {8}, kF32, 32).pad_to(32).zeros(64);
  expect_refused(t.bytes, "duplicate tensor name 'w'");
  RawGguf k;
  k.header(0, 2).key("a", ValueType::kUint32).u32(1).key("a", ValueType::kString).str("x");
  expect_refused(k.bytes, "duplicate metadata key 'a'");
}

TEST(GgufCorrupt, Alignment) {
  auto with_alignment = [](auto write_value) {
    RawGguf r;
    r.header(1, 1).str("general.alignment");
    write_value(r);
    r.tensor_info("w", {8}, kF32, 0).pad_to(64).zeros(32);
    return r.bytes;
  };
  expect_refused(with_alignment([](RawGguf& r) { r.u32(kU32).u32(0); }), "general.alignment must be a power of two, got 0");
  expect_refused(with_alignment([](RawGguf& r) { r.u32(kU32).u32(3); }), "general.alignment must be a power of two, got 3");
  expect_refused(with_alignment([](RawGguf& r) { r.u32(static_cast<uint32_t>(ValueType::kUint64)).u64(uint64_t(1) << 40); }),
                 "general.alignment must be a power of two");
  expect_refused(with_alignment([](RawGguf& r) { r.u32(static_cast<uint32_t>(ValueType::kInt32)).u32(uint32_t(-32)); }),
                 "general.alignment must be a power of two, got -32");
  expect_refused(with_alignment([](RawGguf& r) { r.u32(kStr).str("32"); }), "general.alignment has type string");
  expect_refused(with_alignment([](RawGguf& r) { r.u32(static_cast<uint32_t>(ValueType::kFloat32)).u32(0x42000000); }),
                 "general.alignment has type f32");
  // A valid alignment of 64 makes an offset of 32 misaligned.
  RawGguf r;
  r.header(1, 1).key("general.alignment", ValueType::kUint32).u32(64).tensor_info("w", {8}, kF32, 32).pad_to(64).zeros(96);
  expect_refused(r.bytes, "not a multiple of the alignment 64");
  auto ok = GgufFile::from_bytes(with_alignment([](RawGguf& r) { r.u32(kU32).u32(64); }));
  ASSERT_TRUE(ok) << ok.status().message();
  EXPECT_EQ(ok->alignment(), 64u);
  EXPECT_EQ(ok->data_offset(), 128u);
}

// ---- random mutation ----

// Parses a (possibly mangled) image and, when it is accepted, checks and reads everything the
// reader hands out: tensor ranges within the buffer and matching it, values renderable.
void check_parse(const std::vector<uint8_t>& bytes, int* n_ok) {
  auto f = GgufFile::from_bytes(bytes);
  if (!f) {
    EXPECT_FALSE(f.status().message().empty());
    return;
  }
  ++*n_ok;
  EXPECT_EQ(f->file_size(), bytes.size());
  for (const auto& t : f->tensors()) {
    ASSERT_LE(f->data_offset(), bytes.size());
    ASSERT_LE(t.offset, bytes.size() - f->data_offset()) << t.name;
    ASSERT_LE(t.nbytes, bytes.size() - f->data_offset() - t.offset) << t.name;
    EXPECT_EQ(t.offset % f->alignment(), 0u);
    EXPECT_EQ(int64_t(t.nbytes), row_bytes(t.type, t.ne[0]) * t.n_rows());
    // Touch every byte (ASan checks the pointer) and compare with where it should come from.
    EXPECT_EQ(std::memcmp(t.data, bytes.data() + f->data_offset() + t.offset, t.nbytes), 0) << t.name;
  }
  for (const auto& kv : f->metadata()) {
    (void)to_string(kv.value, 4);
    (void)f->get_int(kv.key);
    (void)f->get_uint(kv.key);
    (void)f->get_float(kv.key);
    if (const Array* a = std::get_if<Array>(&kv.value); a && a->is_numeric()) {
      for (uint64_t i = 0; i < a->count; ++i) {
        (void)a->number_at(i);
        (void)a->int_at(i);
      }
    }
  }
}

// Values that tend to hit limits when written over a length, count or type field.
constexpr uint64_t kInteresting[] = {0,
                                     1,
                                     2,
                                     7,
                                     8,
                                     9,
                                     12,
                                     13,
                                     31,
                                     32,
                                     33,
                                     0x7F,
                                     0x80,
                                     0xFF,
                                     0xFFFF,
                                     0xFFFFFFFF,
                                     0x100000000ull,
                                     0x7FFFFFFFFFFFFFFFull,
                                     0x8000000000000000ull,
                                     0xFFFFFFFFFFFFFFFFull};

void mutate(std::vector<uint8_t>& b, std::mt19937_64& rng, size_t region) {
  const int n = 1 + int(rng() % 4);
  for (int i = 0; i < n; ++i) {
    const size_t pos = rng() % region;
    switch (rng() % 4) {
      case 0: b[pos] = uint8_t(rng()); break;               // random byte
      case 1: b[pos] ^= uint8_t(1u << (rng() % 8)); break;  // bit flip
      case 2: {                                             // interesting u32 / u64
        const uint64_t v = kInteresting[rng() % std::size(kInteresting)];
        const size_t width = rng() % 2 ? 4 : 8;
        if (pos + width <= b.size()) std::memcpy(&b[pos], &v, width);
        break;
      }
      case 3: {  // small increment of a u64
        if (pos + 8 <= b.size()) {
          uint64_t v;
          std::memcpy(&v, &b[pos], 8);
          v += int64_t(rng() % 65) - 32;
          std::memcpy(&b[pos], &v, 8);
        }
        break;
      }
    }
  }
}

TEST(GgufFuzz, RandomMutationsOfSmallImage) {
  const std::vector<uint8_t> image = make_small_image();
  std::mt19937_64 rng(0x6767'7566);
  int n_ok = 0;
  constexpr int kIterations = 20000;
  for (int it = 0; it < kIterations; ++it) {
    std::vector<uint8_t> b = image;
    mutate(b, rng, b.size());
    if (it % 5 == 0) b.resize(rng() % (b.size() + 1));  // sometimes also truncated
    check_parse(b, &n_ok);
    if (::testing::Test::HasFatalFailure()) return;
  }
  // Both outcomes must be exercised: mutations of tensor data are accepted, most header ones not.
  EXPECT_GT(n_ok, 0);
  EXPECT_LT(n_ok, kIterations);
}

TEST(GgufFuzz, RandomMutationsOfStories260KHeader) {
  std::vector<uint8_t> image = test::read_file(test::shared_path("models/stories260K.gguf"));
  ASSERT_FALSE(image.empty());
  // Mutations confined to the header: lengths, counts, types, shapes and offsets of a real file.
  std::mt19937_64 rng(260);
  int n_ok = 0;
  for (int it = 0; it < 300; ++it) {
    std::vector<uint8_t> b = image;
    mutate(b, rng, 14304);  // the header and its padding
    check_parse(b, &n_ok);
    if (::testing::Test::HasFatalFailure()) return;
  }
  EXPECT_GT(n_ok, 0);
}

}  // namespace
}  // namespace loom::gguf
