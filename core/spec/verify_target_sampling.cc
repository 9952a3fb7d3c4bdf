// Target sampling over a tree ("naive" tree sampling; DESIGN.md, One
// speculative step).
//
// At node v draw y ~ p_v, the target's processed distribution
// (temperature → top-k → top-p) after the prefix ending at v; if some child of
// v carries y, move to it and repeat, else emit y as the bonus and stop. Why it
// is lossless for any tree: every emitted token is a fresh draw from the
// target's conditional given exactly the tokens before it (the tree mask makes
// row v condition on v's ancestors only), and the tree merely decides how many
// of those draws one forward pass can serve. The draft distribution plays no
// part, so deterministic and sampled drafters alike are verified exactly; the
// price is a lower acceptance rate than multi-round sampling when q is known.
#include <vector>

#include "core/spec/verify.h"
#include "core/spec/verify_walk.h"

namespace treespec {
namespace verify_internal {

NodeChoice TargetSampleAt(const TokenTree& tree, int32_t v, const std::vector<int32_t>& children,
                          const float* row, int64_t vocab, const SamplingParams& params,
                          const RngKey& key) {
  std::vector<float> p;
  ProcessLogits(row, vocab, params, &p);
  const int32_t y = SampleDense(p, Uniform(NodeKey(key, v), 0));
  return NodeChoice{RankOfToken(tree, children, y), y};
}

}  // namespace verify_internal

VerifyResult VerifyTargetSampling(const TokenTree& tree, const float* logits, int64_t vocab,
                                  const SamplingParams& params, RngKey key) {
  return verify_internal::WalkTree(tree, [&](int32_t v, const std::vector<int32_t>& children) {
    return verify_internal::TargetSampleAt(tree, v, children,
                                           logits + static_cast<int64_t>(v) * vocab, vocab,
                                           params, key);
  });
}

}  // namespace treespec
