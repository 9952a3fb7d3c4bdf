// A draft token tree as the target verifies it.
//
// Node 0 is the root: the last committed token, whose KV is not cached yet.
// Every other node is a draft token; parents[i] < i, so nodes are in
// topological order and a node's children appear in the order the drafter
// produced them. Row i of the target's logits over the packed tree is the
// distribution of the token that follows node i (core/model/forward_batch.h).
//
// `draft` optionally carries, for node i, the sparse distribution q_i its
// children were sampled from (without replacement, in child order; see
// verify.h for the contract). It is empty for greedy drafters; a per-node
// entry is empty for nodes without children or drafted deterministically.
//
// A plain value type: not thread-safe for concurrent mutation; const methods
// may be called concurrently.
#pragma once

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "core/spec/sampling.h"

namespace treespec {

inline constexpr int64_t kMaxTreeNodes = 1024;  // including the root
inline constexpr int32_t kMaxTreeDepth = 64;    // root has depth 0

struct TokenTree {
  std::vector<int32_t> tokens;    // [num_nodes]; tokens[0] is the root token
  std::vector<int32_t> parents;   // [num_nodes]; parents[0] == -1, parents[i] < i
  std::vector<SparseDist> draft;  // empty, or [num_nodes]

  // A tree of the root alone: verification of it is a plain decoding step.
  static TokenTree Root(int32_t root_token);
  // root → tokens[0] → tokens[1] → … (a chain draft).
  static TokenTree Chain(int32_t root_token, const std::vector<int32_t>& chain);

  // Appends a node under `parent` and returns its index. When `draft` is in
  // use the caller fills draft[parent] itself; AddNode keeps draft sized.
  int32_t AddNode(int32_t parent, int32_t token);

  int64_t num_nodes() const { return static_cast<int64_t>(tokens.size()); }
  bool has_draft(int32_t node) const {
    return node < static_cast<int32_t>(draft.size()) && !draft[node].tokens.empty();
  }

  // INVALID_ARGUMENT naming the field, node and value for: empty tree, size
  // mismatches, parents not in [-1 at 0, < i elsewhere), tokens outside
  // [0, vocab), duplicate sibling tokens, more than kMaxTreeNodes nodes, depth
  // above kMaxTreeDepth, and for a present q: tokens out of range or repeated,
  // negative / non-finite probabilities, a sum off 1 by more than 1e-3, or a
  // child token with q(token) == 0.
  absl::Status Validate(int64_t vocab) const;

  // Depth of every node (root 0). Requires a structurally valid tree.
  std::vector<int32_t> Depths() const;
  // Children of `node` in index order.
  std::vector<int32_t> Children(int32_t node) const;
  // Children of every node at once, in O(num_nodes): result[v] = Children(v).
  std::vector<std::vector<int32_t>> ChildLists() const;
  // Node indices from the root to `node`, both included.
  std::vector<int32_t> PathTo(int32_t node) const;
  // Child of `node` carrying `token`, or -1.
  int32_t ChildWithToken(int32_t node, int32_t token) const;
};

}  // namespace treespec
