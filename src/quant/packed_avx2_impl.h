// The 256-bit packed GEMM kernels, written once and compiled twice by packed_avx2.cpp: with the
// plain AVX2 dot step (VPMADDUBSW into int16, VPMADDWD to int32: AMD Zen 2/3, Intel before Alder
// Lake) and with AVX-VNNI's (VPDPBUSD on ymm). Internal to packed_avx2.cpp, which defines before
// each inclusion:
//   LOOM_PK_NS      the namespace of this copy (inside loom::quant::detail)
//   LOOM_PK_TARGET  its target string ("avx2,fma,f16c" or that plus "avxvnni": each copy is
//                   compiled for its own ISA only, so the AVX2 copy can hold no VNNI instruction)
//   LOOM_PK_VNNI    1 for the VPDPBUSD copy
//
// A group's 16 rows are two halves of 8 lanes (bytes 0..31 and 32..63 of every 64-byte chunk of
// the layout, packed.h; the AVX-512 kernels' layout, unchanged): a ymm register holds 4 bytes of
// each of 8 rows. The kernels step through the 4-column element groups of a tile, decode the
// weights of both halves and apply them to NA activation rows (a broadcast of their 4 bytes):
// 2 NA running sums, a register block of 16 weight rows x NA activation rows (NA = 4, 2, 1), so
// each broadcast serves 16 rows and each decoded register NA rows. Decode (NA = 1) streams the
// weights once, with the layout's software prefetch.
//
// The dot step. Dot::begin(init) / Dot::step(part, u, a) / Dot::end(acc, part) compute
// acc + Σ_steps Σ_k u_k · a_k per 32-bit lane (u unsigned bytes, a signed bytes):
//   AVX-VNNI: the part is the int32 sum itself, started at init (VPDPBUSD).
//   AVX2: the part is 16 int16 (VPMADDUBSW: two products per int16, summed over steps), widened
//   and pair-summed into acc by VPMADDWD against 1 (or against a scale, Dot::end_scaled).
//   VPMADDUBSW saturates at ±32767, so a part may only take as many steps as keep
//   2 · steps · u_max · 127 below 2^15: 8 for 4-bit levels (u ≤ 15: 30480), 4 for 5-bit (31),
//   2 for 6-bit (63); the kernels flush it that often (Dot::kSteps*). Q8_0's bytes and the IQ4
//   tables (u up to 255) take the sign trick instead: VPMADDUBSW(|w|, sign(a, w)) with the
//   signed levels w (|w| ≤ 128: 2 · 128 · 127 = 32512, one step per part).
// Every integer sum is exact, so results equal the reference's to float rounding; each output's
// float operations are the same whatever NA (batch invariance).
//
// GCC and these loops: as plain intrinsics it reassociates an int16 part's chain of adds and
// issues a block's VPMADDUBSW all first, spilling them (Dot::step pins each sum with an empty
// asm), and it hoists whatever does not change across an inner loop (the broadcasts, when the
// loop over halves was inside the loop over element groups) and spills that too; hence the loop
// order above.
#if !defined(LOOM_PK_NS) || !defined(LOOM_PK_TARGET) || !defined(LOOM_PK_VNNI)
#error "packed_avx2_impl.h is included by packed_avx2.cpp only"
#endif

#define LOOM_PK __attribute__((target(LOOM_PK_TARGET)))

namespace loom::quant::detail::LOOM_PK_NS {
namespace {

// ---- the dot step ----------------------------------------------------------------------------

struct Dot {
  static constexpr bool kVnni = LOOM_PK_VNNI;
  // The most steps a part may take for levels of at most 4, 5 and 6 bits.
  static constexpr int kSteps4 = kVnni ? 1 << 20 : 8, kSteps5 = kVnni ? 1 << 20 : 4, kSteps6 = kVnni ? 1 << 20 : 2;

  LOOM_PK static inline __m256i begin(__m256i init) {
    if constexpr (kVnni) return init;
    (void)init;
    return _mm256_setzero_si256();
  }
  LOOM_PK static inline __m256i step(__m256i part, __m256i u, __m256i a) {
#if LOOM_PK_VNNI
    return _mm256_dpbusd_avx_epi32(part, u, a);
#else
    // The empty asm keeps each part a running sum: GCC otherwise reassociates the chain of adds
    // and schedules all of a block's VPMADDUBSW first, spilling their results.
    __m256i sum = _mm256_add_epi16(part, _mm256_maddubs_epi16(u, a));
    __asm__("" : "+x"(sum));
    return sum;
#endif
  }
  // acc + the part (AVX2: acc was init, the part started at 0).
  LOOM_PK static inline __m256i end(__m256i acc, __m256i part) {
    if constexpr (kVnni) {
      (void)acc;
      return part;
    }
    return _mm256_add_epi32(acc, _mm256_madd_epi16(part, _mm256_set1_epi16(1)));
  }
  // acc + scale · (the part), the part started at 0 (begin(zero)): sc32 holds the scale in each
  // 32-bit lane (VNNI: VPMULLD), sc16 in both 16-bit halves of it (AVX2: VPMADDWD).
  LOOM_PK static inline __m256i end_scaled(__m256i acc, __m256i part, __m256i sc32, __m256i sc16) {
    if constexpr (kVnni) {
      (void)sc16;
      return _mm256_add_epi32(acc, _mm256_mullo_epi32(part, sc32));
    }
    (void)sc32;
    return _mm256_add_epi32(acc, _mm256_madd_epi16(part, sc16));
  }
};

// The signed-weight step of the AVX2 copy (the sign trick): Σ_k w_k · a_k per lane for signed
// bytes w (-128..127) and a (-127..127), as 16 int16 sums of two products (|w| · |a| ≤ 128 · 127).
LOOM_PK inline __m256i signed_pairs(__m256i w_abs, __m256i w, __m256i a) {
  return _mm256_maddubs_epi16(w_abs, _mm256_sign_epi8(a, w));
}

// ---- small helpers ---------------------------------------------------------------------------

// 4 activation bytes at p broadcast to every lane.
LOOM_PK inline __m256i bcast32(const uint8_t* p) {
  int32_t x;
  std::memcpy(&x, p, 4);
  return _mm256_set1_epi32(x);
}
LOOM_PK inline __m256 bcastf(const uint8_t* p) {
  float x;
  std::memcpy(&x, p, 4);
  return _mm256_set1_ps(x);
}
LOOM_PK inline __m256i load256(const uint8_t* p) { return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)); }
// 8 f16 at p widened to f32.
LOOM_PK inline __m256 f16x8(const uint8_t* p) {
  return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}
