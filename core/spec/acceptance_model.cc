#include "core/spec/acceptance_model.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/util/status_macros.h"

namespace treespec {
namespace {

constexpr int kRankRows = kMaxShapeDepth;

bool FiniteNonNegative(double v) { return std::isfinite(v) && v >= 0.0; }

}  // namespace

absl::Status AcceptanceModelOptions::Validate() const {
  if (depth_bucket_starts.empty() || depth_bucket_starts[0] != 1) {
    return absl::InvalidArgumentError("depth_bucket_starts must start at 1");
  }
  for (size_t i = 1; i < depth_bucket_starts.size(); ++i) {
    if (depth_bucket_starts[i] <= depth_bucket_starts[i - 1]) {
      return absl::InvalidArgumentError(absl::StrCat("depth_bucket_starts[", i,
                                                     "] must be above the previous start, got ",
                                                     depth_bucket_starts[i]));
    }
  }
  if (num_q_bins < 1 || num_q_bins > 1000) {
    return absl::InvalidArgumentError(
        absl::StrCat("num_q_bins must be in [1, 1000], got ", num_q_bins));
  }
  if (max_rank < 1 || max_rank > 64) {
    return absl::InvalidArgumentError(absl::StrCat("max_rank must be in [1, 64], got ", max_rank));
  }
  for (auto [name, v] : {std::pair<const char*, double>{"q_prior_scale", q_prior_scale},
                         {"rank_prior_first", rank_prior_first},
                         {"rank_prior_decay", rank_prior_decay},
                         {"prior_strength", prior_strength}}) {
    if (!FiniteNonNegative(v)) {
      return absl::InvalidArgumentError(absl::StrCat(name, " must be finite and >= 0, got ", v));
    }
  }
  if (rank_prior_first > 1.0 || rank_prior_decay > 1.0) {
    return absl::InvalidArgumentError("rank_prior_first and rank_prior_decay must be <= 1");
  }
  if (!std::isfinite(round_discount) || round_discount <= 0.0 || round_discount > 1.0) {
    return absl::InvalidArgumentError(
        absl::StrCat("round_discount must be in (0, 1], got ", round_discount));
  }
  if (!std::isfinite(max_count) || max_count < 2.0) {
    return absl::InvalidArgumentError(
        absl::StrCat("max_count must be finite and >= 2, got ", max_count));
  }
  return absl::OkStatus();
}

AcceptanceModel::AcceptanceModel(AcceptanceModelOptions options) : options_(std::move(options)) {
  const size_t nb = options_.depth_bucket_starts.size() * options_.num_q_bins;
  q_accepted_.assign(nb, 0.0);
  q_trials_.assign(nb, 0.0);
  q_sum_.assign(nb, 0.0);
  q_curve_x_.assign(nb, 0.0);
  q_curve_y_.assign(nb, 0.0);
  r_accepted_.assign(kRankRows * options_.max_rank, 0.0);
  r_trials_.assign(kRankRows * options_.max_rank, 0.0);
  q_scale_.assign(options_.depth_bucket_starts.size(), options_.q_prior_scale);
  q_lut_.assign(options_.depth_bucket_starts.size() * (kLutSize + 1), 0.0);
  depth_bucket_.assign(kMaxTreeDepth + 1, 0);
  for (int32_t d = 0; d <= kMaxTreeDepth; ++d) depth_bucket_[d] = DepthBucket(d);
  r_mean_.assign(kRankRows * options_.max_rank, 0.0);
  for (int r = 0; r < options_.max_rank; ++r) {
    rank_prior_.push_back(options_.rank_prior_first * std::pow(options_.rank_prior_decay, r));
  }
  Recalibrate(0);
  RecalibrateRanks();
}

absl::StatusOr<AcceptanceModel> AcceptanceModel::Create(AcceptanceModelOptions options) {
  TS_RETURN_IF_ERROR(options.Validate());
  return AcceptanceModel(std::move(options));
}

int AcceptanceModel::DepthBucket(int32_t depth) const {
  const auto& s = options_.depth_bucket_starts;
  return static_cast<int>(std::upper_bound(s.begin(), s.end(), std::max(depth, 1)) - s.begin()) - 1;
}

int AcceptanceModel::QBin(double q) const {
  const int b = static_cast<int>(std::floor(q * options_.num_q_bins));
  return std::clamp(b, 0, options_.num_q_bins - 1);
}

int AcceptanceModel::RankDepth(int32_t depth) const { return std::clamp(depth, 1, kRankRows) - 1; }

int AcceptanceModel::RankCol(int32_t rank) const {
  return std::clamp(rank, 0, options_.max_rank - 1);
}

void AcceptanceModel::Count(double* accepted, double* trials, bool ok) const {
  *trials += 1.0;
  if (ok) *accepted += 1.0;
  if (*trials > options_.max_count) {
    *trials *= 0.5;
    *accepted *= 0.5;
  }
}

// Bucket b's prior is prior(q) = min(1, s_b·q) with s_b fitted to all of the
// bucket's trials, (accepted + m·s_{b-1}) / (Σ q + m), s_{-1} = q_prior_scale:
// bins the drafter rarely reaches follow the bucket's overall calibration,
// and depths never reached follow the depth above. Then posterior means per
// bin and pool-adjacent-violators for a curve that is non-decreasing in q:
// adjacent blocks that decrease are merged into their weighted mean until
// none does (the L2-optimal monotone fit).
void AcceptanceModel::Recalibrate(int first_bucket) {
  const int nq = options_.num_q_bins;
  const double m = options_.prior_strength;
  const int num_buckets = static_cast<int>(options_.depth_bucket_starts.size());
  for (int bucket = first_bucket; bucket < num_buckets; ++bucket) {
    double acc_sum = 0.0, q_sum = 0.0;
    for (int b = 0; b < nq; ++b) {
      acc_sum += q_accepted_[bucket * nq + b];
      q_sum += q_sum_[bucket * nq + b];
    }
    const double above = bucket == 0 ? options_.q_prior_scale : q_scale_[bucket - 1];
    q_scale_[bucket] = m + q_sum > 0 ? (acc_sum + m * above) / (q_sum + m) : above;
    struct Block {
      double y, w;
      int n;
    };
    std::vector<Block> blocks;
    for (int b = 0; b < nq; ++b) {
      const int i = bucket * nq + b;
      const double n = q_trials_[i];
      const double x = n > 0 ? q_sum_[i] / n : (b + 0.5) / nq;
      const double prior = std::min(1.0, q_scale_[bucket] * x);
      const double w = n + m;
      const double y = w > 0 ? (q_accepted_[i] + m * prior) / w : prior;
      q_curve_x_[i] = x;
      blocks.push_back({y, std::max(w, 1e-9), 1});
      if (!options_.isotonic) continue;
      while (blocks.size() >= 2 && blocks[blocks.size() - 2].y > blocks.back().y) {
        Block top = blocks.back();
        blocks.pop_back();
        Block& prev = blocks.back();
        prev.y = (prev.y * prev.w + top.y * top.w) / (prev.w + top.w);
        prev.w += top.w;
        prev.n += top.n;
      }
    }
    int b = 0;
    for (const Block& blk : blocks) {
      for (int k = 0; k < blk.n; ++k, ++b)
        q_curve_y_[bucket * nq + b] = std::clamp(blk.y, 0.0, 1.0);
    }
    // Sample the curve on the grid in one walk over its knots.
    const double* x = &q_curve_x_[bucket * nq];
    const double* y = &q_curve_y_[bucket * nq];
    double* lut = &q_lut_[bucket * (kLutSize + 1)];
    int hi = 0;
    for (int k = 0; k <= kLutSize; ++k) {
      const double q = static_cast<double>(k) / kLutSize;
      while (hi < nq && x[hi] <= q) ++hi;
      if (hi == 0) {
        lut[k] = y[0];
      } else if (hi == nq) {
        lut[k] = y[nq - 1];
      } else {
        const double t = x[hi] > x[hi - 1] ? (q - x[hi - 1]) / (x[hi] - x[hi - 1]) : 0.0;
        lut[k] = y[hi - 1] + t * (y[hi] - y[hi - 1]);
      }
    }
  }
}

// Row d's prior is row d-1's estimate (row 0's is first·decay^r): a depth
// with few trials looks like the depth above it.
void AcceptanceModel::RecalibrateRanks() {
  const int nr = options_.max_rank;
  const double m = options_.prior_strength;
  for (int row = 0; row < kRankRows; ++row) {
    for (int r = 0; r < nr; ++r) {
      const int i = row * nr + r;
      const double prior = row == 0 ? rank_prior_[r] : r_mean_[i - nr];
      const double n = r_trials_[i];
      r_mean_[i] = n + m > 0 ? (r_accepted_[i] + m * prior) / (n + m) : prior;
    }
  }
}

absl::Status AcceptanceModel::CheckPath(const TokenTree& tree, absl::Span<const int32_t> path) {
  const int64_t n = tree.num_nodes();
  if (path.empty() || path[0] != 0) {
    return absl::InvalidArgumentError("path: must start at the root (node 0)");
  }
  for (size_t i = 1; i < path.size(); ++i) {
    const int32_t v = path[i];
    if (v <= 0 || v >= n || tree.parents[v] != path[i - 1]) {
      return absl::InvalidArgumentError(
          absl::StrCat("path[", i, "] = ", v, " is not a child of path[", i - 1, "]"));
    }
  }
  return absl::OkStatus();
}

int AcceptanceModel::Record(const TokenTree& tree, absl::Span<const int32_t> path) {
  const int64_t n = tree.num_nodes();
  std::vector<int32_t> next(n, -1);  // next[u]: the path node after u; -2: u is the last one
  for (size_t i = 1; i < path.size(); ++i) next[path[i - 1]] = path[i];
  next[path.back()] = -2;
  std::vector<int32_t> depth(n, 0), rank_seen(n, 0);
  int first_bucket = static_cast<int>(options_.depth_bucket_starts.size());
  for (int32_t v = 1; v < n; ++v) {
    const int32_t u = tree.parents[v];
    depth[v] = depth[u] + 1;
    const int32_t rank = rank_seen[u]++;
    if (next[u] == -1) continue;  // parent not accepted: v was never tested
    const bool ok = next[u] == v;
    const int row = RankDepth(depth[v]) * options_.max_rank + RankCol(rank);
    Count(&r_accepted_[row], &r_trials_[row], ok);
    if (tree.has_draft(u)) {
      const double q = std::clamp<double>(tree.draft[u].ProbOf(tree.tokens[v]), 0.0, 1.0);
      const int bucket = depth_bucket_[std::min(depth[v], kMaxTreeDepth)];
      const int i = bucket * options_.num_q_bins + QBin(q);
      const double before = q_trials_[i];
      Count(&q_accepted_[i], &q_trials_[i], ok);
      q_sum_[i] = q_trials_[i] < before ? (q_sum_[i] + q) * 0.5 : q_sum_[i] + q;
      first_bucket = std::min(first_bucket, bucket);
    }
  }
  ++num_trees_;
  return first_bucket;
}

absl::Status AcceptanceModel::Observe(const TokenTree& tree, absl::Span<const int32_t> path) {
  TS_RETURN_IF_ERROR(CheckPath(tree, path));
  const int first = Record(tree, path);
  if (first < static_cast<int>(options_.depth_bucket_starts.size())) Recalibrate(first);
  RecalibrateRanks();
  return absl::OkStatus();
}

absl::Status AcceptanceModel::ObserveBatch(absl::Span<const TokenTree> trees,
                                           absl::Span<const std::vector<int32_t>> paths) {
  if (trees.size() != paths.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("paths: ", paths.size(), " paths for ", trees.size(), " trees"));
  }
  for (size_t i = 0; i < trees.size(); ++i) {
    absl::Status s = CheckPath(trees[i], paths[i]);
    if (!s.ok()) return absl::InvalidArgumentError(absl::StrCat("paths[", i, "]: ", s.message()));
  }
  int first = static_cast<int>(options_.depth_bucket_starts.size());
  for (size_t i = 0; i < trees.size(); ++i) first = std::min(first, Record(trees[i], paths[i]));
  if (first < static_cast<int>(options_.depth_bucket_starts.size())) Recalibrate(first);
  RecalibrateRanks();
  return absl::OkStatus();
}

