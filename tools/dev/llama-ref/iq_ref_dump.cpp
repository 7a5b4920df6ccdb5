// Conformance data of the IQ1/IQ2/IQ3 weight types from real ggml (not part of loom's build:
// build.sh beside this file compiles it). Usage: iq_ref_dump OUTDIR
//
// For each of IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S, IQ1_S, IQ1_M it writes OUTDIR/<name>.bin:
// constructed blocks in which every grid index of the type occurs (other bits random, f16 scales
// finite), then random blocks and blocks with every scale field at its maximum and d = +-65504;
// Q8_K activation blocks (ggml's from_float of random floats, plus one block of +-127); for every
// weight block the FNV-1a 64 hash of ggml's to_float output (all 256 floats, bit for bit) and the
// first block's floats themselves; per weight block i the dot with activation block i % n_act as
// ggml's CPU vec_dot (the SIMD kernel this build selects) and its generic (scalar) one; the same
// two for the row of the first n_row blocks (all but the extreme ones) against activations
// cycled the same way.
// OUTDIR/iq_grids.bin: FNV-1a 64 of the bytes of ggml's grid and sign tables.
// Layout (little-endian): "LQIQ", u32 version 1, u32 ggml type, u32 n_blocks, u32 block_bytes,
// u32 n_act, u32 n_row, blocks, activations (292 B each), u64 hash[n_blocks], f32 first_block[256],
// f32 {simd, generic}[n_blocks], f32 row_simd, f32 row_generic.
#include <ggml.h>
#include <ggml-cpu.h>

#define GGML_COMMON_DECL_CPP
#define GGML_COMMON_IMPL_CPP
#include "ggml-common.h"

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

extern "C" {
void ggml_vec_dot_iq2_xxs_q8_K_generic(int, float*, size_t, const void*, size_t, const void*, size_t, int);
void ggml_vec_dot_iq2_xs_q8_K_generic(int, float*, size_t, const void*, size_t, const void*, size_t, int);
void ggml_vec_dot_iq2_s_q8_K_generic(int, float*, size_t, const void*, size_t, const void*, size_t, int);
void ggml_vec_dot_iq3_xxs_q8_K_generic(int, float*, size_t, const void*, size_t, const void*, size_t, int);
void ggml_vec_dot_iq3_s_q8_K_generic(int, float*, size_t, const void*, size_t, const void*, size_t, int);
void ggml_vec_dot_iq1_s_q8_K_generic(int, float*, size_t, const void*, size_t, const void*, size_t, int);
void ggml_vec_dot_iq1_m_q8_K_generic(int, float*, size_t, const void*, size_t, const void*, size_t, int);
}

namespace {

using VecDot = void (*)(int, float*, size_t, const void*, size_t, const void*, size_t, int);

uint64_t fnv1a(const void* p, size_t n) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (size_t i = 0; i < n; ++i) {
    h ^= static_cast<const uint8_t*>(p)[i];
    h *= 0x100000001b3ull;
  }
  return h;
}

std::mt19937_64 rng(20261203);

// A finite f16 of moderate magnitude (2^-6 .. 2^5), random sign.
uint16_t random_d() {
  const uint16_t sign = uint16_t(rng() & 1) << 15;
  const uint16_t exp = uint16_t(9 + rng() % 12);
  return uint16_t(sign | exp << 10 | (rng() & 0x3ff));
}

struct Type {
  const char* name;
  ggml_type type;
  int bytes;
  int slots;  // grid indices per block
  int grid_size;
  VecDot generic;
  // Sets grid index slot k of block b.
  void (*set_index)(uint8_t* b, int k, int idx);
  void (*set_d)(uint8_t* b, uint16_t d);
  void (*max_scales)(uint8_t* b);
};

void set_d_front(uint8_t* b, uint16_t d) { std::memcpy(b, &d, 2); }

uint16_t get16(const uint8_t* p) {
  uint16_t v;
  std::memcpy(&v, p, 2);
  return v;
}
void put16(uint8_t* p, uint16_t v) { std::memcpy(p, &v, 2); }

