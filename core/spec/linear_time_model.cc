#include "core/spec/linear_time_model.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/util/status_macros.h"

namespace treespec {
namespace {

// Solves the n×n system a·x = b in place by Gaussian elimination with partial
// pivoting; a singular pivot leaves that unknown at 0.
std::vector<double> Solve(std::vector<double> a, std::vector<double> b, int n) {
  for (int c = 0; c < n; ++c) {
    int p = c;
    for (int r = c + 1; r < n; ++r) {
      if (std::fabs(a[r * n + c]) > std::fabs(a[p * n + c])) p = r;
    }
    if (p != c) {
      for (int k = 0; k < n; ++k) std::swap(a[c * n + k], a[p * n + k]);
      std::swap(b[c], b[p]);
    }
    const double piv = a[c * n + c];
    if (std::fabs(piv) < 1e-300) continue;
    for (int r = c + 1; r < n; ++r) {
      const double f = a[r * n + c] / piv;
      if (f == 0.0) continue;
      for (int k = c; k < n; ++k) a[r * n + k] -= f * a[c * n + k];
      b[r] -= f * b[c];
    }
  }
  std::vector<double> x(n, 0.0);
  for (int c = n - 1; c >= 0; --c) {
    const double piv = a[c * n + c];
    if (std::fabs(piv) < 1e-300) continue;
    double s = b[c];
    for (int k = c + 1; k < n; ++k) s -= a[c * n + k] * x[k];
    x[c] = s / piv;
  }
  return x;
}

bool FiniteNonNegative(double v) { return std::isfinite(v) && v >= 0.0; }

}  // namespace

absl::Status LinearTimeModelOptions::Validate() const {
  if (window < 1)
    return absl::InvalidArgumentError(absl::StrCat("window must be >= 1, got ", window));
  if (refit_every < 1) {
    return absl::InvalidArgumentError(absl::StrCat("refit_every must be >= 1, got ", refit_every));
  }
  if (!FiniteNonNegative(prior_weight)) {
    return absl::InvalidArgumentError(
        absl::StrCat("prior_weight must be finite and >= 0, got ", prior_weight));
  }
  if (!std::isfinite(huber_k) || huber_k <= 0.0) {
    return absl::InvalidArgumentError(
        absl::StrCat("huber_k must be finite and > 0, got ", huber_k));
  }
  if (irls_iterations < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("irls_iterations must be >= 0, got ", irls_iterations));
  }
  if (!std::isfinite(min_seconds) || min_seconds <= 0.0) {
    return absl::InvalidArgumentError(
        absl::StrCat("min_seconds must be finite and > 0, got ", min_seconds));
  }
  return absl::OkStatus();
}

LinearTimeModel::LinearTimeModel(std::vector<std::string> feature_names,
                                 LinearTimeModelOptions options)
    : names_(std::move(feature_names)),
      options_(options),
      theta_(names_.size(), 0.0),
      prior_(names_.size(), 0.0) {}

double LinearTimeModel::Predict(const double* x) const {
  double t = 0.0;
  for (int k = 0; k < num_features(); ++k) t += theta_[k] * x[k];
  return std::max(t, options_.min_seconds);
}

