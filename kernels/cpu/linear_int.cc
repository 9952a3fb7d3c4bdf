// LinearTyped's integer path for Q8_0 / Q4_0 / Q4_1 / Q5_0 / Q5_1 / Q4_K /
// Q5_K / Q6_K weights (AVX-512 VNNI).
//
// Why: dequantising every weight to f32 in registers (linear_typed.cc) costs
// ~19 vector ops per 32 Q4_1 weights, which made batch-1 decode ALU-bound
// (0.86× llama.cpp on SmolLM2 Q4_1, docs/cpu_engine.md). Here the activations
// are quantised once per call and the weights are multiplied as the integer
// codes they are: about 7 ops per 32 weights at batch 1, and about 2.5 per 32
// weights per extra activation row in a prefill tile.
//
// Accuracy: each 32-element block of an activation row becomes int16 codes
// q with one f32 scale d = max|x| / 32767 (QuantiseBlockI16), an error of at
// most d/2 per element, ~1.5e-5 of the block's largest value; a block holding
// a large activation rounds its other elements on that scale. On the SmolLM2
// goldens against transformers the top-20 logit error is 1.7e-3–1.8e-3
// (f32-FMA path ≤ 2e-5), inside the tolerance 2e-3 + 1e-3·|logit|, with the
// same greedy texts. (llama.cpp rounds activations to int8, 256× coarser.)
// The products are exact integers, so the only rounding besides the
// activations' is the f32 accumulation of one scaled sum per block.
//
// How: vpdpbusd multiplies unsigned by signed bytes, so q is split as
// q = 256·h + l with h = q >> 8 (signed byte) and l = q & 255 (unsigned byte):
//   Σ w·q = 256·Σ w·h + Σ l·w.
// Q4 and Q5 codes (0..15, 0..31) serve as either operand. Q8_0 codes are
// signed, so the h-product uses w + 128 (= w ^ 0x80 as an unsigned byte) and
// the activation side adds −128·256·Σh. Q4_0's −8 offset is −8·Σq (Q5_0's
// −16, −16·Σq), Q4_1's and Q5_1's min m adds
// m·d·Σq in f32 (as does Q4_K's and Q5_K's per-sub-block min, KG). These
// corrections depend only on the activations and are precomputed per block
// with them (XGroup). A group of 4 blocks fills a zmm:
// 128-bit lane b holds block b's elements 0..15 ("lo") or 16..31 ("hi"), so
// dword lanes 4b..4b+3 of the integer sums belong to block b and one f32 FMA
// with the per-lane scale d_w·d_x applies all four blocks' scales. A row's
// last group may be short (K = 576 is 18 blocks): masked loads read zero
// codes and scales for the missing blocks, with zero activations behind them.
//
// Batch invariance (linear.cc's header): an output element is the integer sums
// of its groups (exact, order-free), each turned into f32 and added to 16 lane
// accumulators in group order by the same FMAs, then Reduce16's fixed tree —
// whatever the tile (8×2 or 4×2 for prefill, 1×1 for decode), the number of rows T
// or the thread. The activation codes of a row depend on that row only.
#include "kernels/cpu/linear_int.h"

#include <immintrin.h>

#include <algorithm>
#include <cstring>

#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/dense_ops.h"
#include "kernels/cpu/kquant_simd.h"
#include "kernels/cpu/simd_reduce.h"

// GCC 12 warns about the undefined pass-through operand inside the AVX-512
// intrinsic headers themselves (a known false positive).
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"

