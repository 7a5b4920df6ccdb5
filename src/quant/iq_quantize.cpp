// Quantizers of the lattice ("i-quant") formats IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S, IQ1_S and
// IQ1_M, reproducing ggml's (ggml-quants.c) float arithmetic operation for operation: the same
// sums in the same order, no FMA contraction (loom_quant builds with -ffp-contract=off, and ggml's
// portable C is built without FMA), ggml's rounding trick, its tie-breaking (the first candidate
// wins unless a later one is strictly better) and its quirks (see the notes at each type), so the
// bytes equal ggml_quantize_chunk's.
//
// Shared scheme of the IQ2/IQ3 types: every group of 8 (IQ3: 4) magnitudes is quantized to odd
// levels 2l + 1 (l < 3, IQ3: l < 8) which must form a point of the type's grid; signs are stored
// apart. A sub-block tries a range of scales; for each, the rounded point is looked up in the
// grid, and a point off the grid is replaced by its best neighbour among the grid points nearest
// to it (lists precomputed per off-grid point). The scale with the best weighted least-squares
// fit wins, then the sub-block scales are quantized to 4 bits against one f16 super-block scale.
// IQ1_S / IQ1_M instead search exhaustively over the two split points of the sorted values into
// the three levels -1, 0, 1 (shifted by +-delta), then snap off-grid groups to a neighbour.
#include "quant/iq_quantize.h"

#include <cfloat>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <type_traits>
#include <vector>

#include "base/half.h"
#include "quant/blocks.h"
#include "quant/iq_grids.h"
#include "quant/quant.h"

namespace loom::quant {
namespace {

constexpr int kQK = 256;  // elements per super-block of every type here

// Sub-blocks whose largest magnitude is below these are stored as zero (ggml's GROUP_MAX_EPS*).
constexpr float kEps = 1e-15f;
constexpr float kEpsIq3xxs = 1e-8f;
constexpr float kEpsIq2s = 1e-8f;
constexpr float kEpsIq1m = 1e-7f;
constexpr float kEpsIq1s = 1e-12f;

// ggml's nearest_int (blocks.h), also for large and non-finite v (every caller clamps the result).
inline int round_ggml(float v) { return detail::nearest_int_ggml(v); }
// ggml's MAX / MIN macros (their behaviour with NaN operands differs from std::max / std::min).
inline float gmax(float a, float b) { return a > b ? a : b; }
inline int imax(int a, int b) { return a > b ? a : b; }
inline int imin(int a, int b) { return a < b ? a : b; }
inline int clamp_level(int l, int hi) { return imax(0, imin(hi, l)); }

// ---- lattice search structures ------------------------------------------------------------------

// A grid with its lookup tables: point k's coordinates as odd levels 2 l + 1, the index of every
// code (coordinate j's l in bits [bits * j, bits * j + bits)) that is a grid point, and for every
// other code that the quantizers can produce, the list of grid points at the nwant smallest
// distinct squared distances from it, in order of (distance, grid index).
struct Lattice {
  int dim = 0, bits = 0, n_grid = 0;
  std::vector<int8_t> pos;      // n_grid * dim
  std::vector<int32_t> map;     // code -> grid index >= 0, or -(offset into neigh + 1)
  std::vector<uint16_t> neigh;  // at each offset: count, then the grid indices

