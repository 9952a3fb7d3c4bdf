// core/spec/sampling: temperature / top-k / top-p (ProcessLogits, also the
// CPU backend's ProcessLogitsRows) against values worked out by hand and
// against a brute-force reference written from the definition, not from the
// implementation; plus TopKDist (a drafter's children and their q), Argmax
// and the inverse-CDF draws.
#include "core/spec/sampling.h"

#include <algorithm>
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace treespec {
namespace {

// Effectively -inf: exp(-1000 - max) is exactly 0 in double, so the other
// probabilities are exact when their logits tie.
constexpr float kNever = -1000.0f;

SamplingParams Params(float temperature, int top_k, float top_p) {
  SamplingParams p;
  p.temperature = temperature;
  p.top_k = top_k;
  p.top_p = top_p;
  return p;
}

std::vector<float> Process(const std::vector<float>& logits, const SamplingParams& params) {
  std::vector<float> probs;
  ProcessLogits(logits.data(), static_cast<int64_t>(logits.size()), params, &probs);
  return probs;
}

// By definition, token by token, in O(V^2): a token's rank is the number of
// tokens that beat it (a higher logit, or an equal logit and a lower id). It
// survives top-k when its rank is below k; it survives top-p when the mass
// (softmax at the temperature, renormalised over the top-k survivors) of the
// tokens ranked above it is still below top_p. Survivors share the mass in
// proportion to exp(logit / T).
std::vector<double> BruteForce(const std::vector<float>& logits, const SamplingParams& params) {
  const int n = static_cast<int>(logits.size());
  const int k = params.top_k > 0 ? std::min(params.top_k, n) : n;
  auto beats = [&](int a, int b) {
    return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
  };
  std::vector<int> rank(n, 0);
  for (int i = 0; i < n; ++i) {
    for (int j = 0; j < n; ++j) rank[i] += beats(j, i) ? 1 : 0;
  }
  std::vector<long double> w(n);
  for (int i = 0; i < n; ++i) {
    w[i] = std::exp(static_cast<long double>(logits[i]) / params.temperature);
  }
  long double top_k_mass = 0;
  for (int i = 0; i < n; ++i) top_k_mass += rank[i] < k ? w[i] : 0;
  std::vector<bool> keep(n);
  long double kept_mass = 0;
  for (int i = 0; i < n; ++i) {
    long double above = 0;
    for (int j = 0; j < n; ++j) above += rank[j] < rank[i] ? w[j] : 0;
    keep[i] = rank[i] < k && (params.top_p >= 1.0f || above / top_k_mass < params.top_p);
    kept_mass += keep[i] ? w[i] : 0;
  }
  std::vector<double> probs(n, 0.0);
  for (int i = 0; i < n; ++i) probs[i] = keep[i] ? static_cast<double>(w[i] / kept_mass) : 0.0;
  return probs;
}

void ExpectProbs(const std::vector<float>& got, const std::vector<double>& want,
                 const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < want.size(); ++i) {
    EXPECT_NEAR(got[i], want[i], 1e-6 + 1e-6 * want[i]) << what << ", token " << i;
    if (want[i] == 0.0) EXPECT_EQ(got[i], 0.0f) << what << ", token " << i << " must be cut";
  }
}

TEST(ProcessLogitsTest, TopPExactlyOnACumulativeBoundaryKeepsThatPrefix) {
  // Four tied tokens of 1/4 each: 0.5 is reached exactly after two of them.
  const std::vector<float> logits = {0, 0, 0, 0, kNever, kNever};
  ExpectProbs(Process(logits, Params(1.0f, 0, 0.5f)), {0.5, 0.5, 0, 0, 0, 0}, "p=0.5");
  ExpectProbs(Process(logits, Params(1.0f, 0, 0.25f)), {1, 0, 0, 0, 0, 0}, "p=0.25");
  ExpectProbs(Process(logits, Params(1.0f, 0, 0.75f)), {1. / 3, 1. / 3, 1. / 3, 0, 0, 0},
              "p=0.75");
  // Just past a boundary takes one more token.
  ExpectProbs(Process(logits, Params(1.0f, 0, 0.5001f)), {1. / 3, 1. / 3, 1. / 3, 0, 0, 0},
              "p=0.5001");
}

TEST(ProcessLogitsTest, TiesGoToTheLowerIdAtTheTopKAndTopPCuts) {
  // Ids 2, 3 and 4 tie for second place; top-k = 3 keeps 1, 2, 3.
  const std::vector<float> logits = {0.0f, 3.0f, 2.0f, 2.0f, 2.0f, 1.0f};
  const double e3 = std::exp(3.0), e2 = std::exp(2.0), z = e3 + 2 * e2;
  ExpectProbs(Process(logits, Params(1.0f, 3, 1.0f)), {0, e3 / z, e2 / z, e2 / z, 0, 0}, "k=3");
  // Ids 1, 4 and 6 tie at 1/3 each: top-p 0.6 and top-k 2 both keep 1 and 4.
  const std::vector<float> flat = {kNever, 1.0f, kNever, kNever, 1.0f, kNever, 1.0f};
  ExpectProbs(Process(flat, Params(1.0f, 0, 0.6f)), {0, 0.5, 0, 0, 0.5, 0, 0}, "flat p=0.6");
  ExpectProbs(Process(flat, Params(1.0f, 2, 1.0f)), {0, 0.5, 0, 0, 0.5, 0, 0}, "flat k=2");
}

TEST(ProcessLogitsTest, TopPCutsTheTopKRenormalisedMassNotTheFullSoftmax) {
  // Full softmax: {e, 1, 1, 1} / (e + 3), p0 = 0.475. After top-k = 2 the
  // mass is {e, 1} / (e + 1), p0 = 0.731 >= 0.7, so top-p keeps id 0 alone;
  // top-p on the full softmax would have kept three tokens.
  const std::vector<float> logits = {1.0f, 0.0f, 0.0f, 0.0f};
  ExpectProbs(Process(logits, Params(1.0f, 2, 0.7f)), {1, 0, 0, 0}, "k=2 p=0.7");
  // Temperature first: at T = 4, p0 = e^0.25 / (e^0.25 + 1) = 0.562 < 0.7.
  const double a = std::exp(0.25);
  ExpectProbs(Process(logits, Params(4.0f, 2, 0.7f)), {a / (a + 1), 1 / (a + 1), 0, 0},
              "T=4 k=2 p=0.7");
}

TEST(ProcessLogitsTest, TopKOfVocabOrMoreAndTopPOfOneKeepEverything) {
  const std::vector<float> logits = {0.5f, -2.0f, 1.0f};
  const double z = std::exp(0.5) + std::exp(-2.0) + std::exp(1.0);
  const std::vector<double> all = {std::exp(0.5) / z, std::exp(-2.0) / z, std::exp(1.0) / z};
  ExpectProbs(Process(logits, Params(1.0f, 0, 1.0f)), all, "off");
  ExpectProbs(Process(logits, Params(1.0f, 3, 1.0f)), all, "k=V");
  ExpectProbs(Process(logits, Params(1.0f, 50, 1.0f)), all, "k>V");
}

TEST(ProcessLogitsTest, MatchesTheDefinitionOnRandomTiedRows) {
  std::mt19937 rng(7);
  std::uniform_int_distribution<int> level(-6, 6);
  std::uniform_int_distribution<int> vocab(1, 48);
  std::uniform_real_distribution<float> unit(0.05f, 1.0f);
  for (int c = 0; c < 400; ++c) {
    std::vector<float> logits(vocab(rng));
    for (float& x : logits) x = 0.5f * level(rng);  // coarse: many ties
    const int top_k = c % 3 == 0 ? 0 : 1 + c % static_cast<int>(logits.size() + 2);
    const float top_p = c % 4 == 0 ? 1.0f : unit(rng);
    const float temperature = c % 2 == 0 ? 1.0f : 0.3f + unit(rng) * 2;
    const SamplingParams params = Params(temperature, top_k, top_p);
    ExpectProbs(Process(logits, params), BruteForce(logits, params),
                "case " + std::to_string(c) + " V=" + std::to_string(logits.size()) +
                    " T=" + std::to_string(temperature) + " k=" + std::to_string(top_k) +
                    " p=" + std::to_string(top_p));
    if (HasFailure()) return;
  }
}

TEST(TopKDistTest, TheKBestByLogitThenLowerIdWithTheirSoftmax) {
  // The definition: order the whole vocabulary by logit (descending), ties
  // by id (ascending); keep the first k; softmax over them at temperature T.
  std::mt19937 rng(11);
  std::uniform_int_distribution<int> level(-5, 5);
  for (int c = 0; c < 300; ++c) {
    const int vocab = 1 + c % 200;
    std::vector<float> logits(vocab);
    for (float& x : logits) x = 0.25f * level(rng);  // coarse: many ties
    const int k = std::vector<int>{1, 2, 3, 8, 32, 65, 100, vocab + 5}[c % 8];
    const float temperature = c % 2 == 0 ? 1.0f : 0.4f;
    std::vector<int32_t> ids(vocab);
    for (int v = 0; v < vocab; ++v) ids[v] = v;
    std::stable_sort(ids.begin(), ids.end(),
                     [&](int32_t a, int32_t b) { return logits[a] > logits[b]; });
    ids.resize(std::min(k, vocab));
    double sum = 0;
    for (int32_t v : ids) sum += std::exp((logits[v] - logits[ids[0]]) / temperature);
    const SparseDist d = TopKDist(logits.data(), vocab, k, temperature);
    ASSERT_EQ(d.tokens, ids) << "case " << c << " V=" << vocab << " k=" << k;
    ASSERT_EQ(d.probs.size(), ids.size());
    for (size_t i = 0; i < ids.size(); ++i) {
      EXPECT_NEAR(d.probs[i], std::exp((logits[ids[i]] - logits[ids[0]]) / temperature) / sum,
                  1e-6)
          << "case " << c << " rank " << i;
    }
  }
}

TEST(ArgmaxTest, LowestIdAmongTheMaxima) {
  const std::vector<float> logits = {1.0f, 4.0f, -2.0f, 4.0f, 4.0f};
  EXPECT_EQ(Argmax(logits.data(), 5), 1);
  EXPECT_EQ(Argmax(logits.data(), 1), 0);
}

TEST(SampleTest, InverseCdfNeverDrawsAZeroProbabilityToken) {
  const std::vector<float> probs = {0.0f, 0.25f, 0.0f, 0.75f, 0.0f};
  EXPECT_EQ(SampleDense(probs, 0.0), 1);
  EXPECT_EQ(SampleDense(probs, 0.2499), 1);
  EXPECT_EQ(SampleDense(probs, 0.25), 3);
  EXPECT_EQ(SampleDense(probs, 0.9999999), 3);
  SparseDist d;
  d.tokens = {9, 4, 7};
  d.probs = {0.5f, 0.0f, 0.5f};
  EXPECT_EQ(SampleSparse(d, 0.49), 9);
  EXPECT_EQ(SampleSparse(d, 0.5), 7);
}

}  // namespace
}  // namespace treespec
