// MambaDrafter: a Mamba model as an external drafter (paper 000). Per sequence
// a base state slot (state after every committed token up to the tree root)
// and one preallocated slot per tree node; a level of the tree is one batched
// Step over all sequences' new nodes after copying each parent's state into
// its children's slots (Sec. 4.1). After verification the state of the last
// accepted node is adopted by swapping slot ids — no recomputation — and only
// the bonus token is fed.
#pragma once

#include <map>
#include <memory>
#include <vector>

#include "core/model/mamba.h"
#include "drafter_service/tree_drafter.h"

namespace treespec {

class MambaDrafter final : public TreeDrafter {
 public:
  static absl::StatusOr<std::unique_ptr<MambaDrafter>> Create(const DrafterOptions& options,
                                                              Backend* backend);
  std::string kind() const override { return "mamba"; }
  int64_t vocab_size() const override { return model_->config().vocab_size; }

 private:
  explicit MambaDrafter(const DrafterOptions& options) : TreeDrafter(options) {}
  absl::Status OpenSequence(uint64_t id, const std::vector<int32_t>& prompt) override;
  void ReleaseSequence(uint64_t id) override;
  void Advance(const std::vector<AdvanceItem>& items, std::vector<float>* logits,
               std::vector<absl::Status>* status) override;
  absl::Status Expand(const std::vector<NodeFeed>& feeds,
                      const std::map<uint64_t, TokenTree>& trees,
                      std::vector<float>* logits) override;
  DrafterStats ModelStats() const override;

  struct Slots {
    int32_t base = -1;
    std::vector<int32_t> nodes;  // nodes[i]: state after tree node i (i >= 1)
  };
  std::unique_ptr<MambaModel> model_;
  std::unique_ptr<MambaStatePool> pool_;
  std::map<uint64_t, Slots> slots_;
};

}  // namespace treespec
