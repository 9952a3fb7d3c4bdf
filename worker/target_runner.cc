#include "worker/target_runner.h"

#include <algorithm>
#include <chrono>

#include "absl/strings/str_cat.h"
#include "core/spec/philox.h"
#include "core/util/status_macros.h"

namespace treespec {
int64_t TargetRunner::NowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// `a` followed by the layers of `b` not in it.
std::vector<int32_t> TargetRunner::UnionLayers(std::vector<int32_t> a, const std::vector<int32_t>& b) {
  for (int32_t l : b) {
    if (std::find(a.begin(), a.end(), l) == a.end()) a.push_back(l);
  }
  return a;
}

// Appends to `out`, for each of `rows` (relative to `row0`), the hidden states
// of `want` (each in `have`, the pass's ForwardOptions::hidden_layers) side by
// side: [rows, want.size() * hidden].
void TargetRunner::AppendFeatures(const ForwardOutput& fo, const std::vector<int32_t>& have,
                                  const std::vector<int32_t>& want, int32_t row0,
                                  const std::vector<int32_t>& rows, std::vector<float>* out) {
  const int64_t H = fo.hidden_size;
  const int64_t R = have.empty() ? 0 : static_cast<int64_t>(fo.hidden.size()) / (H * have.size());
  for (int32_t r : rows) {
    for (int32_t l : want) {
      const int64_t k = std::find(have.begin(), have.end(), l) - have.begin();
      const float* src = fo.hidden.data() + (k * R + row0 + r) * H;
      out->insert(out->end(), src, src + H);
    }
  }
}

absl::Status TargetRunnerOptions::Validate() const {
  if (max_context < 2) {
    return absl::InvalidArgumentError(absl::StrCat("max_context ", max_context, " must be >= 2"));
  }
  if (max_tree_nodes < 1 || max_tree_nodes > kMaxTreeNodes) {
    return absl::InvalidArgumentError(absl::StrCat("max_tree_nodes ", max_tree_nodes,
                                                   " must be in [1, ", kMaxTreeNodes, "]"));
  }
  if (max_sequences < 1) {
    return absl::InvalidArgumentError(absl::StrCat("max_sequences ", max_sequences, " must be >= 1"));
  }
  if (prefill_chunk_tokens < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("prefill_chunk_tokens ", prefill_chunk_tokens, " must be >= 1"));
  }
  if (!(prefill_share > 0 && prefill_share <= 4)) {
    return absl::InvalidArgumentError(
        absl::StrCat("prefill_share ", prefill_share, " must be in (0, 4]"));
  }
  if (sequence_lease < absl::ZeroDuration()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "sequence lease ", absl::FormatDuration(sequence_lease), " must not be negative"));
  }
  return absl::OkStatus();
}

TargetRunner::TargetRunner(SequenceModel* model, TargetRunnerOptions options, Clock clock)
    : model_(model),
      options_(options),
      table_(SequenceTableOptions{options.max_sequences, options.sequence_lease}, std::move(clock)),
      pass_time_({"pass", "tokens", "attended"}, LinearTimeModelOptions{.window = 64}) {}

bool TargetRunner::HasSequence(uint64_t id) const {
  absl::MutexLock lock(&mu_);
  return table_.IsVisible(id);
}

absl::Status TargetRunner::CheckOpen(const OpenSpec& spec) const {
  TS_RETURN_IF_ERROR(table_.CheckOpen(spec.id));
  if (spec.prompt.empty()) return absl::InvalidArgumentError("prompt is empty");
  const int64_t V = model_->info().vocab_size;
  for (size_t i = 0; i < spec.prompt.size(); ++i) {
    if (spec.prompt[i] < 0 || spec.prompt[i] >= V) {
      return absl::InvalidArgumentError(absl::StrCat("prompt[", i, "] = ", spec.prompt[i],
                                                     " is outside the vocabulary [0, ", V, ")"));
    }
  }
  for (size_t i = 0; i < spec.feature_layers.size(); ++i) {
    if (spec.feature_layers[i] < 0 || spec.feature_layers[i] >= model_->info().num_layers) {
      return absl::InvalidArgumentError(
          absl::StrCat("feature_layers[", i, "] = ", spec.feature_layers[i],
                       " is not a layer of the target [0, ", model_->info().num_layers, ")"));
    }
  }
  const int64_t max_total = spec.max_total_tokens > 0 ? spec.max_total_tokens : options_.max_context;
  if (max_total > options_.max_context) {
    return absl::InvalidArgumentError(absl::StrCat("max_total_tokens ", max_total,
                                                   " exceeds the context limit ",
                                                   options_.max_context));
  }
  // The sequence grows to max_total tokens; a tree over it adds up to
  // max_tree_nodes positions.
  if (max_total + options_.max_tree_nodes > model_->info().max_positions) {
    return absl::InvalidArgumentError(absl::StrCat(
        "max_total_tokens ", max_total, " plus max_tree_nodes ", options_.max_tree_nodes,
        " exceeds the model's exact position range ", model_->info().max_positions,
        " (its RoPE type changes frequencies past it)"));
  }
  if (static_cast<int64_t>(spec.prompt.size()) >= max_total) {
    return absl::InvalidArgumentError(absl::StrCat("prompt of ", spec.prompt.size(),
                                                   " tokens leaves no room under max_total_tokens ",
                                                   max_total));
  }
  return spec.sampling.Validate();
}

