// Block dequantisation (core/model/gguf_dequant.h), three ways:
//  1. against gguf-py, llama.cpp's own Python reference, on seeded random blocks
//     of every type (tests/golden/data/gguf_blocks/blocks.json, made by
//     tools/goldens/make_gguf_block_goldens.py);
//  2. against a plain per-element reference written here from the format
//     definition (each element's bits located independently, not by replaying
//     the kernels' loops);
//  3. round trips through simple quantisers for Q8_0, Q4_0 and Q4_1.
#include "core/model/gguf_dequant.h"

#include <cmath>
#include <cstring>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "core/tensor/dtype.h"
#include "core/util/mapped_file.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/testing/test_util.h"

namespace treespec {
namespace {

std::vector<uint8_t> FromHex(const std::string& hex) {
  std::vector<uint8_t> out(hex.size() / 2);
  for (size_t i = 0; i < out.size(); ++i) out[i] = std::stoi(hex.substr(2 * i, 2), nullptr, 16);
  return out;
}

float Half(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return HalfToFloat(h);
}

// ---- the per-element reference ----

// 6-bit scale (is_min = false) or min (true) of sub-block j of the 12-byte
// K-quant scale array: entries 0..3 are bytes j / j+4 (low 6 bits); entries
// 4..7 take 4 low bits from byte j+4 (low nibble: scale, high: min) and 2 high
// bits from the top of byte j-4 (scale) or byte j (min).
int KScale(const uint8_t* s, int j, bool is_min) {
  if (j < 4) return s[j + (is_min ? 4 : 0)] & 0x3F;
  const int low = is_min ? (s[j + 4] >> 4) : (s[j + 4] & 0x0F);
  const int high = (s[is_min ? j : j - 4] >> 6) & 0x3;
  return low | (high << 4);
}

float RefElement(GgmlType type, const uint8_t* b, int e) {
  switch (type) {
    case GgmlType::kQ8_0:
      return Half(b) * static_cast<int8_t>(b[2 + e]);
    case GgmlType::kQ4_0: {
      const int nib = e < 16 ? (b[2 + e] & 0xF) : (b[2 + e - 16] >> 4);
      return Half(b) * (nib - 8);
    }
    case GgmlType::kQ4_1: {
      const int nib = e < 16 ? (b[4 + e] & 0xF) : (b[4 + e - 16] >> 4);
      return Half(b) * nib + Half(b + 2);
    }
    case GgmlType::kQ5_0:
    case GgmlType::kQ5_1: {
      // [d][m (Q5_1)][qh: 4 bytes, bit e of the little-endian word][16 code bytes]
      const bool min = type == GgmlType::kQ5_1;
      const uint8_t* qh = b + (min ? 4 : 2);
      const uint8_t* qs = b + (min ? 8 : 6);
      const int nib = e < 16 ? (qs[e] & 0xF) : (qs[e - 16] >> 4);
      const int q = nib | (((qh[e / 8] >> (e % 8)) & 1) << 4);
      return min ? Half(b) * q + Half(b + 2) : Half(b) * (q - 16);
    }
    case GgmlType::kQ4_K:
    case GgmlType::kQ5_K: {
      const bool five = type == GgmlType::kQ5_K;
      const uint8_t* scales = b + 4;
      const uint8_t* qs = b + (five ? 48 : 16);
      const int chunk = e / 64, within = e % 64, l = within % 32;
      const int sub = 2 * chunk + (within >= 32 ? 1 : 0);
      int q = within < 32 ? (qs[32 * chunk + l] & 0xF) : (qs[32 * chunk + l] >> 4);
      if (five) q |= ((b[16 + l] >> sub) & 1) << 4;
      return Half(b) * KScale(scales, sub, false) * q - Half(b + 2) * KScale(scales, sub, true);
    }
    case GgmlType::kQ6_K: {
      const int half = e / 128, r = e % 128, quarter = r / 32, l = r % 32;
      const uint8_t lo = b[64 * half + l + (quarter & 1) * 32];
      const int low4 = quarter >= 2 ? (lo >> 4) : (lo & 0xF);
      const int high2 = (b[128 + 32 * half + l] >> (2 * quarter)) & 3;
      const int8_t scale = static_cast<int8_t>(b[192 + 8 * half + 2 * quarter + l / 16]);
      return Half(b + 208) * scale * ((low4 | (high2 << 4)) - 32);
    }
    default:
      ADD_FAILURE() << "no reference for type " << static_cast<int>(type);
      return 0;
  }
}

struct TypeInfo {
  GgmlType type;
  size_t bytes;
  int elems;
};
const TypeInfo kQuantTypes[] = {{GgmlType::kQ8_0, 34, 32},   {GgmlType::kQ4_0, 18, 32},
                                {GgmlType::kQ4_1, 20, 32},   {GgmlType::kQ5_0, 22, 32},
                                {GgmlType::kQ5_1, 24, 32},   {GgmlType::kQ4_K, 144, 256},
                                {GgmlType::kQ5_K, 176, 256}, {GgmlType::kQ6_K, 210, 256}};

TEST(GgufDequantTest, MatchesGgufPyOnRandomBlocksOfEveryType) {
  auto text = ReadFileToString(testing::SourceDir() + "/tests/golden/data/gguf_blocks/blocks.json");
  ASSERT_TRUE(text.ok()) << text.status();
  const nlohmann::json g = nlohmann::json::parse(*text);
  ASSERT_EQ(g["format_version"].get<int>(), 1);
  std::set<std::string> seen;
  for (const auto& t : g["types"]) {
    const std::string name = t["type"];
    seen.insert(name);
    const auto type = static_cast<GgmlType>(t["ggml_type"].get<uint32_t>());
    EXPECT_EQ(GgmlTypeName(static_cast<uint32_t>(type)), name);
    const std::vector<uint8_t> raw = FromHex(t["hex"]);
    const auto want = t["values"].get<std::vector<float>>();
    std::vector<float> got(want.size());
    ASSERT_TRUE(DequantizeGgml(type, raw.data(), want.size(), got.data()).ok()) << name;
    for (size_t i = 0; i < want.size(); ++i) {
      EXPECT_NEAR(got[i], want[i], 1e-6f * std::fabs(want[i]) + 1e-7f) << name << " element " << i;
    }
  }
  EXPECT_EQ(seen,
            (std::set<std::string>{"F16", "BF16", "Q8_0", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q4_K",
                                   "Q5_K", "Q6_K"}));
}

TEST(GgufDequantTest, MatchesThePerElementReference) {
  std::mt19937 rng(7);
  for (const TypeInfo& ti : kQuantTypes) {
    for (int trial = 0; trial < 20; ++trial) {
      std::vector<uint8_t> block(ti.bytes);
      for (auto& v : block) v = rng() & 0xFF;
      // Finite f16 scales: d, m / dmin, or Q6_K's trailing d.
      const uint16_t h1 = FloatToHalf(std::uniform_real_distribution<float>(-2, 2)(rng));
      const uint16_t h2 = FloatToHalf(std::uniform_real_distribution<float>(-2, 2)(rng));
      if (ti.type == GgmlType::kQ6_K) {
        std::memcpy(&block[208], &h1, 2);
      } else {
        std::memcpy(&block[0], &h1, 2);
        if (ti.type != GgmlType::kQ8_0 && ti.type != GgmlType::kQ4_0 &&
            ti.type != GgmlType::kQ5_0)
          std::memcpy(&block[2], &h2, 2);
      }
      std::vector<float> got(ti.elems);
      ASSERT_TRUE(DequantizeGgml(ti.type, block.data(), ti.elems, got.data()).ok());
      for (int e = 0; e < ti.elems; ++e) {
        const float want = RefElement(ti.type, block.data(), e);
        EXPECT_NEAR(got[e], want, 1e-6f * std::fabs(want) + 1e-7f)
            << GgmlTypeName(static_cast<uint32_t>(ti.type)) << " trial " << trial << " element "
            << e;
      }
    }
  }
}

// Simple quantisers (max-abs scale, as ggml's reference quantize_row_*).
std::vector<uint8_t> QuantizeQ8_0(const float* x) {
  float amax = 0;
  for (int i = 0; i < 32; ++i) amax = std::max(amax, std::fabs(x[i]));
  const float d = amax / 127;
  std::vector<uint8_t> b(34);
  const uint16_t h = FloatToHalf(d);
  std::memcpy(b.data(), &h, 2);
  for (int i = 0; i < 32; ++i)
    b[2 + i] = static_cast<uint8_t>(static_cast<int8_t>(std::lround(d ? x[i] / d : 0)));
  return b;
}

std::vector<uint8_t> QuantizeQ4_1(const float* x) {
  float lo = x[0], hi = x[0];
  for (int i = 0; i < 32; ++i) lo = std::min(lo, x[i]), hi = std::max(hi, x[i]);
  const float d = (hi - lo) / 15;
  std::vector<uint8_t> b(20);
  const uint16_t hd = FloatToHalf(d), hm = FloatToHalf(lo);
  std::memcpy(b.data(), &hd, 2);
  std::memcpy(b.data() + 2, &hm, 2);
  auto q = [&](float v) { return std::clamp<int>(std::lround((v - lo) / d), 0, 15); };
  for (int j = 0; j < 16; ++j) b[4 + j] = q(x[j]) | (q(x[j + 16]) << 4);
  return b;
}

std::vector<uint8_t> QuantizeQ4_0(const float* x) {
  float amax = 0, maxv = 0;
  for (int i = 0; i < 32; ++i) {
    if (std::fabs(x[i]) > amax) amax = std::fabs(x[i]), maxv = x[i];
  }
  const float d = maxv / -8;
  std::vector<uint8_t> b(18);
  const uint16_t h = FloatToHalf(d);
  std::memcpy(b.data(), &h, 2);
  auto q = [&](float v) { return std::clamp<int>(std::lround(v / d) + 8, 0, 15); };
  for (int j = 0; j < 16; ++j) b[2 + j] = q(x[j]) | (q(x[j + 16]) << 4);
  return b;
}

TEST(GgufDequantTest, RoundTripsWithinHalfAStep) {
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> u(-1.5f, 1.5f);
  for (int trial = 0; trial < 50; ++trial) {
    float x[32];
    for (float& v : x) v = u(rng);
    float out[32];
    auto b8 = QuantizeQ8_0(x);
    DequantizeQ8_0(b8.data(), out);
    const float d8 = Half(b8.data());
    for (int i = 0; i < 32; ++i) EXPECT_NEAR(out[i], x[i], 0.5f * d8 + 1e-3f) << "Q8_0 " << i;
    auto b41 = QuantizeQ4_1(x);
    DequantizeQ4_1(b41.data(), out);
    const float d41 = Half(b41.data());
    for (int i = 0; i < 32; ++i) EXPECT_NEAR(out[i], x[i], 0.5f * d41 + 2e-3f) << "Q4_1 " << i;
    auto b40 = QuantizeQ4_0(x);
    DequantizeQ4_0(b40.data(), out);
    const float d40 = std::fabs(Half(b40.data()));
    // Q4_0's levels are d·[-8, 7] with d signed so the largest magnitude sits
    // at -8: values of the other sign beyond 7.5·|d| clip to the last level.
    for (int i = 0; i < 32; ++i) {
      const float clip = std::max(0.0f, std::fabs(x[i]) - 7.5f * d40);
      EXPECT_NEAR(out[i], x[i], 0.5f * d40 + clip + 2e-3f) << "Q4_0 " << i;
    }
  }
}

TEST(GgufDequantTest, PartialBlocksAreRejected) {
  std::vector<uint8_t> raw(144);
  std::vector<float> out(256);
  absl::Status s = DequantizeGgml(GgmlType::kQ4_K, raw.data(), 100, out.data());
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("Q4_K"), std::string::npos) << s;
  EXPECT_EQ(DequantizeGgml(static_cast<GgmlType>(10), raw.data(), 256, out.data()).code(),  // Q2_K
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace treespec