// 8 bytes at p as 8 int32 lanes (unsigned or signed).
LOOM_PK inline __m256i u8x8(const uint8_t* p) {
  return _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)));
}
LOOM_PK inline __m256i i8x8(const uint8_t* p) {
  return _mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)));
}
// An int32 lane value v (|v| < 2^15) in both 16-bit halves of its lane: lo = v, hi = v.
LOOM_PK inline __m256i dup16(__m256i v) { return _mm256_blend_epi16(v, _mm256_slli_epi32(v, 16), 0xAA); }
// Two int32 lane values (|v| < 2^15) as the 16-bit pair (lo, hi) of each lane.
LOOM_PK inline __m256i pair16(__m256i lo, __m256i hi) { return _mm256_blend_epi16(lo, _mm256_slli_epi32(hi, 16), 0xAA); }

// The 32 bits of a chunk mask (ChunkMask) for one half as 32 bytes: `add` where the bit is set,
// else 0 (bit i of the 32 belongs to byte i of the half's register).
LOOM_PK inline __m256i mask_bytes(const uint8_t* half_mask, __m256i add) {
  uint32_t m;
  std::memcpy(&m, half_mask, 4);
  const __m256i spread = _mm256_shuffle_epi8(
      _mm256_set1_epi32(int32_t(m)),
      _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3));
  const __m256i bit = _mm256_set1_epi64x(int64_t(0x8040201008040201ull));
  return _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(spread, bit), bit), add);
}

// Stores the two halves of a group's outputs (rows < valid).
LOOM_PK inline void store16(float* o, __m256 lo, __m256 hi, int valid) {
  if (valid == 16) {
    _mm256_storeu_ps(o, lo);
    _mm256_storeu_ps(o + 8, hi);
    return;
  }
  alignas(32) float tmp[16];
  _mm256_store_ps(tmp, lo);
  _mm256_store_ps(tmp + 8, hi);
  std::memcpy(o, tmp, sizeof(float) * size_t(valid));
}

// ---- the 32-column block types ---------------------------------------------------------------

// What a 32-column block type's tile holds beyond Q4_0's (PackedLayout).
struct Blocks32 {
  bool nibbles, has_min, fifth_bit, lut, mxfp4;
};
constexpr Blocks32 blocks32_of(const PackedLayout& L) { return Blocks32{L.nibbles, L.has_min, L.fifth_bit, L.lut, L.mxfp4}; }

// The IQ4_NL levels as signed bytes (kIq4nlBiased - 128), for the AVX2 copy's sign trick; MXFP4's
// are kMxfp4Values (kMxfp4Biased - 128).
inline constexpr int8_t kIq4nlSigned[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};
inline constexpr int8_t kMxfp4Signed[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};
// The table a lut layout's nibbles go through in this copy: biased (VNNI) or signed (AVX2).
template <bool kVnni>
constexpr const void* lut_table(bool mxfp4) {
  if constexpr (kVnni) return biased_table(mxfp4);
  return mxfp4 ? kMxfp4Signed : kIq4nlSigned;
}

