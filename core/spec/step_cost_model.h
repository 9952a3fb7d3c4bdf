// Cost models of one speculative step, per worker group and drafter: how long
// the target's verify pass and the drafter's tree drafting take as functions
// of the batch, so the tree planner (tree_planner.h) can trade expected
// accepted tokens against time. Both are LinearTimeModel feature maps
// (robust, non-negative, refined online; see linear_time_model.h).
//
// Verify: t = a + b·batch + c·tree_tokens + d·context_tokens
//             + e·max(0, tree_tokens − knee)
// tree_tokens counts every packed node of every sequence, roots included (a
// plain decoding step of batch B has tree_tokens = B), context_tokens the
// cached tokens of all sequences. The linear part is STree's t = kN + C
// (paper 001, Sec. 4) extended to a batch; the hinge at `knee` is the
// roofline bend where the pass stops being bound by weight loads and becomes
// bound by compute, so extra tree tokens cost more past it. FitVerifyProfile
// picks the knee among the profiled token counts by least residual.
//
// Draft (per Draft call, levels drafted one after another):
//   t = a·[call] + b·levels + c·Σ_levels active_sequences + d·Σ_levels nodes
// i.e. a per-call overhead plus, for each tree level, a + b·batch_l + c·nodes_l.
// One level observed alone is {levels = 1, seq_levels = batch_l, nodes = nodes_l}.
//
// Start-up: Profile*() run a caller-given step function over a grid (the
// caller measures, so the clock stays injectable), Fit*Profile() fit it, and
// the fitted pair is cached as JSON keyed by model and device.
//
// Plain value types; not thread-safe for concurrent mutation.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/spec/linear_time_model.h"

namespace treespec {

// What one verify pass processes, summed over the batch.
struct VerifyStepFeatures {
  int64_t batch = 0;           // sequences in the pass
  int64_t tree_tokens = 0;     // packed nodes, roots included (>= batch)
  int64_t context_tokens = 0;  // cached tokens, all sequences
};

// What one Draft call produces, summed over the batch.
struct DraftStepFeatures {
  int64_t levels = 0;      // tree levels drafted (the deepest tree's depth)
  int64_t seq_levels = 0;  // Σ over sequences of their tree depth
  int64_t nodes = 0;       // draft nodes of all trees, roots excluded
};

struct VerifySample {
  VerifyStepFeatures features;
  double seconds = 0.0;
};
struct DraftSample {
  DraftStepFeatures features;
  double seconds = 0.0;
};

class VerifyCostModel {
 public:
  // The coefficients in seconds, for planners that need the marginal costs.
  struct Coefficients {
    double per_step = 0.0;
    double per_sequence = 0.0;
    double per_token = 0.0;
    double per_context_token = 0.0;
    double per_token_past_knee = 0.0;
    int64_t knee_tokens = 0;
  };

  // Predicts min_seconds until fitted. knee_tokens <= 0 means no hinge.
  explicit VerifyCostModel(LinearTimeModelOptions options = {}, int64_t knee_tokens = 0);

  // A model whose coefficients and prior are `c` (e.g. a profile received
  // over RPC). INVALID_ARGUMENT naming the coefficient when one is negative
  // or not finite.
  static absl::StatusOr<VerifyCostModel> FromCoefficients(const Coefficients& c,
                                                          LinearTimeModelOptions options = {});

  // Fits the profile, choosing the knee among the profiled tree_tokens values
  // (and none) by least robust residual. INVALID_ARGUMENT for too few or bad samples.
  static absl::StatusOr<VerifyCostModel> FitProfile(const std::vector<VerifySample>& samples,
                                                    LinearTimeModelOptions options = {});

  double Predict(const VerifyStepFeatures& f) const;
  void Observe(const VerifyStepFeatures& f, double seconds);
  Coefficients coefficients() const;
  int64_t knee_tokens() const { return knee_; }
  const LinearTimeModel& model() const { return model_; }

  nlohmann::json ToJson() const;
  static absl::StatusOr<VerifyCostModel> FromJson(const nlohmann::json& j,
                                                  LinearTimeModelOptions options = {});

