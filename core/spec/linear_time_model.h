// A robust linear model of how long a step takes: t = Σ_k θ_k·x_k over a few
// named features x (batch size, tree tokens, …), with every θ_k >= 0 because
// each feature can only add time. The verify and draft cost models of
// step_cost_model.h are thin feature maps over this class.
//
// Fitting. Timing noise is roughly proportional to the time itself, so the fit
// minimises relative residuals, Σ_i w_i·((y_i − x_i·θ) / y_i)², with Huber
// weights w_i = min(1, k·σ / |r_i|) from iteratively reweighted least squares
// (σ = 1.4826·median |r_i|, the MAD scale): a step stalled by a page fault or
// a noisy neighbour counts like a residual of k·σ, not its full size.
// Coefficients that come out negative are clamped to 0 and the rest refitted
// (an active-set pass, enough for the handful of features here).
//
// Online refinement. Fit() on a start-up profile sets the prior θ₀. Observe()
// keeps the last `window` measured steps and refits on them with a ridge term
// prior_weight·Σ_k s_k²·(θ_k − θ₀_k)², s_k² the mean squared scaled feature,
// i.e. the prior counts as `prior_weight` steps in every direction. Old steps
// leave the window, so the model follows drift (a longer context, a hotter
// GPU) within `window` steps, and a direction the live traffic never varies
// (say batch size in a single-user server) stays at its profiled value instead
// of drifting, which recursive least squares with forgetting would let it do.
//
// A plain value type; not thread-safe for concurrent mutation.
#pragma once

#include <cstdint>
#include <deque>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"

namespace treespec {

struct LinearTimeModelOptions {
  int32_t window = 256;         // online steps kept for refits
  // Refit after this many Observe() calls, or after a sixteenth of the
  // samples in the window when that is more: a fit costs time in proportion
  // to the window (about 20 us for 256 samples of 4 features on the CPU demo
  // machine, on the coordinator's step path), and one new sample in sixteen
  // barely moves a full window's fit.
  int32_t refit_every = 4;
  double prior_weight = 8.0;    // strength of the profile fit, in steps
  double huber_k = 2.5;         // residuals past huber_k·σ are down-weighted
  int32_t irls_iterations = 3;  // reweighting passes per fit
  double min_seconds = 1e-7;    // floor of every prediction and measurement
  absl::Status Validate() const;
};

// One measured step: features [num_features] and its time.
struct TimeSample {
  std::vector<double> x;
  double seconds = 0.0;
};

class LinearTimeModel {
 public:
  // All coefficients start at 0 (predictions are min_seconds) until Fit() or
  // enough Observe() calls; without a Fit() the online refits have no prior.
  LinearTimeModel(std::vector<std::string> feature_names, LinearTimeModelOptions options);

  // Robust fit on `samples` (each x of size num_features, seconds > 0 and
  // finite); the result becomes the prior θ₀ and the online window is cleared.
  // INVALID_ARGUMENT naming the sample for bad sizes or values, or for fewer
  // samples than features.
  absl::Status Fit(const std::vector<TimeSample>& samples);

  // Adds one measured step to the window and refits every refit_every calls.
  // Non-finite or non-positive times, or a wrong size, are ignored (a bad
  // measurement must not poison the model) and counted in num_rejected().
  void Observe(const std::vector<double>& x, double seconds);

  // max(min_seconds, θ·x). in: x [num_features].
  double Predict(const double* x) const;
  double Predict(const std::vector<double>& x) const { return Predict(x.data()); }

  int num_features() const { return static_cast<int>(names_.size()); }
  const std::vector<std::string>& feature_names() const { return names_; }
  const std::vector<double>& coefficients() const { return theta_; }
  const std::vector<double>& prior() const { return prior_; }
  // Relative residual scale (MAD) of the last fit, e.g. 0.03 for 3% noise.
  double residual_scale() const { return sigma_; }
  int64_t num_observed() const { return num_observed_; }
  int64_t num_rejected() const { return num_rejected_; }
  const LinearTimeModelOptions& options() const { return options_; }

  // {"features": [...], "coefficients": [...], "prior": [...], "residual_scale": σ}.
  nlohmann::json ToJson() const;
  // INVALID_ARGUMENT naming the field when names or sizes differ from
  // `feature_names` or a coefficient is negative or not finite.
  static absl::StatusOr<LinearTimeModel> FromJson(const nlohmann::json& j,
                                                  std::vector<std::string> feature_names,
                                                  LinearTimeModelOptions options);

 private:
  // Robust, non-negative fit of `samples` with a ridge toward `prior` of
  // strength prior_weight (0 for none). Returns θ and sets *sigma.
  std::vector<double> RobustFit(const std::vector<const TimeSample*>& samples,
                                const std::vector<double>& prior, double prior_weight,
                                double* sigma) const;
  void Refit();

  std::vector<std::string> names_;
  LinearTimeModelOptions options_;
  std::vector<double> theta_;
  std::vector<double> prior_;
  double sigma_ = 0.0;
  bool has_prior_ = false;  // Fit() or FromJson() ran; before that refits have no ridge
  std::deque<TimeSample> window_;
  int64_t num_observed_ = 0;
  int64_t num_rejected_ = 0;
  int32_t since_refit_ = 0;
};

}  // namespace treespec
