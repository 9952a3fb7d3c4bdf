#include "tests/testing/chi_square.h"

#include <algorithm>
#include <numeric>

#include <boost/math/distributions/chi_squared.hpp>

#include "absl/strings/str_cat.h"
#include "core/util/status_macros.h"

namespace treespec::testing {

std::string ChiSquareResult::ToString() const {
  return absl::StrCat("chi2=", statistic, " dof=", dof, " p=", p_value, " bins=", num_bins,
                      " n=", num_samples, impossible ? " (impossible category observed)" : "");
}

ChiSquareResult ChiSquareTest(const std::vector<int64_t>& observed,
                              const std::vector<double>& probs, double min_expected) {
  TS_CHECK(observed.size() == probs.size());
  ChiSquareResult r;
  r.num_samples = std::accumulate(observed.begin(), observed.end(), int64_t{0});
  const double total_p = std::accumulate(probs.begin(), probs.end(), 0.0);
  TS_CHECK(total_p > 0.0 && r.num_samples > 0);

  struct Bin {
    double expected = 0.0;
    int64_t observed = 0;
  };
  std::vector<Bin> bins;
  Bin pooled;
  for (size_t i = 0; i < probs.size(); ++i) {
    const double e = static_cast<double>(r.num_samples) * probs[i] / total_p;
    if (probs[i] <= 0.0) {
      if (observed[i] > 0) r.impossible = true;
      continue;
    }
    if (e < min_expected) {
      pooled.expected += e;
      pooled.observed += observed[i];
    } else {
      bins.push_back({e, observed[i]});
    }
  }
  if (pooled.expected > 0.0) {
    if (pooled.expected >= min_expected || bins.empty()) {
      bins.push_back(pooled);
    } else {
      auto smallest = std::min_element(bins.begin(), bins.end(), [](const Bin& a, const Bin& b) {
        return a.expected < b.expected;
      });
      smallest->expected += pooled.expected;
      smallest->observed += pooled.observed;
    }
  }
  r.num_bins = static_cast<int>(bins.size());
  r.dof = r.num_bins - 1;
  for (const Bin& b : bins) {
    const double d = static_cast<double>(b.observed) - b.expected;
    r.statistic += d * d / b.expected;
  }
  if (r.impossible) {
    r.p_value = 0.0;
  } else if (r.dof <= 0) {
    r.p_value = 1.0;
  } else {
    boost::math::chi_squared dist(r.dof);
    r.p_value = boost::math::cdf(boost::math::complement(dist, r.statistic));
  }
  return r;
}

}  // namespace treespec::testing