// NA activation rows against one group of a 32-column block type. Per block, for each element
// group j (elements 4j..4j+3; for nibbles, chunk j's low nibbles are elements 4j.., its high
// nibbles 4(j+4)..) the weights of both halves are decoded once and applied to the NA rows'
// broadcast of those elements: 2 NA running sums (a register block of 16 rows x NA rows).
template <int NA, Blocks32 F>
LOOM_PK void group_kernel(const uint8_t* grp, const PackedLayout& L, int64_t nb, const uint8_t* act, size_t act_stride,
                          float* out, size_t out_stride, int valid) {
  // Signed levels and the sign trick (AVX2 only): Q8_0's bytes, the IQ4_NL table.
  constexpr bool kSigned = !Dot::kVnni && (!F.nibbles || F.lut);
  constexpr int kSteps = F.fifth_bit ? Dot::kSteps5 : Dot::kSteps4;
  __m256 acc[NA][2];
  for (int a = 0; a < NA; ++a) acc[a][0] = acc[a][1] = _mm256_setzero_ps();
  const __m256i m4 = _mm256_set1_epi8(0x0f), sixteen = _mm256_set1_epi8(16);
  const __m256i lut =
      _mm256_broadcastsi128_si256(_mm_loadu_si128(static_cast<const __m128i*>(lut_table<Dot::kVnni>(F.mxfp4))));
  const __m256i sign_bit = _mm256_set1_epi8(int8_t(0x80));
  const size_t tile_bytes = L.tile_bytes, q_offset = L.q_offset(), qh_offset = L.qh_offset();
  const int32_t bias = kSigned ? 0 : L.bias;
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* tile = grp + size_t(b) * tile_bytes;
    prefetch_ahead(tile, tile_bytes);
    const uint8_t* q = tile + q_offset;
    const uint8_t* ab[NA];
    for (int a = 0; a < NA; ++a) ab[a] = act + size_t(a) * act_stride + size_t(b) * sizeof(PackedActBlock);
    // The weights of element group j (0..7) of half h, unsigned (or signed, kSigned).
    auto weight = [&](int j, int h) LOOM_PK {
      if constexpr (F.nibbles) {
        const __m256i c = load256(q + 64 * (j & 3) + 32 * h);
        __m256i w = j < 4 ? _mm256_and_si256(c, m4) : _mm256_and_si256(_mm256_srli_epi16(c, 4), m4);
        if constexpr (F.fifth_bit) {
          w = _mm256_or_si256(w, mask_bytes(tile + qh_offset + 16 * size_t(j & 3) + 8 * (j >> 2) + 4 * h, sixteen));
        }
        if constexpr (F.lut) w = _mm256_shuffle_epi8(lut, w);
        return w;
      } else {
        const __m256i c = load256(q + 64 * j + 32 * h);
        return kSigned ? _mm256_xor_si256(c, sign_bit) : c;  // Q8_0: byte - 128
      }
    };
    __m256i isum[NA][2];
    for (int a = 0; a < NA; ++a) {
      int32_t sum;
      std::memcpy(&sum, ab[a] + 4, 4);
      isum[a][0] = isum[a][1] = _mm256_set1_epi32(F.has_min ? 0 : -bias * sum);
    }
    if constexpr (kSigned) {
      for (int j = 0; j < 8; ++j) {
        const __m256i w0 = weight(j, 0), w1 = weight(j, 1);
        const __m256i w0_abs = _mm256_sign_epi8(w0, w0), w1_abs = _mm256_sign_epi8(w1, w1);
        for (int a = 0; a < NA; ++a) {
          const __m256i x = bcast32(ab[a] + 8 + 4 * j);
          isum[a][0] = _mm256_add_epi32(isum[a][0], _mm256_madd_epi16(signed_pairs(w0_abs, w0, x), _mm256_set1_epi16(1)));
          isum[a][1] = _mm256_add_epi32(isum[a][1], _mm256_madd_epi16(signed_pairs(w1_abs, w1, x), _mm256_set1_epi16(1)));
        }
      }
    } else {
      for (int j0 = 0; j0 < 8; j0 += kSteps) {
        __m256i part[NA][2];
        for (int a = 0; a < NA; ++a) {
          part[a][0] = Dot::begin(isum[a][0]);
          part[a][1] = Dot::begin(isum[a][1]);
        }
        for (int j = j0; j < j0 + kSteps && j < 8; ++j) {
          const __m256i w0 = weight(j, 0), w1 = weight(j, 1);
          for (int a = 0; a < NA; ++a) {
            const __m256i x = bcast32(ab[a] + 8 + 4 * j);
            part[a][0] = Dot::step(part[a][0], w0, x);
            part[a][1] = Dot::step(part[a][1], w1, x);
          }
        }
        for (int a = 0; a < NA; ++a) {
          isum[a][0] = Dot::end(isum[a][0], part[a][0]);
          isum[a][1] = Dot::end(isum[a][1], part[a][1]);
        }
      }
    }
    for (int h = 0; h < 2; ++h) {
      const __m256 dw = f16x8(tile + 16 * h);
      __m256 mw = _mm256_setzero_ps();
      if constexpr (F.has_min) mw = f16x8(tile + PackedLayout::kScaleBytes + 16 * h);
      for (int a = 0; a < NA; ++a) {
        acc[a][h] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum[a][h]), _mm256_mul_ps(dw, bcastf(ab[a])), acc[a][h]);
        if constexpr (F.has_min) acc[a][h] = _mm256_fmadd_ps(mw, bcastf(ab[a] + 4), acc[a][h]);
      }
    }
  }
  for (int a = 0; a < NA; ++a) store16(out + size_t(a) * out_stride, acc[a][0], acc[a][1], valid);
}

template <Blocks32 F>
void run_blocks32(TensorType t, int64_t rows, int64_t cols, const void* packed, int64_t g0, int64_t g1, const void* act,
                  size_t act_stride, int n, float* out, size_t out_stride) {
  auto kernel = [](int na, const uint8_t* grp, const PackedLayout& L, int64_t nb, const uint8_t* a, size_t as, float* o,
                   size_t os, int valid) {
    with_na<4, 2, 1>(na, [&]<int NA>() { group_kernel<NA, F>(grp, L, nb, a, as, o, os, valid); });
  };
  packed_gemm_loop(t, rows, cols, packed, g0, g1, act, act_stride, n, out, out_stride, 4, kernel);
}

// ---- the super-block types -------------------------------------------------------------------

// The float step of a super-block for the k-quant kernels, on their integer sums of half h:
// with mins acc += d_a (d isum - dmin msum), without acc += d_a (d isum); d (and dmin) are the
// tile's f16 d[16] at 0 (and dmin[16] at 32).
template <bool kMins, int NA>
LOOM_PK inline void fold_super(const uint8_t* tile, int h, const uint8_t* const* ab, const __m256i* isum,
                               const __m256i* msum, __m256 (*acc)[2]) {
  const __m256 d = f16x8(tile + 16 * h);
  __m256 dmin = _mm256_setzero_ps();
  if constexpr (kMins) dmin = f16x8(tile + 32 + 16 * h);
  for (int a = 0; a < NA; ++a) {
    __m256 t = _mm256_mul_ps(d, _mm256_cvtepi32_ps(isum[a]));
    if constexpr (kMins)
      t = _mm256_fmsub_ps(d, _mm256_cvtepi32_ps(isum[a]), _mm256_mul_ps(dmin, _mm256_cvtepi32_ps(msum[a])));
    acc[a][h] = _mm256_fmadd_ps(bcastf(ab[a]), t, acc[a][h]);
  }
}

// The super-block types with Q4_K's nibble arrangement.
enum class Nib256 { kQ4K, kQ5K, kIQ4XS };

