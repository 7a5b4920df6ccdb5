// `loom quantize` against real llama-quantize, whole files by SHA-256 (issue 27 item 3):
//
//  - every line of tests/data/quant-golden/SHA256SUMS (tools/dev/make-quant-goldens.sh: the kq
//    source model quantized by llama-quantize [--pure] --imatrix kq-imatrix.gguf to each IQ1/IQ2/
//    IQ3 mix, TQ1_0, TQ2_0, MXFP4_MOE, Q1_0, Q2_0) is made by `loom quantize --llama-order` with
//    the same arguments, run in that folder so that quantize.imatrix.file holds the same relative
//    path, and must have the same digest. The files are written to $LOOM_QUANT_GOLDEN_DIR when
//    set (and kept there: tests/model/test_quant_golden_new.cpp computes with them; a file whose
//    digest differs is removed), else to a scratch folder. CTest runs these tests with that
//    variable set as the setup of the fixture quant_golden_files (tests/model/CMakeLists.txt);
//  - the flags (--output-tensor-type, --token-embedding-type, --leave-output-tensor,
//    --include-weights, --exclude-weights, Q2_K_S, the has-imatrix rules of Q4_0 / Q4_K_M, a
//    type without an imatrix) against digests of llama-quantize's files made the same way;
//  - the legacy .dat imatrix: stories260K (rows of 64) with tests/data/imatrix's .dat and .gguf
//    files, each against llama-quantize's digest; the two give the same tensors (as in
//    llama-quantize) and differ only in quantize.imatrix.file;
//  - llama-quantize's refusals (no imatrix for a type that needs one, and the --pure runs where
//    llama-quantize aborts in ggml) exit 1 with one line and write nothing.
#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "gguf/gguf.h"
#include "test_util.h"