const Type kTypes[] = {
    {"iq2_xxs", GGML_TYPE_IQ2_XXS, 66, 32, 256, ggml_vec_dot_iq2_xxs_q8_K_generic,
     [](uint8_t* b, int k, int idx) { b[2 + 8 * (k / 4) + k % 4] = uint8_t(idx); }, set_d_front,
     [](uint8_t* b) {
       for (int ib = 0; ib < 8; ++ib) b[2 + 8 * ib + 7] |= 0xf0;
     }},
    {"iq2_xs", GGML_TYPE_IQ2_XS, 74, 32, 512, ggml_vec_dot_iq2_xs_q8_K_generic,
     [](uint8_t* b, int k, int idx) {
       uint8_t* p = b + 2 + 2 * k;
       put16(p, uint16_t((get16(p) & ~511) | idx));
     },
     set_d_front, [](uint8_t* b) { std::memset(b + 66, 0xff, 8); }},
    {"iq2_s", GGML_TYPE_IQ2_S, 82, 32, 1024, ggml_vec_dot_iq2_s_q8_K_generic,
     [](uint8_t* b, int k, int idx) {
       b[2 + k] = uint8_t(idx);
       uint8_t& h = b[2 + 64 + k / 4];
       h = uint8_t((h & ~(3 << (2 * (k % 4)))) | (idx >> 8) << (2 * (k % 4)));
     },
     set_d_front, [](uint8_t* b) { std::memset(b + 74, 0xff, 8); }},
    {"iq3_xxs", GGML_TYPE_IQ3_XXS, 98, 64, 256, ggml_vec_dot_iq3_xxs_q8_K_generic,
     [](uint8_t* b, int k, int idx) { b[2 + k] = uint8_t(idx); }, set_d_front,
     [](uint8_t* b) {
       for (int ib = 0; ib < 8; ++ib) b[2 + 64 + 4 * ib + 3] |= 0xf0;
     }},
    {"iq3_s", GGML_TYPE_IQ3_S, 110, 64, 512, ggml_vec_dot_iq3_s_q8_K_generic,
     [](uint8_t* b, int k, int idx) {
       b[2 + k] = uint8_t(idx);
       uint8_t& h = b[2 + 64 + k / 8];
       h = uint8_t((h & ~(1 << (k % 8))) | (idx >> 8) << (k % 8));
     },
     set_d_front, [](uint8_t* b) { std::memset(b + 106, 0xff, 4); }},
    {"iq1_s", GGML_TYPE_IQ1_S, 50, 32, 2048, ggml_vec_dot_iq1_s_q8_K_generic,
     [](uint8_t* b, int k, int idx) {
       b[2 + k] = uint8_t(idx);
       uint8_t* p = b + 34 + 2 * (k / 4);
       const int sh = 3 * (k % 4);
       put16(p, uint16_t((get16(p) & ~(7 << sh)) | (idx >> 8) << sh));
     },
     set_d_front,
     [](uint8_t* b) {
       for (int ib = 0; ib < 8; ++ib) put16(b + 34 + 2 * ib, get16(b + 34 + 2 * ib) | 0x7000);
     }},
    {"iq1_m", GGML_TYPE_IQ1_M, 56, 32, 2048, ggml_vec_dot_iq1_m_q8_K_generic,
     [](uint8_t* b, int k, int idx) {
       b[k] = uint8_t(idx);
       uint8_t& h = b[32 + k / 2];
       const int sh = 4 * (k % 2);
       h = uint8_t((h & ~(7 << sh)) | (idx >> 8) << sh);
     },
     [](uint8_t* b, uint16_t d) {  // the top nibble of each u16 scale word
       for (int w = 0; w < 4; ++w) {
         uint8_t* p = b + 48 + 2 * w;
         put16(p, uint16_t((get16(p) & 0x0fff) | ((d >> (4 * w)) & 0xf) << 12));
       }
     },
     [](uint8_t* b) {
       for (int w = 0; w < 4; ++w) put16(b + 48 + 2 * w, get16(b + 48 + 2 * w) | 0x0fff);
     }},
};