// Q4_K / Q5_K / IQ4_XS against Q8_K. Per 64-column pair g of sub-blocks (2g in the low nibbles of
// 8 chunks, 2g + 1 in the high ones), one sub-block at a time: each chunk's weights of both halves
// applied to the NA rows' broadcast (2 NA running sums), the sub-block sums weighted by the scales
// (end_scaled), all in int32; the mins against the activation's sub-block sums (VPMADDWD on 16-bit
// pairs) and the floats once per super-block. Q5_K: the fifth bits (chunk masks) add 16. IQ4_XS:
// the table values (VNNI: biased by 128, each sum starting at -128 · the activation's sum over the
// sub-block, as the reference; AVX2: signed, the sign trick), signed scales, no mins.
template <int NA, Nib256 K>
LOOM_PK void group_kernel_q4k(const uint8_t* grp, int64_t cols, const uint8_t* act, size_t act_stride, float* out,
                              size_t out_stride, int valid) {
  constexpr bool kQ5 = K == Nib256::kQ5K, kIq4 = K == Nib256::kIQ4XS;
  constexpr bool kSigned = kIq4 && !Dot::kVnni;
  constexpr int kSteps = kQ5 ? Dot::kSteps5 : Dot::kSteps4;
  constexpr size_t tile_bytes = kQ5 ? PackedQ5K::kTileBytes : kIq4 ? PackedIQ4XS::kTileBytes : PackedQ4K::kTileBytes;
  constexpr size_t kQs = kIq4 ? PackedIQ4XS::kQs : PackedQ4K::kQs, kSc = kIq4 ? PackedIQ4XS::kSc : PackedQ4K::kSc;
  __m256 acc[NA][2];
  for (int a = 0; a < NA; ++a) acc[a][0] = acc[a][1] = _mm256_setzero_ps();
  const __m256i m4 = _mm256_set1_epi8(0x0f), sixteen = _mm256_set1_epi8(16);
  const __m256i lut = _mm256_broadcastsi128_si256(_mm_loadu_si128(
      reinterpret_cast<const __m128i*>(Dot::kVnni ? reinterpret_cast<const void*>(kIq4nlBiased) : kIq4nlSigned)));
  const int64_t ns = cols / PackedQ4K::kCols;
  for (int64_t sb = 0; sb < ns; ++sb) {
    const uint8_t* tile = grp + size_t(sb) * tile_bytes;
    prefetch_ahead(tile, kQs);
    if constexpr (kQ5) prefetch_ahead(tile + PackedQ5K::kQh, 512);
    const uint8_t* ab[NA];
    for (int a = 0; a < NA; ++a) ab[a] = act + size_t(a) * act_stride + size_t(sb) * sizeof(BlockQ8_K);
    // The activation's sum over sub-block j (two Q8_K bsums).
    auto act_sum = [&](int a, int j) {
      int16_t bs[2];
      std::memcpy(bs, ab[a] + 4 + 256 + 2 * 2 * j, 4);
      return int32_t(bs[0]) + bs[1];
    };
    __m256i isum[NA][2];
    for (int a = 0; a < NA; ++a) isum[a][0] = isum[a][1] = _mm256_setzero_si256();
    for (int g = 0; g < 4; ++g) {
      const uint8_t* q = tile + kQs + 512 * size_t(g);
      prefetch_ahead(q, 512);
      for (int sub = 0; sub < 2; ++sub) {
        const int j = 2 * g + sub;  // the sub-block
        __m256i sc[2], sc16[2];
        for (int h = 0; h < 2; ++h) {
          sc[h] = kIq4 ? i8x8(tile + kSc + 16 * j + 8 * h) : u8x8(tile + kSc + 16 * j + 8 * h);
          sc16[h] = dup16(sc[h]);
        }
        // Sub-block j's weights of chunk c, half h (its low nibbles for sub 0, high for sub 1).
        auto weight = [&](int c, int h) LOOM_PK {
          const __m256i chunk = load256(q + 64 * c + 32 * h);
          __m256i w = sub == 0 ? _mm256_and_si256(chunk, m4) : _mm256_and_si256(_mm256_srli_epi16(chunk, 4), m4);
          if constexpr (kQ5) {
            w = _mm256_or_si256(
                w, mask_bytes(tile + PackedQ5K::kQh + 128 * size_t(g) + 16 * size_t(c) + 8 * sub + 4 * h, sixteen));
          }
          if constexpr (kIq4) w = _mm256_shuffle_epi8(lut, w);
          return w;
        };
        if constexpr (kSigned) {
          for (int c = 0; c < 8; ++c) {
            const __m256i w0 = weight(c, 0), w1 = weight(c, 1);
            const __m256i w0_abs = _mm256_sign_epi8(w0, w0), w1_abs = _mm256_sign_epi8(w1, w1);
            for (int a = 0; a < NA; ++a) {
              const __m256i x = bcast32(ab[a] + 4 + 32 * j + 4 * c);
              isum[a][0] = _mm256_add_epi32(isum[a][0], _mm256_madd_epi16(signed_pairs(w0_abs, w0, x), sc16[0]));
              isum[a][1] = _mm256_add_epi32(isum[a][1], _mm256_madd_epi16(signed_pairs(w1_abs, w1, x), sc16[1]));
            }
          }
        } else {
          for (int c0 = 0; c0 < 8; c0 += kSteps) {
            __m256i part[NA][2];
            for (int a = 0; a < NA; ++a) {
              // IQ4_XS (VNNI): the sums start at -128 · the activation's sum, once per sub-block.
              const __m256i init = _mm256_set1_epi32(kIq4 && c0 == 0 ? -128 * act_sum(a, j) : 0);
              part[a][0] = part[a][1] = Dot::begin(init);
            }
            for (int c = c0; c < c0 + kSteps && c < 8; ++c) {
              const __m256i w0 = weight(c, 0), w1 = weight(c, 1);
              for (int a = 0; a < NA; ++a) {
                const __m256i x = bcast32(ab[a] + 4 + 32 * j + 4 * c);
                part[a][0] = Dot::step(part[a][0], w0, x);
                part[a][1] = Dot::step(part[a][1], w1, x);
              }
            }
            for (int a = 0; a < NA; ++a) {
              isum[a][0] = Dot::end_scaled(isum[a][0], part[a][0], sc[0], sc16[0]);
              isum[a][1] = Dot::end_scaled(isum[a][1], part[a][1], sc[1], sc16[1]);
            }
          }
        }
      }
    }
    for (int h = 0; h < 2; ++h) {
      __m256i msum[NA];
      for (int a = 0; a < NA; ++a) msum[a] = _mm256_setzero_si256();
      if constexpr (!kIq4) {
        for (int g = 0; g < 4; ++g) {
          const __m256i mpair = pair16(u8x8(tile + PackedQ4K::kM + 16 * (2 * g) + 8 * h),
                                       u8x8(tile + PackedQ4K::kM + 16 * (2 * g + 1) + 8 * h));
          for (int a = 0; a < NA; ++a) {
            const int32_t bpair =
                int32_t(uint32_t(uint16_t(act_sum(a, 2 * g))) | uint32_t(uint16_t(act_sum(a, 2 * g + 1))) << 16);
            msum[a] = _mm256_add_epi32(msum[a], _mm256_madd_epi16(mpair, _mm256_set1_epi32(bpair)));
          }
        }
      }
      __m256i is[NA];
      for (int a = 0; a < NA; ++a) is[a] = isum[a][h];
      fold_super<!kIq4, NA>(tile, h, ab, is, msum, acc);
    }
  }
  for (int a = 0; a < NA; ++a) store16(out + size_t(a) * out_stride, acc[a][0], acc[a][1], valid);
}