namespace treespec::cpu {
namespace {

// No AVX512_VBMI: every permute here moves 16-bit words (codes and scales
// all start at even offsets), so Cascade Lake (VNNI without VBMI) takes this
// path too.
#define TS_VNNI __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,f16c,fma")))

constexpr int kGroupBlocks = 4;  // 32-element blocks per group (one zmm of bytes)

// One row's activations for one group of 4 blocks, in the lane layout above.
struct alignas(64) XGroup {
  uint8_t l[2][64];   // low bytes of q: [lo/hi half][16·block + element]
  int8_t h[2][64];    // high bytes of q, same layout
  int32_t corr[16];   // integer correction of block b in lane 4b (type-dependent;
                      // Q6_K: of its elements 0..15 only)
  int32_t corr_hi[16];  // Q6_K: that of elements 16..31, whose weight scale differs
  float d[16];        // d_x of block b in lanes 4b..4b+3
  float dsum[16];     // Q4_1: d_x·Σq of block b in lane 4b
};

// The bytes of one group of a weight row: kGroupBytes where a type sets it
// (the K-quants' half blocks), else 4 blocks.
template <class W>
constexpr size_t GroupBytes() {
  if constexpr (requires { W::kGroupBytes; }) {
    return W::kGroupBytes;
  } else {
    return kGroupBlocks * W::kBlockBytes;
  }
}
// Activation rows per tile (WalkColumns): 8 for the types whose group
// decoding is dear (the K-quants unpack scales per group, Q5 adds the fifth
// bits): a 64-row product 6-12% faster in linear_bench (in cache, 1 thread,
// Zen 4) than with 4; Q4_1 the same and Q8_0 1-4% slower, so they keep 4.
template <class W>
constexpr int TileRows() {
  if constexpr (requires { W::kTileRows; }) {
    return W::kTileRows;
  } else {
    return 4;
  }
}
template <class W>
constexpr bool SplitScales() {
  if constexpr (requires { W::kSplitScales; }) {
    return W::kSplitScales;
  } else {
    return false;
  }
}

// Weights of one group of 4 blocks of one row, decoded for XGroup's layout.
struct WGroup {
  __m512i lo, hi;    // codes as signed bytes, for the l-products
  __m512i ulo, uhi;  // codes as unsigned bytes, for the h-products
  __m512 d, m;       // d_w (and Q4_1's min) of block b in lanes 4b..4b+3
};

// A group's bytes are read as 64-byte windows and rearranged by word permutes
// (vpermt2w) into WGroup's layout: 2 to 4 windows and 2 to 3 permutes per
// group where 16-byte inserts and scalar scale loads took ~20 instructions.
// Every type's codes and scales start at even offsets in its blocks, so words
// suffice (byte permutes, vpermt2b, would need AVX512_VBMI). Tables says, for
// each type, which word of the 128 bytes of two windows every code pair and
// scale of the group is.
struct Tables {
  alignas(64) uint16_t lo[32];  // code bytes 0..15 of block b → words 8b..8b+7
  alignas(64) uint16_t hi[32];  // code bytes 16..31 (Q8_0; nibble types take them from lo)
  alignas(64) uint16_t dm[32];  // scale of block b → words 4b..4b+3, min → 16 + 4b..
};

// Index of the group's byte f in the table [wa, wa + 64) ‖ [wb, wb + 64).
constexpr int At(int f, int wa, int wb) { return f >= wa && f < wa + 64 ? f - wa : 64 + f - wb; }

// bb: block bytes; codes / min: where they start in a block (min < 0: none);
// (wa, wb): the windows of the low codes and scales; (ha, hb): of the high
// codes of byte-coded types (codes, scales and mins sit at even offsets, as
// do all windows, so byte index / 2 is the word index).
constexpr Tables MakeTables(int bb, int codes, int min, bool nibbles, int wa, int wb, int ha,
                            int hb) {
  Tables t{};
  for (int p = 0; p < 32; ++p) {
    const int b = p / 8, e = 2 * (p % 8);
    t.lo[p] = static_cast<uint16_t>(At(b * bb + codes + e, wa, wb) / 2);
    t.hi[p] = nibbles ? 0 : static_cast<uint16_t>(At(b * bb + codes + 16 + e, ha, hb) / 2);
  }
  for (int p = 0; p < 16; ++p) {
    const int b = p / 4;
    t.dm[p] = static_cast<uint16_t>(At(b * bb, wa, wb) / 2);
    t.dm[16 + p] = min < 0 ? 0 : static_cast<uint16_t>(At(b * bb + min, wa, wb) / 2);
  }
  return t;
}

// Half of a window: the 32 bytes at p, of which only the first `left` exist
// when kTail (the rest read as zero, without touching memory).
template <bool kTail>
TS_VNNI inline __m256i Half(const uint8_t* p, int left) {
  if (!kTail) return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
  const __mmask32 m = left >= 32 ? ~0u : left <= 0 ? 0u : (1u << left) - 1;
  return _mm256_maskz_loadu_epi8(m, p);
}

// The 64 bytes at p (as Half). Read as two 32-byte loads: a group's windows
// are not 64-byte aligned, and unaligned 64-byte loads from memory streamed
// at about half the speed on this Zen 4 (a 49152 x 576 Q8_0 product: ~2.1 ms
// against ~1.1 ms, 1 thread).
template <bool kTail>
TS_VNNI inline __m512i Window(const uint8_t* p, int left) {
  return _mm512_inserti64x4(_mm512_castsi256_si512(Half<kTail>(p, left)),
                            Half<kTail>(p + 32, left - 32), 1);
}

// Q8_0: [d f16][32 int8]; a group is 136 bytes, low codes and scales in
// [0, 64) ‖ [64, 128), high codes in [8, 72) ‖ [72, 136).
struct Q8_0G {
  static constexpr size_t kBlockBytes = 34;
  static constexpr bool kHasMin = false;
  static constexpr Tables kTables = MakeTables(34, 2, -1, false, 0, 64, 8, 72);
  template <bool kTail>
  TS_VNNI static inline void Decode(const uint8_t* g, int left, int, WGroup* o) {
    const __m512i a = Window<kTail>(g, left), b = Window<kTail>(g + 64, left - 64);
    const __m512i ha = Window<kTail>(g + 8, left - 8), hb = Window<kTail>(g + 72, left - 72);
    o->lo = _mm512_permutex2var_epi16(a, _mm512_load_si512(kTables.lo), b);
    o->hi = _mm512_permutex2var_epi16(ha, _mm512_load_si512(kTables.hi), hb);
    const __m512i flip = _mm512_set1_epi8(static_cast<char>(0x80));
    o->ulo = _mm512_xor_si512(o->lo, flip);
    o->uhi = _mm512_xor_si512(o->hi, flip);
    const __m512i dm = _mm512_permutex2var_epi16(a, _mm512_load_si512(kTables.dm), b);
    o->d = _mm512_cvtph_ps(_mm512_castsi512_si256(dm));
  }
};

// Q4_0 and Q4_1: byte j of a block's 16 code bytes holds element j in its low
// nibble and element j + 16 in its high nibble. The group fits in
// [0, 64) ‖ [kWinB, kWinB + 64).
// From the group's two windows a and b (NibblesOf) or straight from memory.
template <class W>
TS_VNNI inline void NibblesOf(__m512i a, __m512i b, WGroup* o) {
  const __m512i q = _mm512_permutex2var_epi16(a, _mm512_load_si512(W::kTables.lo), b);
  const __m512i mask = _mm512_set1_epi8(0x0f);
  o->lo = o->ulo = _mm512_and_si512(q, mask);
  o->hi = o->uhi = _mm512_and_si512(_mm512_srli_epi16(q, 4), mask);
  const __m512i dm = _mm512_permutex2var_epi16(a, _mm512_load_si512(W::kTables.dm), b);
  o->d = _mm512_cvtph_ps(_mm512_castsi512_si256(dm));
  if (W::kHasMin) o->m = _mm512_cvtph_ps(_mm512_extracti64x4_epi64(dm, 1));
}
template <class W, bool kTail>
TS_VNNI inline void DecodeNibbles(const uint8_t* g, int left, WGroup* o) {
  NibblesOf<W>(Window<kTail>(g, left), Window<kTail>(g + W::kWinB, left - W::kWinB), o);
}

// Q4_0: [d f16][16 bytes]; a group is 72 bytes.
struct Q4_0G {
  static constexpr size_t kBlockBytes = 18;
  static constexpr bool kHasMin = false;
  static constexpr int kWinB = 8;
  static constexpr Tables kTables = MakeTables(18, 2, -1, true, 0, 8, 0, 0);
  template <bool kTail>
  TS_VNNI static inline void Decode(const uint8_t* g, int left, int, WGroup* o) {
    DecodeNibbles<Q4_0G, kTail>(g, left, o);
  }
};

// Q4_1: [d f16][m f16][16 bytes]; a group is 80 bytes.
struct Q4_1G {
  static constexpr size_t kBlockBytes = 20;
  static constexpr bool kHasMin = true;
  static constexpr int kWinB = 16;
  static constexpr Tables kTables = MakeTables(20, 4, 2, true, 0, 16, 0, 0);
  template <bool kTail>
  TS_VNNI static inline void Decode(const uint8_t* g, int left, int, WGroup* o) {
    DecodeNibbles<Q4_1G, kTail>(g, left, o);
  }
};

// Q5_0 ([d f16][qh u32][16 code bytes], 22 bytes; weights d·(code − 16), the
// −16 applied as Q4_0's −8 is) and Q5_1 ([d f16][m f16][qh u32][16 code
// bytes], 24; d·code + m, as Q4_1): Q4's nibbles, and bit j of qh is element
// j's fifth bit (16). A group (88 or 96 bytes) fits in [0, 64) ‖ [kWinB,
// kWinB + 64). One more word permute gathers the four blocks' qh: words 0..3
// their low halves (elements 0..15), words 4..7 their high halves, so each
// 64-bit half is a byte mask in WGroup's layout (bit 16b + e for block b's
// element e, or e + 16) that adds 16 to the codes whose bit is set.
template <size_t kBytes, bool kMin>
struct Q5G {
  static constexpr size_t kBlockBytes = kBytes;
  static constexpr bool kHasMin = kMin;
  static constexpr int kQh = kMin ? 4 : 2;  // offset of qh in a block; codes follow it
  static constexpr int kTileRows = 8;
  static constexpr int kWinB = 4 * static_cast<int>(kBytes) - 64;
  static constexpr Tables kTables =
      MakeTables(kBytes, kQh + 4, kMin ? 2 : -1, true, 0, kWinB, 0, 0);
  struct alignas(64) QhTable {
    uint16_t w[32];
  };
  static constexpr QhTable MakeQh() {
    QhTable t{};
    for (int p = 0; p < 8; ++p) {
      const int b = p % 4, half = p / 4;
      const int at = b * static_cast<int>(kBytes) + kQh + 2 * half;
      t.w[p] = static_cast<uint16_t>(At(at, 0, kWinB) / 2);
    }
    return t;
  }
  static constexpr QhTable kQhTable = MakeQh();
  template <bool kTail>
  TS_VNNI static inline void Decode(const uint8_t* g, int left, int, WGroup* o) {
    const __m512i a = Window<kTail>(g, left), b = Window<kTail>(g + kWinB, left - kWinB);
    NibblesOf<Q5G>(a, b, o);
    const __m128i qh =
        _mm512_castsi512_si128(_mm512_permutex2var_epi16(a, _mm512_load_si512(kQhTable.w), b));
    const __mmask64 lo = _cvtu64_mask64(static_cast<uint64_t>(_mm_cvtsi128_si64(qh)));
    const __mmask64 hi = _cvtu64_mask64(static_cast<uint64_t>(_mm_extract_epi64(qh, 1)));
    const __m512i bit = _mm512_set1_epi8(0x10);
    o->lo = o->ulo = _mm512_mask_add_epi8(o->lo, lo, o->lo, bit);
    o->hi = o->uhi = _mm512_mask_add_epi8(o->hi, hi, o->hi, bit);
  }
};
using Q5_0G = Q5G<22, false>;
using Q5_1G = Q5G<24, true>;

// Bits of 16 bytes placed at bit 4 of each byte of 4 lanes: every 128-bit
// lane holds `bytes`, shifted right by its lane's count in `shift` (16-bit
// words, per lane), `mask` (1 or 3) of the result's low bits moved up by 4.
// The 16-bit shifts move bits across bytes; the mask drops them.
TS_VNNI inline __m512i TopBits(__m128i bytes, __m512i shift, int mask) {
  const __m512i v = _mm512_srlv_epi16(_mm512_broadcast_i32x4(bytes), shift);
  return _mm512_slli_epi16(_mm512_and_si512(v, _mm512_set1_epi8(static_cast<char>(mask))), 4);
}

// The 64 code bytes at `p` split into nibbles, and the 128-bit lanes of the
// low nibbles (qwords 0..7) and high nibbles (8..15) arranged into *lo and
// *hi by the qword orders `lo_order` / `hi_order` (vpermt2q): a K-quant half
// block's codes into WGroup's layout.
TS_VNNI inline void NibbleLanes(const uint8_t* p, __m512i lo_order, __m512i hi_order, __m512i* lo,
                                __m512i* hi) {
  const __m512i q = Window<false>(p, 64);
  const __m512i mask = _mm512_set1_epi8(0x0f);
  const __m512i low = _mm512_and_si512(q, mask);
  const __m512i high = _mm512_and_si512(_mm512_srli_epi16(q, 4), mask);
  *lo = _mm512_permutex2var_epi64(low, lo_order, high);
  *hi = _mm512_permutex2var_epi64(low, hi_order, high);
}

// Q4_K: [d f16][dmin f16][12 bytes: eight 6-bit scale / min pairs][128 code
// bytes] per 256 elements; a group (4 sub-blocks of 32) is half a block, and
// the Tile's group index says which half (rows are whole blocks, so K is a
// multiple of 256 and there is no short group). Half h's code bytes
// [64h, 64h + 64) hold sub-block 4h in the low and 4h + 1 in the high nibbles
// of their first 32 bytes, 4h + 2 and 4h + 3 likewise in the last 32: the
// nibbles are split and their 16-byte lanes interleaved (vpermt2q) into
// WGroup's layout. Sub-block j's weights are d·sc_j·code − dmin·mn_j, Q4_1's
// form with scale d·sc_j and min −dmin·mn_j, which are exact in f32 (an f16
// times a 6-bit integer).
// Q5_K (kFive): the same with 32 bytes qh between the scales and the codes
// ([d][dmin][12][qh 32][128 code bytes], 176 bytes); bit j of qh byte e is
// the fifth bit (16) of sub-block j's element e (e = 0..31), added to the
// codes as Q6_K adds its top bits (TopBits).
template <bool kFive>
struct KG {
  static constexpr size_t kGroupBytes = kFive ? 88 : 72;  // half a block
  static constexpr bool kHasMin = true;
  static constexpr int kTileRows = 8;
  template <bool kTail>
  TS_VNNI static inline void Decode(const uint8_t* g, int, int index, WGroup* o) {
    const int h = index & 1;
    const uint8_t* b = g - h * kGroupBytes;
    NibbleLanes(b + (kFive ? 48 : 16) + 64 * h, _mm512_setr_epi64(0, 1, 8, 9, 4, 5, 12, 13),
                _mm512_setr_epi64(2, 3, 10, 11, 6, 7, 14, 15), &o->lo, &o->hi);
    o->ulo = o->lo;
    o->uhi = o->hi;
    if constexpr (kFive) {
      // Lane b is sub-block 4h + b: its bit of qh bytes 0..15 (lo) / 16..31 (hi).
      const __m256i qh = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b + 16));
      const __m512i shift = _mm512_add_epi16(
          _mm512_set1_epi16(static_cast<int16_t>(4 * h)),
          _mm512_setr_epi32(0, 0, 0, 0, 0x10001, 0x10001, 0x10001, 0x10001, 0x20002, 0x20002,
                            0x20002, 0x20002, 0x30003, 0x30003, 0x30003, 0x30003));
      o->lo = o->ulo = _mm512_or_si512(o->lo, TopBits(_mm256_castsi256_si128(qh), shift, 1));
      o->hi = o->uhi = _mm512_or_si512(o->hi, TopBits(_mm256_extracti128_si256(qh, 1), shift, 1));
    }
    // The 6-bit pairs of sub-blocks 4h..4h+3 (kquant_simd.h): bytes 0..7 of
    // `sm` are the eight scales, 8..15 the eight mins.
    const __m128i head = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b));
    const __m128i sm = UnpackKScales(head);
    // sm: [sc0..3, sc4..7, mn0..3, mn4..7]. This half's four scales and four
    // mins (bytes 4h.. and 8 + 4h..) as floats [sc, mn], then each spread
    // over lanes 4b..4b+3.
    const __m128i pick =
        _mm_add_epi8(_mm_setr_epi8(0, 1, 2, 3, 8, 9, 10, 11, 0, 0, 0, 0, 0, 0, 0, 0),
                     _mm_set1_epi8(static_cast<char>(4 * h)));
    const __m512 scmn = _mm512_castps256_ps512(
        _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_shuffle_epi8(sm, pick))));
    const __m512i lane = _mm512_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3);
    const __m128 dd = _mm_cvtph_ps(head);  // d, dmin
    o->d = _mm512_mul_ps(_mm512_permutexvar_ps(lane, scmn), _mm512_broadcastss_ps(dd));
    o->m = _mm512_mul_ps(_mm512_permutexvar_ps(_mm512_add_epi32(lane, _mm512_set1_epi32(4)), scmn),
                         _mm512_broadcastss_ps(_mm_sub_ps(_mm_setzero_ps(), _mm_movehdup_ps(dd))));
  }
};
using Q4_KG = KG<false>;
using Q5_KG = KG<true>;

