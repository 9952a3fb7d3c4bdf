// Drafter: one drafter model serving many sequences, behind one interface for
// every drafter kind (mamba, transformer, ngram, EAGLE / EAGLE-3 and ReDrafter heads).
// The service layer (drafter_service.cc) only translates proto <-> these types.
//
// Per sequence a drafter holds its model state over the committed tokens and
// the states of the last tree's nodes. Draft takes, per sequence, the tokens
// committed since its previous call (accepted drafts then the bonus token) and
// returns a new tree rooted at the last of them. Steps are numbered from 1; a
// repeated or out-of-order step is rejected (ABORTED) and changes nothing.
// Failures are per sequence. Every Open / Draft touching a sequence renews
// its lease; ReleaseExpired (the service's sweeper) releases sequences whose
// lease ran out, so a dead coordinator's sequences give their memory back.
//
// Thread-safe: implementations serialise calls internally.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "core/spec/token_tree.h"
#include "core/spec/tree_shape.h"

namespace treespec {

struct DrafterOpenSpec {
  uint64_t id = 0;
  std::vector<int32_t> prompt;  // committed tokens before the first root
  // Kinds that read the target's features (Drafter::feature_layers non-empty):
  // [prompt.size() - 1, feature width] row-major; row i is the target's
  // feature at position i, the one that produced prompt[i + 1]. Else empty.
  std::vector<float> features;
};

struct DraftSpec {
  uint64_t id = 0;
  uint64_t step = 0;
  std::vector<int32_t> new_tokens;  // non-empty; last = root of the new tree
  TreeShape shape = *TreeShape::Chain(1);
  float temperature = 0.0f;  // 0: greedy drafting (top children, no q)
  int32_t top_k = 0;         // support of q; 0: default
  uint64_t seed = 0;
  // Kinds that read the target's features: [new_tokens.size(), feature width];
  // row i is the target's feature at the position before new_tokens[i] (the
  // one that produced it). Else empty.
  std::vector<float> features;
  // Consume new_tokens only (DraftSequence.catch_up): the outcome is the root
  // alone, and no pre-drafting starts for it.
  bool catch_up = false;
};

struct DraftOutcome {
  uint64_t id = 0;
  uint64_t step = 0;
  absl::Status status;
  TokenTree tree;
  // The tree was pre-drafted while the previous one was being verified.
  bool is_predraft_hit = false;
  // Wall time from the call's arrival to this sequence's answer.
  int64_t answer_ns = 0;
};

// Draft-ahead (DraftRequest.ahead): the next step's trees of sequence `id`
// for the most likely outcomes of verifying its last tree, asked for before
// that outcome is known. Nothing is committed.
struct AheadSpec {
  uint64_t id = 0;
  uint64_t step = 0;  // the sequence's next step
  TreeShape shape = *TreeShape::Chain(1);
  float temperature = 0.0f;
  int32_t top_k = 0;
  uint64_t seed = 0;
  int32_t max_candidates = 0;
};

struct AheadCandidate {
  // The outcome it assumes: the accepted drafted tokens, then the bonus.
  std::vector<int32_t> new_tokens;
  // What Draft of `step` with these new_tokens (and the spec's shape,
  // temperature, top_k and seed) returns.
  TokenTree tree;
};

struct AheadOutcome {
  uint64_t id = 0;
  uint64_t step = 0;
  absl::Status status;
  std::vector<AheadCandidate> candidates;  // most likely first
};

struct DrafterStats {
  int64_t num_sequences = 0;
  int64_t slots_free = 0;
  int64_t slots_total = 0;
  // Pre-drafting (DrafterOptions::predraft): drafts answered from a prepared
  // tree, drafts whose sequence had prepared trees none of which matched, and
  // drafts whose sequence had none ready (pre-drafting preempted or failed).
  int64_t predraft_hits = 0;
  int64_t predraft_misses = 0;
  int64_t predraft_unprepared = 0;
};

class Drafter {
 public:
  virtual ~Drafter() = default;
  virtual std::string kind() const = 0;
  virtual int64_t vocab_size() const = 0;
  // The target layers whose outputs (ForwardOptions::hidden_layers) this
  // drafter reads with every Open and Draft, in row order; empty for drafters
  // that read tokens only.
  virtual std::vector<int32_t> feature_layers() const { return {}; }
  // Floats per position of the features it reads (layers x the target's
  // hidden size); 0 when feature_layers() is empty.
  virtual int64_t feature_width() const { return 0; }
  // The model kind (ModelKindName) of the target whose features it reads;
  // empty when feature_layers() is empty.
  virtual std::string target_model_kind() const { return ""; }
  virtual std::vector<absl::Status> Open(const std::vector<DrafterOpenSpec>& specs) = 0;
  virtual std::vector<DraftOutcome> Draft(const std::vector<DraftSpec>& specs) = 0;
  // Draft-ahead: the most candidates one AheadSpec gets; 0 when this
  // drafter does not draft ahead.
  virtual int32_t max_ahead_candidates() const { return 0; }
  // The most sequences of a step worth drafting ahead for (0: any).
  virtual int64_t max_ahead_batch() const { return 0; }
  // Drafts `specs` as Draft does (into `drafted`), then answers `ahead`, in
  // order. Without draft-ahead every ahead item is UNIMPLEMENTED.
  virtual std::vector<AheadOutcome> DraftAhead(const std::vector<DraftSpec>& specs,
                                               const std::vector<AheadSpec>& ahead,
                                               std::vector<DraftOutcome>* drafted);
  virtual int Release(const std::vector<uint64_t>& ids) = 0;
  // Releases every sequence whose lease ran out; returns how many.
  virtual int ReleaseExpired() = 0;
  virtual DrafterStats Stats() const = 0;
  // Blocks until background work queued so far (pre-drafting) is done; for
  // tests and benches that want a deterministic schedule.
  virtual void WaitIdle() {}
};

struct DrafterOptions {
  std::string kind;             // "mamba" | "transformer": must match the model's kind; "ngram";
                                // "eagle" | "eagle3": must match the head's kind;
                                // "redrafter": a ReDrafter head (redrafter_drafter.h)
  std::string model_dir;        // ngram: optional, only for its vocabulary size
  std::string target_dir;       // eagle kinds, redrafter: the target (its embedding and LM head)
  int64_t vocab_size = 0;       // ngram: 0 takes it from model_dir
  int32_t ngram_min = 1;        // ngram: shortest and longest suffix matched
  int32_t ngram_max = 8;
  // redrafter: the beam search's most candidates and draft length; each
  // request's tree shape caps both (redrafter_drafter.h, FitBeams). Defaults:
  // paper 003 Table 2 / App. A.2, whose compute-bound (on-device) runs peak
  // at beam length 4 and width 1-3.
  int32_t beam_width = 3;
  int32_t beam_length = 4;
  int64_t max_sequences = 64;
  int64_t max_tree_nodes = 64;  // root included
  int64_t max_context = 4096;   // transformer: KV per sequence
  int32_t default_top_k = 32;
  bool use_graphs = true;       // CUDA graphs for batched steps where supported
  // Longest prompt piece an Open feeds under the lock at once (split between
  // the sequences of the call); Draft calls waiting go between pieces.
  int64_t prefill_chunk_tokens = 32;
  // Sequences untouched this long are released by ReleaseExpired (zero: never).
  absl::Duration sequence_lease = absl::ZeroDuration();
  // Outcomes per sequence pre-drafted while the coordinator verifies the last
  // tree (0: off). Each takes a forked state of the sequence, so the model is
  // sized for max_sequences * (1 + predraft) sequences.
  int32_t predraft = 2;
  // Also pre-draft after sampled drafts (temperature > 0). Off by default:
  // a sampled bonus token is rarely guessed (about 2% on the demo models at
  // T 1, against 60-80% greedy; tools/bench/predraft_bench).
  bool predraft_sampled = false;
  // Draft calls of more sequences than this start no pre-drafting (0: any
  // size). Pre-drafting pays when the drafter has compute the target's
  // verify pass does not use (its own GPU, idle cores); on CPU cores shared
  // with the worker it slows the verify pass it overlaps, in proportion to
  // the batch: spec_bench on the 2-core demo machine measured auto with the
  // mamba drafter at 0.90x-1.15x plain at concurrency 16 and 64 with
  // pre-drafting and 1.10x-1.74x without.
  int64_t predraft_max_batch = 0;
  // Answer draft-ahead items (DraftRequest.ahead) with up to `predraft`
  // candidates each; false: report max_ahead_candidates 0, so coordinators
  // send none.
  bool draft_ahead = true;
  absl::Status Validate() const;
};

// The checks every drafter kind makes on a request's own fields (INVALID_ARGUMENT
// naming the field): prompt ids inside [0, vocab); for a draft, non-empty
// new_tokens inside [0, vocab), a shape of at most max_tree_nodes, top_k >= 0
// and temperature in [0, 100]. Sequence state (open, step order) is the
// caller's.
absl::Status ValidatePrompt(const std::vector<int32_t>& prompt, int64_t vocab);
absl::Status ValidateDraftSpec(const DraftSpec& s, int64_t max_tree_nodes, int64_t vocab);

// Loads the drafter model of options.model_dir on `backend` (which must
// outlive it); INVALID_ARGUMENT when options.kind does not match the model.
// Kind "ngram" loads no model (drafter_service/ngram_drafter.h).
class Backend;
absl::StatusOr<std::unique_ptr<Drafter>> CreateDrafter(const DrafterOptions& options,
                                                       Backend* backend);

}  // namespace treespec