absl::Status TargetRunner::CheckStep(const StepSpec& step, const Seq& seq,
                                     VerifyMode mode) const {
  TS_RETURN_IF_ERROR(table_.CheckStep(step.id, step.step, "step", "committed"));
  TS_RETURN_IF_ERROR(step.tree.Validate(model_->info().vocab_size));
  if (step.tree.tokens[0] != seq.pending) {
    return absl::InvalidArgumentError(absl::StrCat("tree.tokens[0] = ", step.tree.tokens[0],
                                                   " is not the sequence's last token ",
                                                   seq.pending));
  }
  if (step.tree.num_nodes() > options_.max_tree_nodes) {
    return absl::InvalidArgumentError(absl::StrCat("tree has ", step.tree.num_nodes(),
                                                   " nodes; this worker allows ",
                                                   options_.max_tree_nodes));
  }
  if (seq.num_tokens >= seq.max_total) {
    return absl::OutOfRangeError(absl::StrCat("sequence ", step.id, " reached max_total_tokens ",
                                              seq.max_total));
  }
  return ValidateVerifyMode(mode, seq.sampling);
}

void TargetRunner::NoteVerifyPass(int64_t verify_tokens, double verify_attended,
                                  int64_t pass_tokens, double attended, int64_t ns) {
  const absl::Time now = absl::Now();
  if (last_verify_at_ != absl::InfinitePast()) {
    const double interval = absl::ToDoubleSeconds(now - last_verify_at_);
    verify_interval_s_ =
        verify_interval_s_ > 0 ? 0.8 * verify_interval_s_ + 0.2 * interval : interval;
  }
  last_verify_tokens_ = verify_tokens;
  last_verify_ns_ = ns;
  // The streams' pace follows their trees, not only the passes that carried
  // no piece: while prompts keep arriving every pass carries one, and a pace
  // frozen at a smaller batch's held each piece to one token, so the batch
  // could not grow back (issue 11: at 64 clients, 25 of 64 sequences live
  // and 0.8 s to the first token).
  double trees_s = -1;
  if (HasPassFit()) {
    trees_s = pass_time_.Predict({1.0, static_cast<double>(verify_tokens), verify_attended});
  } else if (pass_tokens == verify_tokens) {
    trees_s = ns * 1e-9;
  }
  if (trees_s > 0) {
    streams_pass_s_ = streams_pass_s_ > 0 ? 0.9 * streams_pass_s_ + 0.1 * trees_s : trees_s;
  }
  last_verify_at_ = now;
  ObservePass(pass_tokens, attended, ns);
}