std::vector<double> LinearTimeModel::RobustFit(const std::vector<const TimeSample*>& samples,
                                               const std::vector<double>& prior,
                                               double prior_weight, double* sigma) const {
  const int nf = num_features();
  const size_t ns = samples.size();
  // Rows scaled by 1/y: the target of every row is 1 (relative residuals).
  std::vector<double> z(ns * nf);
  std::vector<double> s2(nf, 0.0);
  for (size_t i = 0; i < ns; ++i) {
    const double inv = 1.0 / std::max(samples[i]->seconds, options_.min_seconds);
    for (int k = 0; k < nf; ++k) {
      z[i * nf + k] = samples[i]->x[k] * inv;
      s2[k] += z[i * nf + k] * z[i * nf + k];
    }
  }
  for (int k = 0; k < nf; ++k) s2[k] /= std::max<size_t>(ns, 1);

  std::vector<double> w(ns, 1.0);
  std::vector<double> theta(nf, 0.0);
  std::vector<double> resid(ns, 0.0);
  *sigma = 0.0;
  for (int iter = 0; iter <= options_.irls_iterations; ++iter) {
    // The weighted normal equations of all features, once per reweighting:
    // an active-set pass solves the rows and columns of its free features
    // (the same sums, in the same order, as accumulating them per pass).
    std::vector<double> gram(nf * nf, 0.0), rhs(nf, 0.0);
    for (size_t i = 0; i < ns; ++i) {
      const double* zi = &z[i * nf];
      for (int r = 0; r < nf; ++r) {
        rhs[r] += w[i] * zi[r];
        for (int c = 0; c < nf; ++c) gram[r * nf + c] += w[i] * zi[r] * zi[c];
      }
    }
    std::vector<bool> is_free(nf, true);
    for (int pass = 0; pass < nf; ++pass) {
      std::vector<int> idx;
      for (int k = 0; k < nf; ++k) {
        if (is_free[k]) idx.push_back(k);
      }
      const int n = static_cast<int>(idx.size());
      std::vector<double> a(n * n, 0.0), b(n, 0.0);
      for (int r = 0; r < n; ++r) {
        b[r] = rhs[idx[r]];
        for (int c = 0; c < n; ++c) a[r * n + c] = gram[idx[r] * nf + idx[c]];
      }
      for (int r = 0; r < n; ++r) {
        const double ridge = prior_weight * s2[idx[r]];
        a[r * n + r] += ridge + 1e-12 * (s2[idx[r]] + 1e-12);
        b[r] += ridge * prior[idx[r]];
      }
      std::vector<double> sol = Solve(std::move(a), std::move(b), n);
      std::fill(theta.begin(), theta.end(), 0.0);
      int worst = -1;
      for (int r = 0; r < n; ++r) {
        theta[idx[r]] = sol[r];
        if (sol[r] < 0.0 && (worst < 0 || sol[r] < theta[worst])) worst = idx[r];
      }
      if (worst < 0) break;
      theta[worst] = 0.0;
      is_free[worst] = false;
    }
    for (int k = 0; k < nf; ++k) theta[k] = std::max(theta[k], 0.0);
    if (ns == 0) break;
    // Huber reweighting on the MAD scale of the relative residuals.
    std::vector<double> absr(ns);
    for (size_t i = 0; i < ns; ++i) {
      double p = 0.0;
      for (int k = 0; k < nf; ++k) p += z[i * nf + k] * theta[k];
      resid[i] = 1.0 - p;
      absr[i] = std::fabs(resid[i]);
    }
    std::nth_element(absr.begin(), absr.begin() + ns / 2, absr.end());
    *sigma = 1.4826 * absr[ns / 2];
    if (iter == options_.irls_iterations) break;
    const double cut = options_.huber_k * std::max(*sigma, 1e-4);
    for (size_t i = 0; i < ns; ++i) {
      const double r = std::fabs(resid[i]);
      w[i] = r <= cut ? 1.0 : cut / r;
    }
  }
  return theta;
}

absl::Status LinearTimeModel::Fit(const std::vector<TimeSample>& samples) {
  TS_RETURN_IF_ERROR(options_.Validate());
  if (samples.size() < names_.size()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "samples: ", samples.size(), " profiled steps for ", names_.size(), " features"));
  }
  std::vector<const TimeSample*> ptrs;
  for (size_t i = 0; i < samples.size(); ++i) {
    const TimeSample& s = samples[i];
    if (s.x.size() != names_.size()) {
      return absl::InvalidArgumentError(
          absl::StrCat("samples[", i, "].x has ", s.x.size(), " features, want ", names_.size()));
    }
    if (!std::isfinite(s.seconds) || s.seconds <= 0.0) {
      return absl::InvalidArgumentError(
          absl::StrCat("samples[", i, "].seconds must be finite and > 0, got ", s.seconds));
    }
    for (size_t k = 0; k < s.x.size(); ++k) {
      if (!FiniteNonNegative(s.x[k])) {
        return absl::InvalidArgumentError(absl::StrCat("samples[", i, "].x[", k, "] (", names_[k],
                                                       ") must be finite and >= 0, got ", s.x[k]));
      }
    }
    ptrs.push_back(&s);
  }
  theta_ = RobustFit(ptrs, std::vector<double>(names_.size(), 0.0), 0.0, &sigma_);
  prior_ = theta_;
  has_prior_ = true;
  window_.clear();
  since_refit_ = 0;
  return absl::OkStatus();
}

