// EagleHead: an EAGLE (paper 002 Sec. 3) or EAGLE-3 (arXiv 2503.01840)
// drafter head: one Llama decoder layer that drafts in its target's feature
// space, with the target's own token embedding and LM head.
//
// Row t of a head sequence reads g_t, the target's feature at position t
// (EAGLE: the last layer's residual stream; EAGLE-3: a low, a middle and a
// high layer fused by `fuse` [H, 3H]) or, deeper in a draft tree, the head's
// own output for the parent node, and the embedding of token t+1:
//   x_t = fc([g_t ; embed(token_{t+1})])      (fc [H, 2H] applied as two
//   halves) h   = decoder layer over the rows (causal / tree attention, RoPE
//   position t) logits_t = lm_head(norm(h_t))              (the head's norm,
//   the target's lm_head)
// h_t predicts the target's feature at t+1 and its logits token t+2.
//
// The head's directory holds only its own weights (fc, fuse, the layer,
// norm) and a config.json naming the kind and the target layers; the
// embedding and LM head are read from the target's checkpoint, never copied.
// The layer is a one-layer LlamaModel fed its input rows through
// ForwardOptions::input_rows, so the head reuses the Llama kernels, the
// paged KV cache, tree masks and KV compaction as they are.
//
// Thread-compatible: one call at a time.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "core/model/llama_sequence_model.h"
#include "core/tensor/backend.h"
#include "core/tensor/workspace.h"

namespace treespec {

enum class EagleKind { kEagle, kEagle3 };

struct EagleHeadInfo {
  EagleKind kind = EagleKind::kEagle;
  // The target's layers whose outputs (residual stream after the layer,
  // before the final norm; ForwardOptions::hidden_layers) the head reads.
  std::vector<int32_t> target_layers;
  int64_t hidden_size = 0;
  int64_t vocab_size = 0;
  // Floats per position of the features the head reads: layers x hidden.
  int64_t feature_width() const { return static_cast<int64_t>(target_layers.size()) * hidden_size; }
};

// "eagle" / "eagle3".
const char* EagleKindName(EagleKind kind);

class EagleHead {
 public:
  // Loads the head in `head_dir` for the Llama target in `target_dir` on
  // `backend` (not owned, must outlive the head), with a KV cache of
  // `kv_blocks` blocks of `kv_block_size` rows.
  static absl::StatusOr<std::unique_ptr<EagleHead>> Load(const std::string& head_dir,
                                                         const std::string& target_dir,
                                                         Backend* backend, int64_t kv_blocks,
                                                         int64_t kv_block_size);

  const EagleHeadInfo& info() const { return info_; }

  // Target features -> the head's g rows.
  // in: features [n, feature_width()] (per row: the target layers in
  //     info().target_layers order); out: g [n, hidden].
  absl::Status Fuse(const std::vector<float>& features, int64_t n, std::vector<float>* g);

  // One packed pass over head sequences, as SequenceModel::Forward: each
  // ForwardSeq's tokens are the rows' tokens (token t+1 of row t).
  // in: g [total new rows, hidden] in the packed order of `seqs`.
  // out: out->logits for the rows each sequence asks for and out->hidden
  //      [1, those rows, hidden]: each row's h (the next row's g in a tree).
  absl::Status Forward(const std::vector<ForwardSeq>& seqs, const std::vector<float>& g,
                       ForwardOutput* out);

  // Open / Commit / CommitPath / ForkPath / Release of head sequences; its
  // Forward runs plain token embeddings and is not the head's (use Forward).
  SequenceModel* sequences() { return seqs_.get(); }

 private:
  EagleHead() = default;

  EagleHeadInfo info_;
  Backend* backend_ = nullptr;
  std::unique_ptr<LlamaSequenceModel> seqs_;
  Tensor fc_feature_, fc_token_;  // the halves of fc: [H, H] each
  Tensor fuse_;                   // eagle3: [H, feature_width]
  Workspace workspace_;
};

}  // namespace treespec
