#include "worker/target_runner.h"

#include <chrono>
#include <set>

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
  return absl::OkStatus();
}

TargetRunner::TargetRunner(LlamaModel* model, PagedKvCache* cache, TargetRunnerOptions options)
    : model_(model),
      cache_(cache),
      options_(options),
      local_ops_(std::make_unique<LocalTargetOps>(model, cache)),
      ops_(local_ops_.get()) {}

TargetRunner::TargetRunner(LlamaModel* model, PagedKvCache* cache, TargetRunnerOptions options,
                           TargetOps* ops)
    : model_(model), cache_(cache), options_(options), ops_(ops) {}

bool TargetRunner::HasSequence(uint64_t id) const {
  absl::MutexLock lock(&mu_);
  return seqs_.count(id) > 0;
}

absl::Status TargetRunner::CheckOpen(const OpenSpec& spec) const {
  if (seqs_.count(spec.id)) {
    return absl::AlreadyExistsError(absl::StrCat("sequence_id ", spec.id, " is already open"));
  }
  if (static_cast<int64_t>(seqs_.size()) >= options_.max_sequences) {
    return absl::ResourceExhaustedError(absl::StrCat("worker is at its limit of ",
                                                     options_.max_sequences, " sequences"));
  }
  if (spec.prompt.empty()) return absl::InvalidArgumentError("prompt is empty");
  const int64_t V = model_->config().vocab_size;
  for (size_t i = 0; i < spec.prompt.size(); ++i) {
    if (spec.prompt[i] < 0 || spec.prompt[i] >= V) {
      return absl::InvalidArgumentError(absl::StrCat("prompt[", i, "] = ", spec.prompt[i],
                                                     " is outside the vocabulary [0, ", V, ")"));
    }
  }
  const int64_t max_total = spec.max_total_tokens > 0 ? spec.max_total_tokens : options_.max_context;
  if (max_total > options_.max_context) {
    return absl::InvalidArgumentError(absl::StrCat("max_total_tokens ", max_total,
                                                   " exceeds the context limit ",
                                                   options_.max_context));
  }
  if (static_cast<int64_t>(spec.prompt.size()) >= max_total) {
    return absl::InvalidArgumentError(absl::StrCat("prompt of ", spec.prompt.size(),
                                                   " tokens leaves no room under max_total_tokens ",
                                                   max_total));
  }
  return spec.sampling.Validate();
}

int32_t TargetRunner::SampleFirst(const Seq& seq, const float* logits) const {
  const int64_t V = model_->config().vocab_size;
  if (seq.sampling.greedy()) return Argmax(logits, V);
  std::vector<float> probs;
  ProcessLogits(logits, V, seq.sampling, &probs);
  return SampleDense(probs, Uniform({seq.seed, RngStream::kVerify, 0, 0}, 0));
}

std::vector<OpenOutcome> TargetRunner::Open(const std::vector<OpenSpec>& specs) {
  absl::MutexLock lock(&mu_);
  std::vector<OpenOutcome> out(specs.size());
  std::vector<ForwardSeq> batch;
  std::vector<size_t> batch_index;
  std::set<uint64_t> seen;
  for (size_t i = 0; i < specs.size(); ++i) {
    const OpenSpec& spec = specs[i];
    out[i].id = spec.id;
    out[i].status = CheckOpen(spec);
    if (out[i].status.ok() && !seen.insert(spec.id).second) {
      out[i].status = absl::InvalidArgumentError(
          absl::StrCat("sequence_id ", spec.id, " appears twice in one request"));
    }
    if (!out[i].status.ok()) continue;
    Seq seq;
    seq.kv = ops_->CreateSequence();
    seq.sampling = spec.sampling;
    seq.seed = spec.seed;
    seq.max_total = spec.max_total_tokens > 0 ? spec.max_total_tokens : options_.max_context;
    absl::Status reserve = ops_->Reserve(seq.kv, seq.max_total + options_.max_tree_nodes);
    if (!reserve.ok()) {
      ops_->Release(seq.kv);
      out[i].status = reserve;
      continue;
    }
    seqs_[spec.id] = seq;
    batch.push_back({seq.kv, spec.prompt, {}, LogitsMode::kLast});
    batch_index.push_back(i);
  }
  if (batch.empty()) return out;
  ForwardOutput fo;
  absl::Status st = ops_->Forward(batch, &fo);
  for (size_t b = 0; b < batch.size(); ++b) {
    OpenOutcome& o = out[batch_index[b]];
    Seq& seq = seqs_[o.id];
    if (st.ok()) st = ops_->Commit(seq.kv, static_cast<int64_t>(batch[b].tokens.size()));
    if (!st.ok()) {
      ops_->Release(seq.kv);
      seqs_.erase(o.id);
      o.status = st;
      continue;
    }
    seq.pending = SampleFirst(seq, fo.row_logits(fo.row_start[b]));
    seq.num_tokens = static_cast<int64_t>(batch[b].tokens.size()) + 1;
    o.first_token = seq.pending;
  }
  return out;
}

