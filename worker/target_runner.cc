#include "worker/target_runner.h"

#include <algorithm>
#include <chrono>

#include "absl/strings/str_cat.h"
#include "core/spec/philox.h"
#include "core/util/status_macros.h"

namespace treespec {
namespace {

int64_t NowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

bool NoVerifyWaiting(std::atomic<int>* waiting) { return waiting->load() == 0; }

// `a` followed by the layers of `b` not in it.
std::vector<int32_t> UnionLayers(std::vector<int32_t> a, const std::vector<int32_t>& b) {
  for (int32_t l : b) {
    if (std::find(a.begin(), a.end(), l) == a.end()) a.push_back(l);
  }
  return a;
}

// Appends to `out`, for each of `rows` (relative to `row0`), the hidden states
// of `want` (each in `have`, the pass's ForwardOptions::hidden_layers) side by
// side: [rows, want.size() * hidden].
void AppendFeatures(const ForwardOutput& fo, const std::vector<int32_t>& have,
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

}  // namespace

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
  if (sequence_lease < absl::ZeroDuration()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "sequence lease ", absl::FormatDuration(sequence_lease), " must not be negative"));
  }
  return absl::OkStatus();
}

TargetRunner::TargetRunner(SequenceModel* model, TargetRunnerOptions options, Clock clock)
    : model_(model),
      options_(options),
      table_(SequenceTableOptions{options.max_sequences, options.sequence_lease}, std::move(clock)) {}

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

int32_t TargetRunner::SampleFirst(const Seq& seq, const float* logits) const {
  const int64_t V = model_->info().vocab_size;
  if (seq.sampling.greedy()) return Argmax(logits, V);
  std::vector<float> probs;
  ProcessLogits(logits, V, seq.sampling, &probs);
  return SampleDense(probs, Uniform({seq.seed, RngStream::kVerify, 0, 0}, 0));
}

void TargetRunner::FailOpen(uint64_t id, int64_t handle, absl::Status st, OpenOutcome* out) {
  model_->Release(handle);
  table_.Erase(id);
  out->status = std::move(st);
}

std::vector<OpenOutcome> TargetRunner::Open(const std::vector<OpenSpec>& specs) {
  std::vector<OpenOutcome> out(specs.size());
  std::vector<Prefilling> work;
  size_t longest = 0;
  {
    absl::MutexLock lock(&mu_);
    BatchIds ids;
    for (size_t i = 0; i < specs.size(); ++i) {
      const OpenSpec& spec = specs[i];
      out[i].id = spec.id;
      out[i].status = CheckOpen(spec);
      if (out[i].status.ok()) out[i].status = ids.Add(spec.id);
      if (!out[i].status.ok()) continue;
      Seq seq;
      seq.sampling = spec.sampling;
      seq.seed = spec.seed;
      seq.feature_layers = spec.feature_layers;
      seq.max_total = spec.max_total_tokens > 0 ? spec.max_total_tokens : options_.max_context;
      absl::StatusOr<int64_t> handle = model_->Open(seq.max_total + options_.max_tree_nodes);
      if (!handle.ok()) {
        out[i].status = handle.status();
        continue;
      }
      seq.handle = *handle;
      out[i].status = table_.Insert(spec.id, seq, /*visible=*/false);
      if (!out[i].status.ok()) {
        model_->Release(*handle);
        continue;
      }
      work.push_back({i, *handle});
      longest = std::max(longest, spec.prompt.size());
    }
  }
  for (size_t offset = 0; offset < longest;) {
    // Verify calls waiting for the lock go first: live streams never wait
    // for more than one chunk of somebody else's prompt.
    mu_.LockWhen(absl::Condition(&NoVerifyWaiting, &verifies_waiting_));
    const size_t chunk = ChunkTokens(work.size());
    const int64_t t0 = NowNs();
    const int64_t tokens = PrefillChunk(specs, offset, chunk, &work, &out);
    if (tokens > 0) {
      const double per_token = static_cast<double>(NowNs() - t0) / tokens;
      prefill_ns_per_token_ = prefill_ns_per_token_ > 0
                                  ? 0.8 * prefill_ns_per_token_ + 0.2 * per_token
                                  : per_token;
    }
    mu_.Unlock();
    offset += chunk;
  }
  return out;
}