void write_all(FILE* f, const void* p, size_t n) {
  if (fwrite(p, 1, n, f) != n) {
    perror("write");
    exit(1);
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: %s OUTDIR\n", argv[0]);
    return 2;
  }
  const std::string dir = argv[1];
  ggml_cpu_init();

  // Activations shared by every type: 6 from random floats, 1 of +-127 (d = 1/64).
  const int n_act = 7;
  std::vector<uint8_t> acts(size_t(n_act) * sizeof(block_q8_K));
  {
    std::vector<float> x(256 * 6);
    std::normal_distribution<float> nd(0.0f, 1.0f);
    for (size_t i = 0; i < x.size(); ++i) x[i] = nd(rng) * (i < 256 ? 0.01f : i < 512 ? 100.0f : 1.0f);
    ggml_get_type_traits_cpu(GGML_TYPE_Q8_K)->from_float(x.data(), acts.data(), int64_t(x.size()));
    block_q8_K e;
    e.d = 1.0f / 64;
    for (int j = 0; j < 256; ++j) e.qs[j] = int8_t(j % 3 == 0 ? -127 : 127);
    for (int k = 0; k < 16; ++k) {
      int s = 0;
      for (int j = 0; j < 16; ++j) s += e.qs[16 * k + j];
      e.bsums[k] = int16_t(s);
    }
    std::memcpy(acts.data() + 6 * sizeof(block_q8_K), &e, sizeof e);
  }

  for (const Type& t : kTypes) {
    if (ggml_type_size(t.type) != size_t(t.bytes)) {
      fprintf(stderr, "%s: size\n", t.name);
      return 1;
    }
    const int n_enum = (t.grid_size + t.slots - 1) / t.slots;
    const int n_random = 6, n_extreme = 2;
    const int nb = n_enum + n_random + n_extreme;
    std::vector<uint8_t> blocks(size_t(nb) * t.bytes);
    for (auto& v : blocks) v = uint8_t(rng());
    for (int i = 0; i < nb; ++i) {
      uint8_t* b = blocks.data() + size_t(i) * t.bytes;
      if (i < n_enum) {
        for (int k = 0; k < t.slots; ++k) t.set_index(b, k, (i * t.slots + k) % t.grid_size);
        t.set_d(b, random_d());
      } else if (i < n_enum + n_random) {
        t.set_d(b, random_d());
      } else {
        t.max_scales(b);
        t.set_d(b, i == nb - 1 ? 0xfbff : 0x7bff);  // -65504, +65504
      }
    }
    std::vector<float> y(size_t(nb) * 256);
    ggml_get_type_traits(t.type)->to_float(blocks.data(), y.data(), int64_t(y.size()));
    std::vector<uint64_t> hashes(nb);
    for (int i = 0; i < nb; ++i) hashes[i] = fnv1a(y.data() + size_t(i) * 256, 256 * sizeof(float));

    const VecDot simd = ggml_get_type_traits_cpu(t.type)->vec_dot;
    std::vector<float> dots(size_t(nb) * 2);
    std::vector<uint8_t> arow(size_t(nb) * sizeof(block_q8_K));
    for (int i = 0; i < nb; ++i) {
      const uint8_t* a = acts.data() + size_t(i % n_act) * sizeof(block_q8_K);
      std::memcpy(arow.data() + size_t(i) * sizeof(block_q8_K), a, sizeof(block_q8_K));
      const uint8_t* w = blocks.data() + size_t(i) * t.bytes;
      simd(256, &dots[2 * i], 0, w, 0, a, 0, 1);
      t.generic(256, &dots[2 * i + 1], 0, w, 0, a, 0, 1);
    }
    // The row leaves the extreme blocks out (they would dominate its sum).
    const int n_row = n_enum + n_random;
    float row[2];
    simd(256 * n_row, &row[0], 0, blocks.data(), 0, arow.data(), 0, 1);
    t.generic(256 * n_row, &row[1], 0, blocks.data(), 0, arow.data(), 0, 1);

    const std::string path = dir + "/" + t.name + ".bin";
    FILE* f = fopen(path.c_str(), "wb");
    if (!f) {
      perror(path.c_str());
      return 1;
    }
    const uint32_t head[6] = {1u, uint32_t(t.type), uint32_t(nb), uint32_t(t.bytes), uint32_t(n_act), uint32_t(n_row)};
    write_all(f, "LQIQ", 4);
    write_all(f, head, sizeof head);
    write_all(f, blocks.data(), blocks.size());
    write_all(f, acts.data(), acts.size());
    write_all(f, hashes.data(), hashes.size() * 8);
    write_all(f, y.data(), 256 * sizeof(float));
    write_all(f, dots.data(), dots.size() * 4);
    write_all(f, row, 8);
    fclose(f);
    int exact = 0;
    for (int i = 0; i < nb; ++i) exact += dots[2 * i] == dots[2 * i + 1];
    printf("%s: %d blocks (%d enumerating the grid), simd == generic on %d/%d blocks, row %.9g / %.9g\n", t.name, nb, n_enum,
           exact, nb, row[0], row[1]);
  }

  const std::string gpath = dir + "/iq_grids.bin";
  FILE* g = fopen(gpath.c_str(), "wb");
  if (!g) {
    perror(gpath.c_str());
    return 1;
  }
  const uint64_t gh[8] = {fnv1a(iq2xxs_grid, sizeof iq2xxs_grid),   fnv1a(iq2xs_grid, sizeof iq2xs_grid),
                          fnv1a(iq2s_grid, sizeof iq2s_grid),       fnv1a(iq3xxs_grid, sizeof iq3xxs_grid),
                          fnv1a(iq3s_grid, sizeof iq3s_grid),       fnv1a(iq1s_grid, sizeof iq1s_grid),
                          fnv1a(ksigns_iq2xs, sizeof ksigns_iq2xs), fnv1a(kmask_iq2xs, sizeof kmask_iq2xs)};
  write_all(g, "LQIG", 4);
  write_all(g, gh, sizeof gh);
  fclose(g);
  return 0;
}
