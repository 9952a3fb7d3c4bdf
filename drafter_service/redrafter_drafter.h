// RedrafterDrafter: a ReDrafter head (core/model/redrafter_head.h, paper 003)
// as a drafter (--kind redrafter --model HEAD --target TARGET): per request,
// a beam search (redrafter_beam_search.h) from the target's last hidden
// state and the new root, packed into one token tree with dynamic tree
// attention (core/spec/beam_tree.h, Sec. 3.3).
//
// The head reads the target's last layer (feature_layers() = {L - 1}, the
// residual stream before the final norm, as the worker returns it) and
// applies the target's final norm itself, so its h is the last hidden state
// after the norm (as Apple's reference reads it). A Draft's last feature row
// is the one that produced the root, exactly the h of Sec. 3.1; the head has
// no other per-sequence state (no KV cache: the RNN restarts from the root
// each step), so Open only checks its prompt and features.
//
// Tree shape: the request's TreeShape is the node budget. The beam length is
// min(--beam-length, shape depth) and the width min(--beam-width,
// shape draft nodes / length) (at least 1), so the width x length candidate
// tokens, of which the packed tree keeps the distinct prefixes, never exceed
// the shape's node count nor its depth.
//
// Lossless sampling. Beam search is a deterministic top-k selection, not a
// draw: a node's children are the surviving extensions, not tokens sampled
// without replacement from a distribution q. Multi-round speculative
// sampling (core/spec/verify.h, paper 002 App. B.2) is exact only when the
// children were sampled from the q it is given; reporting the head's
// per-step softmax as q for beam children would bias the output towards the
// head. So the trees carry no q (TokenTree::draft empty), whatever the
// request's temperature: greedy verification (temperature 0) is exact as
// for every tree; the target-sampling rule (y ~ p at each node, descend if y
// is a child) needs no q and is exact for any children; and a multi-round
// request verifies every q-less node with that same target-sampling rule
// (verify.h's contract for deterministic drafters), so it stays exact too.
// The per-node draft log-probabilities are kept by PackBeams (e.g. for
// acceptance statistics) but never sent as q.
//
// Thread-safe: one mutex around every public call.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "core/model/redrafter_head.h"
#include "core/model/sequence_table.h"
#include "drafter_service/drafter.h"
#include "drafter_service/table_drafter.h"

namespace treespec {

// ReDrafter keeps no per-sequence state: its head reads the target's features.
struct RedrafterSeqState {};

class RedrafterDrafter : public TableDrafter<RedrafterSeqState> {
 public:
  static absl::StatusOr<std::unique_ptr<RedrafterDrafter>> Create(const DrafterOptions& options,
                                                                  Backend* backend);

  std::string kind() const override { return "redrafter"; }
  int64_t vocab_size() const override { return head_->info().vocab_size; }
  std::vector<int32_t> feature_layers() const override { return {head_->info().target_layer}; }
  int64_t feature_width() const override { return head_->info().hidden_size; }
  // RedrafterHead::Load accepts Llama-family targets only.
  std::string target_model_kind() const override { return "llama"; }
  std::vector<absl::Status> Open(const std::vector<DrafterOpenSpec>& specs) override;
  std::vector<DraftOutcome> Draft(const std::vector<DraftSpec>& specs) override;

  // {width, length} of the beam search for `shape` (see the header comment).
  static std::pair<int32_t, int32_t> FitBeams(const TreeShape& shape, int32_t beam_width,
                                              int32_t beam_length);

 private:
  explicit RedrafterDrafter(const DrafterOptions& options)
      : TableDrafter(options), options_(options) {}
  absl::Status CheckDraft(const DraftSpec& s, BatchIds* ids) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const DrafterOptions options_;
  std::unique_ptr<RedrafterHead> head_;
};

}  // namespace treespec
