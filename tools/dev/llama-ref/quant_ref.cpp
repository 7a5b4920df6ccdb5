// loom-quant-ref: ggml's own arithmetic for one block format, written to a binary file that loom's
// unit tests read (tests/data/quant-ref/). Not part of loom's build: build.sh beside this file
// compiles it against the static ggml libraries of ~/.cache/loom-llama-cpp.
//
// Usage:
//   loom-quant-ref bench [--n N] TYPE...
//       ns per block of ggml's CPU vec_dot (this build's kernel) for each TYPE: one weight row of
//       N elements (default 8192: the activations stay in L1, as in a matrix-vector product)
//       quantized by ggml from Gaussian values x 0.02, activations quantized to the vec_dot_type,
//       the best of 20 runs of >= 1 ms each. build/bin/loom_bench_quant_kernels times loom's
//       kernels (dispatch, sets, tiles).
//   loom-quant-ref TYPE SEED OUT [--n N] [--wrows W] [--arows K] [--weights random|quantize|FILE]
//                  [--qrows Q] [--qsrc FILE.f32] [--imatrix none|random|FILE.f32]
//
//   TYPE     a ggml type name as ggml_type_name spells it (q4_0, tq1_0, mxfp4, iq2_xxs, ...),
//            case-insensitive.
//   SEED     64-bit seed of every random choice (std::mt19937_64; the data are in the file, so
//            nothing needs to reproduce the generator).
//   --n      elements per row (default 256; a multiple of both block sizes).
//   --wrows  weight rows (default 8). --arows activation rows (default 3).
//   --weights random (default): each block is random bytes, redrawn (up to 1000 times) until
//            ggml's to_float of it is finite with every |x| <= 1e10 (so f16 scales are finite,
//            E8M0 exponents moderate); whatever else the bytes hold is kept as ggml decodes it.
//            quantize: ggml_quantize_chunk of random Gaussian rows (with the importance matrix
//            below when the type requires one). Any other value is a file of raw blocks (a
//            multiple of the row size; W is then its row count), e.g. blocks built to hold
//            every code of the format.
//   --qrows  rows of the quantizer section (default 0 = none): built-in patterns, row r uses
//            pattern r % 10 (see make_pattern_row: Gaussian, all zero, one huge value, tiny
//            values near the float denormal range, largest values whose f16 scales stay finite,
//            small integers with exact ties, constants, sparse, per-block scale sweep, uniform).
//   --qsrc   the quantizer section's rows from a raw little-endian f32 file instead (its size a
//            multiple of N floats; --qrows is then ignored).
//   --imatrix none (default unless ggml_quantize_requires_imatrix(TYPE), then random): the
//            importance matrix passed to ggml_quantize_chunk (N floats); random draws each in
//            (0.01, 10]; a file gives N raw f32.
//
// File layout (all little-endian, no padding between sections):
//   header, 16 x u32:
//     [0] magic 0x46525141 ("AQRF" as bytes 41 51 52 46)   [1] version = 1
//     [2] type (ggml type id)         [3] vec_dot_type (from ggml's CPU type traits)
//     [4] block size of type          [5] bytes per block of type
//     [6] block size of vec_dot_type  [7] bytes per block of vec_dot_type
//     [8] N, elements per row         [9] W, weight rows    [10] K, activation rows
//     [11] Q, quantizer rows (0 = no quantizer section)
//     [12] flags: bit 0 weights made by ggml_quantize_chunk; bit 3 weights read from a file
//          (neither: random bytes);
//          bit 1 the quantizer section has an importance matrix;
//          bit 2 dot_generic comes from ggml's separate *_generic scalar function (else it
//          repeats dot: this build's vec_dot is already the generic code, or there is none)
//     [13] seed low 32 bits   [14] seed high 32 bits   [15] 0
//   weights     W rows x N/blk blocks of type                    (W * row_size(type) bytes)
//   dequant     W x N f32: ggml_get_type_traits(type)->to_float of each weight row
//   act_f32     K x N f32: activation rows (Gaussian; row 1 scaled by 1e-3 with two outliers,
//               row 2 all zero when K > 2)
//   act_q       K rows of vec_dot_type: ggml_get_type_traits_cpu(vec_dot_type)->from_float
//   dot         K x W f32, row-major by activation: dot[k * W + w] = the CPU traits' vec_dot
//               (what llama.cpp runs on this machine) of weight row w with act_q row k
//   dot_generic K x W f32, the same from ggml's generic scalar vec_dot (see flag bit 2)
//   when Q > 0:
//     qsrc      Q x N f32: the quantizer's input rows
//     imatrix   N f32, only when flag bit 1
//     qout      Q rows of type: ggml_quantize_chunk(type, qsrc, ..., 0, Q, N, imatrix)
#include <ggml-cpu.h>
#include <ggml.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

