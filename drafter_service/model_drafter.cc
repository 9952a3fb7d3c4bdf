#include "drafter_service/model_drafter.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "core/util/status_macros.h"

namespace treespec {
namespace {

constexpr int64_t kBlockSize = 16;

// A Mamba-2 model drafts as a mamba drafter (recurrent, no context limit); a
// hybrid with attention layers has a KV cache, as a transformer drafter does.
const char* KindFor(ModelKind kind) {
  return kind == ModelKind::kMamba || kind == ModelKind::kMamba2 ? "mamba" : "transformer";
}

}  // namespace

absl::StatusOr<std::unique_ptr<ModelDrafter>> ModelDrafter::Create(const DrafterOptions& options,
                                                                   Backend* backend) {
  TS_RETURN_IF_ERROR(options.Validate());
  auto d = std::unique_ptr<ModelDrafter>(new ModelDrafter(options));
  SequenceModelOptions mo;
  const int64_t per_seq = (options.max_context + options.max_tree_nodes + kBlockSize - 1) / kBlockSize;
  mo.kv_blocks = per_seq * options.max_sequences * (1 + options.predraft);
  mo.kv_block_size = kBlockSize;
  mo.max_sequences = options.max_sequences * (1 + options.predraft);
  mo.max_tail_nodes = options.max_tree_nodes;
  mo.use_graphs = options.use_graphs;
  TS_ASSIGN_OR_RETURN(d->model_, LoadSequenceModel(options.model_dir, backend, nullptr, mo));
  const char* found = KindFor(d->model_->info().kind);
  if (options.kind != found) {
    return absl::InvalidArgumentError(absl::StrCat("--kind ", options.kind, " does not match ",
                                                   options.model_dir, ", a ", found,
                                                   " drafter model"));
  }
  return d;
}

absl::Status ModelDrafter::OpenSequence(const DrafterOpenSpec& spec) {
  const uint64_t id = spec.id;
  const size_t prompt_len = spec.prompt.size();
  if (!model_->info().is_recurrent && static_cast<int64_t>(prompt_len) >= options_.max_context) {
    return absl::InvalidArgumentError(absl::StrCat("prompt of ", prompt_len,
                                                   " tokens exceeds the drafter context ",
                                                   options_.max_context));
  }
  TS_ASSIGN_OR_RETURN(const int64_t handle,
                      model_->Open(options_.max_context + options_.max_tree_nodes));
  handles_[id] = handle;
  return absl::OkStatus();
}

void ModelDrafter::PrefillChunk(const std::vector<PromptChunk>& chunks,
                                std::vector<absl::Status>* status) {
  std::vector<ForwardSeq> batch;
  for (const PromptChunk& c : chunks) {
    batch.push_back({handles_.at(c.id),
                     std::vector<int32_t>(c.prompt->begin() + c.begin, c.prompt->begin() + c.end),
                     {},
                     LogitsMode::kNone});
  }
  ForwardOutput fo;
  const absl::Status st = model_->Forward(batch, &fo);
  for (size_t k = 0; k < chunks.size(); ++k) {
    (*status)[k] = st.ok() ? model_->Commit(batch[k].kv_seq,
                                            static_cast<int64_t>(batch[k].tokens.size()))
                           : st;
  }
}

void ModelDrafter::ReleaseSequence(uint64_t id) {
  auto it = handles_.find(id);
  if (it == handles_.end()) return;
  model_->Release(it->second);
  handles_.erase(it);
}

absl::Status ModelDrafter::CommitAccepted(const AdvanceItem& item, std::vector<int32_t>* rest) {
  const int64_t handle = handles_.at(item.id);
  const TokenTree& last = *item.last_tree;
  const std::vector<int32_t>& toks = *item.new_tokens;
  size_t matched = 0;
  if (last.num_nodes() > 0) {
    // The old root and the accepted drafts are in the tail already.
    std::vector<int32_t> path = {0};
    while (matched + 1 < toks.size()) {
      const int32_t child = last.ChildWithToken(path.back(), toks[matched]);
      if (child < 0) break;
      path.push_back(child);
      ++matched;
    }
    TS_RETURN_IF_ERROR(model_->CommitPath(handle, path));
  }
  rest->assign(toks.begin() + matched, toks.end());
  if (!model_->info().is_recurrent &&
      model_->length(handle) + static_cast<int64_t>(rest->size()) > options_.max_context) {
    return absl::OutOfRangeError(absl::StrCat("sequence ", item.id,
                                              " exceeds the drafter context of ",
                                              options_.max_context));
  }
  return absl::OkStatus();
}

void ModelDrafter::Advance(const std::vector<AdvanceItem>& items, std::vector<float>* logits,
                           std::vector<absl::Status>* status) {
  const int64_t V = vocab_size();
  logits->assign(items.size() * V, 0.0f);
  // Tokens before the new root are committed as chains (usually there are
  // none: just the bonus token is new); each root is then fed as node 0 of
  // its new tree.
  std::vector<ForwardSeq> chains, roots;
  std::vector<size_t> chain_of, root_of;
  for (size_t k = 0; k < items.size(); ++k) {
    std::vector<int32_t> rest;
    (*status)[k] = CommitAccepted(items[k], &rest);
    if (!(*status)[k].ok()) continue;
    const int64_t handle = handles_.at(items[k].id);
    if (rest.size() > 1) {
      chains.push_back({handle, std::vector<int32_t>(rest.begin(), rest.end() - 1), {},
                        LogitsMode::kNone});
      chain_of.push_back(k);
    }
    roots.push_back({handle, {rest.back()}, {-1}, LogitsMode::kAll});
    root_of.push_back(k);
  }
  if (!chains.empty()) {
    ForwardOutput fo;
    absl::Status st = model_->Forward(chains, &fo);
    for (size_t c = 0; c < chains.size(); ++c) {
      const size_t k = chain_of[c];
      if (st.ok()) {
        (*status)[k] = model_->Commit(chains[c].kv_seq, static_cast<int64_t>(chains[c].tokens.size()));
      } else {
        (*status)[k] = st;
      }
    }
  }
  std::vector<ForwardSeq> live_roots;
  std::vector<size_t> live_of;
  for (size_t r = 0; r < roots.size(); ++r) {
    if (!(*status)[root_of[r]].ok()) continue;
    live_roots.push_back(std::move(roots[r]));
    live_of.push_back(root_of[r]);
  }
  if (live_roots.empty()) return;
  ForwardOutput fo;
  absl::Status st = model_->Forward(live_roots, &fo);
  for (size_t r = 0; r < live_roots.size(); ++r) {
    const size_t k = live_of[r];
    if (!st.ok()) {
      (*status)[k] = st;
      continue;
    }
    const float* row = fo.row_logits(fo.row_start[r]);
    std::copy(row, row + V, logits->begin() + k * V);
  }
}

absl::Status ModelDrafter::Expand(const std::vector<NodeFeed>& feeds,
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
    fs.kv_seq = handles_.at(feeds[f].id);
    fs.num_prior = feeds[f].node;
    for (size_t i = f; i < g; ++i) {
      if (feeds[i].node != fs.num_prior + static_cast<int32_t>(i - f)) {
        return absl::InternalError("drafter: level nodes are not consecutive");
      }
      fs.tokens.push_back(feeds[i].token);
    }
    fs.parents.assign(tree.parents.begin(), tree.parents.begin() + fs.num_prior + fs.tokens.size());
    fs.logits = LogitsMode::kAll;
    batch.push_back(std::move(fs));
    f = g;
  }
  ForwardOutput fo;
  TS_RETURN_IF_ERROR(model_->Forward(batch, &fo));
  *logits = std::move(fo.logits);
  return absl::OkStatus();
}

absl::Status ModelDrafter::ForkSequence(uint64_t id, const std::vector<int32_t>& path,
                                        uint64_t fork_id) {
  TS_ASSIGN_OR_RETURN(const int64_t handle,
                      model_->ForkPath(handles_.at(id), path,
                                       options_.max_context + options_.max_tree_nodes));
  handles_[fork_id] = handle;
  return absl::OkStatus();
}

void ModelDrafter::AdoptSequence(uint64_t fork_id, uint64_t id) {
  auto fork = handles_.find(fork_id);
  model_->Release(handles_.at(id));
  handles_[id] = fork->second;
  handles_.erase(fork);
}

DrafterStats ModelDrafter::ModelStats() const {
  const SequenceModelStats m = model_->stats();
  DrafterStats s;
  s.slots_total = m.blocks_used + m.blocks_free;
  s.slots_free = m.blocks_free;
  return s;
}

}  // namespace treespec