void AcceptanceModel::AdvanceRound() {
  ++rounds_;
  if (options_.round_discount >= 1.0) return;
  for (double& v : r_trials_) v *= options_.round_discount;
  for (double& v : r_accepted_) v *= options_.round_discount;
  RecalibrateRanks();
}

double AcceptanceModel::NodeAcceptance(double q, int32_t depth) const {
  const double* lut = &q_lut_[depth_bucket_[std::clamp(depth, 1, kMaxTreeDepth)] * (kLutSize + 1)];
  const double x = std::clamp(q, 0.0, 1.0) * kLutSize;
  const int i = std::min(static_cast<int>(x), kLutSize - 1);
  return lut[i] + (x - i) * (lut[i + 1] - lut[i]);
}

double AcceptanceModel::RankAcceptance(int32_t depth, int32_t rank, double explore) const {
  const int i = RankDepth(depth) * options_.max_rank + RankCol(rank);
  const double n = r_trials_[i];
  double a = r_mean_[i];
  if (explore > 0.0) {
    a += explore * std::sqrt(std::log1p(static_cast<double>(rounds_)) / (1.0 + n));
  }
  return std::clamp(a, 0.0, 1.0);
}

void AcceptanceModel::PathAcceptance(const TokenTree& tree, std::vector<double>* a,
                                     std::vector<double>* pi) const {
  const int64_t n = tree.num_nodes();
  a->assign(n, 0.0);
  pi->assign(n, 0.0);
  (*a)[0] = 1.0;
  (*pi)[0] = 1.0;
  std::vector<int32_t> depth(n, 0), rank_seen(n, 0);
  std::vector<double> sibling_sum(n, 0.0);
  for (int32_t v = 1; v < n; ++v) {
    const int32_t u = tree.parents[v];
    depth[v] = depth[u] + 1;
    const int32_t rank = rank_seen[u]++;
    (*a)[v] = tree.has_draft(u) ? NodeAcceptance(tree.draft[u].ProbOf(tree.tokens[v]), depth[v])
                                : RankAcceptance(depth[v], rank);
    sibling_sum[u] += (*a)[v];
  }
  for (int32_t v = 1; v < n; ++v) {
    const int32_t u = tree.parents[v];
    if (sibling_sum[u] > 1.0) (*a)[v] /= sibling_sum[u];
    (*pi)[v] = (*pi)[u] * (*a)[v];
  }
}

