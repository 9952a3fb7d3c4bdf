#include "core/spec/philox.h"

namespace treespec {

std::array<uint32_t, 4> Philox4x32(std::array<uint32_t, 4> c, std::array<uint32_t, 2> k) {
  constexpr uint32_t kM0 = 0xD2511F53u, kM1 = 0xCD9E8D57u;
  constexpr uint32_t kW0 = 0x9E3779B9u, kW1 = 0xBB67AE85u;
  for (int round = 0; round < 10; ++round) {
    uint64_t p0 = static_cast<uint64_t>(kM0) * c[0];
    uint64_t p1 = static_cast<uint64_t>(kM1) * c[2];
    uint32_t hi0 = static_cast<uint32_t>(p0 >> 32), lo0 = static_cast<uint32_t>(p0);
    uint32_t hi1 = static_cast<uint32_t>(p1 >> 32), lo1 = static_cast<uint32_t>(p1);
    c = {hi1 ^ c[1] ^ k[0], lo1, hi0 ^ c[3] ^ k[1], lo0};
    k[0] += kW0;
    k[1] += kW1;
  }
  return c;
}

double Uniform(const RngKey& key, uint32_t index) {
  std::array<uint32_t, 4> out =
      Philox4x32({static_cast<uint32_t>(key.stream), key.step, key.node, index},
                 {static_cast<uint32_t>(key.seed), static_cast<uint32_t>(key.seed >> 32)});
  uint64_t bits = (static_cast<uint64_t>(out[0] >> 5) << 26) | (out[1] >> 6);
  return static_cast<double>(bits) * (1.0 / 9007199254740992.0);  // 2^53
}

}  // namespace treespec
