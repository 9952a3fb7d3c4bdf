// Internal to core/spec/verify*.cc: the walk from the root down the accepted
// path that every verification rule shares, and the per-node target-sampling
// step that multi-round sampling falls back on. Pure functions; thread-safe.
#pragma once

#include <cstdint>
#include <vector>

#include "core/spec/philox.h"
#include "core/spec/sampling.h"
#include "core/spec/token_tree.h"
#include "core/spec/verify.h"

namespace treespec::verify_internal {

// A rule's decision at one node: descend to children[child_rank], or (rank -1)
// end the step with `token` as the bonus.
struct NodeChoice {
  int32_t child_rank = -1;
  int32_t token = -1;
};

inline RngKey NodeKey(RngKey key, int32_t node) {
  key.stream = RngStream::kVerify;
  key.node = static_cast<uint32_t>(node);
  return key;
}

// choose(node, children) -> NodeChoice, with children in index order.
template <typename Choose>
VerifyResult WalkTree(const TokenTree& tree, Choose&& choose) {
  const std::vector<std::vector<int32_t>> children = tree.ChildLists();
  VerifyResult result;
  int32_t v = 0;
  while (true) {
    result.path.push_back(v);
    const NodeChoice choice = choose(v, children[v]);
    DepthAcceptance info;
    info.node = v;
    info.num_children = static_cast<int32_t>(children[v].size());
    info.accepted_rank = choice.child_rank;
    result.depths.push_back(info);
    if (choice.child_rank < 0) {
      result.bonus_token = choice.token;
      return result;
    }
    v = children[v][choice.child_rank];
    result.accepted_tokens.push_back(tree.tokens[v]);
  }
}

// Index in `children` of the child carrying `token`, or -1.
inline int32_t RankOfToken(const TokenTree& tree, const std::vector<int32_t>& children,
                           int32_t token) {
  for (size_t i = 0; i < children.size(); ++i) {
    if (tree.tokens[children[i]] == token) return static_cast<int32_t>(i);
  }
  return -1;
}

// The per-node rules take p_v, the processed target distribution at v
// (ProcessLogits of row v). in: p [vocab].
// Target sampling at node v: y ~ p_v with draw index 0; descend if y is a child.
NodeChoice TargetSampleAt(const TokenTree& tree, int32_t v, const std::vector<int32_t>& children,
                          const float* p, int64_t vocab, const RngKey& key);
// Multi-round speculative sampling over v's children (verify_multiround.cc).
NodeChoice MultiRoundAt(const TokenTree& tree, int32_t v, const std::vector<int32_t>& children,
                        const float* p, int64_t vocab, const RngKey& key);

// The logits-based rules: p_v computed on the host from row v.
template <typename Rule>
VerifyResult WalkLogits(const TokenTree& tree, const float* logits, int64_t vocab,
                        const SamplingParams& params, Rule&& rule) {
  std::vector<float> p;
  return WalkTree(tree, [&](int32_t v, const std::vector<int32_t>& children) {
    ProcessLogits(logits + static_cast<int64_t>(v) * vocab, vocab, params, &p);
    return rule(v, children, p.data());
  });
}

}  // namespace treespec::verify_internal
