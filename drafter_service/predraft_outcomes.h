// Predicting how verification of a drafted tree will end, for pre-drafting
// (speculative speculative decoding, arXiv 2603.03251): while the target
// verifies step k's tree, the drafter drafts step k+1's tree for the most
// likely outcomes so that the next Draft is usually answered at once.
//
// An outcome of verifying tree T is (n, b): the accepted path ends at node n
// and the target's bonus token is b. With the drafter's own distribution p_v
// at node v standing in for the target's, a child c of v is accepted with
// probability p_v(c), so
//   P(n, b) = prod_{(v -> c) on the path to n} p_v(c) * p_n(b),  b not a child of n
// (if b were a child of n that child would have been accepted instead). The
// outcomes are ranked by this product. For greedy drafts (temperature 0) p_v
// is the drafter's softmax sharpened (logits x 2), estimating P(c is the
// target's argmax). Pure functions; thread-compatible.
#pragma once

#include <cstdint>
#include <vector>

#include "core/spec/token_tree.h"

namespace treespec {

struct PredictedOutcome {
  std::vector<int32_t> path;  // node indices from the root (0) to n
  int32_t bonus = 0;          // b
  double prob = 0.0;          // P(n, b) under the drafter's distribution
};

// The `num` most likely outcomes of verifying `tree`, best first.
// in: node_logits [tree.num_nodes()][vocab], the drafter's next-token logits
// after every node; temperature <= 0 ranks by the sharpened softmax.
std::vector<PredictedOutcome> PredictOutcomes(const TokenTree& tree,
                                              const std::vector<std::vector<float>>& node_logits,
                                              float temperature, int num);

}  // namespace treespec
