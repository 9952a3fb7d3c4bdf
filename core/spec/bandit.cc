#include "core/spec/bandit.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/util/status_macros.h"

namespace treespec {

absl::Status BanditOptions::Validate() const {
  if (!std::isfinite(lambda_ucb) || lambda_ucb < 0.0) {
    return absl::InvalidArgumentError(
        absl::StrCat("lambda_ucb must be finite and >= 0, got ", lambda_ucb));
  }
  if (!std::isfinite(lambda_gamma) || lambda_gamma < 0.0) {
    return absl::InvalidArgumentError(
        absl::StrCat("lambda_gamma must be finite and >= 0, got ", lambda_gamma));
  }
  return absl::OkStatus();
}

UcbBandit::UcbBandit(std::vector<TreeShape> arms, BanditOptions options)
    : arms_(std::move(arms)),
      options_(options),
      pulls_(arms_.size(), 0),
      reward_sum_(arms_.size(), 0.0) {}

absl::StatusOr<UcbBandit> UcbBandit::Create(std::vector<TreeShape> arms, BanditOptions options) {
  TS_RETURN_IF_ERROR(options.Validate());
  if (arms.empty()) return absl::InvalidArgumentError("tree_shapes: the bandit needs an arm");
  if (static_cast<int>(arms.size()) > kMaxBanditArms) {
    return absl::InvalidArgumentError(absl::StrCat(
        "tree_shapes: ", arms.size(), " shapes, more than the limit of ", kMaxBanditArms));
  }
  for (size_t i = 0; i < arms.size(); ++i) {
    for (size_t j = 0; j < i; ++j) {
      if (arms[i] == arms[j]) {
        return absl::InvalidArgumentError(absl::StrCat(
            "tree_shapes[", i, "] = \"", arms[i].ToString(), "\" repeats tree_shapes[", j, "]"));
      }
    }
  }
  return UcbBandit(std::move(arms), options);
}

double UcbBandit::Reward(int32_t num_accepted, int32_t gamma, double lambda_gamma) {
  const double n = std::max<int32_t>(num_accepted, 1);
  return -(1.0 / n + lambda_gamma * gamma / n);
}

double UcbBandit::mean_reward(int k) const {
  return pulls_[k] > 0 ? reward_sum_[k] / static_cast<double>(pulls_[k]) : 0.0;
}

int UcbBandit::Select() const {
  for (int k = 0; k < num_arms(); ++k) {
    if (pulls_[k] == 0) return k;
  }
  const double log_t = std::log(static_cast<double>(rounds_));
  int best = 0;
  double best_score = -std::numeric_limits<double>::infinity();
  for (int k = 0; k < num_arms(); ++k) {
    const double score = mean_reward(k) + options_.lambda_ucb *
                                              std::sqrt(2.0 * log_t / static_cast<double>(pulls_[k]));
    if (score > best_score) {
      best_score = score;
      best = k;
    }
  }
  return best;
}

void UcbBandit::Update(int arm, int32_t num_accepted) {
  TS_CHECK(arm >= 0 && arm < num_arms());
  reward_sum_[arm] += Reward(num_accepted, arms_[arm].Depth(), options_.lambda_gamma);
  ++pulls_[arm];
  ++rounds_;
}

int UcbBandit::MostPulled() const {
  return static_cast<int>(std::max_element(pulls_.begin(), pulls_.end()) - pulls_.begin());
}

}  // namespace treespec