// Q6_K: [128 bytes ql][64 bytes qh][16 int8 scales][d f16] per 256 elements
// (core/tensor/kquant.h); a group (4 sub-blocks of 32) is half a block, 105
// bytes, and the Tile's group index says which half h. Quarter q of the half
// (sub-block 4h + q) has the low (q < 2) or high nibbles of ql bytes 64h +
// 32·(q % 2) .. + 31 and bits 2q, 2q + 1 of qh bytes 128 + 32h .. + 31 on top:
// codes 0..63, either operand of vpdpbusd, with the −32 offset applied as
// −32·Σq on the activation side. Each 16 elements have their own scale, so
// the lo and hi halves of a sub-block (WGroup's lo / hi) are summed apart
// (GroupDot's split form): d·sc_lo in d, d·sc_hi in m.
struct Q6_KG {
  static constexpr size_t kGroupBytes = 105;  // half of a 210-byte block
  static constexpr bool kHasMin = false;
  static constexpr bool kSplitScales = true;
  static constexpr int kTileRows = 8;
  template <bool kTail>
  TS_VNNI static inline void Decode(const uint8_t* g, int, int index, WGroup* o) {
    const int h = index & 1;
    const uint8_t* b = g - h * kGroupBytes;
    // The lanes of ql bytes 0..15, 16..31, 32..47, 48..63: lane q of lo
    // takes quarter q's elements 0..15, of hi its 16..31.
    __m512i lo, hi;
    NibbleLanes(b + 64 * h, _mm512_setr_epi64(0, 1, 4, 5, 8, 9, 12, 13),
                _mm512_setr_epi64(2, 3, 6, 7, 10, 11, 14, 15), &lo, &hi);
    // The top bits: qh bytes 0..15 (16..31) in every lane, lane q shifted
    // right by 2q.
    const __m256i qh = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b + 128 + 32 * h));
    const __m512i shift = _mm512_setr_epi32(0, 0, 0, 0, 0x20002, 0x20002, 0x20002, 0x20002,
                                            0x40004, 0x40004, 0x40004, 0x40004, 0x60006,
                                            0x60006, 0x60006, 0x60006);
    lo = _mm512_or_si512(lo, TopBits(_mm256_castsi256_si128(qh), shift, 3));
    hi = _mm512_or_si512(hi, TopBits(_mm256_extracti128_si256(qh, 1), shift, 3));
    o->lo = o->ulo = lo;
    o->hi = o->uhi = hi;
    // Scales 8h .. 8h + 7: sub-block q's lo half has 8h + 2q, its hi 8h + 2q + 1.
    const __m512 sc = _mm512_castps256_ps512(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(
        _mm_loadl_epi64(reinterpret_cast<const __m128i*>(b + 192 + 8 * h)))));
    uint16_t d16;
    std::memcpy(&d16, b + 208, 2);
    const __m512 d = _mm512_set1_ps(_cvtsh_ss(d16));
    const __m512i lane = _mm512_setr_epi32(0, 0, 0, 0, 2, 2, 2, 2, 4, 4, 4, 4, 6, 6, 6, 6);
    o->d = _mm512_mul_ps(_mm512_permutexvar_ps(lane, sc), d);
    o->m = _mm512_mul_ps(_mm512_permutexvar_ps(_mm512_add_epi32(lane, _mm512_set1_epi32(1)), sc),
                         d);
  }
};

