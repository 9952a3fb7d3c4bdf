// TransformerDrafter: a small Llama as an external drafter (the classic
// baseline). It keeps its own paged KV cache per sequence: committed tokens
// before the tree root are cached; a draft tree is grown level by level in the
// cache tail (tree attention over the prior levels, AttentionBatch
// prior_lens), and after verification the accepted path is kept by KV
// compaction and the rest rolled back — so only the bonus token is new work.
#pragma once

#include <map>
#include <memory>
#include <vector>

#include "core/model/kv_cache.h"
#include "core/model/llama.h"
#include "drafter_service/tree_drafter.h"

namespace treespec {

class TransformerDrafter final : public TreeDrafter {
 public:
  static absl::StatusOr<std::unique_ptr<TransformerDrafter>> Create(
      const DrafterOptions& options, Backend* backend);
  std::string kind() const override { return "transformer"; }
  int64_t vocab_size() const override { return model_->config().vocab_size; }

 private:
  explicit TransformerDrafter(const DrafterOptions& options) : TreeDrafter(options) {}
  absl::Status OpenSequence(uint64_t id, const std::vector<int32_t>& prompt) override;
  void ReleaseSequence(uint64_t id) override;
  void Advance(const std::vector<AdvanceItem>& items, std::vector<float>* logits,
               std::vector<absl::Status>* status) override;
  absl::Status Expand(const std::vector<NodeFeed>& feeds,
                      const std::map<uint64_t, TokenTree>& trees,
                      std::vector<float>* logits) override;
  DrafterStats ModelStats() const override;

  std::unique_ptr<LlamaModel> model_;
  std::unique_ptr<PagedKvCache> cache_;
  std::map<uint64_t, int64_t> kv_;  // sequence -> kv cache sequence
};

}  // namespace treespec
