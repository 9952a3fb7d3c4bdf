// Pearson chi-square goodness-of-fit test for sampling-distribution checks
// (verification must preserve the target distribution; DESIGN.md). Pure
// functions; thread-safe.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace treespec::testing {

struct ChiSquareResult {
  double statistic = 0.0;
  int dof = 0;
  double p_value = 1.0;
  int num_bins = 0;          // after pooling
  int64_t num_samples = 0;
  bool impossible = false;   // a category with probability 0 was observed (p_value 0)
  std::string ToString() const;
};

// Tests `observed` counts against category probabilities `probs` (normalised
// here). Categories whose expected count is below `min_expected` are pooled
// into one bin, and that bin is merged into the smallest other bin if it is
// still below. A zero-probability category with observations gives p = 0.
ChiSquareResult ChiSquareTest(const std::vector<int64_t>& observed,
                              const std::vector<double>& probs, double min_expected = 5.0);

}  // namespace treespec::testing
