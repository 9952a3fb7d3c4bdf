#include "drafter_service/eagle_drafter.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "core/util/status_macros.h"

namespace treespec {
namespace {

constexpr int64_t kBlockSize = 16;

DrafterOptions WithoutPredraft(DrafterOptions o) {
  o.predraft = 0;
  return o;
}

}  // namespace

EagleDrafter::EagleDrafter(const DrafterOptions& options) : TreeDrafter(WithoutPredraft(options)) {}

absl::StatusOr<std::unique_ptr<EagleDrafter>> EagleDrafter::Create(const DrafterOptions& options,
                                                                   Backend* backend) {
  TS_RETURN_IF_ERROR(options.Validate());
  auto d = std::unique_ptr<EagleDrafter>(new EagleDrafter(options));
  const int64_t per_seq =
      (options.max_context + options.max_tree_nodes + kBlockSize - 1) / kBlockSize;
  TS_ASSIGN_OR_RETURN(d->head_, EagleHead::Load(options.model_dir, options.target_dir, backend,
                                                per_seq * options.max_sequences, kBlockSize));
  const char* found = EagleKindName(d->head_->info().kind);
  if (options.kind != found) {
    return absl::InvalidArgumentError(absl::StrCat("--kind ", options.kind, " does not match ",
                                                   options.model_dir, ", an ", found, " head"));
  }
  return d;
}

absl::Status EagleDrafter::OpenSequence(const DrafterOpenSpec& spec) {
  const int64_t P = static_cast<int64_t>(spec.prompt.size());
  const int64_t W = head_->info().feature_width(), H = head_->info().hidden_size;
  if (P < 1) return absl::InvalidArgumentError("prompt is empty");
  if (static_cast<int64_t>(spec.features.size()) != (P - 1) * W) {
    return absl::InvalidArgumentError(
        absl::StrCat("features: ", spec.features.size(), " floats; a prompt of ", P,
                     " tokens needs ", P - 1, " rows of ", W, " (the target's layers ",
                     head_->info().target_layers.size(), " x ", H, ")"));
  }
  if (P >= options_.max_context) {
    return absl::InvalidArgumentError(absl::StrCat(
        "prompt of ", P, " tokens exceeds the drafter context ", options_.max_context));
  }
  TS_ASSIGN_OR_RETURN(const int64_t handle,
                      head_->sequences()->Open(options_.max_context + options_.max_tree_nodes));
  seqs_by_id_[spec.id] = HeadSeq{handle, {}};
  return absl::OkStatus();
}

// Prompt tokens [begin, end) of each chunk: head row i (for i >= 1) reads the
// target's feature i - 1 and token i, so a chunk feeds rows max(begin, 1) ..
// end - 1, one batched forward pass for all chunks.
void EagleDrafter::PrefillChunk(const std::vector<PromptChunk>& chunks,
                                std::vector<absl::Status>* status) {
  const int64_t W = head_->info().feature_width();
  std::vector<ForwardSeq> batch;
  std::vector<size_t> of_chunk;
  std::vector<float> g;
  for (size_t k = 0; k < chunks.size(); ++k) {
    const PromptChunk& c = chunks[k];
    const size_t first = std::max<size_t>(c.begin, 1);
    if (first >= c.end) continue;
    const int64_t n = static_cast<int64_t>(c.end - first);
    std::vector<float> f(c.features->begin() + (first - 1) * W,
                         c.features->begin() + (c.end - 1) * W);
    std::vector<float> chunk_g;
    (*status)[k] = head_->Fuse(f, n, &chunk_g);
    if (!(*status)[k].ok()) continue;
    g.insert(g.end(), chunk_g.begin(), chunk_g.end());
    batch.push_back({seqs_by_id_.at(c.id).handle,
                     std::vector<int32_t>(c.prompt->begin() + first, c.prompt->begin() + c.end),
                     {},
                     LogitsMode::kNone});
    of_chunk.push_back(k);
  }
  if (batch.empty()) return;
  ForwardOutput fo;
  const absl::Status st = head_->Forward(batch, g, &fo);
  for (size_t b = 0; b < batch.size(); ++b) {
    (*status)[of_chunk[b]] =
        st.ok() ? head_->sequences()->Commit(batch[b].kv_seq,
                                             static_cast<int64_t>(batch[b].tokens.size()))
                : st;
  }
}

absl::Status EagleDrafter::CheckDraftSpec(const DraftSpec& spec) const {
  const int64_t W = head_->info().feature_width();
  const int64_t n = static_cast<int64_t>(spec.new_tokens.size());
  if (static_cast<int64_t>(spec.features.size()) != n * W) {
    return absl::InvalidArgumentError(absl::StrCat("features: ", spec.features.size(),
                                                   " floats for ", n, " new tokens; ",
                                                   options_.kind, " needs ", n, " rows of ", W));
  }
  auto it = seqs_by_id_.find(spec.id);
  if (it != seqs_by_id_.end() &&
      head_->sequences()->length(it->second.handle) + n + 1 > options_.max_context) {
    return absl::OutOfRangeError(absl::StrCat(
        "sequence ", spec.id, " exceeds the drafter context of ", options_.max_context));
  }
  return absl::OkStatus();
}

void EagleDrafter::ReleaseSequence(uint64_t id) {
  auto it = seqs_by_id_.find(id);
  if (it == seqs_by_id_.end()) return;
  head_->sequences()->Release(it->second.handle);
  seqs_by_id_.erase(it);
}

absl::Status EagleDrafter::CommitRows(const AdvanceItem& item, std::vector<float>* root_g) {
  HeadSeq& hs = seqs_by_id_.at(item.id);
  SequenceModel* sm = head_->sequences();
  if (item.last_tree->num_nodes() > 0) TS_RETURN_IF_ERROR(sm->CommitPath(hs.handle, {0}));
  const std::vector<int32_t>& toks = *item.new_tokens;
  const int64_t n = static_cast<int64_t>(toks.size()), H = head_->info().hidden_size;
  std::vector<float> g;
  TS_RETURN_IF_ERROR(head_->Fuse(*item.features, n, &g));
  if (n > 1) {
    ForwardOutput fo;
    std::vector<float> chain_g(g.begin(), g.begin() + (n - 1) * H);
    std::vector<int32_t> chain(toks.begin(), toks.end() - 1);
    TS_RETURN_IF_ERROR(head_->Forward({{hs.handle, chain, {}, LogitsMode::kNone}}, chain_g, &fo));
    TS_RETURN_IF_ERROR(sm->Commit(hs.handle, n - 1));
  }
  root_g->assign(g.end() - H, g.end());
  return absl::OkStatus();
}

void EagleDrafter::Advance(const std::vector<AdvanceItem>& items, std::vector<float>* logits,
                           std::vector<absl::Status>* status) {
  const int64_t V = vocab_size(), H = head_->info().hidden_size;
  logits->assign(items.size() * V, 0.0f);
  std::vector<ForwardSeq> roots;
  std::vector<float> roots_g;
  std::vector<size_t> root_of;
  for (size_t k = 0; k < items.size(); ++k) {
    std::vector<float> g;
    (*status)[k] = CommitRows(items[k], &g);
    if (!(*status)[k].ok()) continue;
    roots.push_back({seqs_by_id_.at(items[k].id).handle,
                     {items[k].new_tokens->back()},
                     {-1},
                     LogitsMode::kAll});
    roots_g.insert(roots_g.end(), g.begin(), g.end());
    root_of.push_back(k);
  }
  if (roots.empty()) return;
  ForwardOutput fo;
  absl::Status st = head_->Forward(roots, roots_g, &fo);
  for (size_t r = 0; r < roots.size(); ++r) {
    const size_t k = root_of[r];
    if (!st.ok()) {
      (*status)[k] = st;
      continue;
    }
    const float* row = fo.row_logits(fo.row_start[r]);
    std::copy(row, row + V, logits->begin() + k * V);
    const float* h = fo.hidden.data() + fo.hidden_row_start[r] * H;
    seqs_by_id_.at(items[k].id).node_h.assign(h, h + H);
  }
}

absl::Status EagleDrafter::Expand(const std::vector<NodeFeed>& feeds,
                                  const std::map<uint64_t, TokenTree>& trees,
                                  std::vector<float>* logits) {
  const int64_t H = head_->info().hidden_size;
  // Feeds arrive grouped by sequence with consecutive node indices at the end
  // of each tree; each group is one ForwardSeq over the tail, each row fed its
  // parent's output h.
  std::vector<ForwardSeq> batch;
  std::vector<float> g;
  size_t f = 0;
  while (f < feeds.size()) {
    size_t e = f;
    while (e < feeds.size() && feeds[e].id == feeds[f].id) ++e;
    const TokenTree& tree = trees.at(feeds[f].id);
    const HeadSeq& hs = seqs_by_id_.at(feeds[f].id);
    ForwardSeq fs;
    fs.kv_seq = hs.handle;
    fs.num_prior = feeds[f].node;
    for (size_t i = f; i < e; ++i) {
      if (feeds[i].node != fs.num_prior + static_cast<int32_t>(i - f) ||
          static_cast<int64_t>(hs.node_h.size()) < (feeds[i].parent + 1) * H) {
        return absl::InternalError("eagle drafter: level nodes are not consecutive");
      }
      fs.tokens.push_back(feeds[i].token);
      g.insert(g.end(), hs.node_h.begin() + feeds[i].parent * H,
               hs.node_h.begin() + (feeds[i].parent + 1) * H);
    }
    fs.parents.assign(tree.parents.begin(), tree.parents.begin() + fs.num_prior + fs.tokens.size());
    fs.logits = LogitsMode::kAll;
    batch.push_back(std::move(fs));
    f = e;
  }
  ForwardOutput fo;
  TS_RETURN_IF_ERROR(head_->Forward(batch, g, &fo));
  for (size_t i = 0; i < feeds.size(); ++i) {
    std::vector<float>& node_h = seqs_by_id_.at(feeds[i].id).node_h;
    node_h.resize(std::max<size_t>(node_h.size(), (feeds[i].node + 1) * H));
    std::copy_n(fo.hidden.begin() + i * H, H, node_h.begin() + feeds[i].node * H);
  }
  *logits = std::move(fo.logits);
  return absl::OkStatus();
}

absl::Status EagleDrafter::ForkSequence(uint64_t id, const std::vector<int32_t>& path,
                                        uint64_t fork_id) {
  return absl::UnimplementedError(
      "eagle drafters do not pre-draft (the next tree needs new features)");
}

DrafterStats EagleDrafter::ModelStats() const {
  const SequenceModelStats m = head_->sequences()->stats();
  DrafterStats s;
  s.slots_total = m.blocks_used + m.blocks_free;
  s.slots_free = m.blocks_free;
  return s;
}

}  // namespace treespec
