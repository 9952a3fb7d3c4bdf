// Counter-based random numbers (Philox4x32-10, Salmon et al., SC'11).
//
// A draw is a pure function of (seed, stream, step, node, index): no hidden
// state, so a seeded request gets the same random numbers whatever the batch
// composition, replica or tensor-parallel size — the property that makes
// seeded speculative sampling reproducible. Thread-safe (pure functions).
#pragma once

#include <array>
#include <cstdint>

namespace treespec {

// Independent uses of randomness within one step get distinct streams.
enum class RngStream : uint32_t {
  kVerify = 1,      // acceptance tests and residual sampling at verification
  kDraft = 2,       // drafters sampling tree children
  kSample = 3,      // plain (non-speculative) sampling
};

std::array<uint32_t, 4> Philox4x32(std::array<uint32_t, 4> counter, std::array<uint32_t, 2> key);

struct RngKey {
  uint64_t seed = 0;
  RngStream stream = RngStream::kSample;
  uint32_t step = 0;   // per-sequence step (or output position)
  uint32_t node = 0;   // tree node
};

// Uniform double in [0, 1) with 53 random bits; `index` picks the draw.
double Uniform(const RngKey& key, uint32_t index);

}  // namespace treespec
