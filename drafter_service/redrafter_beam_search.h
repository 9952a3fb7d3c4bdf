// Beam search over a ReDrafter head (paper 003 Sec. 3.2), batched over
// sequences: every step feeds the live candidates of every sequence to the
// head in one call.
//
// Per sequence, step 1 scores the root's continuations from s_1 = e(root);
// each later step extends every live candidate by one token. A candidate's
// score is the sum of its per-step log-probabilities log q_j(y_j | root,
// y_1..y_{j-1}) (the head's log-softmax); after each step the `width` best
// extensions over all candidates survive (ties: the better-ranked parent,
// then the lower token id), so after `length` steps the result holds the
// `width` most likely length-`length` continuations the search found, best
// first. Each extension (parent, token) is unique, so no two results are
// equal; they share prefixes, which PackBeams (core/spec/beam_tree.h) merges.
//
// Thread-compatible (the head is used without a lock).
#pragma once

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "core/model/redrafter_head.h"
#include "core/spec/beam_tree.h"

namespace treespec {

struct BeamRequest {
  int32_t root = 0;            // y_0: the last committed token
  const float* h = nullptr;    // [H] the head's context (RedrafterHead::Context)
  int32_t width = 1;           // >= 1 (capped at the vocabulary)
  int32_t length = 1;          // >= 1
};

// One Beams per request, width min(request width, V), with log_probs.
absl::StatusOr<std::vector<Beams>> RedrafterBeamSearch(RedrafterHead* head,
                                                       const std::vector<BeamRequest>& requests);

}  // namespace treespec
