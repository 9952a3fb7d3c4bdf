// ModelDrafter: any SequenceModel as an external drafter (a Mamba model, paper
// 000; a small Llama, the classic baseline) — the model hooks of TreeDrafter
// written once against the SequenceModel interface.
//
// Per sequence the model holds the committed tokens before the tree root; a
// draft tree is the model's tail: the root is fed as tree node 0, and every
// level is one batched Forward over all sequences' new nodes (num_prior =
// nodes already in the tail). After verification the next Draft commits the
// old root and the accepted path (CommitPath: KV compaction for a
// transformer, adopting the last accepted node's state for a recurrent model)
// so that only the bonus token is new work.
#pragma once

#include <map>
#include <memory>
#include <vector>

#include "core/model/sequence_model.h"
#include "drafter_service/tree_drafter.h"

namespace treespec {

class ModelDrafter final : public TreeDrafter {
 public:
  // Loads options.model_dir; INVALID_ARGUMENT when options.kind ("mamba",
  // "transformer") does not match the model found there.
  static absl::StatusOr<std::unique_ptr<ModelDrafter>> Create(const DrafterOptions& options,
                                                              Backend* backend);
  std::string kind() const override { return options_.kind; }
  int64_t vocab_size() const override { return model_->info().vocab_size; }
  ~ModelDrafter() override { StopPredraft(); }

 private:
  explicit ModelDrafter(const DrafterOptions& options) : TreeDrafter(options) {}
  absl::Status OpenSequence(const DrafterOpenSpec& spec) override;
  void PrefillChunk(const std::vector<PromptChunk>& chunks,
                    std::vector<absl::Status>* status) override;
  void ReleaseSequence(uint64_t id) override;
  void Advance(const std::vector<AdvanceItem>& items, std::vector<float>* logits,
               std::vector<absl::Status>* status) override;
  absl::Status Expand(const std::vector<NodeFeed>& feeds,
                      const std::map<uint64_t, TokenTree>& trees,
                      std::vector<float>* logits) override;
  DrafterStats ModelStats() const override;
  absl::Status ForkSequence(uint64_t id, const std::vector<int32_t>& path,
                            uint64_t fork_id) override;
  void AdoptSequence(uint64_t fork_id, uint64_t id) override;
  // Commits the old root and the accepted path of item k's last tree; out:
  // the tokens of item k not covered by it (the last one is the new root).
  absl::Status CommitAccepted(const AdvanceItem& item, std::vector<int32_t>* rest);

  std::unique_ptr<SequenceModel> model_;
  // Sequence (or pre-draft fork) id -> model handle.
  std::map<uint64_t, int64_t> handles_;
};

}  // namespace treespec