// acc += this group's contribution of weight row `w` to activation row `x`.
template <class W>
TS_VNNI __attribute__((always_inline)) inline void GroupDot(const XGroup& x, const WGroup& w,
                                                            __m512& acc) {
  if constexpr (SplitScales<W>()) {
    __m512i lo = _mm512_dpbusd_epi32(_mm512_load_si512(x.corr), _mm512_load_si512(x.l[0]), w.lo);
    __m512i hi =
        _mm512_dpbusd_epi32(_mm512_load_si512(x.corr_hi), _mm512_load_si512(x.l[1]), w.hi);
    const __m512i hlo = _mm512_dpbusd_epi32(_mm512_setzero_si512(), w.ulo,
                                            _mm512_load_si512(x.h[0]));
    const __m512i hhi = _mm512_dpbusd_epi32(_mm512_setzero_si512(), w.uhi,
                                            _mm512_load_si512(x.h[1]));
    lo = _mm512_add_epi32(_mm512_slli_epi32(hlo, 8), lo);
    hi = _mm512_add_epi32(_mm512_slli_epi32(hhi, 8), hi);
    const __m512 dx = _mm512_load_ps(x.d);
    acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(lo), _mm512_mul_ps(w.d, dx), acc);
    acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(hi), _mm512_mul_ps(w.m, dx), acc);
    return;
  }
  __m512i l = _mm512_load_si512(x.corr);
  l = _mm512_dpbusd_epi32(l, _mm512_load_si512(x.l[0]), w.lo);
  l = _mm512_dpbusd_epi32(l, _mm512_load_si512(x.l[1]), w.hi);
  __m512i h = _mm512_dpbusd_epi32(_mm512_setzero_si512(), w.ulo, _mm512_load_si512(x.h[0]));
  h = _mm512_dpbusd_epi32(h, w.uhi, _mm512_load_si512(x.h[1]));
  const __m512i sum = _mm512_add_epi32(_mm512_slli_epi32(h, 8), l);
  acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sum), _mm512_mul_ps(w.d, _mm512_load_ps(x.d)), acc);
  if (W::kHasMin) acc = _mm512_fmadd_ps(w.m, _mm512_load_ps(x.dsum), acc);
}

