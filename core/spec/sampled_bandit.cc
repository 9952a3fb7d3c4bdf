#include "core/spec/sampled_bandit.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/util/status_macros.h"

namespace treespec {

absl::Status SampledBanditOptions::Validate() const {
  for (auto [name, v] : {std::pair<const char*, double>{"explore", explore},
                         {"prior_accepted", prior_accepted},
                         {"prior_trials", prior_trials}}) {
    if (!std::isfinite(v) || v < 0.0) {
      return absl::InvalidArgumentError(absl::StrCat(name, " must be finite and >= 0, got ", v));
    }
  }
  if (prior_trials <= 0.0 || prior_accepted > prior_trials) {
    return absl::InvalidArgumentError(absl::StrCat("prior_trials must be > 0 and >= prior_accepted (",
                                                   prior_accepted, "), got ", prior_trials));
  }
  return absl::OkStatus();
}

StepCostRatios StepCostRatios::FromProfiles(const std::optional<VerifyCostModel>& verify,
                                            const std::optional<DraftCostModel>& draft,
                                            int reference_batch) {
  StepCostRatios r;
  if (!verify.has_value()) return r;
  const VerifyCostModel::Coefficients v = verify->coefficients();
  const double batch = std::max(1, reference_batch);
  const double plain = v.per_step / batch + v.per_sequence + v.per_token;
  if (!(plain > 0.0) || !std::isfinite(plain)) return r;
  r.per_draft_node = v.per_token / plain;
  r.per_node_past_knee = v.per_token_past_knee / plain;
  // The knee is the pass's: a batch of `batch` sequences crosses it when
  // each packs knee / batch tokens.
  r.knee_tokens = v.knee_tokens > 0 ? std::max<int64_t>(1, static_cast<int64_t>(v.knee_tokens / batch)) : 0;
  if (draft.has_value()) {
    const DraftCostModel::Coefficients d = draft->coefficients();
    r.draft_call = d.per_call / batch / plain;  // one call serves the batch
    r.per_level = (d.per_level + d.per_sequence_level) / plain;
    r.per_draft_node_drafting = d.per_node / plain;
  }
  return r;
}

double StepCostRatios::Cost(const TreeShape& shape) const {
  const double nodes = static_cast<double>(shape.NumDraftNodes());
  double cost = 1.0 + (per_draft_node + per_draft_node_drafting) * nodes + draft_call +
                per_level * shape.Depth();
  if (knee_tokens > 0) {
    cost += per_node_past_knee * static_cast<double>(std::max<int64_t>(0, shape.NumNodes() - knee_tokens));
  }
  return std::max(1.0, cost);
}

absl::StatusOr<SampledShapeBandit> SampledShapeBandit::Create(std::vector<TreeShape> shapes,
                                                              StepCostRatios costs,
                                                              SampledBanditOptions options) {
  TS_RETURN_IF_ERROR(options.Validate());
  if (shapes.empty()) return absl::InvalidArgumentError("tree_shapes: the bandit needs a shape");
  return SampledShapeBandit(std::move(shapes), costs, options);
}

SampledShapeBandit::SampledShapeBandit(std::vector<TreeShape> shapes, StepCostRatios costs,
                                       SampledBanditOptions options)
    : shapes_(std::move(shapes)),
      options_(options),
      accepted_(options.prior_accepted),
      trials_(options.prior_trials) {
  for (const TreeShape& s : shapes_) cost_.push_back(costs.Cost(s));
}

double SampledShapeBandit::ExpectedTokens(int k, double alpha) const {
  double expected = 1.0, reach = 1.0;
  for (int32_t w : shapes_[k].fanouts()) {
    reach *= 1.0 - std::pow(1.0 - alpha, w);
    expected += reach;
  }
  return expected;
}

std::optional<int> SampledShapeBandit::Select() const {
  const double bonus =
      options_.explore * std::sqrt(std::log(static_cast<double>(steps_) + 1.0) / trials_);
  const double alpha = std::clamp(acceptance() + bonus, 0.0, 1.0);
  std::optional<int> best;
  double best_reward = -1.0;  // plain: cost 1 per token
  for (int k = 0; k < num_arms(); ++k) {
    const double reward = -cost_[k] / ExpectedTokens(k, alpha);
    if (reward > best_reward) {
      best_reward = reward;
      best = k;
    }
  }
  return best;
}

void SampledShapeBandit::Update(int arm, int32_t num_accepted_draft) {
  TS_CHECK(arm >= 0 && arm < num_arms());
  const std::vector<int32_t>& fanouts = shapes_[arm].fanouts();
  const int32_t depth = static_cast<int32_t>(fanouts.size());
  const int32_t a = std::clamp<int32_t>(num_accepted_draft, 0, depth);
  accepted_ += a;
  trials_ += a;
  if (a < depth) trials_ += fanouts[a];
  ++steps_;
}

}  // namespace treespec
