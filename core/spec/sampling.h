// Sampling primitives: temperature, top-k, top-p, argmax and inverse-CDF
// sampling, plus the sparse (top-k truncated) draft distributions drafters send
// with their trees. Argmax and ProcessLogits are also the CPU backend's
// ArgmaxRows / ProcessLogitsRows (kernels/cpu) and the plain-loop reference of
// the CUDA kernels. Pure functions; thread-safe.
#pragma once

#include <cstdint>
#include <vector>

#include "absl/status/status.h"

namespace treespec {

struct SamplingParams {
  float temperature = 0.0f;  // 0: greedy (argmax)
  int top_k = 0;             // 0: off
  float top_p = 1.0f;        // 1: off
  bool greedy() const { return temperature <= 0.0f; }
  absl::Status Validate() const;
};

// A distribution over a few tokens: probabilities sum to 1 (descending order).
struct SparseDist {
  std::vector<int32_t> tokens;
  std::vector<float> probs;
  float ProbOf(int32_t token) const;
};

// Lowest index among the maxima.
int32_t Argmax(const float* logits, int64_t vocab);

// Target distribution after temperature, then top-k, then top-p (the order of
// Hugging Face's logits warpers); zeros outside the kept set. Requires
// temperature > 0. Ties in the top-k and top-p orders go to the lower id; the
// top-p cut keeps the shortest prefix whose mass reaches top_p (>=).
// in: logits [vocab]; out: probs [vocab], sums to 1.
void ProcessLogits(const float* logits, int64_t vocab, const SamplingParams& params,
                   float* probs);
void ProcessLogits(const float* logits, int64_t vocab, const SamplingParams& params,
                   std::vector<float>* probs);

// Inverse-CDF draw from a dense distribution with uniform u in [0, 1); never
// returns a zero-probability token.
int32_t SampleDense(const std::vector<float>& probs, double u);
int32_t SampleDense(const float* probs, int64_t n, double u);
int32_t SampleSparse(const SparseDist& dist, double u);

// The `k` most likely tokens of softmax(logits / temperature), renormalised:
// the distribution a drafter samples its children from. temperature <= 0 gives
// the k largest logits with probabilities of softmax(logits) restricted to them.
SparseDist TopKDist(const float* logits, int64_t vocab, int k, float temperature);

}  // namespace treespec