// Q6_K against Q8_K: per sub-block of 16 columns, 4 chunks of levels (0..63), each chunk's weights
// of both halves applied to the NA rows' broadcast; the sums weighted by the signed scale
// (end_scaled). The levels' bias 32 comes off once per super-block as 32 · Σ_s sc_s · (the
// activation's sum over s) (VPMADDWD on 16-bit pairs of scales and sums).
template <int NA>
LOOM_PK void group_kernel_q6k(const uint8_t* grp, int64_t cols, const uint8_t* act, size_t act_stride, float* out,
                              size_t out_stride, int valid) {
  constexpr int kSteps = Dot::kSteps6;
  __m256 acc[NA][2];
  for (int a = 0; a < NA; ++a) acc[a][0] = acc[a][1] = _mm256_setzero_ps();
  const int64_t ns = cols / PackedQ6K::kCols;
  for (int64_t sb = 0; sb < ns; ++sb) {
    const uint8_t* tile = grp + size_t(sb) * PackedQ6K::kTileBytes;
    const uint8_t* ab[NA];
    for (int a = 0; a < NA; ++a) ab[a] = act + size_t(a) * act_stride + size_t(sb) * sizeof(BlockQ8_K);
    __m256i isum[NA][2];
    for (int a = 0; a < NA; ++a) isum[a][0] = isum[a][1] = _mm256_setzero_si256();
    for (int sub = 0; sub < 16; ++sub) {
      const uint8_t* q = tile + PackedQ6K::kQs + 256 * size_t(sub);
      prefetch_ahead(q, 256);
      __m256i sc[2], sc16[2];
      for (int h = 0; h < 2; ++h) {
        sc[h] = i8x8(tile + PackedQ6K::kSc + 16 * sub + 8 * h);
        sc16[h] = dup16(sc[h]);
      }
      for (int c0 = 0; c0 < 4; c0 += kSteps) {
        __m256i part[NA][2];
        for (int a = 0; a < NA; ++a) part[a][0] = part[a][1] = Dot::begin(_mm256_setzero_si256());
        for (int c = c0; c < c0 + kSteps && c < 4; ++c) {
          const __m256i w0 = load256(q + 64 * c), w1 = load256(q + 64 * c + 32);
          for (int a = 0; a < NA; ++a) {
            const __m256i x = bcast32(ab[a] + 4 + 16 * sub + 4 * c);
            part[a][0] = Dot::step(part[a][0], w0, x);
            part[a][1] = Dot::step(part[a][1], w1, x);
          }
        }
        for (int a = 0; a < NA; ++a) {
          isum[a][0] = Dot::end_scaled(isum[a][0], part[a][0], sc[0], sc16[0]);
          isum[a][1] = Dot::end_scaled(isum[a][1], part[a][1], sc[1], sc16[1]);
        }
      }
    }
    for (int h = 0; h < 2; ++h) {
      __m256i bsum[NA];
      for (int a = 0; a < NA; ++a) bsum[a] = _mm256_setzero_si256();
      for (int s = 0; s < 16; s += 2) {
        // Sub-blocks s, s + 1: their scales as 16-bit pairs against the two bsums.
        const __m256i spair =
            pair16(i8x8(tile + PackedQ6K::kSc + 16 * s + 8 * h), i8x8(tile + PackedQ6K::kSc + 16 * (s + 1) + 8 * h));
        for (int a = 0; a < NA; ++a)
          bsum[a] = _mm256_add_epi32(bsum[a], _mm256_madd_epi16(spair, bcast32(ab[a] + 4 + 256 + 2 * s)));
      }
      const __m256 d = f16x8(tile + PackedQ6K::kD + 16 * h);
      for (int a = 0; a < NA; ++a) {
        const __m256i total = _mm256_sub_epi32(isum[a][h], _mm256_slli_epi32(bsum[a], 5));
        acc[a][h] = _mm256_fmadd_ps(_mm256_mul_ps(d, bcastf(ab[a])), _mm256_cvtepi32_ps(total), acc[a][h]);
      }
    }
  }
  for (int a = 0; a < NA; ++a) store16(out + size_t(a) * out_stride, acc[a][0], acc[a][1], valid);
}