std::vector<StepOutcome> TargetRunner::Verify(const std::vector<StepSpec>& steps,
                                              StepTimings* timings) {
  calls_waiting_.fetch_add(1);
  absl::MutexLock lock(&mu_);
  calls_waiting_.fetch_sub(1);
  std::vector<StepOutcome> out(steps.size());
  VerifyBatch vb = PlanVerify(steps, &out);
  std::vector<ForwardSeq>& batch = vb.batch;
  const size_t num_verify = batch.size();
  int64_t verify_tokens = 0;
  double verify_attended = 0;
  for (size_t b = 0; b < num_verify; ++b) {
    const int64_t n = static_cast<int64_t>(batch[b].tokens.size());
    verify_tokens += n;
    verify_attended += Attended(vb.seqs[b]->num_tokens - 1, n);
  }
  // Waiting prompts ride on this pass (target_runner_prefill.cc).
  std::vector<Prefill*> pieces;
  if (num_verify > 0) {
    int64_t whole = 0;
    const int64_t budget =
        FusedTokens(static_cast<int64_t>(num_verify), verify_tokens, verify_attended, &whole);
    pieces = TakePieces(budget, whole, &batch);
  }
  const double piece_attended = PiecesAttended(pieces, batch, num_verify);
  ForwardOptions options = VerifyOptions(vb, pieces);
  int64_t pass_tokens = 0;
  for (const ForwardSeq& f : batch) pass_tokens += static_cast<int64_t>(f.tokens.size());
  const int64_t t0 = NowNs();
  ForwardOutput fo;
  absl::Status st = batch.empty() ? absl::OkStatus() : model_->Forward(batch, &fo, options);
  const int64_t t1 = NowNs();
  if (num_verify > 0) {
    NoteVerifyPass(verify_tokens, verify_attended, pass_tokens, verify_attended + piece_attended,
                   t1 - t0);
    for (Seq* seq : vb.seqs) seq->last_verified = last_verify_at_;
  }
  for (size_t b = 0; b < num_verify; ++b) {
    StepOutcome& o = out[vb.index[b]];
    const StepSpec& s = steps[vb.index[b]];
    Seq& seq = *vb.seqs[b];
    if (!st.ok()) {
      o.status = st;
      continue;
    }
    absl::StatusOr<VerifyResult> verified = AcceptPath(vb, b, s, fo);
    if (!verified.ok()) {
      o.status = verified.status();
      continue;
    }
    const VerifyResult& r = *verified;
    o.status = model_->CommitPath(seq.handle, r.path);
    if (!o.status.ok()) continue;
    o.tokens = r.NewTokens();
    o.num_accepted = r.num_accepted();
    o.accepted_nodes = r.path;
    if (!seq.feature_layers.empty()) {
      AppendFeatures(fo, options.hidden_layers, seq.feature_layers, fo.hidden_row_start[b], r.path,
                     &o.features);
    }
    seq.pending = r.bonus_token;
    seq.num_tokens += static_cast<int64_t>(o.tokens.size());
    table_.AdvanceStep(s.id);
  }
  FinishPieces(pieces, batch, num_verify, st, fo, options.hidden_layers);
  if (timings != nullptr) {
    // The trees' share of the pass: the coordinator's cost model plans trees,
    // not somebody else's prompt. The pieces cost their tokens' marginal time
    // (the fixed part of the pass is the trees'); at least the share in
    // proportion to the tokens.
    const int64_t pass_ns = t1 - t0;
    const std::vector<double>& theta = pass_time_.coefficients();
    const double piece_ns =
        1e9 * (theta[1] * static_cast<double>(pass_tokens - verify_tokens) +
               theta[2] * piece_attended);
    const int64_t proportional = pass_tokens > 0 ? pass_ns * verify_tokens / pass_tokens : pass_ns;
    timings->forward_ns =
        std::max(proportional, pass_ns - static_cast<int64_t>(piece_ns));
    timings->prefill_ns = pass_ns - timings->forward_ns;
    timings->verify_ns = NowNs() - t1;
  }
  return out;
}

ForwardOptions TargetRunner::VerifyOptions(const VerifyBatch& vb,
                                           const std::vector<Prefill*>& pieces) {
  // A pass whose rows are all read greedily only needs each row's argmax,
  // computed on the device: no logits leave it. With sampled rows the device
  // also turns them into probabilities, and only the rows each walk visits
  // come back (ForwardOptions::row_sampling). Prompt pieces read one row, the
  // last piece's, for the first token.
  ForwardOptions options;
  bool sampled = false;
  for (size_t b = 0; b < vb.seqs.size(); ++b) {
    const bool greedy = vb.greedy(b);
    options.row_sampling.push_back(greedy ? SamplingParams{} : vb.seqs[b]->sampling);
    sampled = sampled || !greedy;
  }
  for (size_t k = 0; k < pieces.size(); ++k) {
    const Seq* seq = table_.FindAny(pieces[k]->id);
    const bool last = pieces[k]->fed + vb.batch[vb.seqs.size() + k].tokens.size() ==
                      pieces[k]->prompt->size();
    const bool greedy = !last || seq->sampling.greedy();
    options.row_sampling.push_back(greedy ? SamplingParams{} : seq->sampling);
    sampled = sampled || !greedy;
  }
  options.argmax_only = !sampled && !vb.batch.empty();
  if (!sampled) options.row_sampling.clear();
  // Drafters reading features (EAGLE heads) get the hidden states of the
  // accepted nodes and of every prompt row.
  for (const Seq* seq : vb.seqs) {
    options.hidden_layers = UnionLayers(options.hidden_layers, seq->feature_layers);
  }
  for (const Prefill* p : pieces) {
    options.hidden_layers =
        UnionLayers(options.hidden_layers, table_.FindAny(p->id)->feature_layers);
  }
  return options;
}

