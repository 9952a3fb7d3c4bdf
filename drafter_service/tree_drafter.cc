#include "drafter_service/tree_drafter.h"

#include <algorithm>
#include <optional>
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

bool NoneWaiting(std::atomic<int>* waiting) { return waiting->load() == 0; }

}  // namespace

bool TreeDrafter::SameRequest(const DraftSpec& a, const DraftSpec& b) {
  return a.id == b.id && a.step == b.step && a.new_tokens == b.new_tokens && a.shape == b.shape &&
         a.temperature == b.temperature && a.top_k == b.top_k && a.seed == b.seed &&
         a.catch_up == b.catch_up;
}

absl::Status DrafterOptions::Validate() const {
  const bool eagle = kind == "eagle" || kind == "eagle3" || kind == "redrafter";
  if (kind != "mamba" && kind != "transformer" && kind != "ngram" && !eagle) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--kind '", kind,
        "' is not a drafter kind (mamba, transformer, ngram, eagle, eagle3, redrafter)"));
  }
  if (kind == "redrafter" && (beam_width < 1 || beam_length < 1 || beam_width > 64 ||
                              beam_length > kMaxShapeDepth)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--beam-width ", beam_width, " / --beam-length ", beam_length,
        " must satisfy 1 <= width <= 64 and 1 <= length <= ", kMaxShapeDepth));
  }
  if (eagle && target_dir.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--target is required with --kind ", kind, " (the target's embedding and LM head)"));
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
  if (prefill_chunk_tokens < 1) {
    return absl::InvalidArgumentError(absl::StrCat("--prefill-chunk-tokens must be >= 1, got ",
                                                   prefill_chunk_tokens));
  }
  if (predraft < 0 || predraft > 16) {
    return absl::InvalidArgumentError(absl::StrCat("--predraft must be in [0, 16], got ", predraft));
  }
  if (predraft_max_batch < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("--predraft_max_batch must be >= 0, got ", predraft_max_batch));
  }
  if (sequence_lease < absl::ZeroDuration()) {
    return absl::InvalidArgumentError(absl::StrCat("--sequence-lease-s ",
                                                   absl::ToDoubleSeconds(sequence_lease),
                                                   " must not be negative"));
  }
  return absl::OkStatus();
}

absl::Status ValidatePrompt(const std::vector<int32_t>& prompt, int64_t vocab) {
  for (size_t i = 0; i < prompt.size(); ++i) {
    if (prompt[i] < 0 || prompt[i] >= vocab) {
      return absl::InvalidArgumentError(
          absl::StrCat("prompt[", i, "] = ", prompt[i], " is outside the vocabulary"));
    }
  }
  return absl::OkStatus();
}

absl::Status ValidateDraftSpec(const DraftSpec& s, int64_t max_tree_nodes, int64_t vocab) {
  if (s.new_tokens.empty()) return absl::InvalidArgumentError("new_tokens is empty");
  if (s.shape.NumNodes() > max_tree_nodes) {
    return absl::InvalidArgumentError(absl::StrCat("tree '", s.shape.ToString(), "' has ",
                                                   s.shape.NumNodes(), " nodes; this drafter allows ",
                                                   max_tree_nodes));
  }
  if (s.top_k < 0) return absl::InvalidArgumentError(absl::StrCat("top_k ", s.top_k, " is negative"));
  if (!(s.temperature >= 0.0f && s.temperature <= 100.0f)) {
    return absl::InvalidArgumentError(absl::StrCat("temperature ", s.temperature,
                                                   " is outside [0, 100]"));
  }
  for (size_t t = 0; t < s.new_tokens.size(); ++t) {
    if (s.new_tokens[t] < 0 || s.new_tokens[t] >= vocab) {
      return absl::InvalidArgumentError(absl::StrCat(
          "new_tokens[", t, "] = ", s.new_tokens[t], " is outside the vocabulary [0, ", vocab, ")"));
    }
  }
  return absl::OkStatus();
}