// TR activation rows (G groups each, rows G apart in `x`) × NR weight rows.
template <class W, int TR, int NR>
TS_VNNI __attribute__((always_inline)) inline void Tile(const XGroup* x, int G, int K,
                                                        const uint8_t* w, size_t row_bytes,
                                                        int64_t ldo, float* out) {
  constexpr size_t kGroupBytes = GroupBytes<W>();
  __m512 acc[TR][NR];
#pragma GCC unroll 8
  for (int i = 0; i < TR; ++i)
#pragma GCC unroll 8
    for (int j = 0; j < NR; ++j) acc[i][j] = _mm512_setzero_ps();
  const int full = K / (32 * kGroupBlocks);
  for (int g = 0; g < full; ++g) {
    WGroup wg[NR];
#pragma GCC unroll 8
    for (int j = 0; j < NR; ++j) {
      const uint8_t* p = w + j * row_bytes + g * kGroupBytes;
      for (size_t ahead = 0; ahead < kGroupBytes; ahead += 64) {
        _mm_prefetch(reinterpret_cast<const char*>(p) + kWeightPrefetchBytes + ahead, _MM_HINT_T0);
      }
      W::template Decode<false>(p, kGroupBytes, g, &wg[j]);
    }
#pragma GCC unroll 8
    for (int i = 0; i < TR; ++i)
#pragma GCC unroll 8
      for (int j = 0; j < NR; ++j) GroupDot<W>(x[i * G + g], wg[j], acc[i][j]);
  }
  if (full < G) {
    // The short last group: the missing blocks read as zero codes and scales.
    const int left = static_cast<int>(row_bytes - full * kGroupBytes);
    WGroup wg[NR];
#pragma GCC unroll 8
    for (int j = 0; j < NR; ++j) {
      W::template Decode<true>(w + j * row_bytes + full * kGroupBytes, left, full, &wg[j]);
    }
#pragma GCC unroll 8
    for (int i = 0; i < TR; ++i)
#pragma GCC unroll 8
      for (int j = 0; j < NR; ++j) GroupDot<W>(x[i * G + full], wg[j], acc[i][j]);
  }
#pragma GCC unroll 8
  for (int i = 0; i < TR; ++i)
#pragma GCC unroll 8
    for (int j = 0; j < NR; ++j) out[i * ldo + j] = Reduce16(acc[i][j]);
}

