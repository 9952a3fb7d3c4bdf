#include "drafter_service/transformer_drafter.h"

#include "absl/strings/str_cat.h"
#include "core/util/status_macros.h"

namespace treespec {

absl::StatusOr<std::unique_ptr<TransformerDrafter>> TransformerDrafter::Create(
    const DrafterOptions& options, Backend* backend) {
  TS_RETURN_IF_ERROR(options.Validate());
  auto d = std::unique_ptr<TransformerDrafter>(new TransformerDrafter(options));
  TS_ASSIGN_OR_RETURN(d->model_, LlamaModel::Load(options.model_dir, backend));
  constexpr int64_t kBlock = 16;
  const int64_t per_seq = (options.max_context + options.max_tree_nodes + kBlock - 1) / kBlock;
  TS_ASSIGN_OR_RETURN(d->cache_, PagedKvCache::Create(
                                     d->model_->KvOptions(per_seq * options.max_sequences, kBlock),
                                     backend));
  return d;
}

absl::Status TransformerDrafter::OpenSequence(uint64_t id, const std::vector<int32_t>& prompt) {
  if (static_cast<int64_t>(prompt.size()) >= options_.max_context) {
    return absl::InvalidArgumentError(absl::StrCat("prompt of ", prompt.size(),
                                                   " tokens exceeds the drafter context ",
                                                   options_.max_context));
  }
  const int64_t kv = cache_->CreateSequence();
  absl::Status st = cache_->Reserve(kv, options_.max_context + options_.max_tree_nodes);
  if (st.ok() && !prompt.empty()) {
    ForwardOutput fo;
    st = model_->Forward({{kv, prompt, {}, LogitsMode::kNone}}, cache_.get(), &fo);
    if (st.ok()) st = cache_->Commit(kv, static_cast<int64_t>(prompt.size()));
  }
  if (!st.ok()) {
    cache_->Release(kv);
    return st;
  }
  kv_[id] = kv;
  return absl::OkStatus();
}

void TransformerDrafter::ReleaseSequence(uint64_t id) {
  auto it = kv_.find(id);
  if (it == kv_.end()) return;
  cache_->Release(it->second);
  kv_.erase(it);
}

void TransformerDrafter::Advance(const std::vector<AdvanceItem>& items, std::vector<float>* logits,
                                 std::vector<absl::Status>* status) {
  const int64_t V = vocab_size();
  logits->assign(items.size() * V, 0.0f);
  std::vector<ForwardSeq> batch;
  std::vector<size_t> who;
  for (size_t k = 0; k < items.size(); ++k) {
    const int64_t kv = kv_[items[k].id];
    const TokenTree& last = *items[k].last_tree;
    const std::vector<int32_t>& toks = *items[k].new_tokens;
    size_t matched = 0;
    if (last.num_nodes() > 0) {
      // Keep the old root and the accepted path's KV (tail compaction).
      std::vector<int32_t> path = {0};
      while (matched + 1 < toks.size()) {
        int32_t child = last.ChildWithToken(path.back(), toks[matched]);
        if (child < 0) break;
        path.push_back(child);
        ++matched;
      }
      absl::Status st = cache_->CommitPath(kv, path);
      if (!st.ok()) {
        (*status)[k] = st;
        continue;
      }
    }
    const int64_t rest = static_cast<int64_t>(toks.size() - matched);
    if (cache_->length(kv) + rest + options_.max_tree_nodes > cache_->capacity(kv)) {
      (*status)[k] = absl::OutOfRangeError(absl::StrCat(
          "sequence ", items[k].id, " exceeds the drafter context of ", options_.max_context));
      continue;
    }
    // Unmatched tokens before the root are committed; the root stays in the
    // tail (tree column 0) until the next verification.
    batch.push_back({kv, std::vector<int32_t>(toks.begin() + matched, toks.end()), {},
                     LogitsMode::kLast});
    who.push_back(k);
  }
  if (batch.empty()) return;
  ForwardOutput fo;
  absl::Status st = model_->Forward(batch, cache_.get(), &fo);
  for (size_t b = 0; b < batch.size(); ++b) {
    const size_t k = who[b];
    if (st.ok()) st = cache_->Commit(batch[b].kv_seq, static_cast<int64_t>(batch[b].tokens.size()) - 1);
    if (!st.ok()) {
      (*status)[k] = st;
      continue;
    }
    std::copy(fo.row_logits(fo.row_start[b]), fo.row_logits(fo.row_start[b]) + V,
              logits->begin() + k * V);
  }
}

absl::Status TransformerDrafter::Expand(const std::vector<NodeFeed>& feeds,
                                        const std::map<uint64_t, TokenTree>& trees,
                                        std::vector<float>* logits) {
  // Feeds arrive grouped by sequence with consecutive node indices at the end
  // of each tree; each group is one ForwardSeq over the tail.
  std::vector<ForwardSeq> batch;
  size_t f = 0;
  while (f < feeds.size()) {
    size_t g = f;
    while (g < feeds.size() && feeds[g].id == feeds[f].id) ++g;
    const TokenTree& tree = trees.at(feeds[f].id);
    ForwardSeq fs;
    fs.kv_seq = kv_.at(feeds[f].id);
    fs.num_prior = feeds[f].node;
    for (size_t i = f; i < g; ++i) {
      if (feeds[i].node != fs.num_prior + static_cast<int32_t>(i - f)) {
        return absl::InternalError("transformer drafter: level nodes are not consecutive");
      }
      fs.tokens.push_back(feeds[i].token);
    }
    fs.parents.assign(tree.parents.begin(), tree.parents.begin() + fs.num_prior + fs.tokens.size());
    fs.logits = LogitsMode::kAll;
    batch.push_back(std::move(fs));
    f = g;
  }
  ForwardOutput fo;
  TS_RETURN_IF_ERROR(model_->Forward(batch, cache_.get(), &fo));
  *logits = std::move(fo.logits);
  return absl::OkStatus();
}

DrafterStats TransformerDrafter::ModelStats() const {
  DrafterStats s;
  s.slots_total = cache_->options().num_blocks;
  s.slots_free = cache_->num_free_blocks();
  return s;
}

}  // namespace treespec
