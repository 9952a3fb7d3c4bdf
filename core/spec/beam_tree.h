// Dynamic tree attention over beam-search drafts (paper 003 Sec. 3.3, App.
// A.1): a beam search returns `width` candidate continuations of the root,
// all of the same `length`; many share prefixes (the paper measures 30-60%
// fewer tokens once they are merged). DedupPrefix finds, for every prefix of
// every candidate, the first candidate holding the same prefix; PackBeams
// turns that into a TokenTree (core/spec/token_tree.h) with every shared
// prefix stored once, so the worker verifies all candidates in one packed
// pass with the tree mask it builds for every other tree.
//
// Why the packing is right: two candidates i < k share the node of depth
// j + 1 exactly when beam[i][0..j] == beam[k][0..j] (App. A.1's
// prefix_tree[k][j] == i); the tree path of each candidate is then its own
// token sequence, so a verification walk that accepts a path accepts the
// longest prefix of some candidate the target agrees with, as ReDrafter's
// "longest accepted prefix" selection (Sec. 3.4), and siblings always carry
// distinct tokens (equal tokens under equal prefixes are one node).
//
// Pure functions; thread-safe.
#pragma once

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "core/spec/token_tree.h"

namespace treespec {

// One sequence's beam-search result: candidate i is tokens[i * length ..
// i * length + length), best candidate first.
struct Beams {
  int32_t width = 0;
  int32_t length = 0;
  std::vector<int32_t> tokens;  // [width, length]
  // [width, length] or empty: log q of token j of candidate i given the root
  // and tokens 0..j-1 of that candidate (the drafter's per-step
  // log-softmax). Equal prefixes give equal values for a deterministic
  // drafter; PackBeams keeps the first candidate's.
  std::vector<float> log_probs;

  // INVALID_ARGUMENT naming the field and value: width or length < 1, a
  // width x length above kMaxTreeNodes - 1, sizes off, negative token ids,
  // non-finite or positive log-probabilities.
  absl::Status Validate() const;
};

// App. A.1's dedup_prefix: out[i * length + j] = the smallest k with
// beam[k][0..j] == beam[i][0..j] (so out[i * length + j] <= i, and == i when
// candidate i is the first to hold that prefix). Requires beams.Validate().
// out: [width, length].
std::vector<int32_t> DedupPrefix(const Beams& beams);

struct PackedBeams {
  // The root then one node per distinct prefix, level by level and, within a
  // level, in candidate order (so parents[i] < i and the best candidate's
  // nodes come first among siblings).
  TokenTree tree;
  // [tree.num_nodes()]: each node's per-step draft log-probability (the
  // candidate's log_probs entry; 0 for the root and when beams carry none).
  std::vector<float> node_log_probs;
  // [width, length]: tree node of token j of candidate i.
  std::vector<int32_t> beam_nodes;
};

// App. A.1's pack_beam: the tree of `root_token` followed by the candidates
// with shared prefixes merged. INVALID_ARGUMENT from beams.Validate() or for a
// negative root token.
absl::StatusOr<PackedBeams> PackBeams(int32_t root_token, const Beams& beams);

}  // namespace treespec
