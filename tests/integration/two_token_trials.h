// The trial loop and the expected counts of the two-token chi-square tests of
// lossless sampling on real models (model_distribution_test: the Mamba
// drafter; eagle_distribution_test: the EAGLE heads). Each trial drafts a tree
// (the caller's `draft`, keyed by seed_base + trial), verifies it with `rule`
// on the target's logits of every node (`target_after`: the logits after the
// prompt followed by a suffix), and records the first two emitted tokens,
// sampling the second from the target itself when the step emitted one. They
// must follow p(x)·p(y | x) of the target's own sampling.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <vector>

#include "core/spec/philox.h"
#include "core/spec/sampling.h"
#include "core/spec/verify.h"
#include "tests/testing/chi_square.h"

namespace treespec::testing {

using Rule = std::function<VerifyResult(const TokenTree&, const float*, int64_t,
                                        const SamplingParams&, RngKey)>;

struct TwoTokenOutcome {
  ChiSquareResult first, pair;
  double mean_accepted = 0.0;
};

inline TwoTokenOutcome RunTwoTokenTrials(
    int64_t vocab, int trials, uint64_t seed_base, const SamplingParams& params, const Rule& rule,
    const std::function<TokenTree(int trial, uint64_t seed)>& draft,
    const std::function<const std::vector<float>&(const std::vector<int32_t>&)>& target_after) {
  const int64_t V = vocab;
  auto prob = [&](const std::vector<int32_t>& suffix) {
    std::vector<float> p;
    ProcessLogits(target_after(suffix).data(), V, params, &p);
    return p;
  };
  std::vector<int64_t> first(V, 0), pair(V * V, 0);
  std::map<int32_t, std::vector<float>> p_after;
  int64_t accepted = 0;
  std::vector<float> rows;
  for (int trial = 0; trial < trials; ++trial) {
    const TokenTree tree = draft(trial, seed_base + trial);
    rows.clear();
    for (int32_t v = 0; v < tree.num_nodes(); ++v) {
      std::vector<int32_t> suffix;
      for (int32_t n : tree.PathTo(v)) {
        if (n != 0) suffix.push_back(tree.tokens[n]);
      }
      const std::vector<float>& row = target_after(suffix);
      rows.insert(rows.end(), row.begin(), row.end());
    }
    const uint64_t vseed = 0x5EED + trial;
    VerifyResult r = rule(tree, rows.data(), V, params, RngKey{vseed, RngStream::kVerify, 1, 0});
    accepted += r.num_accepted();
    std::vector<int32_t> emitted = r.NewTokens();
    if (emitted.size() < 2) {  // the next token comes from the target itself
      auto it = p_after.find(emitted[0]);
      if (it == p_after.end()) it = p_after.emplace(emitted[0], prob({emitted[0]})).first;
      emitted.push_back(SampleDense(it->second, Uniform({vseed, RngStream::kSample, 2, 0}, 0)));
    }
    ++first[emitted[0]];
    ++pair[emitted[0] * V + emitted[1]];
  }
  // Expected probabilities. Pairs whose first token is too rare to reach an
  // expected count of 5 are pooled by ChiSquareTest whatever their second
  // token, so p(y | x) is only computed for the others.
  const std::vector<float> p_root = prob({});
  std::vector<double> want_first(p_root.begin(), p_root.end()), want_pair(V * V, 0.0);
  for (int32_t x = 0; x < V; ++x) {
    if (p_root[x] == 0.0f) continue;
    if (p_root[x] * trials < 5.0) {
      for (int32_t y = 0; y < V; ++y) want_pair[x * V + y] = p_root[x] / V;
      continue;
    }
    const std::vector<float> px = prob({x});
    for (int32_t y = 0; y < V; ++y) want_pair[x * V + y] = static_cast<double>(p_root[x]) * px[y];
  }
  TwoTokenOutcome o;
  o.first = ChiSquareTest(first, want_first);
  o.pair = ChiSquareTest(pair, want_pair);
  o.mean_accepted = static_cast<double>(accepted) / trials;
  return o;
}

}  // namespace treespec::testing
