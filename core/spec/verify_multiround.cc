// Multi-round speculative sampling over a tree (EAGLE App. B.2, paper 002;
// the single-round rule of paper 004 applied recursively, as in SpecInfer),
// for children drawn WITHOUT replacement.
//
// At node v with children c_1..c_m drawn in order from q = tree.draft[v]
// without replacement, let p_1 = p_v (processed target row) and q_1 = q.
// Round i tests c_i: accept with probability min(1, p_i(c_i) / q_i(c_i)).
// On rejection p_{i+1} = norm(max(0, p_i − q_i)) and q_{i+1} is q_i with c_i
// removed and renormalised — exactly the law of c_{i+1} under the drafter
// contract. If every child is rejected, the bonus is drawn from p_{m+1}.
//
// Why it is lossless (backward induction on i): suppose that, given the
// rejected history c_1..c_{i-1}, rounds i+1.. emit a token distributed as
// p_{i+1}. p_{i+1} depends on that history but not on c_i, and c_i ~ q_i
// given it. Round i then emits y with probability
//   min(q_i(y), p_i(y)) + (1 − Σ_t min(q_i(t), p_i(t))) · p_{i+1}(y) = p_i(y),
// because Σ_t max(0, p_i(t) − q_i(t)) = 1 − Σ_t min(q_i(t), p_i(t)) — the
// single-round identity of paper 004 (Leviathan et al., App. A.1). The base
// case (after c_m) samples p_{m+1} directly. So the token emitted at v is
// distributed as p_v; descending into an accepted child repeats the argument
// with that child's row, and draws at different nodes use disjoint Philox
// counters, so the emitted sequence has the target's joint law.
//
// Edge cases: a child whose q_i is 0 (outside q's support, or q exhausted)
// could not have been drawn; it is skipped without changing p, which keeps
// the induction intact for the remaining children. If a residual's mass is
// ~0 (p_i ≈ q_i, so rejection had probability ~0 and only rounding got us
// here) p_i is kept. Nodes without a q use the target-sampling rule.
#include <algorithm>
#include <vector>

#include "core/spec/verify.h"
#include "core/spec/verify_walk.h"

namespace treespec {
namespace verify_internal {
namespace {

// Residual masses below this fraction of the current mass count as zero.
constexpr double kMinResidualFraction = 1e-9;

}  // namespace

NodeChoice MultiRoundAt(const TokenTree& tree, int32_t v, const std::vector<int32_t>& children,
                        const float* p_v, int64_t vocab, const RngKey& key) {
  if (children.empty() || !tree.has_draft(v)) {
    return TargetSampleAt(tree, v, children, p_v, vocab, key);
  }
  const SparseDist& q = tree.draft[v];
  const size_t k = q.tokens.size();
  const RngKey node_key = NodeKey(key, v);

  // p is kept unnormalised: p_i = p / mass. Only q's support ever changes.
  std::vector<float> p(p_v, p_v + vocab);
  double mass = 0.0;
  for (float x : p) mass += x;
  std::vector<char> removed(k, 0);
  std::vector<float> residual(k);

  for (size_t i = 0; i < children.size(); ++i) {
    const int32_t x = tree.tokens[children[i]];
    const auto it = std::find(q.tokens.begin(), q.tokens.end(), x);
    const size_t jx = static_cast<size_t>(it - q.tokens.begin());
    double q_rest = 0.0;
    for (size_t j = 0; j < k; ++j) {
      if (!removed[j]) q_rest += q.probs[j];
    }
    if (jx == k || removed[jx] || !(q.probs[jx] > 0.0f) || !(q_rest > 0.0)) continue;

    const double qx = q.probs[jx] / q_rest;  // q_i(x)
    const double px = p[x] / mass;            // p_i(x)
    if (Uniform(node_key, static_cast<uint32_t>(i + 1)) * qx < px) {
      return NodeChoice{static_cast<int32_t>(i), x};
    }
    // p ← max(0, p − mass·q_i) on q_i's support; mass follows.
    double new_mass = mass;
    for (size_t j = 0; j < k; ++j) {
      if (removed[j]) continue;
      const int32_t t = q.tokens[j];
      const double r = std::max(0.0, static_cast<double>(p[t]) - mass * q.probs[j] / q_rest);
      residual[j] = static_cast<float>(r);
      new_mass -= static_cast<double>(p[t]) - residual[j];
    }
    if (new_mass > kMinResidualFraction * mass) {
      for (size_t j = 0; j < k; ++j) {
        if (!removed[j]) p[q.tokens[j]] = residual[j];
      }
      mass = new_mass;
    }
    removed[jx] = 1;
  }
  return NodeChoice{-1, SampleDense(p, Uniform(node_key, 0))};
}

}  // namespace verify_internal

VerifyResult VerifyMultiRound(const TokenTree& tree, const float* logits, int64_t vocab,
                              const SamplingParams& params, RngKey key) {
  return verify_internal::WalkLogits(
      tree, logits, vocab, params,
      [&](int32_t v, const std::vector<int32_t>& children, const float* p) {
        return verify_internal::MultiRoundAt(tree, v, children, p, vocab, key);
      });
}

}  // namespace treespec
