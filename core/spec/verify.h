// Verification of a draft token tree against the target's logits: which path
// of the tree the target accepts, and the bonus token that follows it.
//
// The target runs one forward pass over the packed tree; row v of `logits` is
// the target's next-token distribution after node v. Starting at the root, a
// rule picks at each node either one of its children (descend) or a token
// that is not drafted there (the bonus, which ends the step). At an accepted
// leaf the bonus is drawn from the leaf's own row. Every step therefore emits
// the accepted draft tokens plus exactly one bonus token.
//
// Rules (all lossless — see the comment at each implementation):
//   kGreedy          argmax of the raw logits; exact for temperature 0.
//   kMultiRound      multi-round speculative sampling over each node's
//                    children (EAGLE App. B.2, paper 002; SpecInfer), adapted
//                    to children drawn without replacement. Uses tree.draft.
//   kTargetSampling  y ~ p at each node, descend if y is a child. Needs no q.
//
// Drafter contract for kMultiRound: the children c_1..c_m of node v (in index
// order) are sampled one after another WITHOUT replacement from
// q_v = tree.draft[v]: c_i ~ q_v restricted to tokens other than c_1..c_{i-1},
// renormalised. A node with children but no draft[v] (greedy or deterministic
// drafters) is verified with the target-sampling rule, which is lossless for
// any children, so a mixed tree stays exact.
//
// Randomness: draws use RngKey{key.seed, kVerify, key.step, node v} — index 0
// for the sample from p (or the residual) at v, index i for the acceptance
// test of v's i-th child (1-based). The result is a pure function of
// (tree, logits, params, seed, step), independent of batching.
//
// Pure functions; thread-safe.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "core/spec/philox.h"
#include "core/spec/sampling.h"
#include "core/spec/token_tree.h"

namespace treespec {

enum class VerifyMode { kGreedy, kMultiRound, kTargetSampling };

absl::string_view VerifyModeName(VerifyMode mode);  // "greedy", "multiround", "target_sampling"
absl::StatusOr<VerifyMode> ParseVerifyMode(absl::string_view name);

// kGreedy requires temperature 0 and the sampling modes temperature > 0
// (INVALID_ARGUMENT otherwise); also checks params.Validate().
absl::Status ValidateVerifyMode(VerifyMode mode, const SamplingParams& params);

// What happened at one node of the accepted path.
struct DepthAcceptance {
  int32_t node = 0;           // path node at this depth
  int32_t num_children = 0;   // draft candidates below it
  int32_t accepted_rank = -1; // index among its children of the accepted one; -1: bonus drawn here
};

struct VerifyResult {
  std::vector<int32_t> path;             // accepted nodes root first; path[0] == 0
  std::vector<int32_t> accepted_tokens;  // tokens of path[1..]: accepted draft tokens
  int32_t bonus_token = -1;              // drawn at path.back()
  std::vector<DepthAcceptance> depths;   // [path.size()], depths[d] is about path[d]

  int32_t num_accepted() const { return static_cast<int32_t>(accepted_tokens.size()); }
  // Tokens this step emits (accepted + bonus): N_accept of paper 000, >= 1.
  int32_t num_new_tokens() const { return num_accepted() + 1; }
  std::vector<int32_t> NewTokens() const;
};

// Preconditions (checked by the caller on request data): tree.Validate(vocab)
// is OK and ValidateVerifyMode(mode, params) is OK. As a safety net a sampling
// mode with params.greedy() runs the greedy rule. key.stream and key.node are
// ignored (see above).
// in: logits [tree.num_nodes(), vocab], row v follows node v.
VerifyResult Verify(VerifyMode mode, const TokenTree& tree, const float* logits, int64_t vocab,
                    const SamplingParams& params, RngKey key);

// The sampling rules (kMultiRound, kTargetSampling) read each visited node's
// processed target distribution p_v = ProcessLogits(logits row v, params),
// and only those rows: `rows(v)` returns p_v [vocab], valid until the next
// call, or an error, which the verification returns. A worker keeps the rows
// on the device and brings back only the ones the walk asks for
// (ForwardOutput::fetch_probs). Given the same rows, the result is the one
// Verify computes from the logits, draw for draw. Preconditions as for Verify;
// mode is not kGreedy and params are not greedy.
using ProbRows = std::function<absl::StatusOr<const float*>(int32_t node)>;
absl::StatusOr<VerifyResult> VerifySampledRows(VerifyMode mode, const TokenTree& tree,
                                               int64_t vocab, const SamplingParams& params,
                                               RngKey key, const ProbRows& rows);

VerifyResult VerifyGreedy(const TokenTree& tree, const float* logits, int64_t vocab);
// The greedy rule from each row's argmax alone (computed on the device, so
// that no logits row leaves it). in: argmax [tree.num_nodes()].
VerifyResult VerifyGreedyArgmax(const TokenTree& tree, const int32_t* argmax);
VerifyResult VerifyMultiRound(const TokenTree& tree, const float* logits, int64_t vocab,
                              const SamplingParams& params, RngKey key);
VerifyResult VerifyTargetSampling(const TokenTree& tree, const float* logits, int64_t vocab,
                                  const SamplingParams& params, RngKey key);

}  // namespace treespec