size_t TargetRunner::ChunkTokens(size_t num_seqs) const {
  // Verify batches this recent mean live streams: keep each chunk's forward
  // pass at about half of theirs (Sarathi-style chunked prefill), so a live
  // step waits for at most half a step of this prompt.
  constexpr absl::Duration kLive = absl::Milliseconds(250);
  int64_t budget = options_.prefill_chunk_tokens;
  if (absl::Now() - last_verify_at_ < kLive) {
    const int64_t fit = prefill_ns_per_token_ > 0
                            ? static_cast<int64_t>(0.5 * last_verify_ns_ / prefill_ns_per_token_)
                            : last_verify_tokens_ / 2;
    budget = std::clamp<int64_t>(fit, 1, budget);
  }
  return static_cast<size_t>(
      std::max<int64_t>(1, budget / std::max<int64_t>(1, static_cast<int64_t>(num_seqs))));
}

int64_t TargetRunner::PrefillChunk(const std::vector<OpenSpec>& specs, size_t offset, size_t chunk,
                                std::vector<Prefilling>* work, std::vector<OpenOutcome>* out) {
  std::vector<ForwardSeq> batch;
  std::vector<Prefilling*> members;
  for (Prefilling& p : *work) {
    const OpenSpec& spec = specs[p.index];
    if (p.done) continue;
    Seq* seq = table_.FindAny(spec.id);
    if (seq != nullptr && seq->release_requested) {
      p.done = true;
      FailOpen(spec.id, p.handle,
               absl::CancelledError(absl::StrCat("sequence_id ", spec.id,
                                                 " was released while its prompt was prefilled")),
               &(*out)[p.index]);
      continue;
    }
    const size_t end = std::min(spec.prompt.size(), offset + chunk);
    const bool last = end == spec.prompt.size();
    // A drafter reading features needs every prompt row's hidden states.
    const bool rows = !spec.feature_layers.empty();
    batch.push_back({p.handle,
                     std::vector<int32_t>(spec.prompt.begin() + offset, spec.prompt.begin() + end),
                     {},
                     rows ? LogitsMode::kAll : last ? LogitsMode::kLast : LogitsMode::kNone});
    members.push_back(&p);
  }
  if (batch.empty()) return 0;
  ForwardOutput fo;
  ForwardOptions options;
  for (const Prefilling* p : members) {
    options.hidden_layers = UnionLayers(options.hidden_layers, specs[p->index].feature_layers);
  }
  absl::Status st = model_->Forward(batch, &fo, options);
  for (size_t b = 0; b < batch.size(); ++b) {
    Prefilling& p = *members[b];
    const uint64_t id = specs[p.index].id;
    OpenOutcome& o = (*out)[p.index];
    absl::Status seq_st = st;
    if (seq_st.ok()) seq_st = model_->Commit(p.handle, static_cast<int64_t>(batch[b].tokens.size()));
    if (!seq_st.ok()) {
      p.done = true;
      FailOpen(id, p.handle, seq_st, &o);
      continue;
    }
    const std::vector<int32_t>& layers = specs[p.index].feature_layers;
    if (!layers.empty()) {
      std::vector<int32_t> rows(batch[b].tokens.size());
      for (size_t r = 0; r < rows.size(); ++r) rows[r] = static_cast<int32_t>(r);
      AppendFeatures(fo, options.hidden_layers, layers, fo.row_start[b], rows, &o.features);
    }
    const size_t end = offset + batch[b].tokens.size();
    if (end != specs[p.index].prompt.size()) continue;
    Seq* seq = table_.FindAny(id);
    seq->pending = SampleFirst(*seq, fo.row_logits(fo.row_start[b + 1] - 1));
    seq->num_tokens = static_cast<int64_t>(specs[p.index].prompt.size()) + 1;
    o.first_token = seq->pending;
    p.done = true;
    table_.Publish(id);
  }
  int64_t tokens = 0;
  for (const ForwardSeq& f : batch) tokens += static_cast<int64_t>(f.tokens.size());
  return tokens;
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

std::vector<StepOutcome> TargetRunner::Verify(const std::vector<StepSpec>& steps,
                                              StepTimings* timings) {
  verifies_waiting_.fetch_add(1);
  absl::MutexLock lock(&mu_);
  verifies_waiting_.fetch_sub(1);
  std::vector<StepOutcome> out(steps.size());
  std::vector<ForwardSeq> batch;
  std::vector<size_t> batch_index;
  std::vector<Seq*> batch_seq;
  std::vector<VerifyMode> modes(steps.size(), VerifyMode::kGreedy);
  BatchIds ids;
  for (size_t i = 0; i < steps.size(); ++i) {
    const StepSpec& s = steps[i];
    out[i].id = s.id;
    out[i].step = s.step;
    if (!s.invalid.ok()) {
      out[i].status = s.invalid;
      continue;
    }
    absl::StatusOr<Seq*> seq = table_.Find(s.id);
    out[i].status = seq.status();
    if (out[i].status.ok()) out[i].status = ids.Add(s.id);
    if (!out[i].status.ok()) continue;
    modes[i] = s.mode.value_or((*seq)->sampling.greedy() ? VerifyMode::kGreedy
                                                          : VerifyMode::kMultiRound);
    out[i].status = CheckStep(s, **seq, modes[i]);
    if (!out[i].status.ok()) continue;
    batch.push_back({(*seq)->handle, s.tree.tokens, s.tree.parents, LogitsMode::kAll});
    batch_index.push_back(i);
    batch_seq.push_back(*seq);
  }
  // A batch verified greedily only needs each row's argmax, computed on the
  // device: no logits leave it.
  ForwardOptions options;
  options.argmax_only = !batch.empty();
  for (const Seq* seq : batch_seq) {
    options.hidden_layers = UnionLayers(options.hidden_layers, seq->feature_layers);
  }
  for (size_t b = 0; b < batch.size(); ++b) {
    if (modes[batch_index[b]] != VerifyMode::kGreedy && !batch_seq[b]->sampling.greedy()) {
      options.argmax_only = false;
    }
  }
  if (!batch.empty()) {
    last_verify_tokens_ = 0;
    for (const ForwardSeq& f : batch) last_verify_tokens_ += static_cast<int64_t>(f.tokens.size());
  }
  const int64_t t0 = NowNs();
  ForwardOutput fo;
  absl::Status st = batch.empty() ? absl::OkStatus() : model_->Forward(batch, &fo, options);
  const int64_t t1 = NowNs();
  if (!batch.empty()) {
    last_verify_ns_ = t1 - t0;
    last_verify_at_ = absl::Now();
  }
  const int64_t V = model_->info().vocab_size;
  for (size_t b = 0; b < batch.size(); ++b) {
    StepOutcome& o = out[batch_index[b]];
    const StepSpec& s = steps[batch_index[b]];
    Seq& seq = *batch_seq[b];
    if (!st.ok()) {
      o.status = st;
      continue;
    }
    VerifyResult r =
        options.argmax_only
            ? VerifyGreedyArgmax(s.tree, fo.argmax.data() + fo.row_start[b])
            : treespec::Verify(modes[batch_index[b]], s.tree, fo.row_logits(fo.row_start[b]), V,
                               seq.sampling,
                               RngKey{seq.seed, RngStream::kVerify, static_cast<uint32_t>(s.step), 0});
    o.status = model_->CommitPath(seq.handle, r.path);
    if (!o.status.ok()) continue;
    o.tokens = r.NewTokens();
    o.num_accepted = r.num_accepted();
    o.accepted_nodes = r.path;
    if (!seq.feature_layers.empty()) {
      AppendFeatures(fo, options.hidden_layers, seq.feature_layers, fo.row_start[b], r.path,
                     &o.features);
    }
    seq.pending = r.bonus_token;
    seq.num_tokens += static_cast<int64_t>(o.tokens.size());
    table_.AdvanceStep(s.id);
  }
  if (timings != nullptr) {
    timings->forward_ns = t1 - t0;
    timings->verify_ns = NowNs() - t1;
  }
  return out;
}

int TargetRunner::Release(const std::vector<uint64_t>& ids) {
  absl::MutexLock lock(&mu_);
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