  const int8_t* point(int k) const { return pos.data() + size_t(k) * size_t(dim); }
  // Neighbour list of an off-grid code (map[code] < 0).
  const uint16_t* neighbours(int code) const { return neigh.data() + (-map[size_t(code)] - 1); }
};

[[noreturn]] void table_bug(const char* what) {
  std::fprintf(stderr, "loom: iq_quantize: inconsistent grid table (%s)\n", what);
  std::abort();
}

// levels: the distinct coordinate values of the grid table in ascending order (coordinate value
// levels[l] is level l); value(k, j) reads coordinate j of table entry k. max_digit: the largest
// l the quantizers put in a code (they clamp to it), so neighbour lists are needed only for codes
// whose every digit is <= max_digit.
template <class ValueAt>
Lattice build_lattice(int n_grid, int dim, int bits, int nwant, int max_digit, const int* levels, int n_levels,
                      ValueAt value) {
  Lattice g;
  g.dim = dim;
  g.bits = bits;
  g.n_grid = n_grid;
  g.pos.resize(size_t(n_grid) * size_t(dim));
  const int n_codes = 1 << (bits * dim);
  g.map.assign(size_t(n_codes), INT32_MIN);
  int prev_code = -1;
  for (int k = 0; k < n_grid; ++k) {
    int code = 0;
    for (int j = 0; j < dim; ++j) {
      const int v = value(k, j);
      int l = 0;
      while (l < n_levels && levels[l] != v) ++l;
      if (l == n_levels) table_bug("a coordinate outside the levels");
      g.pos[size_t(k) * size_t(dim) + size_t(j)] = int8_t(2 * l + 1);
      code |= l << (bits * j);
    }
    // The grids list their points in ascending code order; ggml's grid index k is the k-th code.
    if (code <= prev_code) table_bug("codes not ascending");
    prev_code = code;
    g.map[size_t(code)] = k;
  }
  std::vector<int> d2(size_t(n_grid), 0);
  int8_t p[8];
  for (int code = 0; code < n_codes; ++code) {
    if (g.map[size_t(code)] >= 0) continue;
    bool reachable = true;
    for (int j = 0; j < dim; ++j) {
      const int l = (code >> (bits * j)) & ((1 << bits) - 1);
      if (l > max_digit) reachable = false;
      p[j] = int8_t(2 * l + 1);
    }
    if (!reachable) continue;
    for (int k = 0; k < n_grid; ++k) {
      const int8_t* q = g.point(k);
      int s = 0;
      for (int j = 0; j < dim; ++j) s += (q[j] - p[j]) * (q[j] - p[j]);
      d2[size_t(k)] = s;
    }
    const size_t start = g.neigh.size();
    g.neigh.push_back(0);
    int last = -1;
    for (int have = 0; have < nwant; ++have) {
      int next = INT32_MAX;
      for (int k = 0; k < n_grid; ++k) {
        if (d2[size_t(k)] > last && d2[size_t(k)] < next) next = d2[size_t(k)];
      }
      if (next == INT32_MAX) break;
      for (int k = 0; k < n_grid; ++k) {
        if (d2[size_t(k)] == next) g.neigh.push_back(uint16_t(k));
      }
      last = next;
    }
    g.neigh[start] = uint16_t(g.neigh.size() - start - 1);
    g.map[size_t(code)] = -int32_t(start) - 1;
  }
  return g;
}

constexpr int kLevelsIq2[3] = {0x08, 0x19, 0x2b};
constexpr int kLevelsIq1[3] = {-1, 0, 1};
constexpr int kLevelsIq3xxs[8] = {4, 12, 20, 28, 36, 44, 52, 62};
constexpr int kLevelsIq3s[8] = {1, 3, 5, 7, 9, 11, 13, 15};

template <size_t N>
Lattice build_grid64(const uint64_t (&grid)[N], const int* levels, int n_levels, int nwant, bool is_signed) {
  return build_lattice(int(N), 8, 2, nwant, 2, levels, n_levels, [&](int k, int j) {
    const uint8_t b = uint8_t(grid[k] >> (8 * j));
    return is_signed ? int(int8_t(b)) : int(b);
  });
}
template <size_t N>
Lattice build_grid32(const uint32_t (&grid)[N], const int* levels, int nwant) {
  return build_lattice(int(N), 4, 3, nwant, 7, levels, 8, [&](int k, int j) { return int(uint8_t(grid[k] >> (8 * j))); });
}

// Built once on first use; C++ guarantees thread-safe initialization of function-local statics.
const Lattice& lattice_iq2xxs() {
  static const Lattice g = build_grid64(iq::kIq2xxsGrid, kLevelsIq2, 3, 2, false);
  return g;
}
const Lattice& lattice_iq2xs() {
  static const Lattice g = build_grid64(iq::kIq2xsGrid, kLevelsIq2, 3, 2, false);
  return g;
}
const Lattice& lattice_iq2s() {
  static const Lattice g = build_grid64(iq::kIq2sGrid, kLevelsIq2, 3, 1, false);
  return g;
}
const Lattice& lattice_iq1s() {  // IQ1_S and IQ1_M share it
  static const Lattice g = build_grid64(iq::kIq1sGrid, kLevelsIq1, 3, 3, true);
  return g;
}
const Lattice& lattice_iq3xxs() {
  static const Lattice g = build_grid32(iq::kIq3xxsGrid, kLevelsIq3xxs, 2);
  return g;
}
const Lattice& lattice_iq3s() {
  static const Lattice g = build_grid32(iq::kIq3sGrid, kLevelsIq3s, 3);
  return g;
}

// Among an off-grid code's neighbours, the grid point nearest (weighted squared error) to the
// magnitudes xval at this scale; writes its levels l to L and returns its index.
int nearest_neighbour(const Lattice& g, int code, const float* xval, const float* w, float scale, int8_t* L) {
  const uint16_t* nb = g.neighbours(code);
  float best = FLT_MAX;
  int idx = -1;
  for (int n = 1; n <= nb[0]; ++n) {
    const int8_t* q = g.point(nb[n]);
    float d2 = 0;
    for (int i = 0; i < g.dim; ++i) {
      const float diff = scale * float(q[i]) - xval[i];
      d2 += w[i] * diff * diff;
    }
    if (d2 < best) {
      best = d2;
      idx = nb[n];
    }
  }
  if (idx < 0) idx = nb[1];  // only for non-finite inputs (ggml asserts)
  const int8_t* q = g.point(idx);
  for (int i = 0; i < g.dim; ++i) L[i] = int8_t((q[i] - 1) / 2);
  return idx;
}

// The code of dim levels (bits each).
inline int code_of(const int8_t* L, int dim, int bits) {
  int u = 0;
  for (int i = 0; i < dim; ++i) u |= L[i] << (bits * i);
  return u & 0xffff;  // ggml keeps codes in a uint16_t
}

// Grid index of the levels L (on the grid by construction); 0 where ggml would abort.
inline int grid_index_of(const Lattice& g, const int8_t* L) {
  const int gi = g.map[size_t(code_of(L, g.dim, g.bits))];
  return gi >= 0 ? gi : 0;
}

// ---- input access ------------------------------------------------------------------------------

// One super-block of the source (may be unaligned) and of the importance matrix.
struct SuperBlock {
  float x[kQK];
  float qw[kQK];
  bool has_qw = false;
  float sumx2 = 0;
  void load(const float* src, const float* imatrix, int64_t ibl) {
    std::memcpy(x, reinterpret_cast<const uint8_t*>(src) + ibl * kQK * 4, sizeof(x));
    has_qw = imatrix != nullptr;
    if (has_qw) std::memcpy(qw, reinterpret_cast<const uint8_t*>(imatrix) + ibl * kQK * 4, sizeof(qw));
    float s = 0;
    for (int i = 0; i < kQK; ++i) s += x[i] * x[i];
    sumx2 = s;
  }
};

// ggml's weighted least-squares fit of non-negative x to levels 0..nmax with a single scale
// (make_qp_quants): IQ2_XXS's starting scale. L is kept as bytes as in ggml: a negative level (of
// the one negated magnitude of a group) wraps, and the wrapped value enters the sums as ggml's does.
float fit_levels_qp(int n, int nmax, const float* x, uint8_t* L, const float* w) {
  float max = 0;
  for (int i = 0; i < n; ++i) max = gmax(max, x[i]);
  if (max < kEps) {
    std::memset(L, 0, size_t(n));
    return 0.0f;
  }
  float iscale = float(nmax) / max;
  for (int i = 0; i < n; ++i) L[i] = uint8_t(round_ggml(iscale * x[i]));
  const float scale0 = 1 / iscale;
  float best_mse = 0;
  for (int i = 0; i < n; ++i) {
    const float diff = x[i] - scale0 * float(L[i]);
    best_mse += w[i] * diff * diff;
  }
  for (int is = -4; is <= 4; ++is) {
    if (is == 0) continue;
    const float iscale_is = (0.1f * float(is) + float(nmax)) / max;
    const float scale_is = 1 / iscale_is;
    float mse = 0;
    for (int i = 0; i < n; ++i) {
      const int l = imin(nmax, round_ggml(iscale_is * x[i]));
      const float diff = x[i] - scale_is * float(l);
      mse += w[i] * diff * diff;
    }
    if (mse < best_mse) {
      best_mse = mse;
      iscale = iscale_is;
    }
  }
  float sumlx = 0, suml2 = 0;
  for (int i = 0; i < n; ++i) {
    const int l = imin(nmax, round_ggml(iscale * x[i]));
    L[i] = uint8_t(l);
    sumlx += w[i] * x[i] * float(l);
    suml2 += w[i] * float(l) * float(l);
  }
  for (int pass = 0; pass < 5; ++pass) {
    int changed = 0;
    for (int i = 0; i < n; ++i) {
      const float li = float(L[i]);
      float slx = sumlx - w[i] * x[i] * li;
      float sl2 = suml2 - w[i] * li * li;
      if (slx > 0 && sl2 > 0) {
        const int nl = imin(nmax, round_ggml(x[i] * sl2 / slx));
        if (nl != int(L[i])) {
          slx += w[i] * x[i] * float(nl);
          sl2 += w[i] * float(nl) * float(nl);
          if (slx * slx * suml2 > sumlx * sumlx * sl2) {
            L[i] = uint8_t(nl);
            sumlx = slx;
            suml2 = sl2;
            ++changed;
          }
        }
      }
    }
    if (changed == 0) break;
  }
  return suml2 > 0.0f ? sumlx / suml2 : 0.0f;
}

// Magnitudes and sign bits of a group of 8: xval = |x|, bit i of the result set where x[i] < 0.
// With parity (IQ2_XXS, IQ2_XS, IQ3_XXS: an even number of negatives is stored), an odd count
// negates back the element of least weighted square (the first on ties), whose magnitude then
// enters the fit as a negative value. Returns the 7 (parity) or 8 stored sign bits.
uint8_t split_signs(const float* x, const float* w, float* xval, bool parity) {
  uint8_t s = 0;
  int nflip = 0;
  for (int i = 0; i < 8; ++i) {
    if (x[i] >= 0) {
      xval[i] = x[i];
    } else {
      xval[i] = -x[i];
      ++nflip;
      s = uint8_t(s | 1 << i);
    }
  }
  if (!parity) return s;
  if (nflip % 2) {
    int imn = 0;
    float mn = w[0] * x[0] * x[0];
    for (int i = 1; i < 8; ++i) {
      const float a = w[i] * x[i] * x[i];
      if (a < mn) {
        mn = a;
        imn = i;
      }
    }
    xval[imn] = -xval[imn];
    s = uint8_t(s ^ 1 << imn);
  }
  return uint8_t(s & 127);
}

// Weighted sums of a candidate: sum w x q and sum w q^2 with q = 2 l + 1.
inline void fit_sums(int n, const float* w, const float* xval, const int8_t* L, float* sqx, float* sq2) {
  float a = 0, b = 0;
  for (int i = 0; i < n; ++i) {
    const float q = float(2 * L[i] + 1);
    a += w[i] * xval[i] * q;
    b += w[i] * q * q;
  }
  *sqx = a;
  *sq2 = b;
}

// Rounds the magnitudes of one group to levels at inverse scale id and snaps them to the grid
// (nearest neighbour at scale s when off it). Returns whether the rounded point was on the grid.
bool round_group(const Lattice& g, int kmax, float id, float s, const float* xval, const float* w_aux, int8_t* L) {
  for (int i = 0; i < g.dim; ++i) L[i] = int8_t(clamp_level(round_ggml(0.5f * (id * xval[i] - 1)), kmax - 1));
  const int u = code_of(L, g.dim, g.bits);
  if (g.map[size_t(u)] >= 0) return true;
  nearest_neighbour(g, u, xval, w_aux, s, L);
  return false;
}

// 4-bit sub-block scale of IQ2/IQ3: l with scale ~ d * (2 l + 1).
inline int scale_nibble(float id, float s) { return clamp_level(round_ggml(0.5f * (id * s - 1)), 15); }

// ---- IQ2_XXS ------------------------------------------------------------------------------------
// 8 sub-blocks of 32 = 4 groups of 8 on the 256-point grid, signs with parity. The search starts
// from fit_levels_qp's scale and tries 13 inverse scales around it.

void iq2_xxs_block(const SuperBlock& sb, uint8_t* out) {
  const Lattice& g = lattice_iq2xxs();
  constexpr int kMaxQ = 3;
  uint32_t q2[16] = {};
  float scales[8];
  float max_scale = 0;
  const float sigma2 = sb.sumx2 / float(kQK);
  for (int ib = 0; ib < 8; ++ib) {
    const float* xb = sb.x + 32 * ib;
    const float* qw = sb.qw + 32 * ib;
    float weight[32], waux[32], xval[32];
    int8_t L[32], Laux[32];
    uint8_t signs[4];
    for (int i = 0; i < 32; ++i) weight[i] = qw[i] * std::sqrt(sigma2 + xb[i] * xb[i]);
    for (int i = 0; i < 32; ++i) waux[i] = std::sqrt(weight[i]);
    for (int k = 0; k < 4; ++k) signs[k] = split_signs(xb + 8 * k, weight + 8 * k, xval + 8 * k, true);
    float max = xval[0];
    for (int i = 1; i < 32; ++i) max = gmax(max, xval[i]);
    if (max < kEps) {
      scales[ib] = 0;
      continue;
    }
    float scale = fit_levels_qp(32, kMaxQ + 1, xval, reinterpret_cast<uint8_t*>(L), weight);
    const float eff_max = scale * float(kMaxQ);
    if (eff_max <= 0) {
      scales[ib] = 0;
      continue;
    }
    float best = 0;
    for (int is = -6; is <= 6; ++is) {
      const float id = (float(2 * kMaxQ - 1) + float(is) * 0.1f) / eff_max;
      const float this_scale = 1 / id;
      for (int k = 0; k < 4; ++k) round_group(g, kMaxQ, id, this_scale, xval + 8 * k, waux + 8 * k, Laux + 8 * k);
      float sumqx, sumq2;
      fit_sums(32, weight, xval, Laux, &sumqx, &sumq2);
      if (sumq2 > 0 && sumqx * sumqx > best * sumq2) {
        scale = sumqx / sumq2;
        best = scale * sumqx;
        std::memcpy(L, Laux, 32);
      }
    }
    if (scale > 0) {  // re-round every group at the chosen scale
      const float id = 1 / scale;
      for (int k = 0; k < 4; ++k) {
        round_group(g, kMaxQ, id, scale, xval + 8 * k, waux + 8 * k, L + 8 * k);
      }
      float sumqx, sumq2;
      fit_sums(32, weight, xval, L, &sumqx, &sumq2);
      if (sumq2 > 0) scale = sumqx / sumq2;
    }
    if (scale < 0) {
      scale = -scale;
      for (int k = 0; k < 4; ++k) signs[k] = uint8_t(~signs[k] & 127);
    }
    for (int k = 0; k < 4; ++k) {
      q2[2 * ib] |= uint32_t(grid_index_of(g, L + 8 * k)) << (8 * k);
      q2[2 * ib + 1] |= uint32_t(signs[k]) << (7 * k);
    }
    scales[ib] = scale;
    max_scale = gmax(max_scale, scale);
  }
  uint16_t d16 = f32_to_f16(0.0f);
  if (max_scale == 0.0f) {
    std::memset(q2, 0, sizeof(q2));
  } else {
    const float d = max_scale / 31;
    d16 = f32_to_f16(d);
    const float id = 1 / d;
    for (int ib = 0; ib < 8; ++ib) q2[2 * ib + 1] |= uint32_t(scale_nibble(id, scales[ib])) << 28;
  }
  std::memcpy(out, &d16, 2);
  std::memcpy(out + 2, q2, 64);
}

// ---- IQ2_XS / IQ2_S -----------------------------------------------------------------------------
// 16 sub-blocks of 16 = 2 groups of 8. IQ2_XS: 512-point grid, signs with parity; IQ2_S:
// 1024-point grid, 8 free sign bits, a fallback weighting without an importance matrix.

struct Iq2SubResult {
  float scale;
  int gi[2];
  uint8_t signs[2];
  bool stored;  // false: all-zero sub-block, nothing stored
};

Iq2SubResult iq2_16_sub(const Lattice& g, const float* xb, const float* weight, bool parity, float eps) {
  constexpr int kMaxQ = 3;
  Iq2SubResult r{};
  float waux[16], xval[16];
  int8_t L[16] = {}, Laux[16];
  for (int i = 0; i < 16; ++i) waux[i] = std::sqrt(weight[i]);
  for (int k = 0; k < 2; ++k) r.signs[k] = split_signs(xb + 8 * k, weight + 8 * k, xval + 8 * k, parity);
  float max = xval[0];
  for (int i = 1; i < 16; ++i) max = gmax(max, xval[i]);
  if (max < eps) {
    r.stored = false;
    return r;
  }
  float best = 0;
  float scale = max / float(2 * kMaxQ - 1);
  bool on_grid[2] = {true, true};
  for (int is = -9; is <= 9; ++is) {
    const float id = (float(2 * kMaxQ - 1) + float(is) * 0.1f) / max;
    const float this_scale = 1 / id;
    bool on_aux[2];
    for (int k = 0; k < 2; ++k) on_aux[k] = round_group(g, kMaxQ, id, this_scale, xval + 8 * k, waux + 8 * k, Laux + 8 * k);
    float sumqx, sumq2;
    fit_sums(16, weight, xval, Laux, &sumqx, &sumq2);
    if (sumq2 > 0 && sumqx * sumqx > best * sumq2) {
      scale = sumqx / sumq2;
      best = scale * sumqx;
      std::memcpy(L, Laux, 16);
      on_grid[0] = on_aux[0];
      on_grid[1] = on_aux[1];
    }
  }
  if ((!on_grid[0] || !on_grid[1]) && scale > 0) {  // re-round the snapped groups
    const float id = 1 / scale;
    for (int k = 0; k < 2; ++k) {
      if (on_grid[k]) continue;
      round_group(g, kMaxQ, id, scale, xval + 8 * k, waux + 8 * k, L + 8 * k);
    }
    float sumqx, sumq2;
    fit_sums(16, weight, xval, L, &sumqx, &sumq2);
    if (sumq2 > 0) scale = sumqx / sumq2;
  }
  if (scale < 0) {
    scale = -scale;
    for (int k = 0; k < 2; ++k) r.signs[k] = uint8_t(parity ? ~r.signs[k] & 127 : ~r.signs[k]);
  }
  for (int k = 0; k < 2; ++k) r.gi[k] = grid_index_of(g, L + 8 * k);
  r.scale = scale;
  r.stored = true;
  return r;
}

void iq2_xs_block(const SuperBlock& sb, uint8_t* out) {
  const Lattice& g = lattice_iq2xs();
  uint16_t q2[32] = {};
  uint8_t sc[8] = {};
  float scales[16];
  float max_scale = 0;
  const float sigma2 = sb.sumx2 / float(kQK);
  for (int ib = 0; ib < 16; ++ib) {
    const float* xb = sb.x + 16 * ib;
    float weight[16];
    for (int i = 0; i < 16; ++i) weight[i] = sb.qw[16 * ib + i] * std::sqrt(sigma2 + xb[i] * xb[i]);
    const Iq2SubResult r = iq2_16_sub(g, xb, weight, true, kEps);
    if (!r.stored) {
      scales[ib] = 0;
      continue;
    }
    for (int k = 0; k < 2; ++k) q2[2 * ib + k] = uint16_t(r.gi[k] | r.signs[k] << 9);
    scales[ib] = r.scale;
    max_scale = gmax(max_scale, r.scale);
  }
  uint16_t d16 = f32_to_f16(0.0f);
  if (max_scale == 0.0f) {
    std::memset(q2, 0, sizeof(q2));
  } else {
    const float d = max_scale / 31;
    d16 = f32_to_f16(d);
    const float id = 1 / d;
    for (int ib = 0; ib < 16; ++ib) sc[ib / 2] = uint8_t(sc[ib / 2] | scale_nibble(id, scales[ib]) << (4 * (ib % 2)));
  }
  std::memcpy(out, &d16, 2);
  std::memcpy(out + 2, q2, 64);
  std::memcpy(out + 66, sc, 8);
}

void iq2_s_block(const SuperBlock& sb, uint8_t* out) {
  const Lattice& g = lattice_iq2s();
  // {f16 d; u8 qs[64] (32 grid index bytes, then 32 sign bytes); u8 qh[8]; u8 scales[8]}
  uint8_t qs[64] = {}, qh[8] = {}, sc[8] = {};
  float scales[16];
  float max_scale = 0;
  const float sigma2 = 2 * sb.sumx2 / float(kQK);
  for (int ib = 0; ib < 16; ++ib) {
    const float* xb = sb.x + 16 * ib;
    float weight[16];
    if (sb.has_qw) {
      for (int i = 0; i < 16; ++i) weight[i] = sb.qw[16 * ib + i] * std::sqrt(sigma2 + xb[i] * xb[i]);
    } else {
      for (int i = 0; i < 16; ++i) weight[i] = 0.25f * sigma2 + xb[i] * xb[i];
    }
    const Iq2SubResult r = iq2_16_sub(g, xb, weight, false, kEpsIq2s);
    if (!r.stored) {
      scales[ib] = 0;
      continue;
    }
    for (int k = 0; k < 2; ++k) {
      const int i8 = 2 * ib + k;
      qs[i8] = uint8_t(r.gi[k] & 255);
      qh[i8 / 4] = uint8_t(qh[i8 / 4] | (r.gi[k] >> 8) << (2 * (i8 % 4)));
      qs[32 + i8] = r.signs[k];
    }
    scales[ib] = r.scale;
    max_scale = gmax(max_scale, r.scale);
  }
  uint16_t d16 = f32_to_f16(0.0f);
  if (max_scale != 0.0f) {
    const float d = max_scale / 31;
    d16 = f32_to_f16(d * 0.9875f);
    const float id = 1 / d;
    for (int ib = 0; ib < 16; ++ib) sc[ib / 2] = uint8_t(sc[ib / 2] | scale_nibble(id, scales[ib]) << (4 * (ib % 2)));
  }
  std::memcpy(out, &d16, 2);
  std::memcpy(out + 2, qs, 64);
  std::memcpy(out + 66, qh, 8);
  std::memcpy(out + 74, sc, 8);
}

// ---- IQ3_XXS / IQ3_S ----------------------------------------------------------------------------
// 8 sub-blocks of 32 = 8 groups of 4 levels 0..7. IQ3_XXS: 256-point grid, signs with parity per
// 8 elements; IQ3_S: 512-point grid, 8 free sign bits.

struct Iq3SubResult {
  float scale;
  int gi[8];
  uint8_t signs[4];
  bool stored;
};

// xxs: IQ3_XXS's variant (epsilon, parity, 31 trial scales, re-rounding only snapped groups)
// instead of IQ3_S's (exact-zero test, 19 trial scales, re-rounding every group).
Iq3SubResult iq3_sub(const Lattice& g, const float* xb, const float* weight, bool xxs) {
  constexpr int kMaxQ = 8;
  Iq3SubResult r{};
  float waux[32], xval[32];
  int8_t L[32] = {}, Laux[32];
  for (int i = 0; i < 32; ++i) waux[i] = std::sqrt(weight[i]);
  for (int k = 0; k < 4; ++k) r.signs[k] = split_signs(xb + 8 * k, weight + 8 * k, xval + 8 * k, xxs);
  float max = xval[0];
  for (int i = 1; i < 32; ++i) max = gmax(max, xval[i]);
  if (xxs ? max < kEpsIq3xxs : !(max != 0.0f)) {
    r.stored = false;
    return r;
  }
  float best = 0;
  float scale = max / float(2 * kMaxQ - 1);
  bool on_grid[8];
  for (int k = 0; k < 8; ++k) on_grid[k] = xxs;
  const int lim = xxs ? 15 : 9;
  for (int is = -lim; is <= lim; ++is) {
    const float id = (float(2 * kMaxQ - 1) + float(is) * 0.2f) / max;
    const float this_scale = 1 / id;
    bool on_aux[8];
    for (int k = 0; k < 8; ++k) on_aux[k] = round_group(g, kMaxQ, id, this_scale, xval + 4 * k, waux + 4 * k, Laux + 4 * k);
    float sumqx, sumq2;
    fit_sums(32, weight, xval, Laux, &sumqx, &sumq2);
    if (sumq2 > 0 && sumqx * sumqx > best * sumq2) {
      scale = sumqx / sumq2;
      best = scale * sumqx;
      std::memcpy(L, Laux, 32);
      for (int k = 0; k < 8; ++k) on_grid[k] = on_aux[k];
    }
  }
  int n_off = 0;
  for (int k = 0; k < 8; ++k) n_off += on_grid[k] ? 0 : 1;
  if (n_off > 0 && scale > 0) {
    const float id = 1 / scale;
    for (int k = 0; k < 8; ++k) {
      if (xxs && on_grid[k]) continue;
      round_group(g, kMaxQ, id, scale, xval + 4 * k, waux + 4 * k, L + 4 * k);
    }
    float sumqx, sumq2;
    fit_sums(32, weight, xval, L, &sumqx, &sumq2);
    if (sumq2 > 0) scale = sumqx / sumq2;
  }
  if (scale < 0) {
    scale = -scale;
    for (int k = 0; k < 4; ++k) r.signs[k] = uint8_t(xxs ? ~r.signs[k] & 127 : ~r.signs[k]);
  }
  for (int k = 0; k < 8; ++k) r.gi[k] = grid_index_of(g, L + 4 * k);
  r.scale = scale;
  r.stored = true;
  return r;
}

void iq3_weights(const SuperBlock& sb, int ib, float sigma2, float* weight) {
  const float* xb = sb.x + 32 * ib;
  if (sb.has_qw) {
    for (int i = 0; i < 32; ++i) weight[i] = sb.qw[32 * ib + i] * std::sqrt(sigma2 + xb[i] * xb[i]);
  } else {
    for (int i = 0; i < 32; ++i) weight[i] = xb[i] * xb[i];
  }
}

void iq3_xxs_block(const SuperBlock& sb, uint8_t* out) {
  const Lattice& g = lattice_iq3xxs();
  // {f16 d; u8 q3[96]}: 64 grid index bytes, then per sub-block a u32 of 4 x 7 sign bits and the
  // 4-bit scale in bits 28-31.
  uint8_t q3[96] = {};
  float scales[8];
  float max_scale = 0;
  const float sigma2 = 2 * sb.sumx2 / float(kQK);
  for (int ib = 0; ib < 8; ++ib) {
    float weight[32];
    iq3_weights(sb, ib, sigma2, weight);
    const Iq3SubResult r = iq3_sub(g, sb.x + 32 * ib, weight, true);
    if (!r.stored) {
      scales[ib] = 0;
      continue;
    }
    for (int k = 0; k < 8; ++k) q3[8 * ib + k] = uint8_t(r.gi[k]);
    const uint32_t ss =
        uint32_t(r.signs[0]) | uint32_t(r.signs[1]) << 7 | uint32_t(r.signs[2]) << 14 | uint32_t(r.signs[3]) << 21;
    std::memcpy(q3 + 64 + 4 * ib, &ss, 4);
    scales[ib] = r.scale;
    max_scale = gmax(max_scale, r.scale);
  }
  uint16_t d16 = f32_to_f16(0.0f);
  if (max_scale == 0.0f) {
    std::memset(q3, 0, sizeof(q3));
  } else {
    const float d = max_scale / 31;
    d16 = f32_to_f16(d * 1.0125f);
    const float id = 1 / d;
    for (int ib = 0; ib < 8; ++ib) {
      uint32_t ss;
      std::memcpy(&ss, q3 + 64 + 4 * ib, 4);
      ss |= uint32_t(scale_nibble(id, scales[ib])) << 28;
      std::memcpy(q3 + 64 + 4 * ib, &ss, 4);
    }
  }
  std::memcpy(out, &d16, 2);
  std::memcpy(out + 2, q3, 96);
}

void iq3_s_block(const SuperBlock& sb, uint8_t* out) {
  const Lattice& g = lattice_iq3s();
  // {f16 d; u8 qs[64]; u8 qh[8]; u8 signs[32]; u8 scales[4]}
  uint8_t qs[64] = {}, qh[8] = {}, sg[32] = {}, sc[4] = {};
  float scales[8];
  float max_scale = 0;
  const float sigma2 = 2 * sb.sumx2 / float(kQK);
  // ggml advances its grid-index and sign write positions only past stored sub-blocks: after an
  // all-zero sub-block, the following ones land 8 index bytes / 4 sign bytes early (the high
  // index bits stay at their own sub-block's qh byte). Reproduced.
  int qs_at = 0, sg_at = 0;
  for (int ib = 0; ib < 8; ++ib) {
    float weight[32];
    iq3_weights(sb, ib, sigma2, weight);
    const Iq3SubResult r = iq3_sub(g, sb.x + 32 * ib, weight, false);
    if (!r.stored) {
      scales[ib] = 0;
      continue;
    }
    for (int k = 0; k < 8; ++k) {
      qs[qs_at + k] = uint8_t(r.gi[k] & 255);
      qh[ib] = uint8_t(qh[ib] | (r.gi[k] >> 8) << k);
    }
    qs_at += 8;
    for (int k = 0; k < 4; ++k) sg[sg_at + k] = r.signs[k];
    sg_at += 4;
    scales[ib] = r.scale;
    max_scale = gmax(max_scale, r.scale);
  }
  uint16_t d16 = f32_to_f16(0.0f);
  if (max_scale != 0.0f) {
    const float d = max_scale / 31;
    d16 = f32_to_f16(d * 1.033f);
    const float id = 1 / d;
    for (int ib = 0; ib < 8; ib += 2) {
      sc[ib / 2] = uint8_t(scale_nibble(id, scales[ib]) | scale_nibble(id, scales[ib + 1]) << 4);
    }
  }
  std::memcpy(out, &d16, 2);
  std::memcpy(out + 2, qs, 64);
  std::memcpy(out + 66, qh, 8);
  std::memcpy(out + 74, sg, 32);
  std::memcpy(out + 106, sc, 4);
}

// ---- IQ1_S / IQ1_M ------------------------------------------------------------------------------

constexpr float kDelta1 = 0.125f;  // IQ1S_DELTA == IQ1M_DELTA
constexpr float kXp[3] = {-1 + kDelta1, kDelta1, 1 + kDelta1};
constexpr float kXm[3] = {-1 - kDelta1, -kDelta1, 1 - kDelta1};

// Indices 0..n-1 ordered by ascending x, equal values in index order (glibc's qsort, which ggml
// calls, is a stable merge sort for arrays this small).
void sort_indices(int n, const float* x, int* idx) {
  for (int i = 0; i < n; ++i) {
    int j = i;
    while (j > 0 && x[idx[j - 1]] > x[i]) {
      idx[j] = idx[j - 1];
      --j;
    }
    idx[j] = i;
  }
}

// The neighbour of an off-grid IQ1 code nearest (weighted squared error) to x at scale s, with
// the level values xx (the group's shifted -1, 0, 1).
int iq1_neighbour(const Lattice& g, int code, const float* x, const float* w, float s, const float* xx, int8_t* L) {
  const uint16_t* nb = g.neighbours(code);
  auto err = [&](int k) {
    const int8_t* q = g.point(k);
    float d2 = 0;
    for (int i = 0; i < 8; ++i) {
      const float diff = s * xx[(q[i] - 1) / 2] - x[i];
      d2 += w[i] * diff * diff;
    }
    return d2;
  };
  float best = FLT_MAX;
  int idx = -1;
  for (int n = 1; n <= nb[0]; ++n) {
    const float d2 = err(nb[n]);
    if (d2 < best) {
      best = d2;
      idx = nb[n];
    }
  }
  // Only for errors of at least FLT_MAX or NaN; ggml then scans the whole grid (reading its
  // inputs at a wrong index), here the scan is done properly.
  for (int k = 0; idx < 0 && k < g.n_grid; ++k) {
    const float d2 = err(k);
    if (d2 < best) {
      best = d2;
      idx = k;
    }
  }
  if (idx < 0) idx = nb[1];
  const int8_t* q = g.point(idx);
  for (int i = 0; i < 8; ++i) L[i] = int8_t((q[i] - 1) / 2);
  return idx;
}

// IQ1_S: 8 sub-blocks of 32 with one shift sign each. {f16 d; u8 qs[32]; u16 qh[8]}
void iq1_s_block(const SuperBlock& sb, uint8_t* out) {
  const Lattice& g = lattice_iq1s();
  uint8_t qs[32] = {};
  uint16_t qh[8] = {};
  float scales[8];
  int shifts[8];
  float max_scale = 0;
  const float sigma2 = 2 * sb.sumx2 / float(kQK);
  for (int ib = 0; ib < 8; ++ib) {
    const float* xb = sb.x + 32 * ib;
    float weight[32];
    for (int i = 0; i < 32; ++i) weight[i] = sb.qw[32 * ib + i] * std::sqrt(sigma2 + xb[i] * xb[i]);
    float max = std::fabs(xb[0]);
    for (int i = 1; i < 32; ++i) max = gmax(max, std::fabs(xb[i]));
    if (max < kEpsIq1s) {
      scales[ib] = 0;
      shifts[ib] = 1;
      continue;
    }
    int idx[32];
    sort_indices(32, xb, idx);
    float sumx[33], sumw[33];
    sumx[0] = sumw[0] = 0;
    for (int j = 0; j < 32; ++j) {
      const int i = idx[j];
      sumx[j + 1] = sumx[j] + weight[i] * xb[i];
      sumw[j + 1] = sumw[j] + weight[i];
    }
    float best_score = -FLT_MAX, scale = max;
    int b1 = -1, b2 = -1, best_shift = 0;
    for (int i1 = 0; i1 <= 32; ++i1) {
      for (int i2 = i1; i2 <= 32; ++i2) {
        for (int sgn = 0; sgn < 2; ++sgn) {
          const float* v = sgn == 0 ? kXp : kXm;
          const float sumqx = (sumx[i1] - sumx[0]) * v[0] + (sumx[i2] - sumx[i1]) * v[1] + (sumx[32] - sumx[i2]) * v[2];
          const float sumq2 =
              (sumw[i1] - sumw[0]) * v[0] * v[0] + (sumw[i2] - sumw[i1]) * v[1] * v[1] + (sumw[32] - sumw[i2]) * v[2] * v[2];
          if (sumq2 > 0 && sumqx * sumqx > best_score * sumq2) {
            scale = sumqx / sumq2;
            best_score = scale * sumqx;
            b1 = i1;
            b2 = i2;
            best_shift = sgn == 0 ? 1 : -1;
          }
        }
      }
    }
    if (b1 < 0 || b2 < 0 || best_shift == 0) {
      scales[ib] = 0;
      shifts[ib] = 1;
      continue;
    }
    int8_t L[32];
    for (int j = 0; j < 32; ++j) L[idx[j]] = int8_t(j < b1 ? 0 : j < b2 ? 1 : 2);
    if (scale < 0) {
      for (int j = 0; j < 32; ++j) L[j] = int8_t(2 - L[j]);
      scale = -scale;
      best_shift = -best_shift;
    }
    const float* xx = best_shift == 1 ? kXp : kXm;
    bool all_on_grid = true;
    int index[4];
    for (int k = 0; k < 4; ++k) {
      const int u = code_of(L + 8 * k, 8, 2);
      int gi = g.map[size_t(u)];
      if (gi < 0) {
        all_on_grid = false;
        gi = iq1_neighbour(g, u, xb + 8 * k, weight + 8 * k, scale, xx, L + 8 * k);
      }
      index[k] = gi;
    }
    if (!all_on_grid) {
      float sumqx = 0, sumq2 = 0;
      for (int k = 0; k < 4; ++k) {
        const int8_t* q = g.point(index[k]);
        for (int j = 0; j < 8; ++j) {
          const float w = weight[8 * k + j];
          const float v = xx[(q[j] - 1) / 2];
          sumqx += w * v * xb[8 * k + j];
          sumq2 += w * v * v;
        }
      }
      if (sumqx > 0 && sumq2 > 0) scale = sumqx / sumq2;
    }
    uint16_t h = 0;
    for (int k = 0; k < 4; ++k) {
      qs[4 * ib + k] = uint8_t(index[k] & 255);
      h = uint16_t(h | (index[k] >> 8) << (3 * k));
    }
    qh[ib] = h;
    scales[ib] = scale;
    shifts[ib] = best_shift;
    max_scale = gmax(max_scale, scale);
  }
  uint16_t d16 = f32_to_f16(0.0f);
  if (max_scale != 0.0f) {
    const float d = max_scale / 15;
    d16 = f32_to_f16(d * 1.125f);
    const float id = 1 / d;
    for (int ib = 0; ib < 8; ++ib) {
      int l = clamp_level(round_ggml(0.5f * (id * scales[ib] - 1)), 7);
      if (shifts[ib] == -1) l |= 8;
      qh[ib] = uint16_t(qh[ib] | l << 12);
    }
  }
  std::memcpy(out, &d16, 2);
  std::memcpy(out + 2, qs, 32);
  std::memcpy(out + 34, qh, 16);
}

// IQ1_M: 16 sub-blocks of 16, each of its two groups of 8 with its own shift sign; the f16 scale
// is spread over the top nibbles of the four u16 scale words. {u8 qs[32]; u8 qh[16]; u8 scales[8]}
void iq1_m_block(const SuperBlock& sb, uint8_t* out) {
  const Lattice& g = lattice_iq1s();
  uint8_t qs[32] = {}, qh[16] = {};
  uint16_t sc[4] = {};
  float scales[16];
  int shifts[16];
  float max_scale = 0;
  const float sigma2 = 2 * sb.sumx2 / float(kQK);
  auto weights = [&](int ib, float* weight) {
    const float* xb = sb.x + 16 * ib;
    if (sb.has_qw) {
      for (int i = 0; i < 16; ++i) weight[i] = sb.qw[16 * ib + i] * std::sqrt(sigma2 + xb[i] * xb[i]);
    } else {
      for (int i = 0; i < 16; ++i) weight[i] = xb[i] * xb[i];
    }
  };
  // Level values of group k (0, 1) under shift pattern s: bit 1 of s = group 0 shifted down,
  // bit 0 = group 1 shifted down (0: +,+  1: +,-  2: -,+  3: -,-).
  auto levels = [](int s, int k) { return (k == 0 ? s < 2 : s % 2 == 0) ? kXp : kXm; };
  const float p2 = kXp[2], m2 = kXm[2];
  const float cp1 = kXp[0] * kXp[0] - kXp[1] * kXp[1];
  const float cp2 = kXp[1] * kXp[1] - kXp[2] * kXp[2];
  const float cm1 = kXm[0] * kXm[0] - kXm[1] * kXm[1];
  const float cm2 = kXm[1] * kXm[1] - kXm[2] * kXm[2];
  for (int ib = 0; ib < 16; ++ib) {
    const float* xb = sb.x + 16 * ib;
    float weight[16];
    weights(ib, weight);
    float max = std::fabs(xb[0]);
    for (int i = 1; i < 16; ++i) max = gmax(max, std::fabs(xb[i]));
    if (max < kEpsIq1m) {
      scales[ib] = 0;
      shifts[ib] = 0;
      continue;
    }
    int idx[16];
    sort_indices(16, xb, idx);
    // Prefix sums over the sorted order, kept per half of the sub-block (each half has its shift).
    float px[2][17], pw[2][17];
    px[0][0] = px[1][0] = pw[0][0] = pw[1][0] = 0;
    for (int j = 0; j < 16; ++j) {
      const int i = idx[j];
      const int h = i < 8 ? 0 : 1;
      px[h][j + 1] = px[h][j] + weight[i] * xb[i];
      px[1 - h][j + 1] = px[1 - h][j];
      pw[h][j + 1] = pw[h][j] + weight[i];
      pw[1 - h][j + 1] = pw[1 - h][j];
    }
    const float txs[2] = {px[0][16], px[1][16]};
    const float tws[2] = {pw[0][16], pw[1][16]};
    float best_score = -FLT_MAX, scale = max;
    int b1 = -1, b2 = -1, best_k = -1;
    for (int i1 = 0; i1 <= 16; ++i1) {
      for (int i2 = i1; i2 <= 16; ++i2) {
        float qx_p[2], qx_m[2], q2_p[2], q2_m[2];
        for (int h = 0; h < 2; ++h) {
          const float sx = px[h][i1] + px[h][i2];
          qx_p[h] = txs[h] * p2 - sx;
          qx_m[h] = txs[h] * m2 - sx;
          q2_p[h] = tws[h] * p2 * p2 + pw[h][i1] * cp1 + pw[h][i2] * cp2;
          q2_m[h] = tws[h] * m2 * m2 + pw[h][i1] * cm1 + pw[h][i2] * cm2;
        }
        const float sqx[4] = {qx_p[0] + qx_p[1], qx_p[0] + qx_m[1], qx_m[0] + qx_p[1], qx_m[0] + qx_m[1]};
        const float sq2[4] = {q2_p[0] + q2_p[1], q2_p[0] + q2_m[1], q2_m[0] + q2_p[1], q2_m[0] + q2_m[1]};
        for (int k = 0; k < 4; ++k) {
          if (sq2[k] > 0 && sqx[k] * sqx[k] > best_score * sq2[k]) {
            scale = sqx[k] / sq2[k];
            best_score = scale * sqx[k];
            b1 = i1;
            b2 = i2;
            best_k = k;
          }
        }
      }
    }
    if (b1 < 0 || b2 < 0 || best_k < 0) {
      scales[ib] = 0;
      shifts[ib] = 0;
      continue;
    }
    int8_t L[16];
    for (int j = 0; j < 16; ++j) L[idx[j]] = int8_t(j < b1 ? 0 : j < b2 ? 1 : 2);
    if (scale < 0) {
      for (int j = 0; j < 16; ++j) L[j] = int8_t(2 - L[j]);
      scale = -scale;
      best_k = 3 - best_k;
    }
    bool all_on_grid = true;
    int index[2];
    for (int k = 0; k < 2; ++k) {
      const float* xx = levels(best_k, k);
      const int u = code_of(L + 8 * k, 8, 2);
      int gi = g.map[size_t(u)];
      if (gi < 0) {
        all_on_grid = false;
        gi = iq1_neighbour(g, u, xb + 8 * k, weight + 8 * k, scale, xx, L + 8 * k);
      }
      index[k] = gi;
    }
    if (!all_on_grid) {
      float sumqx = 0, sumq2 = 0;
      for (int k = 0; k < 2; ++k) {
        const float* xx = levels(best_k, k);
        const int8_t* q = g.point(index[k]);
        for (int j = 0; j < 8; ++j) {
          const float w = weight[8 * k + j];
          const float v = xx[(q[j] - 1) / 2];
          sumqx += w * v * xb[8 * k + j];
          sumq2 += w * v * v;
        }
      }
      if (sumqx > 0 && sumq2 > 0) scale = sumqx / sumq2;
    }
    qs[2 * ib] = uint8_t(index[0] & 255);
    qs[2 * ib + 1] = uint8_t(index[1] & 255);
    qh[ib] = uint8_t((index[0] >> 8) | (index[1] >> 8) << 4);
    scales[ib] = scale;
    shifts[ib] = best_k;
    max_scale = gmax(max_scale, scale);
  }
  if (max_scale != 0.0f) {
    // The 3-bit sub-block scales against d = max/15, then d itself refitted by least squares
    // over the whole super-block with the stored levels and scales.
    static constexpr uint8_t kShiftBits[4] = {0x00, 0x80, 0x08, 0x88};
    float d = max_scale / 15;
    const float id = 1 / d;
    float sumqx = 0, sumq2 = 0;
    for (int ib = 0; ib < 16; ++ib) {
      const int l = clamp_level(round_ggml(0.5f * (id * scales[ib] - 1)), 7);
      sc[ib / 4] = uint16_t(sc[ib / 4] | l << (3 * (ib % 4)));
      qh[ib] = uint8_t(qh[ib] | kShiftBits[shifts[ib]]);
      const float* xb = sb.x + 16 * ib;
      float weight[16];
      weights(ib, weight);
      for (int k = 0; k < 2; ++k) {
        const float* xx = levels(shifts[ib], k);
        const int gi = qs[2 * ib + k] + ((qh[ib] << (8 - 4 * k)) & 0x700);
        const int8_t* q = g.point(gi);
        for (int j = 0; j < 8; ++j) {
          const float w = weight[8 * k + j];
          const float v = xx[(q[j] - 1) / 2] * float(2 * l + 1);
          sumqx += w * v * xb[8 * k + j];
          sumq2 += w * v * v;
        }
      }
    }
    if (sumq2 > 0) d = sumqx / sumq2;
    const uint16_t s = f32_to_f16(d * 1.1125f);
    sc[0] = uint16_t(sc[0] | (s & 0x000f) << 12);
    sc[1] = uint16_t(sc[1] | (s & 0x00f0) << 8);
    sc[2] = uint16_t(sc[2] | (s & 0x0f00) << 4);
    sc[3] = uint16_t(sc[3] | (s & 0xf000));
  }
  std::memcpy(out, qs, 32);
  std::memcpy(out + 32, qh, 16);
  std::memcpy(out + 48, sc, 8);
}

// ---- row driver ---------------------------------------------------------------------------------

size_t quantize_rows(void (*block)(const SuperBlock&, uint8_t*), size_t block_bytes, const float* src, void* dst,
                     int64_t nrows, int64_t n_per_row, const float* imatrix) {
  if (nrows < 0 || n_per_row <= 0 || n_per_row % kQK != 0) return 0;
  const int64_t nb = n_per_row / kQK;
  uint8_t* out = static_cast<uint8_t*>(dst);
  SuperBlock sb;
  for (int64_t r = 0; r < nrows; ++r) {
    const float* row = reinterpret_cast<const float*>(reinterpret_cast<const uint8_t*>(src) + r * n_per_row * 4);
    for (int64_t i = 0; i < nb; ++i) {
      sb.load(row, imatrix, i);
      block(sb, out);
      out += block_bytes;
    }
  }
  return size_t(nrows) * size_t(nb) * block_bytes;
}

// ---- importance-weighted quantizers of the older types ---------------------------------------
// ggml's quantize_qX_K / quantize_qX_Y with quant_weights: the same block formats as the reference
// quantizers (quant.h), but every fit weighs element i by the importance value times
// sqrt(sigma2 + x_i^2), and the sub-block scales are themselves fitted by weighted least squares.

using detail::BlockIQ4_NL;
using detail::BlockIQ4_XS;
using detail::BlockQ2_K;
using detail::BlockQ3_K;
using detail::BlockQ4_0;
using detail::BlockQ4_1;
using detail::BlockQ4_K;
using detail::BlockQ5_0;
using detail::BlockQ5_1;
using detail::BlockQ5_K;
using detail::BlockQ6_K;

// Symmetric fit of n values to levels -nmax..nmax-1 (stored + nmax) with weights w (ggml's
// make_qx_quants with importance weights, rmse_type 1): the grid from the value of largest
// magnitude, then 18 nearby grids, keeping the best weighted least-squares fit.
float fit_symmetric_weighted(int n, int nmax, const float* x, int8_t* L, const float* w) {
  float max = 0, amax = 0;
  for (int i = 0; i < n; ++i) {
    const float ax = std::fabs(x[i]);
    if (ax > amax) {
      amax = ax;
      max = x[i];
    }
  }
  if (amax < kEps) {
    std::memset(L, 0, size_t(n));
    return 0.0f;
  }
  float iscale = float(-nmax) / max;
  float sumlx = 0, suml2 = 0;
  for (int i = 0; i < n; ++i) {
    const int l = imax(-nmax, imin(nmax - 1, round_ggml(iscale * x[i])));
    L[i] = int8_t(l + nmax);
    sumlx += w[i] * x[i] * float(l);
    suml2 += w[i] * float(l) * float(l);
  }
  float scale = suml2 != 0.0f ? sumlx / suml2 : 0.0f;
  float best = scale * sumlx;
  for (int is = -9; is <= 9; ++is) {
    if (is == 0) continue;
    iscale = -(float(nmax) + 0.1f * float(is)) / max;
    sumlx = suml2 = 0;
    for (int i = 0; i < n; ++i) {
      const int l = imax(-nmax, imin(nmax - 1, round_ggml(iscale * x[i])));
      sumlx += w[i] * x[i] * float(l);
      suml2 += w[i] * float(l) * float(l);
    }
    if (suml2 > 0 && sumlx * sumlx > best * suml2) {
      for (int i = 0; i < n; ++i) L[i] = int8_t(nmax + imax(-nmax, imin(nmax - 1, round_ggml(iscale * x[i]))));
      scale = sumlx / suml2;
      best = scale * sumlx;
    }
  }
  return scale;
}

// Affine fit x ~ scale * L - min_out of n values to levels 0..nmax with weights w (ggml's
// make_qkx3_quants, squared error): the min/max grid, then nstep + 1 grids with nmax + rmin +
// rdelta * is steps, each refitted by weighted least squares (the offset kept <= 0).
float fit_affine_weighted(int n, int nmax, const float* x, const float* w, uint8_t* L, float* min_out, float rmin,
                          float rdelta, int nstep) {
  float min = x[0], max = x[0];
  float sum_w = w[0];
  float sum_x = sum_w * x[0];
  for (int i = 1; i < n; ++i) {
    if (x[i] < min) min = x[i];
    if (x[i] > max) max = x[i];
    sum_w += w[i];
    sum_x += w[i] * x[i];
  }
  if (min > 0) min = 0;
  if (max <= min) {
    std::memset(L, 0, size_t(n));
    *min_out = -min;
    return 0.0f;
  }
  float iscale = float(nmax) / (max - min);
  float scale = 1 / iscale;
  float best = 0;
  for (int i = 0; i < n; ++i) {
    L[i] = uint8_t(clamp_level(round_ggml(iscale * (x[i] - min)), nmax));
    const float diff = scale * float(L[i]) + min - x[i];
    best += w[i] * (diff * diff);
  }
  uint8_t aux[32];
  for (int is = 0; is <= nstep; ++is) {
    iscale = (rmin + rdelta * float(is) + float(nmax)) / (max - min);
    float sum_l = 0, sum_l2 = 0, sum_xl = 0;
    for (int i = 0; i < n; ++i) {
      const int l = clamp_level(round_ggml(iscale * (x[i] - min)), nmax);
      aux[i] = uint8_t(l);
      sum_l += w[i] * float(l);
      sum_l2 += w[i] * float(l) * float(l);
      sum_xl += w[i] * float(l) * x[i];
    }
    const float det = sum_w * sum_l2 - sum_l * sum_l;
    if (det > 0) {
      float this_scale = (sum_w * sum_xl - sum_x * sum_l) / det;
      float this_min = (sum_l2 * sum_x - sum_l * sum_xl) / det;
      if (this_min > 0) {
        this_min = 0;
        this_scale = sum_xl / sum_l2;
      }
      float err = 0;
      for (int i = 0; i < n; ++i) {
        const float diff = this_scale * float(aux[i]) + this_min - x[i];
        err += w[i] * (diff * diff);
      }
      if (err < best) {
        std::memcpy(L, aux, size_t(n));
        best = err;
        scale = this_scale;
        min = this_min;
      }
    }
  }
  *min_out = -min;
  return scale;
}

inline float f16f(uint16_t h) { return f16_to_f32(h); }

// 2-bit levels of elements e, e+32, e+64, e+96 of each 128-element half into one byte.
void pack_2bit_levels(const uint8_t* L, uint8_t* qs) {
  for (int h = 0; h < 2; ++h) {
    for (int l = 0; l < 32; ++l) {
      const uint8_t* p = L + 128 * h + l;
      qs[32 * h + l] = uint8_t(p[0] | p[32] << 2 | p[64] << 4 | p[96] << 6);
    }
  }
}

void q2_k_weighted(const float* x, const float* qw, BlockQ2_K& y) {
  uint8_t L[256], Ls[16], Lm[16];
  float mins[16], scales[16], sw[16], weight[16];
  float sumx2 = 0;
  for (int j = 0; j < 256; ++j) sumx2 += x[j] * x[j];
  const float sigma2 = sumx2 / 256;
  for (int j = 0; j < 16; ++j) {
    for (int l = 0; l < 16; ++l) weight[l] = qw[16 * j + l] * std::sqrt(sigma2 + x[16 * j + l] * x[16 * j + l]);
    sw[j] = 0;
    for (int l = 0; l < 16; ++l) sw[j] += weight[l];
    scales[j] = fit_affine_weighted(16, 3, x + 16 * j, weight, L + 16 * j, &mins[j], -0.9f, 0.05f, 36);
  }
  const float dm0 = fit_levels_qp(16, 15, scales, Ls, sw);
  const float mm0 = fit_levels_qp(16, 15, mins, Lm, sw);
  y.d = f32_to_f16(dm0);
  y.dmin = f32_to_f16(mm0);
  const float dm = f16f(y.d), mm = f16f(y.dmin);
  for (int j = 0; j < 16; ++j) y.scales[j] = uint8_t(Ls[j] | Lm[j] << 4);
  for (int j = 0; j < 16; ++j) {
    const float d = dm * float(y.scales[j] & 0xF);
    if (d == 0.0f) continue;
    const float m = mm * float(y.scales[j] >> 4);
    for (int i = 0; i < 16; ++i) L[16 * j + i] = uint8_t(clamp_level(round_ggml((x[16 * j + i] + m) / d), 3));
  }
  pack_2bit_levels(L, y.qs);
}

void q3_k_weighted(const float* x, const float* qw, BlockQ3_K& y) {
  int8_t L[256], Ls[16];
  float scales[16], weight[16], sw[16];
  float sumx2 = 0;
  for (int j = 0; j < 256; ++j) sumx2 += x[j] * x[j];
  const float sigma2 = 2 * sumx2 / 256;
  for (int j = 0; j < 16; ++j) {
    for (int l = 0; l < 16; ++l) weight[l] = qw[16 * j + l] * std::sqrt(sigma2 + x[16 * j + l] * x[16 * j + l]);
    float sumw = 0;
    for (int l = 0; l < 16; ++l) sumw += weight[l];
    sw[j] = sumw;
    scales[j] = fit_symmetric_weighted(16, 4, x + 16 * j, L + 16 * j, weight);
  }
  std::memset(y.scales, 0, 12);
  const float d_block = fit_symmetric_weighted(16, 32, scales, Ls, sw);
  for (int j = 0; j < 16; ++j) {
    int l = Ls[j];
    if (j < 8) y.scales[j] = uint8_t(l & 0xF);
    else y.scales[j - 8] = uint8_t(y.scales[j - 8] | (l & 0xF) << 4);
    l >>= 4;
    y.scales[j % 4 + 8] = uint8_t(y.scales[j % 4 + 8] | l << (2 * (j / 4)));
  }
  y.d = f32_to_f16(d_block);
  for (int j = 0; j < 16; ++j) {
    int8_t sc = int8_t(j < 8 ? y.scales[j] & 0xF : y.scales[j - 8] >> 4);
    sc = int8_t((sc | ((y.scales[8 + j % 4] >> (2 * (j / 4))) & 3) << 4) - 32);
    const float d = f16f(y.d) * float(sc);
    if (d == 0.0f) continue;
    for (int i = 0; i < 16; ++i) L[16 * j + i] = int8_t(imax(-4, imin(3, round_ggml(x[16 * j + i] / d))) + 4);
  }
  std::memset(y.hmask, 0, 32);
  uint8_t low[256];
  for (int e = 0; e < 256; ++e) {
    int l = L[e];
    if (l > 3) {
      y.hmask[e % 32] = uint8_t(y.hmask[e % 32] | 1 << (e / 32));
      l -= 4;
    }
    low[e] = uint8_t(l);
  }
  pack_2bit_levels(low, y.qs);
}

// Q4_K / Q5_K: 8 sub-blocks of 32 with 6-bit scales and mins fitted against the sub-block weights.
void q45_k_weighted(const float* x, const float* qw, int nmax, bool clamp63, uint16_t* d_out, uint16_t* dmin_out,
                    uint8_t* sc, uint8_t* L) {
  uint8_t Ls[8], Lm[8];
  float weights[32], sw[8], mins[8], scales[8];
  float sum_x2 = 0;
  for (int l = 0; l < 256; ++l) sum_x2 += x[l] * x[l];
  const float sigma2 = 2 * sum_x2 / 256;
  for (int j = 0; j < 8; ++j) {
    for (int l = 0; l < 32; ++l) weights[l] = qw[32 * j + l] * std::sqrt(sigma2 + x[32 * j + l] * x[32 * j + l]);
    float sumw = 0;
    for (int l = 0; l < 32; ++l) sumw += weights[l];
    sw[j] = sumw;
    scales[j] = fit_affine_weighted(32, nmax, x + 32 * j, weights, L + 32 * j, &mins[j], -0.9f, 0.05f, 36);
  }
  const float d_block = fit_levels_qp(8, 63, scales, Ls, sw);
  const float m_block = fit_levels_qp(8, 63, mins, Lm, sw);
  for (int j = 0; j < 8; ++j) {
    uint8_t ls = Ls[j], lm = Lm[j];
    if (clamp63) {
      ls = uint8_t(imin(63, ls));
      lm = uint8_t(imin(63, lm));
    }
    if (j < 4) {
      sc[j] = ls;
      sc[j + 4] = lm;
    } else {
      sc[j + 4] = uint8_t((ls & 0xF) | (lm & 0xF) << 4);
      sc[j - 4] = uint8_t(sc[j - 4] | (ls >> 4) << 6);
      sc[j] = uint8_t(sc[j] | (lm >> 4) << 6);
    }
  }
  *d_out = f32_to_f16(d_block);
  *dmin_out = f32_to_f16(m_block);
  for (int j = 0; j < 8; ++j) {
    int s, m;
    detail::k4_scale_min(sc, j, &s, &m);
    const float d = f16f(*d_out) * float(s);
    if (d == 0.0f) continue;
    const float dm = f16f(*dmin_out) * float(m);
    for (int i = 0; i < 32; ++i) L[32 * j + i] = uint8_t(clamp_level(round_ggml((x[32 * j + i] + dm) / d), nmax));
  }
}

void q4_k_weighted(const float* x, const float* qw, BlockQ4_K& y) {
  uint8_t L[256];
  q45_k_weighted(x, qw, 15, false, &y.d, &y.dmin, y.scales, L);
  for (int c = 0; c < 4; ++c) {
    for (int l = 0; l < 32; ++l) y.qs[32 * c + l] = uint8_t(L[64 * c + l] | L[64 * c + 32 + l] << 4);
  }
}

void q5_k_weighted(const float* x, const float* qw, BlockQ5_K& y) {
  uint8_t L[256];
  q45_k_weighted(x, qw, 31, true, &y.d, &y.dmin, y.scales, L);
  std::memset(y.qh, 0, 32);
  for (int c = 0; c < 4; ++c) {
    for (int l = 0; l < 32; ++l) {
      int lo = L[64 * c + l], hi = L[64 * c + 32 + l];
      if (lo > 15) {
        lo -= 16;
        y.qh[l] = uint8_t(y.qh[l] | 1 << (2 * c));
      }
      if (hi > 15) {
        hi -= 16;
        y.qh[l] = uint8_t(y.qh[l] | 2 << (2 * c));
      }
      y.qs[32 * c + l] = uint8_t(lo | hi << 4);
    }
  }
}

void q6_k_weighted(const float* x, const float* qw, BlockQ6_K& y) {
  int8_t L[256];
  float scales[16];
  float max_scale = 0, max_abs_scale = 0;
  for (int ib = 0; ib < 16; ++ib) {
    // The raw importance values, without ggml's sigma2 term here.
    const float scale = fit_symmetric_weighted(16, 32, x + 16 * ib, L + 16 * ib, qw + 16 * ib);
    scales[ib] = scale;
    const float a = std::fabs(scale);
    if (a > max_abs_scale) {
      max_abs_scale = a;
      max_scale = scale;
    }
  }
  if (max_abs_scale < kEps) {
    std::memset(&y, 0, sizeof(y));
    return;
  }
  const float iscale = -128.0f / max_scale;
  y.d = f32_to_f16(1 / iscale);
  for (int ib = 0; ib < 16; ++ib) y.scales[ib] = int8_t(imin(127, round_ggml(iscale * scales[ib])));
  for (int j = 0; j < 16; ++j) {
    const float d = f16f(y.d) * float(y.scales[j]);
    if (d == 0.0f) continue;
    for (int i = 0; i < 16; ++i) L[16 * j + i] = int8_t(imax(-32, imin(31, round_ggml(x[16 * j + i] / d))) + 32);
  }
  for (int h = 0; h < 2; ++h) {
    uint8_t* ql = y.ql + 64 * h;
    uint8_t* qh = y.qh + 32 * h;
    const int8_t* p = L + 128 * h;
    for (int l = 0; l < 32; ++l) {
      ql[l] = uint8_t((p[l] & 0xF) | (p[l + 64] & 0xF) << 4);
      ql[l + 32] = uint8_t((p[l + 32] & 0xF) | (p[l + 96] & 0xF) << 4);
      qh[l] = uint8_t(p[l] >> 4 | (p[l + 32] >> 4) << 2 | (p[l + 64] >> 4) << 4 | (p[l + 96] >> 4) << 6);
    }
  }
}

// Q4_0 / Q4_1 / Q5_0 / Q5_1: 32-element blocks; sigma2 is taken over the whole row.
void q4_0_weighted(const float* xb, const float* w, BlockQ4_0& y) {
  int8_t L[32];
  y.d = f32_to_f16(fit_symmetric_weighted(32, 8, xb, L, w));
  for (int j = 0; j < 16; ++j) y.qs[j] = uint8_t(L[j] | L[j + 16] << 4);
}
void q4_1_weighted(const float* xb, const float* w, BlockQ4_1& y) {
  uint8_t L[32];
  float min;
  const float d = fit_affine_weighted(32, 15, xb, w, L, &min, -0.9f, 0.05f, 36);
  y.d = f32_to_f16(d);
  y.m = f32_to_f16(-min);
  for (int j = 0; j < 16; ++j) y.qs[j] = uint8_t(L[j] | L[j + 16] << 4);
}
void pack_q5(const uint8_t* L, uint8_t* qs, uint8_t* qh_out) {
  uint32_t qh = 0;
  for (int j = 0; j < 16; ++j) {
    qs[j] = uint8_t((L[j] & 0x0F) | (L[j + 16] & 0x0F) << 4);
    qh |= uint32_t((L[j] & 0x10u) >> 4) << j;
    qh |= uint32_t((L[j + 16] & 0x10u) >> 4) << (j + 16);
  }
  std::memcpy(qh_out, &qh, 4);
}
void q5_0_weighted(const float* xb, const float* w, BlockQ5_0& y) {
  int8_t L[32];
  y.d = f32_to_f16(fit_symmetric_weighted(32, 16, xb, L, w));
  pack_q5(reinterpret_cast<const uint8_t*>(L), y.qs, y.qh);
}
void q5_1_weighted(const float* xb, const float* w, BlockQ5_1& y) {
  uint8_t L[32];
  float min;
  const float d = fit_affine_weighted(32, 31, xb, w, L, &min, -0.9f, 0.05f, 36);
  y.d = f32_to_f16(d);
  y.m = f32_to_f16(-min);
  pack_q5(L, y.qs, y.qh);
}

// Index of the IQ4_NL level nearest to v (the lower one unless the upper is strictly nearer).
int iq4_index(float v) {
  const int8_t* t = detail::kIq4nlValues;
  if (v <= float(t[0])) return 0;
  if (v >= float(t[15])) return 15;
  int lo = 0, hi = 15;
  while (hi - lo > 1) {
    const int mid = (lo + hi) / 2;
    if (v < float(t[mid])) hi = mid;
    else lo = mid;
  }
  return v - float(t[hi - 1]) < float(t[hi]) - v ? hi - 1 : hi;
}

// IQ4_NL (sbs 32) / IQ4_XS (sbs 256): ggml's quantize_row_iq4_nl_impl as ggml_quantize_chunk runs
// it (15 trial scales), weights from the importance matrix or x^2 without one.
void iq4_weighted(int sbs, const float* x, const float* qw, uint16_t* dh, uint8_t* q4, uint16_t* scales_h,
                  uint8_t* scales_l) {
  constexpr int kTry = 7;
  const int8_t* values = detail::kIq4nlValues;
  float sigma2 = 0;
  for (int j = 0; j < sbs; ++j) sigma2 += x[j] * x[j];
  sigma2 *= 2.0f / float(sbs);
  std::memset(q4, 0, size_t(sbs / 2));
  *dh = f32_to_f16(0.0f);
  uint8_t L[256];
  float scales[8], weight[32];
  float max_scale = 0, amax_scale = 0;
  const int nb = sbs / 32;
  for (int ib = 0; ib < nb; ++ib) {
    const float* xb = x + 32 * ib;
    uint8_t* Lb = L + 32 * ib;
    if (qw) {
      for (int j = 0; j < 32; ++j) weight[j] = qw[32 * ib + j] * std::sqrt(sigma2 + xb[j] * xb[j]);
    } else {
      for (int j = 0; j < 32; ++j) weight[j] = xb[j] * xb[j];
    }
    float amax = 0, max = 0;
    for (int j = 0; j < 32; ++j) {
      const float ax = std::fabs(xb[j]);
      if (ax > amax) {
        amax = ax;
        max = xb[j];
      }
    }
    if (amax < kEps) {
      scales[ib] = 0;
      continue;
    }
    float d = -max / float(values[0]);
    float id = 1 / d;
    float sumqx = 0, sumq2 = 0;
    for (int j = 0; j < 32; ++j) {
      const int l = iq4_index(id * xb[j]);
      Lb[j] = uint8_t(l);
      const float q = float(values[l]);
      sumqx += weight[j] * q * xb[j];
      sumq2 += weight[j] * q * q;
    }
    d = sumq2 > 0 ? sumqx / sumq2 : 0.0f;
    float best = d * sumqx;
    for (int itry = -kTry; itry <= kTry; ++itry) {
      id = float(itry + values[0]) / max;
      sumqx = sumq2 = 0;
      for (int j = 0; j < 32; ++j) {
        const float q = float(values[iq4_index(id * xb[j])]);
        sumqx += weight[j] * q * xb[j];
        sumq2 += weight[j] * q * q;
      }
      if (sumq2 > 0 && sumqx * sumqx > best * sumq2) {
        d = sumqx / sumq2;
        best = d * sumqx;
      }
    }
    scales[ib] = d;
    const float abs_d = std::fabs(d);
    if (abs_d > amax_scale) {
      amax_scale = abs_d;
      max_scale = d;
    }
  }
  if (nb > 1) {
    *scales_h = 0;
    const float d = -max_scale / 32;
    *dh = f32_to_f16(d);
    const float id = d != 0.0f ? 1 / d : 0.0f;
    for (int ib = 0; ib < nb; ++ib) {
      int l = imax(-32, imin(31, round_ggml(id * scales[ib])));
      const float dl = d * float(l);
      const float idl = dl != 0.0f ? 1 / dl : 0.0f;
      for (int j = 0; j < 32; ++j) L[32 * ib + j] = uint8_t(iq4_index(idl * x[32 * ib + j]));
      l += 32;
      const uint8_t l_l = uint8_t(l & 0xF), l_h = uint8_t(l >> 4);
      if (ib % 2 == 0) scales_l[ib / 2] = l_l;
      else scales_l[ib / 2] = uint8_t(scales_l[ib / 2] | l_l << 4);
      *scales_h = uint16_t(*scales_h | l_h << (2 * (ib % 8)));
    }
  } else {
    *dh = f32_to_f16(scales[0]);
    const float id = scales[0] != 0.0f ? 1 / scales[0] : 0.0f;
    for (int j = 0; j < sbs; ++j) L[j] = uint8_t(iq4_index(id * x[j]));
  }
  for (int i = 0; i < sbs / 32; ++i) {
    for (int j = 0; j < 16; ++j) q4[16 * i + j] = uint8_t(L[32 * i + j] | L[32 * i + 16 + j] << 4);
  }
}

// Row driver of the weighted quantizers: copies each row (and the importance values) to aligned
// storage, then runs one block function per block of `blk` elements; ggml's row-wide sigma2 is
// passed for the 32-element types.
enum class RowKind { kSuper, kLegacy };

template <class Block>
size_t weighted_rows(TensorType t, int blk, const float* src, void* dst, int64_t nrows, int64_t n_per_row,
                     const float* imatrix, void (*super_fn)(const float*, const float*, Block&),
                     void (*legacy_fn)(const float*, const float*, Block&)) {
  if (nrows < 0 || n_per_row <= 0 || n_per_row % blk != 0) return 0;
  const int64_t nb = n_per_row / blk;
  const size_t row_bytes = size_t(nb) * sizeof(Block);
  uint8_t* out = static_cast<uint8_t*>(dst);
  std::vector<float> row(static_cast<size_t>(n_per_row)), qw;
  if (!imatrix) {  // ggml_quantize_chunk then runs the reference quantizer
    for (int64_t r = 0; r < nrows; ++r) {
      std::memcpy(row.data(), reinterpret_cast<const uint8_t*>(src) + r * n_per_row * 4, row.size() * 4);
      quantize_row(t, row.data(), out + size_t(r) * row_bytes, n_per_row);
    }
    return size_t(nrows) * row_bytes;
  }
  qw.resize(size_t(n_per_row));
  std::memcpy(qw.data(), imatrix, qw.size() * 4);
  std::vector<float> w(32);
  for (int64_t r = 0; r < nrows; ++r) {
    std::memcpy(row.data(), reinterpret_cast<const uint8_t*>(src) + r * n_per_row * 4, row.size() * 4);
    float sigma2 = 0;
    if (legacy_fn) {
      float sum_x2 = 0;
      for (int64_t j = 0; j < n_per_row; ++j) sum_x2 += row[size_t(j)] * row[size_t(j)];
      sigma2 = sum_x2 / float(n_per_row);
    }
    for (int64_t i = 0; i < nb; ++i) {
      Block b;
      std::memset(&b, 0, sizeof(b));
      const float* xb = row.data() + i * blk;
      const float* qb = qw.data() + i * blk;
      if (legacy_fn) {
        for (int j = 0; j < 32; ++j) w[size_t(j)] = qb[j] * std::sqrt(sigma2 + xb[j] * xb[j]);
        legacy_fn(xb, w.data(), b);
      } else {
        super_fn(xb, qb, b);
      }
      detail::store_block(out + size_t(r) * row_bytes, i, b);
    }
  }
  return size_t(nrows) * row_bytes;
}

template <class Block>
size_t iq4_rows(int sbs, const float* src, void* dst, int64_t nrows, int64_t n_per_row, const float* imatrix) {
  if (nrows < 0 || n_per_row <= 0 || n_per_row % sbs != 0) return 0;
  const int64_t nb = n_per_row / sbs;
  uint8_t* out = static_cast<uint8_t*>(dst);
  std::vector<float> row(static_cast<size_t>(n_per_row)), qw;
  if (imatrix) {
    qw.resize(size_t(n_per_row));
    std::memcpy(qw.data(), imatrix, qw.size() * 4);
  }
  for (int64_t r = 0; r < nrows; ++r) {
    std::memcpy(row.data(), reinterpret_cast<const uint8_t*>(src) + r * n_per_row * 4, row.size() * 4);
    for (int64_t i = 0; i < nb; ++i) {
      Block b;
      std::memset(&b, 0, sizeof(b));
      const float* qb = imatrix ? qw.data() + i * sbs : nullptr;
      if constexpr (std::is_same_v<Block, BlockIQ4_XS>) {
        iq4_weighted(sbs, row.data() + i * sbs, qb, &b.d, b.qs, &b.scales_h, b.scales_l);
      } else {
        uint16_t unused_h = 0;
        iq4_weighted(sbs, row.data() + i * sbs, qb, &b.d, b.qs, &unused_h, nullptr);
      }
      detail::store_block(out + size_t(r) * size_t(nb) * sizeof(Block), i, b);
    }
  }
  return size_t(nrows) * size_t(nb) * sizeof(Block);
}

}  // namespace

size_t quantize_iq2_xxs(const float* src, void* dst, int64_t nrows, int64_t n_per_row, const float* imatrix) {
  if (!imatrix) return 0;
  return quantize_rows(iq2_xxs_block, 66, src, dst, nrows, n_per_row, imatrix);
}
size_t quantize_iq2_xs(const float* src, void* dst, int64_t nrows, int64_t n_per_row, const float* imatrix) {
  if (!imatrix) return 0;
  return quantize_rows(iq2_xs_block, 74, src, dst, nrows, n_per_row, imatrix);
}
size_t quantize_iq2_s(const float* src, void* dst, int64_t nrows, int64_t n_per_row, const float* imatrix) {
  return quantize_rows(iq2_s_block, 82, src, dst, nrows, n_per_row, imatrix);
}
size_t quantize_iq3_xxs(const float* src, void* dst, int64_t nrows, int64_t n_per_row, const float* imatrix) {
  return quantize_rows(iq3_xxs_block, 98, src, dst, nrows, n_per_row, imatrix);
}
size_t quantize_iq3_s(const float* src, void* dst, int64_t nrows, int64_t n_per_row, const float* imatrix) {
  return quantize_rows(iq3_s_block, 110, src, dst, nrows, n_per_row, imatrix);
}
size_t quantize_iq1_s(const float* src, void* dst, int64_t nrows, int64_t n_per_row, const float* imatrix) {
  if (!imatrix) return 0;
  return quantize_rows(iq1_s_block, 50, src, dst, nrows, n_per_row, imatrix);
}
size_t quantize_iq1_m(const float* src, void* dst, int64_t nrows, int64_t n_per_row, const float* imatrix) {
  return quantize_rows(iq1_m_block, 56, src, dst, nrows, n_per_row, imatrix);
}

bool iq_requires_imatrix(TensorType t) {
  return t == TensorType::IQ2_XXS || t == TensorType::IQ2_XS || t == TensorType::IQ1_S;
}

bool llama_quantize_requires_imatrix(TensorType t) {
  switch (t) {
    case TensorType::IQ2_XXS:
    case TensorType::IQ2_XS:
    case TensorType::IQ2_S:
    case TensorType::IQ3_XXS:
    case TensorType::IQ1_S:
    case TensorType::IQ1_M: return true;
    default: return false;
  }
}

size_t quantize_iq(TensorType t, const float* src, void* dst, int64_t nrows, int64_t n_per_row, const float* imatrix) {
  switch (t) {
    case TensorType::IQ2_XXS: return quantize_iq2_xxs(src, dst, nrows, n_per_row, imatrix);
    case TensorType::IQ2_XS: return quantize_iq2_xs(src, dst, nrows, n_per_row, imatrix);
    case TensorType::IQ2_S: return quantize_iq2_s(src, dst, nrows, n_per_row, imatrix);
    case TensorType::IQ3_XXS: return quantize_iq3_xxs(src, dst, nrows, n_per_row, imatrix);
    case TensorType::IQ3_S: return quantize_iq3_s(src, dst, nrows, n_per_row, imatrix);
    case TensorType::IQ1_S: return quantize_iq1_s(src, dst, nrows, n_per_row, imatrix);
    case TensorType::IQ1_M: return quantize_iq1_m(src, dst, nrows, n_per_row, imatrix);
    default: return 0;
  }
}

size_t quantize_q2_k(const float* src, void* dst, int64_t nrows, int64_t n_per_row, const float* imatrix) {
  return weighted_rows<BlockQ2_K>(TensorType::Q2_K, 256, src, dst, nrows, n_per_row, imatrix, q2_k_weighted, nullptr);
}
size_t quantize_q3_k(const float* src, void* dst, int64_t nrows, int64_t n_per_row, const float* imatrix) {
  return weighted_rows<BlockQ3_K>(TensorType::Q3_K, 256, src, dst, nrows, n_per_row, imatrix, q3_k_weighted, nullptr);
}
size_t quantize_q4_k(const float* src, void* dst, int64_t nrows, int64_t n_per_row, const float* imatrix) {
  return weighted_rows<BlockQ4_K>(TensorType::Q4_K, 256, src, dst, nrows, n_per_row, imatrix, q4_k_weighted, nullptr);
}
size_t quantize_q5_k(const float* src, void* dst, int64_t nrows, int64_t n_per_row, const float* imatrix) {
  return weighted_rows<BlockQ5_K>(TensorType::Q5_K, 256, src, dst, nrows, n_per_row, imatrix, q5_k_weighted, nullptr);
}
size_t quantize_q6_k(const float* src, void* dst, int64_t nrows, int64_t n_per_row, const float* imatrix) {
  return weighted_rows<BlockQ6_K>(TensorType::Q6_K, 256, src, dst, nrows, n_per_row, imatrix, q6_k_weighted, nullptr);
}
size_t quantize_q4_0(const float* src, void* dst, int64_t nrows, int64_t n_per_row, const float* imatrix) {
  return weighted_rows<BlockQ4_0>(TensorType::Q4_0, 32, src, dst, nrows, n_per_row, imatrix, nullptr, q4_0_weighted);
}
size_t quantize_q4_1(const float* src, void* dst, int64_t nrows, int64_t n_per_row, const float* imatrix) {
  return weighted_rows<BlockQ4_1>(TensorType::Q4_1, 32, src, dst, nrows, n_per_row, imatrix, nullptr, q4_1_weighted);
}
size_t quantize_q5_0(const float* src, void* dst, int64_t nrows, int64_t n_per_row, const float* imatrix) {
  return weighted_rows<BlockQ5_0>(TensorType::Q5_0, 32, src, dst, nrows, n_per_row, imatrix, nullptr, q5_0_weighted);
}
size_t quantize_q5_1(const float* src, void* dst, int64_t nrows, int64_t n_per_row, const float* imatrix) {
  return weighted_rows<BlockQ5_1>(TensorType::Q5_1, 32, src, dst, nrows, n_per_row, imatrix, nullptr, q5_1_weighted);
}
size_t quantize_iq4_nl(const float* src, void* dst, int64_t nrows, int64_t n_per_row, const float* imatrix) {
  return iq4_rows<BlockIQ4_NL>(32, src, dst, nrows, n_per_row, imatrix);
}
size_t quantize_iq4_xs(const float* src, void* dst, int64_t nrows, int64_t n_per_row, const float* imatrix) {
  return iq4_rows<BlockIQ4_XS>(256, src, dst, nrows, n_per_row, imatrix);
}

size_t quantize_chunk(TensorType t, const float* src, void* dst, int64_t nrows, int64_t n_per_row, const float* imatrix) {
  switch (t) {
    case TensorType::Q2_K: return quantize_q2_k(src, dst, nrows, n_per_row, imatrix);
    case TensorType::Q3_K: return quantize_q3_k(src, dst, nrows, n_per_row, imatrix);
    case TensorType::Q4_K: return quantize_q4_k(src, dst, nrows, n_per_row, imatrix);
    case TensorType::Q5_K: return quantize_q5_k(src, dst, nrows, n_per_row, imatrix);
    case TensorType::Q6_K: return quantize_q6_k(src, dst, nrows, n_per_row, imatrix);
    case TensorType::Q4_0: return quantize_q4_0(src, dst, nrows, n_per_row, imatrix);
    case TensorType::Q4_1: return quantize_q4_1(src, dst, nrows, n_per_row, imatrix);
    case TensorType::Q5_0: return quantize_q5_0(src, dst, nrows, n_per_row, imatrix);
    case TensorType::Q5_1: return quantize_q5_1(src, dst, nrows, n_per_row, imatrix);
    case TensorType::IQ4_NL: return quantize_iq4_nl(src, dst, nrows, n_per_row, imatrix);
    case TensorType::IQ4_XS: return quantize_iq4_xs(src, dst, nrows, n_per_row, imatrix);
    default: return quantize_iq(t, src, dst, nrows, n_per_row, imatrix);
  }
}

}  // namespace loom::quant
