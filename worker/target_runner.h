// TargetRunner: the worker's sequence table and speculative step, without gRPC.
//
// It owns, per sequence, a SequenceModel handle over the committed tokens, the
// pending token (the last committed token, not yet fed to the model: the root
// of the next tree), the step counter and the sampling parameters. Open
// prefills prompts and samples each first token; Verify runs ONE forward pass
// over every sequence's packed tree, then per sequence accepts a path
// (core/spec/verify.h), commits it in the model and advances.
//
// Prefill never stalls live streams (target_runner_prefill.cc): while Verify
// calls come, each Verify pass also carries the next piece of the waiting
// prompts, sized so that the piece adds about half to the pass (chunked
// prefill fused with decoding, as Sarathi-Serve does); without live streams
// Open runs its own chunks of at most prefill_chunk_tokens, releasing the
// lock between them. A sequence being prefilled is invisible to Verify until
// its Open completes (NOT_FOUND), but holds its id and its capacity.
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
#include "core/spec/linear_time_model.h"
#include "core/spec/sampling.h"
#include "core/spec/token_tree.h"
#include "core/spec/verify.h"

namespace treespec {

struct TargetRunnerOptions {
  int64_t max_context = 2048;    // prompt + completion
  int64_t max_tree_nodes = 128;  // per sequence per step, root included
  int64_t max_sequences = 256;
  // Longest prompt piece prefilled in one pass. While other sequences are
  // verifying, a piece rides on their Verify pass, sized to add
  // prefill_share to it (from the measured pass times), so a live stream's
  // step takes at most about 1 + prefill_share times as long while somebody
  // else's prompt is admitted.
  int64_t prefill_chunk_tokens = 256;
  // What a riding piece may add to the pass the trees alone would take, as a
  // share of it, in (0, 4] (worker/target_runner_prefill.cc).
  double prefill_share = 0.15;
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
  // The forward pass, less the marginal time of the prompt pieces it carried.
  int64_t forward_ns = 0;
  int64_t verify_ns = 0;
  // That marginal time (the pass's time minus forward_ns).
  int64_t prefill_ns = 0;
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
  const ModelInfo& model_info() const { return model_->info(); }

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
    absl::Time last_verified = absl::InfinitePast();  // its last Verify pass
    std::vector<int32_t> feature_layers;
  };
  // A sequence whose prompt is being prefilled: owned by its Open call and
  // listed in prefilling_ until that call returns.
  struct Prefill {
    uint64_t id = 0;
    int64_t handle = 0;
    const std::vector<int32_t>* prompt = nullptr;
    size_t fed = 0;     // prompt tokens consumed so far
    bool done = false;  // published, failed or cancelled
    OpenOutcome* out = nullptr;
  };
  // The sequences of a Verify call that pass their checks, in batch order.
  struct VerifyBatch {
    std::vector<ForwardSeq> batch;
    std::vector<size_t> index;  // in the call's steps
    std::vector<Seq*> seqs;
    std::vector<VerifyMode> modes;
    bool greedy(size_t b) const {
      return modes[b] == VerifyMode::kGreedy || seqs[b]->sampling.greedy();
    }
  };
  absl::Status CheckOpen(const OpenSpec& spec) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The pass options for `vb`'s trees followed by prompt `pieces`.
  ForwardOptions VerifyOptions(const VerifyBatch& vb, const std::vector<Prefill*>& pieces)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Checks every step (failures go to `out`) and packs the others' trees.
  VerifyBatch PlanVerify(const std::vector<StepSpec>& steps, std::vector<StepOutcome>* out)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The path batch member `b` accepts, from the forward pass's rows: host
  // logits where the model returned them, else the device argmax (greedy) or
  // the processed rows the walk visits, fetched one by one (sampled).
  absl::StatusOr<VerifyResult> AcceptPath(const VerifyBatch& vb, size_t b, const StepSpec& s,
                                          const ForwardOutput& fo) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status CheckStep(const StepSpec& step, const Seq& seq, VerifyMode mode) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The first token after a prompt from its last row `row` of `fo`: host
  // logits where the model returned them, else the device argmax (greedy) or
  // the row's processed distribution (sampled; ForwardOptions::row_sampling).
  absl::StatusOr<int32_t> FirstToken(const Seq& seq, const ForwardOutput& fo, int64_t row) const;
  // Steady-clock time in nanoseconds (pass timings).
  static int64_t NowNs();
  // `a` followed by the layers of `b` not in it.
  static std::vector<int32_t> UnionLayers(std::vector<int32_t> a, const std::vector<int32_t>& b);
  // Appends to `out`, for each of `rows` (relative to `row0`), the hidden
  // states of `want` (each in `have`, the pass's ForwardOptions::hidden_layers)
  // side by side: [rows, want.size() * hidden].
  static void AppendFeatures(const ForwardOutput& fo, const std::vector<int32_t>& have,
                             const std::vector<int32_t>& want, int32_t row0,
                             const std::vector<int32_t>& rows, std::vector<float>* out);
  // ---- prefill (target_runner_prefill.cc) ----
  // Checks, opens and inserts (hidden) each spec; failures go to `out`.
  std::vector<Prefill> BeginOpen(const std::vector<OpenSpec>& specs,
                                 std::vector<OpenOutcome>* out) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Whether Verify passes come often enough to carry the waiting prompts.
  bool StreamsLive() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Whether a sequence still open verified within `d`.
  bool VerifiedWithin(absl::Duration d) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Duration IdleWait() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Prompt tokens of an Open's own pass (no Verify to ride on).
  int64_t ChunkTokens() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Prompt tokens a Verify pass of `streams` sequences' `verify_tokens` tree
  // nodes carries, which attend `verify_attended` positions in all (Attended).
  // `whole`: the tokens a prompt may bring when they finish it (the share of
  // the pass alone, without the usual-pass bound).
  int64_t FusedTokens(int64_t streams, int64_t verify_tokens, double verify_attended,
                      int64_t* whole) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The share of a pass its piece may add: prefill_share, times the waiting
  // prompts per live stream when they outnumber the streams.
  double PieceShare(int64_t streams) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Positions attended by `n` tokens appended after `before` cached ones
  // (causal: the k-th, from 0, attends before + k + 1): the pass-time fit's
  // context feature.
  static double Attended(int64_t before, int64_t n);
  // Attended() of the prompt pieces in batch entries [first, first + pieces.size()).
  static double PiecesAttended(const std::vector<Prefill*>& pieces,
                               const std::vector<ForwardSeq>& batch, size_t first);
  // Whether the pass-time fit is trusted yet.
  bool HasPassFit() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Prompt tokens already fed of the oldest waiting prompt (0: none).
  int64_t OldestFed() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The longest piece of the oldest waiting prompt, in [1, most] tokens,
  // whose marginal time under the fit is at most `budget_s`.
  int64_t PieceTokensWithin(double budget_s, int64_t most) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Appends to `batch` the next pieces of the waiting prompts, oldest first,
  // `budget` tokens in all, and returns their Prefills (one per piece).
  // Cancels those released meanwhile.
  // A prompt whose rest fits in `whole` tokens (left of it) is fed whole even
  // past `budget`.
  std::vector<Prefill*> TakePieces(int64_t budget, int64_t whole, std::vector<ForwardSeq>* batch)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The pieces ran as batch entries [first, first + pieces.size()) of a pass
  // that returned `st`: commits them, and samples the first token of and
  // publishes each sequence whose prompt is complete (failures fail the Open).
  // Features (OpenSpec::feature_layers) of every piece row go to its Open's
  // outcome; `hidden_layers` are the pass's ForwardOptions::hidden_layers.
  void FinishPieces(const std::vector<Prefill*>& pieces, const std::vector<ForwardSeq>& batch,
                    size_t first, const absl::Status& st, const ForwardOutput& fo,
                    const std::vector<int32_t>& hidden_layers)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // One pass of prompt pieces alone.
  void RunOwnChunk() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void FailOpen(Prefill* p, absl::Status st) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Records a Verify pass of `verify_tokens` tree nodes attending
  // `verify_attended` positions, `pass_tokens` in all (prompt pieces
  // included) attending `attended`, that took `ns`: the step interval, the
  // last pass, the streams' pace, the pass-time model.
  void NoteVerifyPass(int64_t verify_tokens, double verify_attended, int64_t pass_tokens,
                      double attended, int64_t ns)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Feeds the pass-time model with a forward pass of `tokens` tokens that
  // attended `attended` positions in all.
  void ObservePass(int64_t tokens, double attended, int64_t ns) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  SequenceModel* const model_;
  const TargetRunnerOptions options_;
  mutable absl::Mutex mu_;
  // Verify and Release calls waiting for mu_: a prefilling Open lets them
  // go first.
  std::atomic<int> calls_waiting_{0};
  SequenceTable<Seq> table_ ABSL_GUARDED_BY(mu_);
  // Prompts being prefilled, oldest first.
  std::vector<Prefill*> prefilling_ ABSL_GUARDED_BY(mu_);
  // Piece sizing: the last Verify's forward pass (tokens, time, when), the
  // mean interval between Verify calls, and a fit of every pass's time as
  // fixed + per_token * tokens + per_position * attended positions.
  int64_t last_verify_tokens_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t last_verify_ns_ ABSL_GUARDED_BY(mu_) = 0;
  absl::Time last_verify_at_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
  double verify_interval_s_ ABSL_GUARDED_BY(mu_) = 0;
  // EMA of the time the Verify passes' trees alone take, every pass with or
  // without a prompt piece (the fit's prediction for the trees; before the
  // fit, the measured time of passes that carried no piece): the live
  // streams' usual pace, which a pass with a piece may exceed by PieceShare
  // (target_runner_prefill.cc).
  double streams_pass_s_ ABSL_GUARDED_BY(mu_) = 0;
  LinearTimeModel pass_time_ ABSL_GUARDED_BY(mu_);
};

}  // namespace treespec
