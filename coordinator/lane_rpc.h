// LaneRpc: the client layer between a lane's step machine (step_machine.h)
// and its worker and drafter. It turns the machine's plans into the batched
// treespec.v1 requests and the responses into the machine's replies, keeps
// endpoint health, and moves each drafted tree from the DraftResponse into
// the VerifyRequest as an opaque payload: never decoded into a TokenTree and
// re-encoded. The machine sees only a tree's node count, root token and
// validity (ValidateDraftedTree: vocabulary, size, parents).
//
// Draft-ahead candidates (step_machine.h) take the same road: their trees stay
// here, by sequence id and candidate index, until a Verify item names one.
//
// A response that does not answer every item in order (count or ids) is
// turned into per-item errors here, so the machine can index replies by item.
//
// Features (drafters that read the target's hidden states, EAGLE heads): a
// sequence opened `with_drafter` asks the worker for its drafter's feature
// layers; every feature row the worker returns (the prompt's at Open, the
// root's and the accepted nodes' at each Verify) is appended, as the f16 bytes
// it came in, to the sequence's log here, so row p is always position p. A
// drafter Open of a prompt of m tokens gets rows [0, m - 1), a Draft rows
// [feature_begin, feature_begin + new_tokens), so a drafter re-opened after a
// restart or a lost sequence gets the whole history it needs. The log is
// freed with the worker's sequence (ReleaseWorker); it costs rows x width x 2
// bytes per sequence.
//
// Thread-safety: Draft, Verify and the draft-ahead halves (the payload
// stores) are called by the lane thread only; the Open, CatchUp and Release
// calls are safe from any thread.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "coordinator/endpoints.h"
#include "coordinator/step_machine.h"
#include "treespec/v1/common.pb.h"

namespace treespec {

struct LaneRpcOptions {
  std::chrono::milliseconds open_timeout{120000};
  std::chrono::milliseconds verify_timeout{60000};
  std::chrono::milliseconds draft_timeout{5000};
  std::chrono::milliseconds release_timeout{5000};
  int64_t vocab_size = 0;      // 0: token ids are not checked against a vocabulary
  int64_t max_tree_nodes = 0;  // 0: no limit
};

// OK, or INVALID_ARGUMENT naming the field and value of the first defect:
// tokens/parents sizes, node count, token ids outside [0, vocab_size),
// parents[0] != -1, parents[i] not in [0, i), more draft distributions than
// nodes, a draft distribution with mismatched sizes, tokens outside the
// vocabulary or probabilities outside [0, 1].
absl::Status ValidateDraftedTree(const v1::TokenTree& tree, int64_t vocab_size,
                                 int64_t max_tree_nodes);

class LaneRpc {
 public:
  // `drafter` may be null (no drafter).
  LaneRpc(WorkerEndpoint* worker, DrafterEndpoint* drafter, LaneRpcOptions options);

  absl::StatusOr<std::vector<WorkerOpenReply>> OpenWorker(const std::vector<WorkerOpenItem>& items);
  // Releases the items marked release_first, then opens all.
  absl::StatusOr<std::vector<absl::Status>> OpenDrafter(const std::vector<DrafterOpenItem>& items);
  absl::StatusOr<std::vector<DraftReply>> Draft(const std::vector<DraftItem>& items);
  // Sends catch-up items (DraftItem::catch_up) and returns each one's status;
  // safe from any thread (no payloads, no timing), so the lane sends it off
  // its step thread.
  absl::StatusOr<std::vector<absl::Status>> CatchUp(const std::vector<DraftItem>& items);
  // Draft-ahead, in two halves so that the lane makes its Verify call in
  // between: StartAhead sends `plan` as one Draft call (the commits as
  // DraftSequences with omit_tree, then the ahead items) without waiting;
  // FinishAhead waits for the answer and returns the machine's replies,
  // keeping the candidates' trees for the next Verify's items that name one
  // (older ones are dropped: call it after that Verify). `*wall_ns`: the
  // call's time from StartAhead to its answer.
  struct AheadCall {
    AheadPlan plan;
    std::unique_ptr<PendingDraft> pending;
    std::chrono::steady_clock::time_point start;
  };
  std::unique_ptr<AheadCall> StartAhead(AheadPlan plan);
  absl::StatusOr<AheadReplies> FinishAhead(std::unique_ptr<AheadCall> call, int64_t* wall_ns);
  // Verifies the drafted payload of every item marked `drafted` (the ahead
  // candidate it names, else the tree of the last Draft), a root-only tree
  // otherwise.
  absl::StatusOr<std::vector<VerifyReply>> Verify(const std::vector<VerifyItem>& items);
  absl::Status ReleaseWorker(const std::vector<uint64_t>& ids);
  absl::Status ReleaseDrafter(const std::vector<uint64_t>& ids);

  // Wall time of the last Draft / Verify call, and what the servers reported.
  struct Timing {
    int64_t draft_ns = 0, verify_ns = 0, worker_forward_ns = 0, drafter_reported_ns = 0;
    int64_t worker_handler_ns = 0;
    int64_t worker_prefill_ns = 0;  // VerifyResponse.prefill_ns
  };
  Timing TakeTiming();

 private:
  WorkerEndpoint* const worker_;
  DrafterEndpoint* const drafter_;
  const LaneRpcOptions options_;
  v1::DraftRequest DraftRequestOf(const std::vector<DraftItem>& items);
  // Draft-ahead candidates' trees by sequence id, in candidate order.
  using CandidateTrees = std::map<uint64_t, std::vector<v1::TokenTree>>;
  // One AheadResult as the machine's reply; its trees move to `trees`.
  AheadReply AheadReplyOf(const AheadItem& item, v1::AheadResult* r,
                          std::vector<v1::TokenTree>* trees) const;
  struct FeatureLog {
    int32_t width = 0;
    int64_t num_rows = 0;
    std::string f16;  // num_rows * width halves
  };
  // Appends a worker's rows to `id`'s log (a width change restarts it).
  void LogFeatures(uint64_t id, const v1::Features& f);
  // Rows [begin, begin + n) of `id`'s log into `out` (unset when it lacks them:
  // the drafter then reports the missing rows).
  void CopyFeatures(uint64_t id, int64_t begin, int64_t n, v1::Features* out);

  std::map<uint64_t, v1::TokenTree> payloads_;  // drafted trees awaiting Verify
  CandidateTrees candidates_;                   // draft-ahead candidates awaiting Verify
  Timing timing_;
  absl::Mutex features_mu_;
  std::map<uint64_t, FeatureLog> features_ ABSL_GUARDED_BY(features_mu_);
};

}  // namespace treespec