TargetRunner::VerifyBatch TargetRunner::PlanVerify(const std::vector<StepSpec>& steps,
                                                   std::vector<StepOutcome>* out) {
  VerifyBatch vb;
  BatchIds ids;
  for (size_t i = 0; i < steps.size(); ++i) {
    const StepSpec& s = steps[i];
    StepOutcome& o = (*out)[i];
    o.id = s.id;
    o.step = s.step;
    if (!s.invalid.ok()) {
      o.status = s.invalid;
      continue;
    }
    absl::StatusOr<Seq*> seq = table_.Find(s.id);
    o.status = seq.status();
    if (o.status.ok()) o.status = ids.Add(s.id);
    if (!o.status.ok()) continue;
    const VerifyMode mode = s.mode.value_or((*seq)->sampling.greedy() ? VerifyMode::kGreedy
                                                                      : VerifyMode::kMultiRound);
    o.status = CheckStep(s, **seq, mode);
    if (!o.status.ok()) continue;
    vb.batch.push_back({(*seq)->handle, s.tree.tokens, s.tree.parents, LogitsMode::kAll});
    vb.index.push_back(i);
    vb.seqs.push_back(*seq);
    vb.modes.push_back(mode);
  }
  return vb;
}

absl::StatusOr<VerifyResult> TargetRunner::AcceptPath(const VerifyBatch& vb, size_t b,
                                                      const StepSpec& s,
                                                      const ForwardOutput& fo) const {
  const Seq& seq = *vb.seqs[b];
  const int64_t V = model_->info().vocab_size;
  const int32_t first_row = fo.row_start[b];
  const RngKey key{seq.seed, RngStream::kVerify, static_cast<uint32_t>(s.step), 0};
  if (!fo.logits.empty()) {
    // The model returned every row (it does not keep rows on the device).
    return treespec::Verify(vb.modes[b], s.tree, fo.row_logits(first_row), V, seq.sampling, key);
  }
  if (vb.greedy(b)) return VerifyGreedyArgmax(s.tree, fo.argmax.data() + first_row);
  std::vector<float> row(V);
  return VerifySampledRows(vb.modes[b], s.tree, V, seq.sampling, key,
                           [&](int32_t v) -> absl::StatusOr<const float*> {
                             TS_RETURN_IF_ERROR(fo.fetch_probs(first_row + v, row.data()));
                             return row.data();
                           });
}

int TargetRunner::Release(const std::vector<uint64_t>& ids) {
  calls_waiting_.fetch_add(1);
  absl::MutexLock lock(&mu_);
  calls_waiting_.fetch_sub(1);
  int n = 0;
  for (uint64_t id : ids) {
    if (!table_.IsVisible(id)) {
      // Still prefilling: its Open cancels it after the current chunk.
      if (Seq* opening = table_.FindAny(id); opening != nullptr) {
        opening->release_requested = true;
        ++n;
      }
      continue;
    }
    std::optional<Seq> seq = table_.Erase(id);
    model_->Release(seq->handle);
    ++n;
  }
  return n;
}

int TargetRunner::ReleaseExpired() {
  absl::MutexLock lock(&mu_);
  std::vector<std::pair<uint64_t, Seq>> expired = table_.TakeExpired();
  for (const auto& [id, seq] : expired) model_->Release(seq.handle);
  return static_cast<int>(expired.size());
}

TargetRunnerStats TargetRunner::Stats() const {
  absl::MutexLock lock(&mu_);
  SequenceModelStats m = model_->stats();
  TargetRunnerStats s;
  s.num_sequences = table_.size();
  s.kv_blocks_used = m.blocks_used;
  s.kv_blocks_free = m.blocks_free;
  s.kv_block_size = m.block_size;
  return s;
}

}  // namespace treespec