std::vector<absl::Status> TreeDrafter::Open(const std::vector<DrafterOpenSpec>& specs) {
  std::vector<absl::Status> out(specs.size());
  std::vector<Opening> work;
  {
    ForegroundLock lock(this);
    work = BeginOpen(specs, &out);
  }
  size_t longest = 0;
  for (const Opening& o : work) longest = std::max(longest, specs[o.index].prompt.size());
  const size_t chunk = static_cast<size_t>(std::max<int64_t>(
      1, options_.prefill_chunk_tokens / std::max<int64_t>(1, static_cast<int64_t>(work.size()))));
  // Calls waiting for the lock (Draft, Release, ...) go first: live streams
  // never wait for more than one chunk of somebody else's prompt.
  for (size_t offset = 0;; offset += chunk) {
    mu_.LockWhen(absl::Condition(&NoneWaiting, &num_foreground_));
    FeedChunk(specs, offset, chunk, &work, &out);
    mu_.Unlock();
    const bool all_done =
        std::all_of(work.begin(), work.end(), [](const Opening& o) { return o.done; });
    if (all_done || offset + chunk >= longest) break;
  }
  return out;
}

std::vector<TreeDrafter::Opening> TreeDrafter::BeginOpen(const std::vector<DrafterOpenSpec>& specs,
                                                         std::vector<absl::Status>* out) {
  std::vector<Opening> work;
  for (size_t i = 0; i < specs.size(); ++i) {
    const DrafterOpenSpec& spec = specs[i];
    absl::Status& st = (*out)[i];
    st = seqs_.CheckOpen(spec.id);
    if (st.ok()) st = ValidatePrompt(spec.prompt, vocab_size());
    if (st.ok()) st = OpenSequence(spec);
    if (!st.ok()) continue;
    st = seqs_.Insert(spec.id, SeqState{}, /*visible=*/false);
    if (!st.ok()) {
      ReleaseSequence(spec.id);
      continue;
    }
    work.push_back({i});
  }
  return work;
}

void TreeDrafter::FailOpen(uint64_t id, absl::Status st, absl::Status* out) {
  ReleaseSequence(id);
  seqs_.Erase(id);
  *out = std::move(st);
}

void TreeDrafter::FeedChunk(const std::vector<DrafterOpenSpec>& specs, size_t offset, size_t chunk,
                            std::vector<Opening>* work, std::vector<absl::Status>* out) {
  std::vector<PromptChunk> chunks;
  std::vector<Opening*> members;
  for (Opening& o : *work) {
    if (o.done) continue;
    const DrafterOpenSpec& spec = specs[o.index];
    if (seqs_.FindAny(spec.id)->release_requested) {
      o.done = true;
      FailOpen(spec.id,
               absl::CancelledError(absl::StrCat("sequence_id ", spec.id,
                                                 " was released while its prompt was prefilled")),
               &(*out)[o.index]);
      continue;
    }
    const size_t begin = std::min(offset, spec.prompt.size());
    const size_t end = std::min(spec.prompt.size(), offset + chunk);
    if (begin < end) chunks.push_back({spec.id, &spec.prompt, begin, end, &spec.features});
    members.push_back(&o);
  }
  std::vector<absl::Status> status(chunks.size());
  if (!chunks.empty()) PrefillChunk(chunks, &status);
  size_t c = 0;
  for (Opening* o : members) {
    const DrafterOpenSpec& spec = specs[o->index];
    const bool fed = c < chunks.size() && chunks[c].id == spec.id;
    if (fed && !status[c].ok()) {
      o->done = true;
      FailOpen(spec.id, status[c], &(*out)[o->index]);
    } else if (offset + chunk >= spec.prompt.size()) {
      o->done = true;
      seqs_.Publish(spec.id);
    }
    if (fed) ++c;
  }
}

absl::Status TreeDrafter::CheckDraft(const DraftSpec& s, BatchIds* ids, SeqState** state) {
  TS_ASSIGN_OR_RETURN(*state, seqs_.Find(s.id));
  TS_RETURN_IF_ERROR(ids->Add(s.id));
  if ((*state)->broken) {
    return absl::FailedPreconditionError(absl::StrCat(
        "sequence ", s.id, " lost its drafter state in an earlier failure; release and reopen it"));
  }
  TS_RETURN_IF_ERROR(seqs_.CheckStep(s.id, s.step, "draft step", "drafted"));
  TS_RETURN_IF_ERROR(ValidateDraftSpec(s, options_.max_tree_nodes, vocab_size()));
  return CheckDraftSpec(s);
}

bool TreeDrafter::WantsPredraft(const DraftSpec& s) const {
  return s.temperature <= 0.0f || options_.predraft_sampled;
}