std::vector<double> AcceptanceModel::LevelReach(const TreeShape& shape, double explore) const {
  std::vector<double> reach;
  double p = 1.0;
  for (int32_t d = 1; d <= shape.Depth(); ++d) {
    double level = 0.0;
    for (int32_t r = 0; r < shape.fanouts()[d - 1]; ++r) level += RankAcceptance(d, r, explore);
    p *= std::min(level, 1.0);
    reach.push_back(p);
  }
  return reach;
}

double AcceptanceModel::ExpectedTokens(const TreeShape& shape, double explore) const {
  return ExpectedTokens(absl::MakeConstSpan(shape.fanouts()), explore);
}

double AcceptanceModel::ExpectedTokens(absl::Span<const int32_t> fanouts, double explore) const {
  double e = 1.0, p = 1.0;
  for (int32_t d = 1; d <= static_cast<int32_t>(fanouts.size()); ++d) {
    double level = 0.0;
    for (int32_t r = 0; r < fanouts[d - 1]; ++r) level += RankAcceptance(d, r, explore);
    p *= std::min(level, 1.0);
    e += p;
  }
  return e;
}

double AcceptanceModel::rank_trials(int32_t depth, int32_t rank) const {
  return r_trials_[RankDepth(depth) * options_.max_rank + RankCol(rank)];
}

double AcceptanceModel::rank_accepted(int32_t depth, int32_t rank) const {
  return r_accepted_[RankDepth(depth) * options_.max_rank + RankCol(rank)];
}

}  // namespace treespec
