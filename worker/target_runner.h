// TargetRunner: the worker's sequence table and speculative step, without gRPC.
//
// It owns, per sequence, a SequenceModel handle over the committed tokens, the
// pending token (the last committed token, not yet fed to the model: the root
// of the next tree), the step counter and the sampling parameters. Open
// prefills prompts and samples each first token; Verify runs ONE forward pass
// over every sequence's packed tree, then per sequence accepts a path
// (core/spec/verify.h), commits it in the model and advances.
//
// Prefill never stalls live streams: Open prefills in chunks of at most
// prefill_chunk_tokens and releases the lock between chunks (letting waiting
// Verify calls go first), so a long prompt delays a live sequence's step by at
// most one chunk. A sequence being prefilled is invisible to Verify until its
// Open completes (NOT_FOUND), but holds its id and its capacity.
//
// Failures are per sequence: a bad tree, a repeated step or a full model
// fails only that sequence's result. Capacity for a sequence's whole budget
// (max_total_tokens plus the largest tree) is taken at Open, so a live
// sequence can never run out of model memory later.
//
// Every change to the model's state goes through the SequenceModel, so that
// rank 0 of a tensor-parallel group can mirror it (a GroupLeader is a
// SequenceModel, worker/rank_loop.h); verification runs here only.
//
// Leases: every Open / Verify touching a sequence renews its lease;
// ReleaseExpired (called by the service's sweeper) releases sequences whose
// lease ran out, so a dead coordinator's sequences give their memory back.
//
// Thread-safe: calls are serialised by an internal mutex (Open takes it once
// per prefill chunk).
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "core/model/sequence_model.h"
#include "core/model/sequence_table.h"
#include "core/spec/sampling.h"
#include "core/spec/token_tree.h"
#include "core/spec/verify.h"

namespace treespec {

struct TargetRunnerOptions {
  int64_t max_context = 2048;    // prompt + completion
  int64_t max_tree_nodes = 128;  // per sequence per step, root included
  int64_t max_sequences = 256;
  // Longest prompt piece prefilled under the lock at once. While other
  // sequences are verifying, a piece is sized to take about half their last
  // verify pass (from the measured prefill time per token), so a live
  // stream's step waits for at most half a step of somebody else's prompt.
  int64_t prefill_chunk_tokens = 256;
  // Sequences untouched this long are released by ReleaseExpired (zero: never).
  absl::Duration sequence_lease = absl::ZeroDuration();
  absl::Status Validate() const;
};

struct OpenSpec {
  uint64_t id = 0;
  std::vector<int32_t> prompt;
  SamplingParams sampling;
  uint64_t seed = 0;
  int64_t max_total_tokens = 0;  // 0: max_context
  // Target layers whose outputs the sequence's drafter reads (EAGLE heads):
  // Open returns them for every prompt position, Verify for the root and the
  // accepted nodes. Empty: none.
  std::vector<int32_t> feature_layers;
};

struct OpenOutcome {
  uint64_t id = 0;
  absl::Status status;
  int32_t first_token = -1;
  // [prompt.size(), feature_layers.size() * hidden] with OpenSpec::feature_layers.
  std::vector<float> features;
};

struct StepSpec {
  uint64_t id = 0;
  uint64_t step = 0;
  TokenTree tree;
  // Unset: greedy at temperature 0, multi-round speculative sampling otherwise.
  std::optional<VerifyMode> mode;
  // Set by the service when the request itself was malformed; returned as is.
  absl::Status invalid;
};

struct StepOutcome {
  uint64_t id = 0;
  uint64_t step = 0;
  absl::Status status;
  std::vector<int32_t> tokens;          // accepted drafts then the bonus
  int32_t num_accepted = 0;
  std::vector<int32_t> accepted_nodes;  // root first
  // [accepted_nodes.size(), feature width]: the features of the accepted
  // nodes (OpenSpec::feature_layers; empty without).
  std::vector<float> features;
};

struct StepTimings {
  int64_t forward_ns = 0;
  int64_t verify_ns = 0;
};

struct TargetRunnerStats {
  int64_t num_sequences = 0;
  int64_t kv_blocks_used = 0;
  int64_t kv_blocks_free = 0;
  int64_t kv_block_size = 0;
};

class TargetRunner {
 public:
  using Clock = SequenceTable<int>::Clock;
  // `model` (not owned) must outlive the runner; every state change goes
  // through it. `clock` drives the leases.
  TargetRunner(SequenceModel* model, TargetRunnerOptions options, Clock clock = &absl::Now);

  std::vector<OpenOutcome> Open(const std::vector<OpenSpec>& specs);
  std::vector<StepOutcome> Verify(const std::vector<StepSpec>& steps, StepTimings* timings);
  int Release(const std::vector<uint64_t>& ids);
  // Releases every sequence whose lease ran out; returns how many.
  int ReleaseExpired();

  TargetRunnerStats Stats() const;
  const TargetRunnerOptions& options() const { return options_; }
  int64_t vocab_size() const { return model_->info().vocab_size; }

  // Whether a sequence is open (published) (tests).
  bool HasSequence(uint64_t id) const;

 private:
  struct Seq {
    int64_t handle = 0;
    int32_t pending = -1;
    int64_t num_tokens = 0;  // committed tokens including the pending one
    SamplingParams sampling;
    uint64_t seed = 0;
    int64_t max_total = 0;
    bool release_requested = false;  // Release while its Open was prefilling
    std::vector<int32_t> feature_layers;
  };
  // A sequence of an Open call being prefilled.
  struct Prefilling {
    size_t index;  // in the Open call's specs
    int64_t handle;
    bool done = false;
  };
  absl::Status CheckOpen(const OpenSpec& spec) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status CheckStep(const StepSpec& step, const Seq& seq, VerifyMode mode) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  int32_t SampleFirst(const Seq& seq, const float* logits) const;
  // Prompt tokens per sequence for the next chunk of an Open of `num_seqs`.
  size_t ChunkTokens(size_t num_seqs) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Runs the prompt chunk [offset, offset + chunk) of every unfinished
  // sequence; returns the tokens it fed.
  int64_t PrefillChunk(const std::vector<OpenSpec>& specs, size_t offset, size_t chunk,
                    std::vector<Prefilling>* work, std::vector<OpenOutcome>* out)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void FailOpen(uint64_t id, int64_t handle, absl::Status st, OpenOutcome* out)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  SequenceModel* const model_;
  const TargetRunnerOptions options_;
  mutable absl::Mutex mu_;
  // Verify calls waiting for mu_: a prefilling Open lets them go first.
  std::atomic<int> verifies_waiting_{0};
  SequenceTable<Seq> table_ ABSL_GUARDED_BY(mu_);
  // Chunk sizing: the last Verify's forward pass (tokens, time, when) and a
  // running estimate of a prefill chunk's time per token.
  int64_t last_verify_tokens_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t last_verify_ns_ ABSL_GUARDED_BY(mu_) = 0;
  absl::Time last_verify_at_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
  double prefill_ns_per_token_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace treespec
