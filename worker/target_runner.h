// TargetRunner: the worker's sequence table and speculative step, without gRPC.
//
// It owns, per sequence, the committed tokens' KV cache, the pending token
// (the last committed token, whose KV is not cached yet: the root of the next
// tree), the step counter and the sampling parameters. Open prefills prompts in
// one batched forward pass and samples each first token; Verify runs ONE
// forward pass over every sequence's packed tree, then per sequence accepts a
// path (core/spec/verify.h), compacts the KV cache to it and advances.
//
// Failures are per sequence: a bad tree, a repeated step or a full KV cache
// fails only that sequence's result. Capacity for a sequence's whole budget
// (max_total_tokens plus the largest tree) is reserved at Open, so a live
// sequence can never run out of KV blocks later.
//
// Every change to the model's state (KV cache operations, forward passes) goes
// through a TargetOps, so that rank 0 of a tensor-parallel group can mirror it
// to the other ranks (worker/rank_loop.h); verification runs here only.
//
// Thread-safe: calls are serialised by an internal mutex.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "core/model/kv_cache.h"
#include "core/model/llama.h"
#include "core/spec/sampling.h"
#include "core/spec/token_tree.h"
#include "core/spec/verify.h"
#include "worker/target_ops.h"

namespace treespec {

struct TargetRunnerOptions {
  int64_t max_context = 2048;    // prompt + completion
  int64_t max_tree_nodes = 128;  // per sequence per step, root included
  int64_t max_sequences = 256;
  absl::Status Validate() const;
};

struct OpenSpec {
  uint64_t id = 0;
  std::vector<int32_t> prompt;
  SamplingParams sampling;
  uint64_t seed = 0;
  int64_t max_total_tokens = 0;  // 0: max_context
};

struct OpenOutcome {
  uint64_t id = 0;
  absl::Status status;
  int32_t first_token = -1;
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
  // `model` and `cache` must outlive the runner.
  TargetRunner(LlamaModel* model, PagedKvCache* cache, TargetRunnerOptions options);
  // The same, with every state change made through `ops` (not owned; it
  // must act on `model` and `cache`), e.g. a tensor-parallel GroupLeader.
  TargetRunner(LlamaModel* model, PagedKvCache* cache, TargetRunnerOptions options,
               TargetOps* ops);

  std::vector<OpenOutcome> Open(const std::vector<OpenSpec>& specs);
  std::vector<StepOutcome> Verify(const std::vector<StepSpec>& steps, StepTimings* timings);
  int Release(const std::vector<uint64_t>& ids);

  TargetRunnerStats Stats() const;
  const TargetRunnerOptions& options() const { return options_; }
  int64_t vocab_size() const { return model_->config().vocab_size; }

  // Pending tokens of a sequence (tests): committed tokens and the pending one.
  bool HasSequence(uint64_t id) const;

 private:
  struct Seq {
    int64_t kv = 0;
    int32_t pending = -1;
    int64_t num_tokens = 0;  // committed tokens including the pending one
    uint64_t next_step = 1;
    SamplingParams sampling;
    uint64_t seed = 0;
    int64_t max_total = 0;
  };
  absl::Status CheckOpen(const OpenSpec& spec) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status CheckStep(const StepSpec& step, const Seq& seq, VerifyMode mode) const;
  int32_t SampleFirst(const Seq& seq, const float* logits) const;

  LlamaModel* const model_;
  PagedKvCache* const cache_;
  const TargetRunnerOptions options_;
  std::unique_ptr<TargetOps> local_ops_;  // when no ops were given
  TargetOps* const ops_;
  mutable absl::Mutex mu_;
  std::map<uint64_t, Seq> seqs_ ABSL_GUARDED_BY(mu_);
};

}  // namespace treespec