void LinearTimeModel::Observe(const std::vector<double>& x, double seconds) {
  bool ok = x.size() == names_.size() && std::isfinite(seconds) && seconds > 0.0;
  for (size_t k = 0; ok && k < x.size(); ++k) ok = FiniteNonNegative(x[k]);
  if (!ok) {
    ++num_rejected_;
    return;
  }
  ++num_observed_;
  window_.push_back(TimeSample{x, seconds});
  while (static_cast<int32_t>(window_.size()) > options_.window) window_.pop_front();
  const int64_t every =
      std::max<int64_t>(options_.refit_every, static_cast<int64_t>(window_.size()) / 16);
  if (++since_refit_ >= every) Refit();
}

void LinearTimeModel::Refit() {
  since_refit_ = 0;
  std::vector<const TimeSample*> ptrs;
  ptrs.reserve(window_.size());
  for (const TimeSample& s : window_) ptrs.push_back(&s);
  theta_ = RobustFit(ptrs, prior_, has_prior_ ? options_.prior_weight : 0.0, &sigma_);
}

nlohmann::json LinearTimeModel::ToJson() const {
  nlohmann::json j;
  j["features"] = names_;
  j["coefficients"] = theta_;
  j["prior"] = prior_;
  j["residual_scale"] = sigma_;
  return j;
}

absl::StatusOr<LinearTimeModel> LinearTimeModel::FromJson(const nlohmann::json& j,
                                                          std::vector<std::string> feature_names,
                                                          LinearTimeModelOptions options) {
  TS_RETURN_IF_ERROR(options.Validate());
  LinearTimeModel m(std::move(feature_names), options);
  if (!j.is_object()) return absl::InvalidArgumentError("cost model: not a JSON object");
  const auto names = j.find("features");
  if (names == j.end() || !names->is_array() || names->size() != m.names_.size()) {
    return absl::InvalidArgumentError(absl::StrCat("features: want ", m.names_.size(), " names"));
  }
  for (size_t k = 0; k < m.names_.size(); ++k) {
    if (!(*names)[k].is_string() || (*names)[k].get<std::string>() != m.names_[k]) {
      return absl::InvalidArgumentError(
          absl::StrCat("features[", k, "]: want \"", m.names_[k], "\", got ", (*names)[k].dump()));
    }
  }
  for (const char* field : {"coefficients", "prior"}) {
    const auto v = j.find(field);
    if (v == j.end() || !v->is_array() || v->size() != m.names_.size()) {
      return absl::InvalidArgumentError(
          absl::StrCat(field, ": want ", m.names_.size(), " numbers"));
    }
    std::vector<double>& dst = std::string(field) == "coefficients" ? m.theta_ : m.prior_;
    for (size_t k = 0; k < m.names_.size(); ++k) {
      if (!(*v)[k].is_number() || !FiniteNonNegative((*v)[k].get<double>())) {
        return absl::InvalidArgumentError(absl::StrCat(field, "[", k, "] (", m.names_[k],
                                                       "): want a finite number >= 0, got ",
                                                       (*v)[k].dump()));
      }
      dst[k] = (*v)[k].get<double>();
    }
  }
  const auto s = j.find("residual_scale");
  if (s != j.end() && s->is_number()) m.sigma_ = s->get<double>();
  m.has_prior_ = true;
  return m;
}

}  // namespace treespec