// Q2_K and Q3_K against Q8_K: per sub-block s = 4G + p of 16 columns, the 4 chunks of its 64
// columns G shifted by 2p and masked give 4 columns of s per lane (Q3_K: the third bits of plane p,
// chunk masks, add 4); each chunk's weights of both halves applied to the NA rows' broadcast, the
// sums weighted by the scale (end_scaled). Q2_K: 4-bit scales, mins against the activation's
// sub-block sums; Q3_K: signed scales, the levels' bias 4 taken off as 4 · Σ_s sc_s · (the
// activation's sum over s); both once per super-block (VPMADDWD on 16-bit pairs), floats too.
template <int NA, bool Q3>
LOOM_PK void group_kernel_q23k(const uint8_t* grp, int64_t cols, const uint8_t* act, size_t act_stride, float* out,
                               size_t out_stride, int valid) {
  constexpr size_t tile_bytes = Q3 ? PackedQ3K::kTileBytes : PackedQ2K::kTileBytes;
  constexpr size_t kQs = Q3 ? PackedQ3K::kQs : PackedQ2K::kQs;
  constexpr size_t kScales = Q3 ? PackedQ3K::kSc : PackedQ2K::kSm;
  __m256 acc[NA][2];
  for (int a = 0; a < NA; ++a) acc[a][0] = acc[a][1] = _mm256_setzero_ps();
  const __m256i m3 = _mm256_set1_epi8(3), four = _mm256_set1_epi8(4), m4_32 = _mm256_set1_epi32(0x0f);
  // Sub-block s's scales (Q2_K: the low nibble of its byte; Q3_K: signed) and Q2_K's mins, half h.
  auto scale = [&](const uint8_t* tile, int s, int h) LOOM_PK {
    const uint8_t* p = tile + kScales + 16 * s + 8 * h;
    return Q3 ? i8x8(p) : _mm256_and_si256(u8x8(p), m4_32);
  };
  const int64_t ns = cols / PackedQ2K::kCols;
  for (int64_t sb = 0; sb < ns; ++sb) {
    const uint8_t* tile = grp + size_t(sb) * tile_bytes;
    prefetch_ahead(tile, kQs);
    if constexpr (Q3) prefetch_ahead(tile + PackedQ3K::kQh, 512);
    const uint8_t* ab[NA];
    for (int a = 0; a < NA; ++a) ab[a] = act + size_t(a) * act_stride + size_t(sb) * sizeof(BlockQ8_K);
    __m256i isum[NA][2];
    for (int a = 0; a < NA; ++a) isum[a][0] = isum[a][1] = _mm256_setzero_si256();
    for (int G = 0; G < 4; ++G) {
      const uint8_t* q = tile + kQs + 256 * size_t(G);
      prefetch_ahead(q, 256);
      for (int p = 0; p < 4; ++p) {
        const int s = 4 * G + p;
        __m256i sc[2], sc16[2];
        for (int h = 0; h < 2; ++h) {
          sc[h] = scale(tile, s, h);
          sc16[h] = dup16(sc[h]);
        }
        auto weight = [&](int qd, int h) LOOM_PK {
          const __m256i chunk = load256(q + 64 * qd + 32 * h);
          __m256i w = _mm256_and_si256(_mm256_srli_epi16(chunk, 2 * p), m3);
          if constexpr (Q3)
            w = _mm256_or_si256(w, mask_bytes(tile + PackedQ3K::kQh + 32 * size_t(4 * G + qd) + 8 * p + 4 * h, four));
          return w;
        };
        // 4 steps of levels below 8: 4 · 2 · 7 · 127 < 2^15, one part per sub-block.
        __m256i part[NA][2];
        for (int a = 0; a < NA; ++a) part[a][0] = part[a][1] = Dot::begin(_mm256_setzero_si256());
        for (int qd = 0; qd < 4; ++qd) {
          const __m256i w0 = weight(qd, 0), w1 = weight(qd, 1);
          for (int a = 0; a < NA; ++a) {
            const __m256i x = bcast32(ab[a] + 4 + 64 * G + 16 * p + 4 * qd);
            part[a][0] = Dot::step(part[a][0], w0, x);
            part[a][1] = Dot::step(part[a][1], w1, x);
          }
        }
        for (int a = 0; a < NA; ++a) {
          isum[a][0] = Dot::end_scaled(isum[a][0], part[a][0], sc[0], sc16[0]);
          isum[a][1] = Dot::end_scaled(isum[a][1], part[a][1], sc[1], sc16[1]);
        }
      }
    }
    for (int h = 0; h < 2; ++h) {
      // Q2_K: Σ_s min_s · bsum_s; Q3_K: Σ_s sc_s · bsum_s (times 4, off isum).
      __m256i bsum[NA];
      for (int a = 0; a < NA; ++a) bsum[a] = _mm256_setzero_si256();
      for (int s = 0; s < 16; s += 2) {
        __m256i pair;
        if constexpr (Q3) {
          pair = pair16(scale(tile, s, h), scale(tile, s + 1, h));
        } else {
          pair = pair16(_mm256_srli_epi32(u8x8(tile + PackedQ2K::kSm + 16 * s + 8 * h), 4),
                        _mm256_srli_epi32(u8x8(tile + PackedQ2K::kSm + 16 * (s + 1) + 8 * h), 4));
        }
        for (int a = 0; a < NA; ++a)
          bsum[a] = _mm256_add_epi32(bsum[a], _mm256_madd_epi16(pair, bcast32(ab[a] + 4 + 256 + 2 * s)));
      }
      __m256i is[NA];
      for (int a = 0; a < NA; ++a) is[a] = Q3 ? _mm256_sub_epi32(isum[a][h], _mm256_slli_epi32(bsum[a], 2)) : isum[a][h];
      fold_super<!Q3, NA>(tile, h, ab, is, bsum, acc);
    }
  }
  for (int a = 0; a < NA; ++a) store16(out + size_t(a) * out_stride, acc[a][0], acc[a][1], valid);
}