// ggml's scalar dot products (ggml-cpu/quants.c). Declared weak: a build where an architecture
// has no kernel of its own renames the generic function to the plain name, leaving no *_generic
// symbol (the address is then null and dot_generic repeats dot).
#define LOOM_GENERIC_DOT(name)                                                                                    \
  extern "C" void name(int n, float* s, size_t bs, const void* vx, size_t bx, const void* vy, size_t by, int nrc) \
      __attribute__((weak));
LOOM_GENERIC_DOT(ggml_vec_dot_q1_0_q8_0_generic)
LOOM_GENERIC_DOT(ggml_vec_dot_q2_0_q8_0_generic)
LOOM_GENERIC_DOT(ggml_vec_dot_q4_0_q8_0_generic)
LOOM_GENERIC_DOT(ggml_vec_dot_q4_1_q8_1_generic)
LOOM_GENERIC_DOT(ggml_vec_dot_q5_0_q8_0_generic)
LOOM_GENERIC_DOT(ggml_vec_dot_q5_1_q8_1_generic)
LOOM_GENERIC_DOT(ggml_vec_dot_q8_0_q8_0_generic)
LOOM_GENERIC_DOT(ggml_vec_dot_mxfp4_q8_0_generic)
LOOM_GENERIC_DOT(ggml_vec_dot_nvfp4_q8_0_generic)
LOOM_GENERIC_DOT(ggml_vec_dot_q2_K_q8_K_generic)
LOOM_GENERIC_DOT(ggml_vec_dot_q3_K_q8_K_generic)
LOOM_GENERIC_DOT(ggml_vec_dot_q4_K_q8_K_generic)
LOOM_GENERIC_DOT(ggml_vec_dot_q5_K_q8_K_generic)
LOOM_GENERIC_DOT(ggml_vec_dot_q6_K_q8_K_generic)
LOOM_GENERIC_DOT(ggml_vec_dot_tq1_0_q8_K_generic)
LOOM_GENERIC_DOT(ggml_vec_dot_tq2_0_q8_K_generic)
LOOM_GENERIC_DOT(ggml_vec_dot_iq2_xxs_q8_K_generic)
LOOM_GENERIC_DOT(ggml_vec_dot_iq2_xs_q8_K_generic)
LOOM_GENERIC_DOT(ggml_vec_dot_iq2_s_q8_K_generic)
LOOM_GENERIC_DOT(ggml_vec_dot_iq3_xxs_q8_K_generic)
LOOM_GENERIC_DOT(ggml_vec_dot_iq3_s_q8_K_generic)
LOOM_GENERIC_DOT(ggml_vec_dot_iq1_s_q8_K_generic)
LOOM_GENERIC_DOT(ggml_vec_dot_iq1_m_q8_K_generic)
LOOM_GENERIC_DOT(ggml_vec_dot_iq4_nl_q8_0_generic)
LOOM_GENERIC_DOT(ggml_vec_dot_iq4_xs_q8_K_generic)