absl::Status TargetRunner::CheckStep(const StepSpec& step, const Seq& seq,
                                     VerifyMode mode) const {
  if (step.step != seq.next_step) {
    return absl::AbortedError(absl::StrCat("step ", step.step, " of sequence ", step.id,
                                           step.step < seq.next_step ? " was already committed"
                                                                     : " is out of order",
                                           " (expected ", seq.next_step, ")"));
  }
  TS_RETURN_IF_ERROR(step.tree.Validate(model_->config().vocab_size));
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
  absl::MutexLock lock(&mu_);
  std::vector<StepOutcome> out(steps.size());
  std::vector<ForwardSeq> batch;
  std::vector<size_t> batch_index;
  std::vector<VerifyMode> modes(steps.size(), VerifyMode::kGreedy);
  std::set<uint64_t> seen;
  for (size_t i = 0; i < steps.size(); ++i) {
    const StepSpec& s = steps[i];
    out[i].id = s.id;
    out[i].step = s.step;
    auto it = seqs_.find(s.id);
    if (!s.invalid.ok()) {
      out[i].status = s.invalid;
      continue;
    }
    if (it == seqs_.end()) {
      out[i].status = absl::NotFoundError(absl::StrCat("sequence_id ", s.id, " is not open"));
      continue;
    }
    if (!seen.insert(s.id).second) {
      out[i].status = absl::InvalidArgumentError(
          absl::StrCat("sequence_id ", s.id, " appears twice in one request"));
      continue;
    }
    modes[i] = s.mode.value_or(it->second.sampling.greedy() ? VerifyMode::kGreedy
                                                             : VerifyMode::kMultiRound);
    out[i].status = CheckStep(s, it->second, modes[i]);
    if (!out[i].status.ok()) continue;
    batch.push_back({it->second.kv, s.tree.tokens, s.tree.parents, LogitsMode::kAll});
    batch_index.push_back(i);
  }
  const int64_t t0 = NowNs();
  ForwardOutput fo;
  absl::Status st = batch.empty() ? absl::OkStatus() : ops_->Forward(batch, &fo);
  const int64_t t1 = NowNs();
  const int64_t V = model_->config().vocab_size;
  for (size_t b = 0; b < batch.size(); ++b) {
    StepOutcome& o = out[batch_index[b]];
    const StepSpec& s = steps[batch_index[b]];
    Seq& seq = seqs_[s.id];
    if (!st.ok()) {
      o.status = st;
      continue;
    }
    VerifyResult r = treespec::Verify(modes[batch_index[b]], s.tree, fo.row_logits(fo.row_start[b]), V,
                                      seq.sampling,
                                      RngKey{seq.seed, RngStream::kVerify,
                                             static_cast<uint32_t>(s.step), 0});
    o.status = ops_->CommitPath(seq.kv, r.path);
    if (!o.status.ok()) continue;
    o.tokens = r.NewTokens();
    o.num_accepted = r.num_accepted();
    o.accepted_nodes = r.path;
    seq.pending = r.bonus_token;
    seq.num_tokens += static_cast<int64_t>(o.tokens.size());
    seq.next_step += 1;
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
    auto it = seqs_.find(id);
    if (it == seqs_.end()) continue;
    ops_->Release(it->second.kv);
    seqs_.erase(it);
    ++n;
  }
  return n;
}

TargetRunnerStats TargetRunner::Stats() const {
  absl::MutexLock lock(&mu_);
  TargetRunnerStats s;
  s.num_sequences = static_cast<int64_t>(seqs_.size());
  s.kv_blocks_used = cache_->num_used_blocks();
  s.kv_blocks_free = cache_->num_free_blocks();
  s.kv_block_size = cache_->options().block_size;
  return s;
}

}  // namespace treespec