// Output columns [n0, n1) for all T rows (WalkColumns, dense_ops.h; flatten
// inlines the walk and, within it, each tile).
template <class W>
TS_VNNI __attribute__((flatten)) void Columns(
    const XGroup* x, int G, const uint8_t* w, size_t row_bytes, int T, int K, int N, int n0, int n1,
    float* out) {
  WalkColumns<TileRows<W>()>(row_bytes, T, n0, n1, [&](auto tr, auto nr, int t, int n) TS_VNNI {
    Tile<W, tr, nr>(x + static_cast<int64_t>(t) * G, G, K, w + n * row_bytes, row_bytes, N,
                    out + static_cast<int64_t>(t) * N + n);
  });
}

// One block of activations → int16 codes (as int32 in q[0], q[1]) and *d.
TS_VNNI inline void QuantiseBlock(const float* x, __m512i* q, float* d) {
  const __m512 v[2] = {_mm512_loadu_ps(x), _mm512_loadu_ps(x + 16)};
  const float amax = _mm512_reduce_max_ps(_mm512_max_ps(_mm512_abs_ps(v[0]), _mm512_abs_ps(v[1])));
  *d = amax / 32767.0f;
  const __m512 inv = _mm512_set1_ps(amax > 0 ? 32767.0f / amax : 0.0f);
  const __m512 hi = _mm512_set1_ps(32767.0f), lo = _mm512_set1_ps(-32767.0f);
  for (int s = 0; s < 2; ++s) {
    const __m512 r = _mm512_roundscale_ps(_mm512_mul_ps(v[s], inv),
                                          _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    q[s] = _mm512_cvtps_epi32(_mm512_min_ps(hi, _mm512_max_ps(lo, r)));
  }
}

// One activation row → its G groups (zero beyond the last block).
TS_VNNI void QuantiseRow(const float* x, int K, DType wtype, XGroup* groups) {
  const int num_blocks = K / 32;
  std::memset(static_cast<void*>(groups), 0,
              sizeof(XGroup) * ((num_blocks + kGroupBlocks - 1) / kGroupBlocks));
  for (int b = 0; b < num_blocks; ++b) {
    XGroup& g = groups[b / kGroupBlocks];
    const int lane = b % kGroupBlocks;
    __m512i q[2];
    float d;
    QuantiseBlock(x + 32 * b, q, &d);
    int32_t sum_q = 0, sum_h = 0, half_q[2];
    for (int s = 0; s < 2; ++s) {
      const __m512i h = _mm512_srai_epi32(q[s], 8);  // q = 256·h + (q & 255)
      const __m512i l = _mm512_and_si512(q[s], _mm512_set1_epi32(255));
      _mm_storeu_si128(reinterpret_cast<__m128i*>(g.l[s] + 16 * lane), _mm512_cvtepi32_epi8(l));
      _mm_storeu_si128(reinterpret_cast<__m128i*>(g.h[s] + 16 * lane), _mm512_cvtepi32_epi8(h));
      half_q[s] = _mm512_reduce_add_epi32(q[s]);
      sum_q += half_q[s];
      sum_h += _mm512_reduce_add_epi32(h);
    }
    if (wtype == DType::kQ6_K) {
      g.corr[4 * lane] = -32 * half_q[0];
      g.corr_hi[4 * lane] = -32 * half_q[1];
    }
    if (wtype == DType::kQ8_0) g.corr[4 * lane] = -128 * 256 * sum_h;
    if (wtype == DType::kQ4_0) g.corr[4 * lane] = -8 * sum_q;
    if (wtype == DType::kQ5_0) g.corr[4 * lane] = -16 * sum_q;
    if (wtype == DType::kQ4_1 || wtype == DType::kQ4_K || wtype == DType::kQ5_1 ||
        wtype == DType::kQ5_K) {
      g.dsum[4 * lane] = d * static_cast<float>(sum_q);
    }
    for (int s = 0; s < 4; ++s) g.d[4 * lane + s] = d;
  }
}

template <class W>
void Run(const float* x, const uint8_t* w, DType wtype, int T, int K, int N, float* out,
         int threads) {
  const int G = (K / 32 + kGroupBlocks - 1) / kGroupBlocks;
  const size_t row_bytes = DTypeBytes(wtype, K);
  RoundRowsThenColumns<XGroup>(
      T, K, N, G, threads,
      [&](int t, XGroup* g) { QuantiseRow(x + static_cast<int64_t>(t) * K, K, wtype, g); },
      [&](const XGroup* xg, int n0, int n1) {
        Columns<W>(xg, G, w, row_bytes, T, K, N, n0, n1, out);
      });
}

}  // namespace

