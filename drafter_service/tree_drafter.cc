#include "drafter_service/tree_drafter.h"

#include <set>

#include "absl/strings/str_cat.h"
#include "core/spec/philox.h"
#include "core/spec/sampling.h"
#include "core/util/status_macros.h"

namespace treespec {
namespace {

// Children of one node: the N most likely tokens (greedy), or N tokens drawn
// without replacement from q (returned in `q`), whose support is the
// request's top_k or, when that is 0, the drafter's default.
std::vector<int32_t> ChooseChildren(const float* logits, int64_t vocab, int n, const DraftSpec& spec,
                                    int32_t default_top_k, int32_t node, SparseDist* q) {
  if (spec.temperature <= 0.0f) {
    return TopKDist(logits, vocab, n, 1.0f).tokens;
  }
  const int k = std::max(n, spec.top_k > 0 ? spec.top_k : default_top_k);
  *q = TopKDist(logits, vocab, k, spec.temperature);
  SparseDist remaining = *q;
  std::vector<int32_t> children;
  for (int j = 0; j < n; ++j) {
    double mass = 0.0;
    for (float p : remaining.probs) mass += p;
    if (mass <= 0.0) break;
    const double u = Uniform(RngKey{spec.seed, RngStream::kDraft, static_cast<uint32_t>(spec.step),
                                    static_cast<uint32_t>(node)},
                             static_cast<uint32_t>(j));
    const int32_t tok = SampleSparse(remaining, u);
    children.push_back(tok);
    for (size_t t = 0; t < remaining.tokens.size(); ++t) {
      if (remaining.tokens[t] == tok) remaining.probs[t] = 0.0f;
    }
  }
  return children;
}

}  // namespace

absl::Status DrafterOptions::Validate() const {
  if (kind != "mamba" && kind != "transformer" && kind != "ngram") {
    return absl::InvalidArgumentError(
        absl::StrCat("--kind '", kind, "' is not a drafter kind (mamba, transformer, ngram)"));
  }
  if (kind == "ngram" && (ngram_min < 1 || ngram_max < ngram_min || ngram_max > 64)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--ngram-min ", ngram_min, " / --ngram-max ", ngram_max, " must satisfy 1 <= min <= max <= 64"));
  }
  if (model_dir.empty() && kind != "ngram") return absl::InvalidArgumentError("--model is required");
  if (max_sequences < 1) return absl::InvalidArgumentError("--max-sequences must be >= 1");
  if (max_tree_nodes < 2 || max_tree_nodes > kMaxTreeNodes) {
    return absl::InvalidArgumentError(absl::StrCat("--max-tree-nodes must be in [2, ",
                                                   kMaxTreeNodes, "], got ", max_tree_nodes));
  }
  if (default_top_k < 1) return absl::InvalidArgumentError("--top-k must be >= 1");
  if (sequence_lease < absl::ZeroDuration()) {
    return absl::InvalidArgumentError(absl::StrCat("--sequence-lease-s ",
                                                   absl::ToDoubleSeconds(sequence_lease),
                                                   " must not be negative"));
  }
  return absl::OkStatus();
}

std::vector<absl::Status> TreeDrafter::Open(const std::vector<DrafterOpenSpec>& specs) {
  absl::MutexLock lock(&mu_);
  std::vector<absl::Status> out;
  for (const DrafterOpenSpec& spec : specs) {
    absl::Status st = seqs_.CheckOpen(spec.id);
    for (size_t i = 0; i < spec.prompt.size() && st.ok(); ++i) {
      if (spec.prompt[i] < 0 || spec.prompt[i] >= vocab_size()) {
        st = absl::InvalidArgumentError(absl::StrCat("prompt[", i, "] = ", spec.prompt[i],
                                                     " is outside the vocabulary"));
      }
    }
    if (st.ok()) st = OpenSequence(spec.id, spec.prompt);
    if (st.ok()) st = seqs_.Insert(spec.id, SeqState{});
    out.push_back(st);
  }
  return out;
}

absl::Status TreeDrafter::CheckDraft(const DraftSpec& s, BatchIds* ids, SeqState** state) {
  TS_ASSIGN_OR_RETURN(*state, seqs_.Find(s.id));
  TS_RETURN_IF_ERROR(ids->Add(s.id));
  if ((*state)->broken) {
    return absl::FailedPreconditionError(absl::StrCat(
        "sequence ", s.id, " lost its drafter state in an earlier failure; release and reopen it"));
  }
  TS_RETURN_IF_ERROR(seqs_.CheckStep(s.id, s.step, "draft step", "drafted"));
  if (s.new_tokens.empty()) return absl::InvalidArgumentError("new_tokens is empty");
  if (s.shape.NumNodes() > options_.max_tree_nodes) {
    return absl::InvalidArgumentError(absl::StrCat("tree '", s.shape.ToString(), "' has ",
                                                   s.shape.NumNodes(), " nodes; this drafter allows ",
                                                   options_.max_tree_nodes));
  }
  if (s.top_k < 0) return absl::InvalidArgumentError(absl::StrCat("top_k ", s.top_k, " is negative"));
  if (!(s.temperature >= 0.0f && s.temperature <= 100.0f)) {
    return absl::InvalidArgumentError(absl::StrCat("temperature ", s.temperature,
                                                   " is outside [0, 100]"));
  }
  const int64_t V = vocab_size();
  for (size_t t = 0; t < s.new_tokens.size(); ++t) {
    if (s.new_tokens[t] < 0 || s.new_tokens[t] >= V) {
      return absl::InvalidArgumentError(absl::StrCat(
          "new_tokens[", t, "] = ", s.new_tokens[t], " is outside the vocabulary [0, ", V, ")"));
    }
  }
  return absl::OkStatus();
}

std::vector<DraftOutcome> TreeDrafter::Draft(const std::vector<DraftSpec>& specs) {
  absl::MutexLock lock(&mu_);
  const int64_t V = vocab_size();
  std::vector<DraftOutcome> out(specs.size());
  std::vector<AdvanceItem> items;
  std::vector<size_t> item_index;
  BatchIds ids;
  std::map<uint64_t, SeqState*> state_of;
  for (size_t i = 0; i < specs.size(); ++i) {
    const DraftSpec& s = specs[i];
    DraftOutcome& o = out[i];
    o.id = s.id;
    o.step = s.step;
    SeqState* state = nullptr;
    o.status = CheckDraft(s, &ids, &state);
    if (!o.status.ok()) continue;
    state_of[s.id] = state;
    items.push_back({s.id, &state->last_tree, &s.new_tokens});
    item_index.push_back(i);
  }
  if (items.empty()) return out;

  std::vector<float> root_logits;
  std::vector<absl::Status> adv_status(items.size());
  Advance(items, &root_logits, &adv_status);

  // Per sequence: the tree being built, each node's logits, its frontier.
  std::map<uint64_t, TokenTree> trees;
  std::map<uint64_t, std::vector<std::vector<float>>> node_logits;
  std::map<uint64_t, std::vector<int32_t>> frontier;
  std::map<uint64_t, size_t> spec_of;
  int32_t max_depth = 0;
  for (size_t k = 0; k < items.size(); ++k) {
    const size_t i = item_index[k];
    if (!adv_status[k].ok()) {
      out[i].status = adv_status[k];
      state_of[specs[i].id]->broken = true;
      continue;
    }
    const DraftSpec& s = specs[i];
    trees[s.id] = TokenTree::Root(s.new_tokens.back());
    node_logits[s.id].emplace_back(root_logits.begin() + k * V, root_logits.begin() + (k + 1) * V);
    frontier[s.id] = {0};
    spec_of[s.id] = i;
    max_depth = std::max(max_depth, s.shape.Depth());
  }
  absl::Status level_status;
  for (int32_t level = 0; level < max_depth && level_status.ok(); ++level) {
    std::vector<NodeFeed> feeds;
    for (auto& [id, tree] : trees) {
      const DraftSpec& s = specs[spec_of[id]];
      if (level >= s.shape.Depth()) continue;
      const int n = s.shape.fanouts()[level];
      std::vector<int32_t> next;
      for (int32_t parent : frontier[id]) {
        SparseDist q;
        std::vector<int32_t> children =
            ChooseChildren(node_logits[id][parent].data(), V, n, s,
                           options_.default_top_k, parent, &q);
        if (!q.tokens.empty()) {
          tree.draft.resize(tree.tokens.size());
          tree.draft[parent] = std::move(q);
        }
        for (int32_t tok : children) {
          int32_t node = tree.AddNode(parent, tok);
          feeds.push_back({id, node, parent, tok});
          next.push_back(node);
        }
      }
      frontier[id] = std::move(next);
    }
    if (feeds.empty()) break;
    std::vector<float> logits;
    level_status = Expand(feeds, trees, &logits);
    if (!level_status.ok()) break;
    for (size_t f = 0; f < feeds.size(); ++f) {
      auto& rows = node_logits[feeds[f].id];
      rows.resize(std::max<size_t>(rows.size(), feeds[f].node + 1));
      rows[feeds[f].node].assign(logits.begin() + f * V, logits.begin() + (f + 1) * V);
    }
  }
  for (auto& [id, tree] : trees) {
    DraftOutcome& o = out[spec_of[id]];
    SeqState& st = *state_of[id];
    if (!level_status.ok()) {
      o.status = level_status;
      st.broken = true;
      continue;
    }
    if (!tree.draft.empty()) tree.draft.resize(tree.tokens.size());
    st.last_tree = tree;
    seqs_.AdvanceStep(id);
    o.tree = std::move(tree);
  }
  return out;
}

int TreeDrafter::Release(const std::vector<uint64_t>& ids) {
  absl::MutexLock lock(&mu_);
  int n = 0;
  for (uint64_t id : ids) {
    if (!seqs_.Erase(id).has_value()) continue;
    ReleaseSequence(id);
    ++n;
  }
  return n;
}

int TreeDrafter::ReleaseExpired() {
  absl::MutexLock lock(&mu_);
  std::vector<std::pair<uint64_t, SeqState>> expired = seqs_.TakeExpired();
  for (const auto& [id, state] : expired) ReleaseSequence(id);
  return static_cast<int>(expired.size());
}

DrafterStats TreeDrafter::Stats() const {
  absl::MutexLock lock(&mu_);
  DrafterStats s = ModelStats();
  s.num_sequences = seqs_.size();
  return s;
}

}  // namespace treespec
