// EagleDrafter: an EAGLE / EAGLE-3 head (core/model/eagle_head.h) as a tree
// drafter (--kind eagle | eagle3), drafting from the target's features.
//
// Per sequence the head's KV cache holds one committed row per target
// position whose feature is known: row t = (feature t, token t+1). Features
// arrive with every Open (the prompt's) and Draft (those the last
// verification computed: the old root's and the accepted nodes'), one per
// token after the first (drafter.h states the rows). A Draft then
//   1. commits the old tree's root row (its input was a real feature); the
//      rest of the old tree is dropped: its rows read the head's own
//      predictions, and the target's real features replace them (paper 002
//      Sec. 3.1: drafting always restarts from the target's features);
//   2. feeds new_tokens[0 .. n-2] as a chain with their real features and
//      commits them, then new_tokens[n-1], the new root, as tree node 0;
//   3. grows the tree level by level (TreeDrafter): a node's row reads its
//      parent's output h as the feature and its own token.
// A root row's logits give the root's children: they predict the token after
// the root from (feature before the root, root), exactly what the target's
// feature at the root would give if the head were perfect.
//
// Pre-drafting is off for these kinds: the next tree needs the features that
// only the next verification computes.
//
// Thread-safe (TreeDrafter's lock).
#pragma once

#include <map>
#include <memory>
#include <vector>

#include "core/model/eagle_head.h"
#include "drafter_service/tree_drafter.h"

namespace treespec {

class EagleDrafter final : public TreeDrafter {
 public:
  // Loads the head in options.model_dir for the target in options.target_dir;
  // INVALID_ARGUMENT when options.kind is not the head's kind.
  static absl::StatusOr<std::unique_ptr<EagleDrafter>> Create(const DrafterOptions& options,
                                                              Backend* backend);
  std::string kind() const override { return options_.kind; }
  int64_t vocab_size() const override { return head_->info().vocab_size; }
  std::vector<int32_t> feature_layers() const override { return head_->info().target_layers; }
  int64_t feature_width() const override { return head_->info().feature_width(); }
  // EagleHead::Load accepts Llama-family targets only.
  std::string target_model_kind() const override { return "llama"; }
  ~EagleDrafter() override { StopPredraft(); }

 private:
  struct HeadSeq {
    int64_t handle = 0;
    std::vector<float> node_h;  // [nodes of the current tree, H]: each node's output h
  };
  explicit EagleDrafter(const DrafterOptions& options);
  absl::Status OpenSequence(const DrafterOpenSpec& spec) override;
  void PrefillChunk(const std::vector<PromptChunk>& chunks,
                    std::vector<absl::Status>* status) override;
  absl::Status CheckDraftSpec(const DraftSpec& spec) const override;
  void ReleaseSequence(uint64_t id) override;
  void Advance(const std::vector<AdvanceItem>& items, std::vector<float>* logits,
               std::vector<absl::Status>* status) override;
  absl::Status Expand(const std::vector<NodeFeed>& feeds,
                      const std::map<uint64_t, TokenTree>& trees,
                      std::vector<float>* logits) override;
  DrafterStats ModelStats() const override;
  absl::Status ForkSequence(uint64_t id, const std::vector<int32_t>& path,
                            uint64_t fork_id) override;
  void AdoptSequence(uint64_t fork_id, uint64_t id) override {}
  // Step 1 and the chain of step 2 for one item; out: the root's g row.
  absl::Status CommitRows(const AdvanceItem& item, std::vector<float>* root_g);

  std::unique_ptr<EagleHead> head_;
  std::map<uint64_t, HeadSeq> seqs_by_id_;
};

}  // namespace treespec