TS_VNNI void QuantiseBlockI16(const float* x, int16_t* q, float* d) {
  __m512i v[2];
  QuantiseBlock(x, v, d);
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(q), _mm512_cvtepi32_epi16(v[0]));
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(q + 16), _mm512_cvtepi32_epi16(v[1]));
}

bool LinearIntHasSimd() {
  static const bool have = CpuHasAvx512() && __builtin_cpu_supports("avx512vnni");
  return have;
}

bool LinearIntTakes(DType wtype) {
  return wtype == DType::kQ8_0 || wtype == DType::kQ4_0 || wtype == DType::kQ4_1 ||
         wtype == DType::kQ4_K || wtype == DType::kQ5_0 || wtype == DType::kQ5_1 ||
         wtype == DType::kQ5_K || wtype == DType::kQ6_K;
}

void LinearInt(const float* x, const void* w, DType wtype, int T, int K, int N, float* out,
               int threads) {
  if (T == 0 || N == 0) return;
  const uint8_t* wb = static_cast<const uint8_t*>(w);
  switch (wtype) {
    case DType::kQ8_0: Run<Q8_0G>(x, wb, wtype, T, K, N, out, threads); break;
    case DType::kQ4_0: Run<Q4_0G>(x, wb, wtype, T, K, N, out, threads); break;
    case DType::kQ4_1: Run<Q4_1G>(x, wb, wtype, T, K, N, out, threads); break;
    case DType::kQ4_K: Run<Q4_KG>(x, wb, wtype, T, K, N, out, threads); break;
    case DType::kQ5_0: Run<Q5_0G>(x, wb, wtype, T, K, N, out, threads); break;
    case DType::kQ5_1: Run<Q5_1G>(x, wb, wtype, T, K, N, out, threads); break;
    case DType::kQ5_K: Run<Q5_KG>(x, wb, wtype, T, K, N, out, threads); break;
    case DType::kQ6_K: Run<Q6_KG>(x, wb, wtype, T, K, N, out, threads); break;
    default: break;
  }
}

}  // namespace treespec::cpu