 private:
  std::vector<double> Features(const VerifyStepFeatures& f) const;
  int64_t knee_;
  LinearTimeModel model_;
};

class DraftCostModel {
 public:
  struct Coefficients {
    double per_call = 0.0;
    double per_level = 0.0;
    double per_sequence_level = 0.0;
    double per_node = 0.0;
  };

  explicit DraftCostModel(LinearTimeModelOptions options = {});
  // As VerifyCostModel::FromCoefficients.
  static absl::StatusOr<DraftCostModel> FromCoefficients(const Coefficients& c,
                                                         LinearTimeModelOptions options = {});
  static absl::StatusOr<DraftCostModel> FitProfile(const std::vector<DraftSample>& samples,
                                                   LinearTimeModelOptions options = {});

  // 0 for a call that drafts nothing (levels == 0): the drafter is not called.
  double Predict(const DraftStepFeatures& f) const;
  void Observe(const DraftStepFeatures& f, double seconds);
  Coefficients coefficients() const;
  const LinearTimeModel& model() const { return model_; }

  nlohmann::json ToJson() const;
  static absl::StatusOr<DraftCostModel> FromJson(const nlohmann::json& j,
                                                 LinearTimeModelOptions options = {});

 private:
  static std::vector<double> Features(const DraftStepFeatures& f);
  LinearTimeModel model_;
};

// The verify and draft models of one (target model, drafter, device), as the
// start-up cache stores them.
struct StepCostModel {
  std::string model;   // target (and drafter) identity, e.g. "llama-68m+mamba-130m"
  std::string device;  // e.g. "cpu-16t" or "H100-80GB tp2"
  VerifyCostModel verify;
  DraftCostModel draft;

  // {"format_version": 1, "model", "device", "verify": {...}, "draft": {...}}.
  std::string ToJsonText() const;
  static absl::StatusOr<StepCostModel> FromJsonText(const std::string& text,
                                                    LinearTimeModelOptions options = {});

  // File name of the cache entry for (model, device): both sanitised to
  // [A-Za-z0-9._-] and joined, e.g. "costmodel_llama-68m_cpu-16t.json".
  static std::string CacheFileName(const std::string& model, const std::string& device);
  // Writes dir/CacheFileName(model, device). UNAVAILABLE when it cannot write.
  absl::Status SaveToCache(const std::string& dir) const;
  // NOT_FOUND when there is no entry; FAILED_PRECONDITION when the entry is
  // for another model or device (a name clash after sanitising);
  // INVALID_ARGUMENT naming the field when it does not parse.
  static absl::StatusOr<StepCostModel> LoadFromCache(const std::string& dir,
                                                     const std::string& model,
                                                     const std::string& device,
                                                     LinearTimeModelOptions options = {});
};

// Runs `step` `repeats` times at every grid point (after one warm-up call at
// the first point) and records the median of its returned times. `step`
// returns the measured seconds of one step with those features, or an error,
// which Profile*() returns at once.
using VerifyStepFn = std::function<absl::StatusOr<double>(const VerifyStepFeatures&)>;
using DraftStepFn = std::function<absl::StatusOr<double>(const DraftStepFeatures&)>;
absl::StatusOr<std::vector<VerifySample>> ProfileVerify(const VerifyStepFn& step,
                                                        const std::vector<VerifyStepFeatures>& grid,
                                                        int repeats);
absl::StatusOr<std::vector<DraftSample>> ProfileDraft(const DraftStepFn& step,
                                                      const std::vector<DraftStepFeatures>& grid,
                                                      int repeats);

// A brief start-up grid: batch sizes × tokens per sequence × context lengths
// (every sequence alike), e.g. {1, 4, 16} × {1, 8, 32, 64} × {128, 1024}.
std::vector<VerifyStepFeatures> VerifyGrid(const std::vector<int64_t>& batches,
                                           const std::vector<int64_t>& tokens_per_sequence,
                                           const std::vector<int64_t>& context_per_sequence);
// batches × depths × nodes per level per sequence.
std::vector<DraftStepFeatures> DraftGrid(const std::vector<int64_t>& batches,
                                         const std::vector<int64_t>& depths,
                                         const std::vector<int64_t>& nodes_per_level);

}  // namespace treespec
