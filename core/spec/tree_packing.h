// Tree packing: the positions and attention masks of a packed token tree's
// nodes, from their parent indices.
//
// Why this is right (SpecInfer's tree attention, paper 002 Sec. 3; paper 000
// Sec. 4.1): a node must see exactly the tokens on its root-to-node path and
// sit where that path would put it in a plain sequence. With the tree after a
// committed prefix of `length` tokens, the node at depth d (root depth 0) is
// therefore at position length + d, and its mask row is the ancestor-or-self
// set: row(i) = row(parent(i)) ∪ {i}. Because parents precede children
// (parents[i] < i), row(parent(i)) is complete when row(i) is built, so one
// pass in index order suffices. Its logits then equal those of decoding the
// path one token at a time, which is what verification relies on.
//
// Pure functions; thread-safe.
#pragma once

#include <cstdint>
#include <vector>

#include "absl/status/status.h"

namespace treespec {

struct PackedTree {
  int32_t words_per_row = 0;     // ceil(num_nodes / 64)
  std::vector<uint64_t> masks;   // [num_nodes, words_per_row]: bit j of row i = i sees j
  std::vector<int32_t> depth;    // [num_nodes], root 0
};

// in: parents [num_nodes] (parents[i] in [-1, i)); out: *packed. INVALID_ARGUMENT
// naming the node when a parent does not precede its child.
absl::Status PackTree(const std::vector<int32_t>& parents, PackedTree* packed);

}  // namespace treespec