#if !LOOM_PK_VNNI
// F16 (BF16) weights against f32 activations (no dot step: compiled in the AVX2 copy only, which
// the AVX-VNNI entry point calls for them). Column c of a group is 16 f16 (bf16), one per row:
// two registers of 8 rows, acc[g][a][h] += w * x_a[c] for NG groups against NA activation rows.
// Every output is one FMA chain over the columns in order whatever NA and NG (batch invariance);
// the chains' latency is hidden by running 8 to 12 at once: runs of 6 (then 4) activation rows
// over one group, the last 1..3 rows over 2 or 4 groups at a time.
template <bool kBf16>
LOOM_PK inline __m256 load8_f32(const uint8_t* p) {
  const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  if constexpr (kBf16) return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
  return _mm256_cvtph_ps(h);
}

template <int NA, int NG, bool kBf16>
LOOM_PK void group_kernel_f16(const uint8_t* grp, size_t group_bytes, int64_t cols, const uint8_t* act, size_t act_stride,
                              float* out, size_t out_stride, const int* valid) {
  __m256 acc[NG][NA][2];
  for (int g = 0; g < NG; ++g) {
    for (int a = 0; a < NA; ++a) acc[g][a][0] = acc[g][a][1] = _mm256_setzero_ps();
  }
  const uint8_t* x[NA];
  for (int a = 0; a < NA; ++a) x[a] = act + size_t(a) * act_stride;
  for (int64_t c = 0; c < cols; c += 32) {
    const uint8_t* tile = grp + size_t(c) * 32;
    if constexpr (NA == 1) {
      prefetch_next_groups(tile, group_bytes, NG, 1024);
    } else {
      for (int g = 0; g < NG; ++g) prefetch_ahead(tile + size_t(g) * group_bytes, 1024);
    }
    for (int k = 0; k < 32; ++k) {
      for (int g = 0; g < NG; ++g) {
        const uint8_t* col = tile + size_t(g) * group_bytes + 32 * k;
        const __m256 w0 = load8_f32<kBf16>(col), w1 = load8_f32<kBf16>(col + 16);
        for (int a = 0; a < NA; ++a) {
          const __m256 xv = bcastf(x[a] + 4 * size_t(c + k));
          acc[g][a][0] = _mm256_fmadd_ps(w0, xv, acc[g][a][0]);
          acc[g][a][1] = _mm256_fmadd_ps(w1, xv, acc[g][a][1]);
        }
      }
    }
  }
  for (int g = 0; g < NG; ++g) {
    for (int a = 0; a < NA; ++a)
      store16(out + size_t(a) * out_stride + size_t(16 * g), acc[g][a][0], acc[g][a][1], valid[g]);
  }
}

template <bool kBf16>
void run_f16(int64_t rows, int64_t cols, const void* packed, int64_t g0, int64_t g1, const void* act, size_t act_stride,
             int n, float* out, size_t out_stride) {
  const size_t gb = packed_group_stride(kBf16 ? TensorType::BF16 : TensorType::F16, cols);
  const auto* p = static_cast<const uint8_t*>(packed);
  const auto* a = static_cast<const uint8_t*>(act);
  auto valid_rows = [rows](int64_t g) { return int(rows - g * 16 < 16 ? rows - g * 16 : 16); };
  // Runs of 6 activation rows (12 accumulators, the two weight registers and a broadcast: 15 of
  // the 16 ymm registers; 12 FMAs per column against 2 conversions and 6 broadcasts), then one
  // run of 4 where 4 or 5 rows are left, or two where 2 are (n = 6k + 2, a 512-row prompt: 8 rows
  // as 4 + 4 on the group while it is in L1, instead of 2 rows streaming every group again).
  int n6 = n / 6 * 6;
  if (n - n6 == 2 && n6 >= 6) n6 -= 6;
  const int n4 = n - n6 >= 4 ? n6 + 4 : n6, n44 = n - n4 >= 4 ? n4 + 4 : n4;
  for (int64_t g = g0; g < g1; ++g) {
    const int valid[1] = {valid_rows(g)};
    for (int i = 0; i < n6; i += 6) {
      group_kernel_f16<6, 1, kBf16>(p + size_t(g) * gb, gb, cols, a + size_t(i) * act_stride, act_stride,
                                    out + size_t(i) * out_stride + size_t(16 * g), out_stride, valid);
    }
    for (int i = n6; i < n44; i += 4) {
      group_kernel_f16<4, 1, kBf16>(p + size_t(g) * gb, gb, cols, a + size_t(i) * act_stride, act_stride,
                                    out + size_t(i) * out_stride + size_t(16 * g), out_stride, valid);
    }
  }
  for (int i = n44; i < n;) {
    const int na = n - i >= 2 ? 2 : 1, ng_max = na == 2 ? 2 : 4;
    for (int64_t g = g0; g < g1;) {
      const int ng = int(g1 - g < ng_max ? g1 - g : ng_max);
      int valid[4];
      for (int k = 0; k < ng; ++k) valid[k] = valid_rows(g + k);
      const uint8_t* grp = p + size_t(g) * gb;
      const uint8_t* ai = a + size_t(i) * act_stride;
      float* o = out + size_t(i) * out_stride + size_t(16 * g);
      if (na == 2) {
        if (ng == 2) group_kernel_f16<2, 2, kBf16>(grp, gb, cols, ai, act_stride, o, out_stride, valid);
        else group_kernel_f16<2, 1, kBf16>(grp, gb, cols, ai, act_stride, o, out_stride, valid);
      } else {
        switch (ng) {
          case 4: group_kernel_f16<1, 4, kBf16>(grp, gb, cols, ai, act_stride, o, out_stride, valid); break;
          case 3: group_kernel_f16<1, 3, kBf16>(grp, gb, cols, ai, act_stride, o, out_stride, valid); break;
          case 2: group_kernel_f16<1, 2, kBf16>(grp, gb, cols, ai, act_stride, o, out_stride, valid); break;
          default: group_kernel_f16<1, 1, kBf16>(grp, gb, cols, ai, act_stride, o, out_stride, valid); break;
        }
      }
      g += ng;
    }
    i += na;
  }
}
#endif  // !LOOM_PK_VNNI