namespace {

using DotFn = void (*)(int, float*, size_t, const void*, size_t, const void*, size_t, int);

DotFn generic_dot(ggml_type t) {
  switch (t) {
    case GGML_TYPE_Q1_0: return ggml_vec_dot_q1_0_q8_0_generic;
    case GGML_TYPE_Q2_0: return ggml_vec_dot_q2_0_q8_0_generic;
    case GGML_TYPE_Q4_0: return ggml_vec_dot_q4_0_q8_0_generic;
    case GGML_TYPE_Q4_1: return ggml_vec_dot_q4_1_q8_1_generic;
    case GGML_TYPE_Q5_0: return ggml_vec_dot_q5_0_q8_0_generic;
    case GGML_TYPE_Q5_1: return ggml_vec_dot_q5_1_q8_1_generic;
    case GGML_TYPE_Q8_0: return ggml_vec_dot_q8_0_q8_0_generic;
    case GGML_TYPE_MXFP4: return ggml_vec_dot_mxfp4_q8_0_generic;
    case GGML_TYPE_NVFP4: return ggml_vec_dot_nvfp4_q8_0_generic;
    case GGML_TYPE_Q2_K: return ggml_vec_dot_q2_K_q8_K_generic;
    case GGML_TYPE_Q3_K: return ggml_vec_dot_q3_K_q8_K_generic;
    case GGML_TYPE_Q4_K: return ggml_vec_dot_q4_K_q8_K_generic;
    case GGML_TYPE_Q5_K: return ggml_vec_dot_q5_K_q8_K_generic;
    case GGML_TYPE_Q6_K: return ggml_vec_dot_q6_K_q8_K_generic;
    case GGML_TYPE_TQ1_0: return ggml_vec_dot_tq1_0_q8_K_generic;
    case GGML_TYPE_TQ2_0: return ggml_vec_dot_tq2_0_q8_K_generic;
    case GGML_TYPE_IQ2_XXS: return ggml_vec_dot_iq2_xxs_q8_K_generic;
    case GGML_TYPE_IQ2_XS: return ggml_vec_dot_iq2_xs_q8_K_generic;
    case GGML_TYPE_IQ2_S: return ggml_vec_dot_iq2_s_q8_K_generic;
    case GGML_TYPE_IQ3_XXS: return ggml_vec_dot_iq3_xxs_q8_K_generic;
    case GGML_TYPE_IQ3_S: return ggml_vec_dot_iq3_s_q8_K_generic;
    case GGML_TYPE_IQ1_S: return ggml_vec_dot_iq1_s_q8_K_generic;
    case GGML_TYPE_IQ1_M: return ggml_vec_dot_iq1_m_q8_K_generic;
    case GGML_TYPE_IQ4_NL: return ggml_vec_dot_iq4_nl_q8_0_generic;
    case GGML_TYPE_IQ4_XS: return ggml_vec_dot_iq4_xs_q8_K_generic;
    default: return nullptr;
  }
}

[[noreturn]] void die(const std::string& msg) {
  std::fprintf(stderr, "loom-quant-ref: %s\n", msg.c_str());
  std::exit(1);
}

std::vector<float> read_f32(const std::string& path) {
  FILE* f = std::fopen(path.c_str(), "rb");
  if (!f) die("cannot open " + path);
  std::vector<float> v;
  float buf[1024];
  size_t got;
  while ((got = std::fread(buf, 4, 1024, f)) > 0) v.insert(v.end(), buf, buf + got);
  std::fclose(f);
  return v;
}

ggml_type type_by_name(const std::string& name) {
  for (int t = 0; t < GGML_TYPE_COUNT; ++t) {
    const char* tn = ggml_type_name(ggml_type(t));
    if (!tn || ggml_blck_size(ggml_type(t)) == 0) continue;
    if (strcasecmp(tn, name.c_str()) == 0) return ggml_type(t);
  }
  die("unknown ggml type '" + name + "'");
}

// Pattern p of the quantizer section's rows (n elements). Values stay finite, and the largest
// magnitude is 6e4 so that formats storing the absolute maximum as f16 keep a finite scale.
void make_pattern_row(int p, std::mt19937_64& rng, float* x, int64_t n) {
  std::normal_distribution<float> gauss(0.0f, 1.0f);
  std::uniform_real_distribution<float> unif(-1.0f, 1.0f);
  switch (p) {
    case 0:  // Gaussian
      for (int64_t i = 0; i < n; ++i) x[i] = gauss(rng);
      break;
    case 1:  // all zero
      for (int64_t i = 0; i < n; ++i) x[i] = 0.0f;
      break;
    case 2: {  // Gaussian with one huge value (both signs over the rows)
      for (int64_t i = 0; i < n; ++i) x[i] = gauss(rng);
      const int64_t at = int64_t(rng() % uint64_t(n));
      x[at] = (rng() & 1) ? 3.0e4f : -3.0e4f;
      break;
    }
    case 3:  // tiny values near (and below) the smallest normal float
      for (int64_t i = 0; i < n; ++i) x[i] = gauss(rng) * 1.0e-38f;
      break;
    case 4: {  // large values, scaled so that max |x| = 6e4
      float amax = 0.0f;
      for (int64_t i = 0; i < n; ++i) {
        x[i] = gauss(rng);
        amax = std::max(amax, std::fabs(x[i]));
      }
      for (int64_t i = 0; i < n; ++i) x[i] = x[i] / amax * 6.0e4f;
      break;
    }
    case 5:  // small integers and halves: exact ties for every rounding step
      for (int64_t i = 0; i < n; ++i) x[i] = float(int(rng() % 33) - 16) * 0.5f;
      break;
    case 6: {  // a constant (sign by row)
      const float c = (rng() & 1) ? 0.75f : -0.75f;
      for (int64_t i = 0; i < n; ++i) x[i] = c;
      break;
    }
    case 7:  // sparse: mostly zero
      for (int64_t i = 0; i < n; ++i) x[i] = (rng() % 8 == 0) ? gauss(rng) : 0.0f;
      break;
    case 8:  // per-32-element scale sweeping 1e-4 .. 1e3
      for (int64_t i = 0; i < n; ++i) {
        const float s = std::pow(10.0f, float(int((i / 32) % 8)) - 4.0f);
        x[i] = gauss(rng) * s;
      }
      break;
    default:  // uniform in [-1, 1]
      for (int64_t i = 0; i < n; ++i) x[i] = unif(rng);
      break;
  }
}

void put(FILE* f, const void* p, size_t bytes) {
  if (bytes && std::fwrite(p, 1, bytes, f) != bytes) die("write failed");
}

int bench(int argc, char** argv) {
  int64_t n = 8192;
  std::vector<ggml_type> types;
  for (int i = 2; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--n" && i + 1 < argc) n = std::stoll(argv[++i]);
    else types.push_back(type_by_name(a));
  }
  ggml_cpu_init();
  for (ggml_type t : types) {
    const auto* ct = ggml_get_type_traits_cpu(t);
    if (!ct->vec_dot) die(std::string(ggml_type_name(t)) + " has no CPU vec_dot");
    const int64_t blk = ggml_blck_size(t);
    if (n % blk != 0 || n % ggml_blck_size(ct->vec_dot_type) != 0) die("--n is not a multiple of the block sizes");
    std::mt19937_64 rng(1);
    std::normal_distribution<float> g(0.0f, 1.0f);
    std::vector<float> x(static_cast<size_t>(n)), y(static_cast<size_t>(n));
    for (auto& v : x) v = g(rng) * 0.02f;
    for (auto& v : y) v = g(rng);
    std::vector<uint8_t> w(ggml_row_size(t, n)), a(ggml_row_size(ct->vec_dot_type, n));
    std::vector<float> im(size_t(n), 1.0f);
    ggml_quantize_chunk(t, x.data(), w.data(), 0, 1, n, ggml_quantize_requires_imatrix(t) ? im.data() : nullptr);
    ggml_get_type_traits_cpu(ct->vec_dot_type)->from_float(y.data(), a.data(), n);
    const int reps = int(std::max<int64_t>(10, 4000000 / n));
    double best = 1e30;
    volatile float sink = 0.0f;
    for (int r = 0; r < 20; ++r) {
      const auto t0 = std::chrono::steady_clock::now();
      for (int k = 0; k < reps; ++k) {
        float s = 0.0f;
        ct->vec_dot(int(n), &s, 0, w.data(), 0, a.data(), 0, 1);
        sink = sink + s;
      }
      const double ns = std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - t0).count();
      best = std::min(best, ns / (double(reps) * double(n / blk)));
    }
    std::printf("%-8s ggml %7.2f ns/block\n", ggml_type_name(t), best);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc >= 2 && std::string(argv[1]) == "bench") return bench(argc, argv);
  if (argc < 4) {
    std::fprintf(stderr,
                 "usage: loom-quant-ref TYPE SEED OUT [--n N] [--wrows W] [--arows K] "
                 "[--weights random|quantize|FILE] [--qrows Q] [--qsrc FILE.f32] "
                 "[--imatrix none|random|FILE.f32]\n       loom-quant-ref bench [--n N] TYPE...\n");
    return 2;
  }
  const ggml_type type = type_by_name(argv[1]);
  const uint64_t seed = std::strtoull(argv[2], nullptr, 0);
  const std::string out_path = argv[3];
  int64_t n = 256, wrows = 8, arows = 3, qrows = 0;
  std::string weights_mode = "random", qsrc_path, imatrix_arg;
  for (int i = 4; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) die("missing value after " + a);
      return argv[++i];
    };
    if (a == "--n") n = std::stoll(next());
    else if (a == "--wrows") wrows = std::stoll(next());
    else if (a == "--arows") arows = std::stoll(next());
    else if (a == "--weights") weights_mode = next();
    else if (a == "--qrows") qrows = std::stoll(next());
    else if (a == "--qsrc") qsrc_path = next();
    else if (a == "--imatrix") imatrix_arg = next();
    else die("unknown option " + a);
  }

  ggml_cpu_init();
  const auto* tr = ggml_get_type_traits(type);
  const auto* ctr = ggml_get_type_traits_cpu(type);
  if (!tr->to_float) die(std::string("type ") + argv[1] + " has no to_float");
  if (!ctr->vec_dot) die(std::string("type ") + argv[1] + " has no CPU vec_dot");
  const ggml_type vdt = ctr->vec_dot_type;
  const auto* vtr = ggml_get_type_traits_cpu(vdt);
  if (!vtr->from_float) die("vec_dot_type has no from_float");
  const int64_t blk = ggml_blck_size(type), vblk = ggml_blck_size(vdt);
  if (n <= 0 || n % blk != 0 || n % vblk != 0) {
    die("--n must be a positive multiple of " + std::to_string(blk) + " and " + std::to_string(vblk));
  }
  const size_t row_bytes = ggml_row_size(type, n), arow_bytes = ggml_row_size(vdt, n);
  const size_t blk_bytes = ggml_type_size(type);
  const bool needs_imatrix = ggml_quantize_requires_imatrix(type);
  if (imatrix_arg.empty()) imatrix_arg = needs_imatrix ? "random" : "none";

  std::mt19937_64 rng(seed);
  std::normal_distribution<float> gauss(0.0f, 1.0f);

  std::vector<float> imatrix;
  if (imatrix_arg == "random") {
    std::uniform_real_distribution<float> u(0.01f, 10.0f);
    imatrix.resize(size_t(n));
    for (auto& v : imatrix) v = u(rng);
  } else if (imatrix_arg != "none") {
    imatrix = read_f32(imatrix_arg);
    if (int64_t(imatrix.size()) != n) die("--imatrix file must hold N floats");
  }
  if (needs_imatrix && imatrix.empty()) die("this type needs an importance matrix");

  // Weights.
  std::vector<uint8_t> weights;
  const bool weights_file = weights_mode != "random" && weights_mode != "quantize";
  if (weights_file) {
    FILE* wf = std::fopen(weights_mode.c_str(), "rb");
    if (!wf) die("cannot open " + weights_mode);
    int c;
    while ((c = std::fgetc(wf)) != EOF) weights.push_back(uint8_t(c));
    std::fclose(wf);
    if (weights.empty() || weights.size() % row_bytes != 0) {
      die("--weights file size is not a multiple of the row size " + std::to_string(row_bytes));
    }
    wrows = int64_t(weights.size() / row_bytes);
  } else {
    weights.resize(row_bytes * size_t(wrows));
  }
  std::vector<float> dequant(size_t(n * wrows));
  if (weights_file) {
    // as given
  } else if (weights_mode == "random") {
    std::vector<float> tmp(static_cast<size_t>(blk));
    for (size_t b = 0; b < weights.size() / blk_bytes; ++b) {
      uint8_t* p = weights.data() + b * blk_bytes;
      bool ok = false;
      for (int attempt = 0; attempt < 1000 && !ok; ++attempt) {
        for (size_t j = 0; j < blk_bytes; ++j) p[j] = uint8_t(rng());
        tr->to_float(p, tmp.data(), blk);
        ok = true;
        for (float v : tmp) ok = ok && std::isfinite(v) && std::fabs(v) <= 1e10f;
      }
      if (!ok) die("no valid random block found in 1000 draws");
    }
  } else {
    std::vector<float> src(size_t(n * wrows));
    for (auto& v : src) v = gauss(rng);
    ggml_quantize_chunk(type, src.data(), weights.data(), 0, wrows, n, imatrix.empty() ? nullptr : imatrix.data());
  }
  for (int64_t r = 0; r < wrows; ++r) {
    tr->to_float(weights.data() + size_t(r) * row_bytes, dequant.data() + r * n, n);
  }

  // Activations.
  std::vector<float> act(size_t(n * arows));
  for (int64_t k = 0; k < arows; ++k) {
    float* x = act.data() + k * n;
    for (int64_t i = 0; i < n; ++i) x[i] = gauss(rng);
    if (k == 1) {
      for (int64_t i = 0; i < n; ++i) x[i] *= 1e-3f;
      x[rng() % uint64_t(n)] = 50.0f;
      x[rng() % uint64_t(n)] = -70.0f;
    } else if (k == 2) {
      for (int64_t i = 0; i < n; ++i) x[i] = 0.0f;
    }
  }
  std::vector<uint8_t> actq(arow_bytes * size_t(arows));
  for (int64_t k = 0; k < arows; ++k) {
    vtr->from_float(act.data() + k * n, actq.data() + size_t(k) * arow_bytes, n);
  }

  // Dot products.
  const DotFn gen = generic_dot(type);
  std::vector<float> dot(size_t(arows * wrows)), dotg(size_t(arows * wrows));
  for (int64_t k = 0; k < arows; ++k) {
    for (int64_t w = 0; w < wrows; ++w) {
      const void* wp = weights.data() + size_t(w) * row_bytes;
      const void* ap = actq.data() + size_t(k) * arow_bytes;
      float s = 0.0f;
      ctr->vec_dot(int(n), &s, 0, wp, 0, ap, 0, 1);
      dot[size_t(k * wrows + w)] = s;
      float g = s;
      if (gen) gen(int(n), &g, 0, wp, 0, ap, 0, 1);
      dotg[size_t(k * wrows + w)] = g;
    }
  }

  // Quantizer section.
  std::vector<float> qsrc;
  if (!qsrc_path.empty()) {
    qsrc = read_f32(qsrc_path);
    if (qsrc.empty() || qsrc.size() % size_t(n) != 0) die("--qsrc size is not a multiple of N");
    qrows = int64_t(qsrc.size()) / n;
  } else if (qrows > 0) {
    qsrc.resize(size_t(qrows * n));
    for (int64_t r = 0; r < qrows; ++r) make_pattern_row(int(r % 10), rng, qsrc.data() + r * n, n);
  }
  std::vector<uint8_t> qout(row_bytes * size_t(qrows));
  if (qrows > 0) {
    ggml_quantize_chunk(type, qsrc.data(), qout.data(), 0, qrows, n, imatrix.empty() ? nullptr : imatrix.data());
  }

  uint32_t hdr[16] = {};
  hdr[0] = 0x46525141u;
  hdr[1] = 1;
  hdr[2] = uint32_t(type);
  hdr[3] = uint32_t(vdt);
  hdr[4] = uint32_t(blk);
  hdr[5] = uint32_t(blk_bytes);
  hdr[6] = uint32_t(vblk);
  hdr[7] = uint32_t(ggml_type_size(vdt));
  hdr[8] = uint32_t(n);
  hdr[9] = uint32_t(wrows);
  hdr[10] = uint32_t(arows);
  hdr[11] = uint32_t(qrows);
  hdr[12] = (weights_mode == "quantize" ? 1u : 0u) | (weights_file ? 8u : 0u) | (qrows > 0 && !imatrix.empty() ? 2u : 0u) |
            (gen ? 4u : 0u);
  hdr[13] = uint32_t(seed);
  hdr[14] = uint32_t(seed >> 32);

  FILE* f = std::fopen(out_path.c_str(), "wb");
  if (!f) die("cannot write " + out_path);
  put(f, hdr, sizeof hdr);
  put(f, weights.data(), weights.size());
  put(f, dequant.data(), dequant.size() * 4);
  put(f, act.data(), act.size() * 4);
  put(f, actq.data(), actq.size());
  put(f, dot.data(), dot.size() * 4);
  put(f, dotg.data(), dotg.size() * 4);
  if (qrows > 0) {
    put(f, qsrc.data(), qsrc.size() * 4);
    if (!imatrix.empty()) put(f, imatrix.data(), imatrix.size() * 4);
    put(f, qout.data(), qout.size());
  }
  if (std::fclose(f) != 0) die("write failed");
  std::printf("%s: %s (vec_dot_type %s) N=%lld W=%lld K=%lld Q=%lld%s%s\n", out_path.c_str(), ggml_type_name(type),
              ggml_type_name(vdt), (long long)n, (long long)wrows, (long long)arows, (long long)qrows,
              hdr[12] & 2 ? " imatrix" : "", gen ? " generic-dot" : "");
  return 0;
}
