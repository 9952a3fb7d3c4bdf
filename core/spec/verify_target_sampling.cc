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
                          const float* p, int64_t vocab, const RngKey& key) {
  const int32_t y = SampleDense(p, vocab, Uniform(NodeKey(key, v), 0));
  return NodeChoice{RankOfToken(tree, children, y), y};
}

}  // namespace verify_internal

VerifyResult VerifyTargetSampling(const TokenTree& tree, const float* logits, int64_t vocab,
                                  const SamplingParams& params, RngKey key) {
  return verify_internal::WalkLogits(
      tree, logits, vocab, params,
      [&](int32_t v, const std::vector<int32_t>& children, const float* p) {
        return verify_internal::TargetSampleAt(tree, v, children, p, vocab, key);
      });
}

}  // namespace treespec