// The super-block kernels share one driver: K::run<NA> for runs of NA activation rows.
template <typename K, int... kNas>
void run_by_cols(TensorType t, int64_t rows, int64_t cols, const void* packed, int64_t g0, int64_t g1, const void* act,
                 size_t act_stride, int n, float* out, size_t out_stride) {
  auto kernel = [cols](int na, const uint8_t* grp, const PackedLayout&, int64_t, const uint8_t* a, size_t as, float* o,
                       size_t os, int valid) {
    with_na<kNas...>(na, [&]<int NA>() { K::template run<NA>(grp, cols, a, as, o, os, valid); });
  };
  packed_gemm_loop(t, rows, cols, packed, g0, g1, act, act_stride, n, out, out_stride, std::max({kNas...}), kernel);
}

struct Q6K {
  template <int NA>
  static void run(const uint8_t* g, int64_t c, const uint8_t* a, size_t as, float* o, size_t os, int v) {
    group_kernel_q6k<NA>(g, c, a, as, o, os, v);
  }
};
template <bool Q3>
struct Q23K {
  template <int NA>
  static void run(const uint8_t* g, int64_t c, const uint8_t* a, size_t as, float* o, size_t os, int v) {
    group_kernel_q23k<NA, Q3>(g, c, a, as, o, os, v);
  }
};
template <Nib256 K>
struct Q4K {
  template <int NA>
  static void run(const uint8_t* g, int64_t c, const uint8_t* a, size_t as, float* o, size_t os, int v) {
    group_kernel_q4k<NA, K>(g, c, a, as, o, os, v);
  }
};

}  // namespace

// Every type this copy has a kernel for (packed_avx2_has_kernel; F16 and BF16 in the AVX2 copy
// only); the others must not get here.
// NOLINTNEXTLINE(misc-definitions-in-headers): the body of one .cpp per ISA, each its own namespace
void packed_gemm(TensorType t, int64_t rows, int64_t cols, const void* packed, int64_t g0, int64_t g1, const void* act,
                 size_t act_stride, int n, float* out, size_t out_stride) {
  constexpr Blocks32 kQ40 = blocks32_of(kLayoutQ4_0), kQ41 = blocks32_of(kLayoutQ4_1), kQ50 = blocks32_of(kLayoutQ5_0),
                     kQ51 = blocks32_of(kLayoutQ5_1), kQ80 = blocks32_of(kLayoutQ8_0), kIq4 = blocks32_of(kLayoutIQ4_NL),
                     kMxfp4 = blocks32_of(kLayoutMXFP4);
  switch (t) {
    case TensorType::Q4_0: return run_blocks32<kQ40>(t, rows, cols, packed, g0, g1, act, act_stride, n, out, out_stride);
    case TensorType::Q4_1: return run_blocks32<kQ41>(t, rows, cols, packed, g0, g1, act, act_stride, n, out, out_stride);
    case TensorType::Q5_0: return run_blocks32<kQ50>(t, rows, cols, packed, g0, g1, act, act_stride, n, out, out_stride);
    case TensorType::Q5_1: return run_blocks32<kQ51>(t, rows, cols, packed, g0, g1, act, act_stride, n, out, out_stride);
    case TensorType::Q8_0: return run_blocks32<kQ80>(t, rows, cols, packed, g0, g1, act, act_stride, n, out, out_stride);
    case TensorType::IQ4_NL: return run_blocks32<kIq4>(t, rows, cols, packed, g0, g1, act, act_stride, n, out, out_stride);
    case TensorType::MXFP4: return run_blocks32<kMxfp4>(t, rows, cols, packed, g0, g1, act, act_stride, n, out, out_stride);
    case TensorType::Q4_K:
      return run_by_cols<Q4K<Nib256::kQ4K>, 4, 2, 1>(t, rows, cols, packed, g0, g1, act, act_stride, n, out, out_stride);
    case TensorType::Q5_K:
      return run_by_cols<Q4K<Nib256::kQ5K>, 4, 2, 1>(t, rows, cols, packed, g0, g1, act, act_stride, n, out, out_stride);
    case TensorType::IQ4_XS:
      return run_by_cols<Q4K<Nib256::kIQ4XS>, 4, 2, 1>(t, rows, cols, packed, g0, g1, act, act_stride, n, out, out_stride);
    case TensorType::Q2_K:
      return run_by_cols<Q23K<false>, 4, 2, 1>(t, rows, cols, packed, g0, g1, act, act_stride, n, out, out_stride);
    case TensorType::Q3_K:
      return run_by_cols<Q23K<true>, 4, 2, 1>(t, rows, cols, packed, g0, g1, act, act_stride, n, out, out_stride);
    case TensorType::Q6_K:
      return run_by_cols<Q6K, 4, 2, 1>(t, rows, cols, packed, g0, g1, act, act_stride, n, out, out_stride);
#if !LOOM_PK_VNNI
    case TensorType::F16: return run_f16<false>(rows, cols, packed, g0, g1, act, act_stride, n, out, out_stride);
    case TensorType::BF16: return run_f16<true>(rows, cols, packed, g0, g1, act, act_stride, n, out, out_stride);
#endif
    default: break;
  }
}

}  // namespace loom::quant::detail::LOOM_PK_NS

#undef LOOM_PK