namespace loom::model {
namespace {

namespace fs = std::filesystem;
using loom::test::quote;
using loom::test::run_loom;
using loom::test::shared_path;

// ---- SHA-256 (FIPS 180-4) ----

std::string sha256_hex(const std::vector<uint8_t>& msg) {
  static constexpr uint32_t k[64] = {
      0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5, 0xd807aa98, 0x12835b01,
      0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174, 0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc,
      0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da, 0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147,
      0x06ca6351, 0x14292967, 0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
      0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070, 0x19a4c116, 0x1e376c08,
      0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3, 0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208,
      0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2};
  uint32_t h[8] = {0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a, 0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19};
  const auto rotr = [](uint32_t x, int n) { return (x >> n) | (x << (32 - n)); };
  std::vector<uint8_t> m = msg;
  const uint64_t bits = uint64_t(msg.size()) * 8;
  m.push_back(0x80);
  while (m.size() % 64 != 56) m.push_back(0);
  for (int i = 7; i >= 0; --i) m.push_back(uint8_t(bits >> (8 * i)));
  for (size_t off = 0; off < m.size(); off += 64) {
    uint32_t w[64];
    for (int i = 0; i < 16; ++i) {
      w[i] = uint32_t(m[off + 4 * i]) << 24 | uint32_t(m[off + 4 * i + 1]) << 16 | uint32_t(m[off + 4 * i + 2]) << 8 |
             uint32_t(m[off + 4 * i + 3]);
    }
    for (int i = 16; i < 64; ++i) {
      const uint32_t s0 = rotr(w[i - 15], 7) ^ rotr(w[i - 15], 18) ^ (w[i - 15] >> 3);
      const uint32_t s1 = rotr(w[i - 2], 17) ^ rotr(w[i - 2], 19) ^ (w[i - 2] >> 10);
      w[i] = w[i - 16] + s0 + w[i - 7] + s1;
    }
    uint32_t a = h[0], b = h[1], c = h[2], d = h[3], e = h[4], f = h[5], g = h[6], hh = h[7];
    for (int i = 0; i < 64; ++i) {
      const uint32_t t1 = hh + (rotr(e, 6) ^ rotr(e, 11) ^ rotr(e, 25)) + ((e & f) ^ (~e & g)) + k[i] + w[i];
      const uint32_t t2 = (rotr(a, 2) ^ rotr(a, 13) ^ rotr(a, 22)) + ((a & b) ^ (a & c) ^ (b & c));
      hh = g;
      g = f;
      f = e;
      e = d + t1;
      d = c;
      c = b;
      b = a;
      a = t1 + t2;
    }
    h[0] += a;
    h[1] += b;
    h[2] += c;
    h[3] += d;
    h[4] += e;
    h[5] += f;
    h[6] += g;
    h[7] += hh;
  }
  static constexpr char kHex[] = "0123456789abcdef";
  std::string s;
  for (uint32_t v : h) {
    for (int i = 7; i >= 0; --i) s += kHex[(v >> (4 * i)) & 15];
  }
  return s;
}

TEST(QuantizeGoldensSha256, KnownAnswers) {
  EXPECT_EQ(sha256_hex({}), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  const std::string abc = "abc";
  EXPECT_EQ(sha256_hex(std::vector<uint8_t>(abc.begin(), abc.end())),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  const std::string two = "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq";  // 56 bytes: two blocks
  EXPECT_EQ(sha256_hex(std::vector<uint8_t>(two.begin(), two.end())),
            "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
}

// ---- helpers ----

std::string golden_dir() { return std::string(LOOM_SOURCE_DIR) + "/tests/data/quant-golden"; }
std::string imatrix_dir() { return std::string(LOOM_SOURCE_DIR) + "/tests/data/imatrix"; }

// Runs `loom ARGS` with the working directory `dir` (relative --imatrix paths as llama-quantize
// was given them: they end up in quantize.imatrix.file).
test::RunResult run_in(const std::string& dir, const std::string& args) {
  const fs::path old = fs::current_path();
  fs::current_path(dir);
  test::RunResult r = run_loom(args);
  fs::current_path(old);
  return r;
}

// A scratch folder removed when the program ends.
const fs::path& scratch_dir() { return test::scratch_dir("loom_quantize_goldens"); }

// Where the SHA256SUMS files go: $LOOM_QUANT_GOLDEN_DIR (kept) or the scratch folder.
fs::path output_dir() {
  if (const char* env = std::getenv("LOOM_QUANT_GOLDEN_DIR"); env && *env) {
    fs::create_directories(env);
    return fs::path(env);
  }
  return scratch_dir();
}

std::string file_digest(const std::string& path) { return sha256_hex(test::read_file(path)); }

// ---- SHA256SUMS ----

struct Golden {
  std::string digest;
  std::string file;  // kq-<t>-<mix|pure>.gguf
  std::string type;  // "IQ2_M"
  bool pure = false;
};
void PrintTo(const Golden& g, std::ostream* os) { *os << g.file; }

std::vector<Golden> read_sums() {
  std::vector<Golden> v;
  std::ifstream f(golden_dir() + "/SHA256SUMS");
  std::string digest, file;
  while (f >> digest >> file) {
    Golden g;
    g.digest = digest;
    g.file = file;
    // kq-<t>-<variant>.gguf
    const std::string stem = file.substr(3, file.size() - 3 - 5);
    const size_t dash = stem.rfind('-');
    g.type = stem.substr(0, dash);
    for (char& c : g.type) c = char(std::toupper(static_cast<unsigned char>(c)));
    g.pure = stem.substr(dash + 1) == "pure";
    v.push_back(g);
  }
  return v;
}

TEST(QuantizeGoldens, SumsListTheIssueTypes) {
  const auto sums = read_sums();
  EXPECT_EQ(sums.size(), 26u);  // 15 types x {mix, pure}, less the 4 --pure runs llama-quantize aborts
}

class QuantizeGoldensSums : public ::testing::TestWithParam<Golden> {};

TEST_P(QuantizeGoldensSums, SameDigestAsLlamaQuantize) {
  const Golden& g = GetParam();
  const std::string src = shared_path("golden/kq/synth-llama-kq-f32.gguf");
  ASSERT_FALSE(src.empty());
  const fs::path out = output_dir() / g.file;
  std::error_code ec;
  fs::remove(out, ec);
  const auto r =
      run_in(golden_dir(), std::string("quantize -q --llama-order -t 2 --imatrix kq-imatrix.gguf") +
                               (g.pure ? " --pure " : " ") + quote(src) + " " + quote(out.string()) + " " + g.type);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::string got = file_digest(out.string());
  EXPECT_EQ(got, g.digest) << g.file << " differs from llama-quantize's";
  if (got != g.digest) fs::remove(out, ec);  // never hand a wrong file to the golden-logits test
}

INSTANTIATE_TEST_SUITE_P(All, QuantizeGoldensSums, ::testing::ValuesIn(read_sums()),
                         [](const auto& info) { return test::param_name(info.param.file); });

// ---- flags, against llama-quantize's digests (same arguments, in tests/data/quant-golden) ----

struct FlagCase {
  const char* name;
  const char* args;  // before IN OUT TYPE
  const char* type;
  const char* digest;
};
void PrintTo(const FlagCase& c, std::ostream* os) { *os << c.name; }

const FlagCase kFlagCases[] = {
    {"iq3_s_tensor_types", "--imatrix kq-imatrix.gguf --output-tensor-type q8_0 --token-embedding-type q4_k", "IQ3_S",
     "f6fcd70bd981045fed79513bf489722c6fe7209325e6355cc0dafaff67f2b000"},
    {"q4_k_m_leave_output", "--leave-output-tensor", "Q4_K_M",
     "2d0ddd0f3643fb8ea0ce304c17bcdde3bdf87ec6662d012080d063dd486ef236"},
    {"q4_0_exclude_weights", "--imatrix kq-imatrix.gguf --exclude-weights ffn_down", "Q4_0",
     "27fa7f8d22029073ca307739302c59e12e6ecb31eccc121f14ae48fc0d2e2060"},
    {"iq4_xs_include_weights", "--imatrix kq-imatrix.gguf --include-weights attn", "IQ4_XS",
     "78249480b394874d765ea22aa13f5664d4804345a30ef84ba7ad5769e36fbd09"},
    {"q2_k_s", "--imatrix kq-imatrix.gguf", "Q2_K_S", "861454904aca026d14db27b4bd02fb50d4bd62cd6633b5315d7a954c11600fdb"},
    {"q4_k_m_imatrix", "--imatrix kq-imatrix.gguf", "Q4_K_M",
     "6d395beddb64e86c729a44ca1f2a268a4732f5cecf0c709b707d2be6d0b89b3c"},
    {"tq1_0_no_imatrix", "", "TQ1_0", "06d709c1219685f893576f7af3f1973aee50473c7f2d833ffac15e3311b46b4a"},
};

class QuantizeGoldensFlags : public ::testing::TestWithParam<FlagCase> {};

TEST_P(QuantizeGoldensFlags, SameDigestAsLlamaQuantize) {
  const FlagCase& c = GetParam();
  const std::string src = shared_path("golden/kq/synth-llama-kq-f32.gguf");
  ASSERT_FALSE(src.empty());
  const fs::path out = scratch_dir() / (std::string("flags-") + c.name + ".gguf");
  const auto r = run_in(golden_dir(), std::string("quantize -q --llama-order -t 2 ") + c.args + " " + quote(src) + " " +
                                          quote(out.string()) + " " + c.type);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(file_digest(out.string()), c.digest) << c.name;
}

INSTANTIATE_TEST_SUITE_P(All, QuantizeGoldensFlags, ::testing::ValuesIn(kFlagCases),
                         [](const auto& info) { return std::string(info.param.name); });

// ---- the legacy .dat imatrix (stories260K, rows of 64) ----

struct DatCase {
  const char* type;
  const char* gguf_digest;  // llama-quantize --imatrix stories260K-imatrix.gguf
  const char* dat_digest;   // llama-quantize --imatrix stories260K-imatrix.dat
};
void PrintTo(const DatCase& c, std::ostream* os) { *os << c.type; }

const DatCase kDatCases[] = {
    {"Q4_0", "895abf027400e1edcb2bf66637013d0a6d81fb53cc0e97848727877fb604fbb8",
     "43ce983649adda35f2ac111dbe808d98ac6aa0e9d65d9678c7e99f3b770ecfb4"},
    {"Q5_1", "61c51e383a5c2f074269a9bdba474f6cbeabb2b1bd170bcf8ee8793de3c7a52e",
     "65eb9c3b886440c349ff5899d12ba0ff68fd9ba1a10c03cade5cfa227c7ff197"},
    {"IQ4_NL", "5fa1d4bd4e086a10a2510380136a54728487a4f08ac61028a118e1d15f2e08b0",
     "6368a4dbbc9d9d5c4b12fb2838a019d245475b86c378b2dcfe91927d760c5189"},
    {"Q4_K_M", "8fa58e889c0a2a4e2e21fab7517eaca66dd93a65a90612bdbd604db0ed42f060",
     "3986309fe6e6150fbce93e730ec1a988ed3e753d23b3315fb2715e2a06c82f9b"},
    {"IQ2_XXS", "bfa1d7dc2eb6cd0950d6a9afd0b8b6acb3cdccbcb6560c8fc18727ee32f1e927",
     "9a1c29a33212a35d7ad7b619643e46bc14434f36ecba69f23a8515b4fdddc1e9"},
    {"IQ3_M", "483b99795ce99149332e999d6180b2a96775227de88bebb17b05c986808d3722",
     "6d2c2d7b8169a8ab8ab0c17468e27bf5da8794fe082198304611d994bb8edc6e"},
    {"Q2_0", "49d5cc5829a7de53c7a437bd542d2057a826657047623fdba6ce20ef2f0f8839",
     "609686691884aee7ea434151525475934534b9cf4b03146163a460ae80249c09"},
    {"Q8_0", "ebe0686273e3bf14b06d45f071e6b4f86dbffe930a8d4ca090426db088f246f1",
     "ddcaad38ea15609e937f6a4898a8cf281eb0f0845f212243e46a5c530893417c"},
};

class QuantizeGoldensLegacyDat : public ::testing::TestWithParam<DatCase> {};

TEST_P(QuantizeGoldensLegacyDat, DatAndGgufGiveLlamaQuantizesFiles) {
  const DatCase& c = GetParam();
  const std::string src = shared_path("models/stories260K.gguf");
  ASSERT_FALSE(src.empty());
  std::string paths[2];
  for (int k = 0; k < 2; ++k) {
    const std::string fmt = k == 0 ? "gguf" : "dat";
    paths[k] = (scratch_dir() / (std::string("stories-") + c.type + "-" + fmt + ".gguf")).string();
    const auto r = run_in(imatrix_dir(), "quantize -q --llama-order -t 2 --imatrix stories260K-imatrix." + fmt + " " +
                                             quote(src) + " " + quote(paths[k]) + " " + c.type);
    ASSERT_EQ(r.exit_code, 0) << fmt << ": " << r.err;
    EXPECT_EQ(file_digest(paths[k]), k == 0 ? c.gguf_digest : c.dat_digest) << c.type << " with the " << fmt << " imatrix";
  }
  auto a = gguf::GgufFile::open(paths[0]);
  auto b = gguf::GgufFile::open(paths[1]);
  ASSERT_TRUE(a.has_value() && b.has_value());
  ASSERT_EQ(a->tensors().size(), b->tensors().size());
  for (size_t i = 0; i < a->tensors().size(); ++i) {
    const auto& ta = a->tensors()[i];
    const auto& tb = b->tensors()[i];
    EXPECT_EQ(ta.name, tb.name);
    EXPECT_EQ(ta.type, tb.type) << ta.name;
    ASSERT_EQ(ta.nbytes, tb.nbytes) << ta.name;
    EXPECT_EQ(std::memcmp(ta.data, tb.data, size_t(ta.nbytes)), 0) << c.type << " " << ta.name;
  }
  ASSERT_EQ(a->metadata().size(), b->metadata().size());
  for (size_t i = 0; i < a->metadata().size(); ++i) {
    const auto& ka = a->metadata()[i];
    ASSERT_EQ(ka.key, b->metadata()[i].key);
    const std::string va = gguf::to_string(ka.value, 1u << 20), vb = gguf::to_string(b->metadata()[i].value, 1u << 20);
    if (ka.key == "quantize.imatrix.file") {
      EXPECT_NE(va.find("stories260K-imatrix.gguf"), std::string::npos) << va;
      EXPECT_NE(vb.find("stories260K-imatrix.dat"), std::string::npos) << vb;
    } else {
      EXPECT_EQ(va, vb) << ka.key;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(All, QuantizeGoldensLegacyDat, ::testing::ValuesIn(kDatCases),
                         [](const auto& info) { return std::string(info.param.type); });

// ---- refusals ----

TEST(QuantizeGoldens, RefusalsExitWithOneLineAndNoOutput) {
  const std::string src = shared_path("golden/kq/synth-llama-kq-f32.gguf");
  ASSERT_FALSE(src.empty());
  const fs::path dir = scratch_dir() / "refusals";
  fs::create_directories(dir);
  const std::string out = (dir / "out.gguf").string();
  struct Case {
    std::string args;
    std::string needle;
  };
  const std::string io = " " + quote(src) + " " + quote(out) + " ";
  const Case cases[] = {
      // llama-quantize: "this quantization requires an imatrix!"
      {"quantize" + io + "IQ2_XXS", "requires an importance matrix"},
      {"quantize" + io + "IQ1_M", "requires an importance matrix"},
      {"quantize" + io + "IQ3_XXS", "requires an importance matrix"},
      {"quantize" + io + "Q2_K_S", "requires an importance matrix"},
      {"quantize --pure" + io + "IQ3_XXS", "requires an importance matrix"},
      // llama-quantize aborts in ggml: token_embd / output.weight have no imatrix entry.
      {"quantize --pure --imatrix kq-imatrix.gguf" + io + "IQ2_XXS", "token_embd.weight"},
      {"quantize --pure --imatrix kq-imatrix.gguf" + io + "IQ1_S", "token_embd.weight"},
      {"quantize --pure --imatrix kq-imatrix.gguf" + io + "IQ2_XS", "token_embd.weight"},
      {"quantize --pure --imatrix kq-imatrix.gguf" + io + "IQ2_S", "token_embd.weight"},
      {"quantize --pure --imatrix kq-imatrix.gguf --token-embedding-type q4_k" + io + "IQ2_XXS", "output.weight"},
      // Bad flags.
      {"quantize --imatrix no-such-imatrix.gguf" + io + "IQ2_XXS", "no-such-imatrix.gguf"},
      {"quantize --imatrix kq-imatrix.gguf --include-weights attn --exclude-weights ffn" + io + "Q4_0",
       "cannot be used together"},
      {"quantize --exclude-weights ffn" + io + "Q4_0", "need an imatrix"},
      {"quantize --output-tensor-type q9_9" + io + "Q4_0", "q9_9"},
      {"quantize --token-embedding-type q8_1" + io + "Q4_0", "q8_1"},
  };
  for (const Case& c : cases) {
    const auto r = run_in(golden_dir(), c.args);
    EXPECT_EQ(r.exit_code, 1) << c.args << "\n" << r.err;
    EXPECT_EQ(r.err.rfind("loom: ", 0), 0u) << c.args << "\n" << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << c.args << "\n" << r.err;
    EXPECT_NE(r.err.find(c.needle), std::string::npos) << c.args << "\n" << r.err;
    EXPECT_FALSE(fs::exists(out)) << c.args;
    EXPECT_TRUE(fs::is_empty(dir)) << c.args;
  }
}

}  // namespace
}  // namespace loom::model
