// Greedy verification (paper 000, Alg. 1 in A.5, the p_one-hot lines).
//
// Why it is exact: at temperature 0 the target's own decoding emits
// y = argmax(row v) after the prefix ending at v. Descending only into the
// child whose token equals y, and emitting y as the bonus where no child does,
// reproduces the target's token sequence one token at a time; each row used
// is conditioned on exactly the accepted prefix because the tree mask lets
// node v attend only to its ancestors. Ties take the lowest token id (Argmax),
// the same rule plain decoding uses, so speculative and plain greedy output
// are identical token for token.
#include "core/spec/verify.h"
#include "core/spec/verify_walk.h"

namespace treespec {

VerifyResult VerifyGreedy(const TokenTree& tree, const float* logits, int64_t vocab) {
  return verify_internal::WalkTree(tree, [&](int32_t v, const std::vector<int32_t>& children) {
    const int32_t y = Argmax(logits + static_cast<int64_t>(v) * vocab, vocab);
    return verify_internal::NodeChoice{verify_internal::RankOfToken(tree, children, y), y};
  });
}

VerifyResult VerifyGreedyArgmax(const TokenTree& tree, const int32_t* argmax) {
  return verify_internal::WalkTree(tree, [&](int32_t v, const std::vector<int32_t>& children) {
    return verify_internal::NodeChoice{verify_internal::RankOfToken(tree, children, argmax[v]),
                                       argmax[v]};
  });
}

}  // namespace treespec