bool TreeDrafter::BuildTrees(std::vector<Build>* builds, bool preemptible) {
  const int64_t V = vocab_size();
  std::vector<AdvanceItem> items;
  for (const Build& b : *builds) items.push_back({b.model_id, b.last_tree, b.new_tokens, &b.spec->features});
  if (items.empty()) return true;
  std::vector<float> root_logits;
  std::vector<absl::Status> adv_status(items.size());
  Advance(items, &root_logits, &adv_status);

  // Per build: each node's logits and the frontier.
  std::vector<std::vector<int32_t>> frontier(builds->size());
  std::map<uint64_t, TokenTree> trees;  // by model id, for Expand
  std::map<uint64_t, size_t> build_of;
  int32_t max_depth = 0;
  for (size_t k = 0; k < builds->size(); ++k) {
    Build& b = (*builds)[k];
    b.status = adv_status[k];
    if (!b.status.ok()) continue;
    trees[b.model_id] = TokenTree::Root(b.new_tokens->back());
    b.node_logits.clear();
    b.node_logits.emplace_back(root_logits.begin() + k * V, root_logits.begin() + (k + 1) * V);
    frontier[k] = {0};
    build_of[b.model_id] = k;
    if (!b.spec->catch_up) max_depth = std::max(max_depth, b.spec->shape.Depth());
  }
  absl::Status level_status;
  for (int32_t level = 0; level < max_depth && level_status.ok(); ++level) {
    if (preemptible && num_foreground_.load() > 0) return false;
    std::vector<NodeFeed> feeds;
    for (auto& [id, tree] : trees) {
      const size_t k = build_of[id];
      Build& b = (*builds)[k];
      const DraftSpec& s = *b.spec;
      if (s.catch_up || level >= s.shape.Depth()) continue;
      const int n = s.shape.fanouts()[level];
      std::vector<int32_t> next;
      for (int32_t parent : frontier[k]) {
        SparseDist q;
        std::vector<int32_t> children = ChooseChildren(b.node_logits[parent].data(), V, n, s,
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
      frontier[k] = std::move(next);
    }
    if (feeds.empty()) break;
    std::vector<float> logits;
    level_status = Expand(feeds, trees, &logits);
    if (!level_status.ok()) break;
    for (size_t f = 0; f < feeds.size(); ++f) {
      auto& rows = (*builds)[build_of[feeds[f].id]].node_logits;
      rows.resize(std::max<size_t>(rows.size(), feeds[f].node + 1));
      rows[feeds[f].node].assign(logits.begin() + f * V, logits.begin() + (f + 1) * V);
    }
  }
  for (auto& [id, tree] : trees) {
    Build& b = (*builds)[build_of[id]];
    if (!level_status.ok()) {
      b.status = level_status;
      continue;
    }
    if (!tree.draft.empty()) tree.draft.resize(tree.tokens.size());
    b.tree = std::move(tree);
  }
  return true;
}

std::vector<DraftOutcome> TreeDrafter::Draft(const std::vector<DraftSpec>& specs) {
  const absl::Time t0 = absl::Now();
  ForegroundLock lock(this);
  return DraftLocked(specs, t0);
}

bool TreeDrafter::TakePrepared(const DraftSpec& s, SeqState* state, DraftOutcome* o) {
  auto hit = std::find_if(state->prepared.begin(), state->prepared.end(),
                          [&](const Prepared& p) { return SameRequest(p.spec, s); });
  if (hit == state->prepared.end()) {
    ++(state->prepared.empty() ? unprepared_ : misses_);
    DropPrepared(state);
    return false;
  }
  Prepared p = std::move(*hit);
  state->prepared.erase(hit);
  AdoptPrepared(s, state, std::move(p), o);
  return true;
}

void TreeDrafter::AdoptPrepared(const DraftSpec& s, SeqState* state, Prepared p, DraftOutcome* o) {
  AdoptSequence(p.fork_id, s.id);
  DropPrepared(state);
  state->last_tree = p.tree;
  state->last_node_logits = std::move(p.node_logits);
  state->has_outcomes = false;
  seqs_.AdvanceStep(s.id);
  o->tree = std::move(p.tree);
  o->is_predraft_hit = true;
  ++hits_;
}

std::vector<DraftOutcome> TreeDrafter::DraftLocked(const std::vector<DraftSpec>& specs,
                                                   absl::Time t0) {
  const bool predraft = options_.predraft > 0;
  // A call of catch-ups only (sent beside the step loop) leaves the
  // pre-drafting of the last step's trees going, but for its own sequences.
  const bool catch_up_only =
      !specs.empty() &&
      std::all_of(specs.begin(), specs.end(), [](const DraftSpec& s) { return s.catch_up; });
  // Larger calls start no pre-drafting (DrafterOptions::predraft_max_batch).
  const bool seed = !catch_up_only && predraft &&
                    (options_.predraft_max_batch <= 0 ||
                     static_cast<int64_t>(specs.size()) <= options_.predraft_max_batch);
  if (catch_up_only) {
    const auto caught_up = [&](const PredraftSeed& p) {
      return std::any_of(specs.begin(), specs.end(), [&](const DraftSpec& s) { return s.id == p.id; });
    };
    pending_.erase(std::remove_if(pending_.begin(), pending_.end(), caught_up), pending_.end());
  } else if (!specs.empty()) {
    pending_.clear();
    pending_round_ = 0;
  }
  std::vector<DraftOutcome> out(specs.size());
  std::vector<Build> builds;
  std::vector<size_t> build_index;
  std::vector<PredraftSeed> seeds;
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
    if (s.catch_up) {
      DropPrepared(state);  // trees for outcomes of a tree it never used
    } else if (predraft && TakePrepared(s, state, &o)) {
      o.answer_ns = absl::ToInt64Nanoseconds(absl::Now() - t0);
      if (seed && WantsPredraft(s)) seeds.push_back({s.id, s});
      continue;
    }
    Build b;
    b.model_id = s.id;
    b.spec = &s;
    b.last_tree = &state->last_tree;
    b.new_tokens = &s.new_tokens;
    builds.push_back(std::move(b));
    build_index.push_back(i);
  }
  BuildTrees(&builds, /*preemptible=*/false);
  const int64_t done_ns = absl::ToInt64Nanoseconds(absl::Now() - t0);
  for (size_t k = 0; k < builds.size(); ++k) {
    Build& b = builds[k];
    DraftOutcome& o = out[build_index[k]];
    SeqState& st = *state_of[o.id];
    o.answer_ns = done_ns;
    if (!b.status.ok()) {
      o.status = b.status;
      st.broken = true;
      continue;
    }
    st.last_tree = b.tree;
    st.has_outcomes = false;
    st.last_node_logits.clear();
    if (predraft && !b.spec->catch_up) st.last_node_logits = std::move(b.node_logits);
    seqs_.AdvanceStep(o.id);
    o.tree = std::move(b.tree);
    if (seed && !b.spec->catch_up && WantsPredraft(*b.spec)) seeds.push_back({o.id, *b.spec});
  }
  if (!catch_up_only && !specs.empty()) pending_ = std::move(seeds);
  return out;
}

int TreeDrafter::Release(const std::vector<uint64_t>& ids) {
  ForegroundLock lock(this);
  int n = 0;
  for (uint64_t id : ids) {
    if (!seqs_.IsVisible(id)) {
      // Still prefilling: its Open cancels it after the current chunk.
      if (SeqState* opening = seqs_.FindAny(id); opening != nullptr) {
        opening->release_requested = true;
        ++n;
      }
      continue;
    }
    std::optional<SeqState> state = seqs_.Erase(id);
    if (!state.has_value()) continue;
    DropPrepared(&*state);
    ReleaseSequence(id);
    ++n;
  }
  return n;
}

int TreeDrafter::ReleaseExpired() {
  ForegroundLock lock(this);
  std::vector<std::pair<uint64_t, SeqState>> expired = seqs_.TakeExpired();
  for (auto& [id, state] : expired) {
    DropPrepared(&state);
    ReleaseSequence(id);
  }
  return static_cast<int>(expired.size());
}

DrafterStats TreeDrafter::Stats() const {
  ForegroundLock lock(this);
  DrafterStats s = ModelStats();
  s.num_sequences = seqs_.size();
  s.predraft_hits = hits_;
  s.predraft_misses = misses_;
  s.predraft_unprepared = unprepared_;
  return s;
}

}  // namespace treespec
