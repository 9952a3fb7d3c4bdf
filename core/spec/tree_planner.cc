#include "core/spec/tree_planner.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/spec/tree_planner_internal.h"
#include "core/util/status_macros.h"

namespace treespec {
namespace {

using planner_internal::StepCost;
using planner_internal::ValidateBatch;

// Expected tokens, node counts and fanouts of every prefix of one shape.
struct ShapePrefixes {
  std::vector<int32_t> fanouts;
  std::vector<double> e_decide;  // [depth + 1], with the exploration bonus
  std::vector<double> e_mean;    // [depth + 1]
  std::vector<int64_t> nodes;    // [depth + 1], root excluded

  ShapePrefixes(const TreeShape& shape, const AcceptanceModel& acc, double explore)
      : fanouts(shape.fanouts()), e_decide{1.0}, e_mean{1.0}, nodes{0} {
    double reach_d = 1.0, reach_m = 1.0;
    int64_t level = 1;
    for (int32_t d = 1; d <= shape.Depth(); ++d) {
      double a_d = 0.0, a_m = 0.0;
      for (int32_t r = 0; r < fanouts[d - 1]; ++r) {
        a_m += acc.RankAcceptance(d, r);
        a_d += explore > 0.0 ? acc.RankAcceptance(d, r, explore) : 0.0;
      }
      if (explore <= 0.0) a_d = a_m;
      reach_d *= std::min(a_d, 1.0);
      reach_m *= std::min(a_m, 1.0);
      level *= fanouts[d - 1];
      e_decide.push_back(e_decide.back() + reach_d);
      e_mean.push_back(e_mean.back() + reach_m);
      nodes.push_back(nodes.back() + level);
    }
  }
};

constexpr int kMaxPolishPasses = 8;

struct Option {
  const ShapePrefixes* shape = nullptr;  // nullptr: no tree
  int32_t depth = 0;
  int64_t nodes = 0;
  double e_decide = 1.0;
  double e_mean = 1.0;
};

// One PlanShapes call: the options of every sequence, then the Dinkelbach
// rounds, the greedy polish and the plan (see the header's derivation).
class ShapeSearch {
 public:
  ShapeSearch(absl::Span<const PlanSequence> batch, const VerifyCostModel& verify,
              const DraftCostModel& draft, const PlannerOptions& options)
      : cost_(verify, &draft, options.overhead_seconds),
        nb_(static_cast<int64_t>(batch.size())),
        explore_(options.explore),
        has_knee_(cost_.v.knee_tokens > 0 && cost_.v.per_token_past_knee > 0.0) {
    for (const PlanSequence& s : batch) context_ += s.context_tokens;
    cost_.Calibrate(nb_, context_, options.plain_time_scale, options.added_time_scale,
                    options.draft_time_scale);
  }

  void BuildOptions(absl::Span<const PlanSequence> batch, absl::Span<const TreeShape> candidates,
                    const AcceptanceModel& acceptance);
  // Dinkelbach rounds from the baseline plan; sets best_ and rho_.
  void Dinkelbach();
  // Greedy polish of best_, and past a knee of the knee-blind plans.
  void Polish();
  ShapePlan MakePlan() const;

 private:
  static constexpr size_t kNone = ~size_t{0};
  // Sequences with the same options (same budget cap, both drafting, no
  // fixed shape) share one option range and one group: the per-sequence
  // subproblem is solved once per group.
  struct GroupKey {
    bool can_draft;
    int32_t cap;
    size_t begin, end;
    int32_t id;
  };

  void AddOption(const ShapePrefixes* p, int32_t cap);
  // Appends sequence i's option range: its group's, or a new group's.
  void AddSequence(const PlanSequence& s, absl::Span<const TreeShape> candidates,
                   const AcceptanceModel& acceptance);
  // The true E/T of a choice (one option index per sequence).
  double Score(const std::vector<size_t>& choice, double* e_dec, double* e_mean, double* t_draft,
               double* t_verify) const;
  // Each sequence's best option of depth <= max_depth for ρ = r and a
  // per-node price with `knee_price` added.
  void Subproblem(int32_t max_depth, double knee_price, double r, std::vector<size_t>* choice);
  // Coordinate ascent under the true T; returns the final ρ of `choice`.
  double PolishChoice(std::vector<size_t>* choice) const;
  double StepSeconds(int32_t levels, int64_t seq_levels, int64_t nodes) const {
    return cost_.Draft(levels, seq_levels, nodes) + cost_.Verify(nb_, nb_ + nodes, context_) +
           cost_.overhead;
  }

  StepCost cost_;  // calibrated in the constructor
  const int64_t nb_;
  const double explore_;
  const bool has_knee_;
  int64_t context_ = 0;
  std::vector<ShapePrefixes> shapes_;  // reserved up front: options point into it
  // Options of sequence i: opts_[begin_[i] .. end_[i]); the first is the
  // baseline (no tree, or the fixed shape).
  std::vector<Option> opts_;
  std::vector<size_t> begin_, end_;
  std::vector<int32_t> group_;
  std::vector<GroupKey> groups_;
  int32_t num_groups_ = 0;
  std::vector<int32_t> depths_ = {0};
  int32_t min_depth_ = 0;  // the deepest fixed tree
  std::vector<size_t> group_pick_;
  std::vector<size_t> best_;
  double rho_ = 0.0;
};

void ShapeSearch::AddOption(const ShapePrefixes* p, int32_t cap) {
  const int32_t d = p == nullptr ? 0 : std::min<int32_t>(cap, p->fanouts.size());
  if (p != nullptr && d == 0) return;
  Option o;
  if (d > 0) o = {p, d, p->nodes[d], p->e_decide[d], p->e_mean[d]};
  opts_.push_back(o);
  depths_.push_back(d);
}

void ShapeSearch::AddSequence(const PlanSequence& s, absl::Span<const TreeShape> candidates,
                              const AcceptanceModel& acceptance) {
  const int32_t cap =
      static_cast<int32_t>(std::min<int64_t>(s.remaining_tokens - 1, kMaxShapeDepth));
  const size_t first = opts_.size();
  if (s.can_draft && s.fixed_shape.has_value()) {
    shapes_.emplace_back(*s.fixed_shape, acceptance, explore_);
    AddOption(&shapes_.back(), cap);
    if (opts_.size() == first) AddOption(nullptr, cap);
    min_depth_ = std::max(min_depth_, opts_.back().depth);
    begin_.push_back(first);
    end_.push_back(opts_.size());
    group_.push_back(num_groups_++);
    return;
  }
  for (const GroupKey& g : groups_) {
    if (g.can_draft == s.can_draft && g.cap == cap) {
      begin_.push_back(g.begin);
      end_.push_back(g.end);
      group_.push_back(g.id);
      return;
    }
  }
  AddOption(nullptr, cap);
  if (s.can_draft) {
    for (size_t k = 0; k < candidates.size(); ++k) AddOption(&shapes_[k], cap);
  }
  groups_.push_back({s.can_draft, cap, first, opts_.size(), num_groups_});
  begin_.push_back(first);
  end_.push_back(opts_.size());
  group_.push_back(num_groups_++);
}

void ShapeSearch::BuildOptions(absl::Span<const PlanSequence> batch,
                               absl::Span<const TreeShape> candidates,
                               const AcceptanceModel& acceptance) {
  shapes_.reserve(candidates.size() + batch.size());
  for (const TreeShape& s : candidates) shapes_.emplace_back(s, acceptance, explore_);
  for (const PlanSequence& s : batch) AddSequence(s, candidates, acceptance);
  std::sort(depths_.begin(), depths_.end());
  depths_.erase(std::unique(depths_.begin(), depths_.end()), depths_.end());
}

double ShapeSearch::Score(const std::vector<size_t>& choice, double* e_dec, double* e_mean,
                          double* t_draft, double* t_verify) const {
  int64_t nodes = 0, seq_levels = 0, levels = 0;
  *e_dec = *e_mean = 0.0;
  for (size_t c : choice) {
    nodes += opts_[c].nodes;
    seq_levels += opts_[c].depth;
    levels = std::max<int64_t>(levels, opts_[c].depth);
    *e_dec += opts_[c].e_decide;
    *e_mean += opts_[c].e_mean;
  }
  *t_draft = cost_.Draft(levels, seq_levels, nodes);
  *t_verify = cost_.Verify(nb_, nb_ + nodes, context_);
  return *e_dec / (*t_draft + *t_verify + cost_.overhead);
}

void ShapeSearch::Subproblem(int32_t max_depth, double knee_price, double r,
                             std::vector<size_t>* choice) {
  const double per_node = cost_.v.per_token + knee_price + cost_.d.per_node;
  const double per_level = cost_.d.per_sequence_level;
  group_pick_.assign(num_groups_, kNone);
  for (int64_t i = 0; i < nb_; ++i) {
    size_t& pick = group_pick_[group_[i]];
    if (pick == kNone) {
      pick = begin_[i];
      double pick_value = -1e300;
      for (size_t c = begin_[i]; c < end_[i]; ++c) {
        const Option& o = opts_[c];
        if (o.depth > max_depth) continue;
        const double v = o.e_decide - r * (per_node * o.nodes + per_level * o.depth);
        if (v > pick_value) {
          pick_value = v;
          pick = c;
        }
      }
    }
    (*choice)[i] = pick;
  }
}

void ShapeSearch::Dinkelbach() {
  best_.assign(begin_.begin(), begin_.end());
  double ed, em, td, tv;
  rho_ = Score(best_, &ed, &em, &td, &tv);
  std::vector<size_t> trial(best_.size());
  for (int iter = 0; iter < 64; ++iter) {
    double round_best = rho_;
    std::vector<size_t> round_choice;
    for (int32_t max_depth : depths_) {
      if (max_depth < min_depth_) continue;
      for (int side = 0; side < (has_knee_ ? 2 : 1); ++side) {
        Subproblem(max_depth, side == 1 ? cost_.v.per_token_past_knee : 0.0, rho_, &trial);
        const double r = Score(trial, &ed, &em, &td, &tv);
        if (r > round_best) {
          round_best = r;
          round_choice = trial;
        }
      }
    }
    if (round_choice.empty() || !(round_best > rho_ * (1.0 + 1e-12))) break;
    rho_ = round_best;
    best_ = std::move(round_choice);
  }
}

double ShapeSearch::PolishChoice(std::vector<size_t>* choice) const {
  int64_t nodes = 0, seq_levels = 0;
  double e = 0.0;
  std::vector<int32_t> at_depth(kMaxShapeDepth + 1, 0);
  for (size_t c : *choice) {
    nodes += opts_[c].nodes;
    seq_levels += opts_[c].depth;
    e += opts_[c].e_decide;
    ++at_depth[opts_[c].depth];
  }
  auto deepest = [&] {
    int32_t d = kMaxShapeDepth;
    while (d > 0 && at_depth[d] == 0) --d;
    return d;
  };
  double r_now = e / StepSeconds(deepest(), seq_levels, nodes);
  // (group, option) pairs known to have no improving change since the last
  // change: an identical sequence in the same state has none either.
  std::vector<std::pair<int32_t, size_t>> settled;
  for (int pass = 0; pass < kMaxPolishPasses; ++pass) {
    bool changed = false;
    for (int64_t i = 0; i < nb_; ++i) {
      if (end_[i] - begin_[i] < 2) continue;
      const std::pair<int32_t, size_t> state = {group_[i], (*choice)[i]};
      if (std::find(settled.begin(), settled.end(), state) != settled.end()) continue;
      const Option& cur = opts_[(*choice)[i]];
      --at_depth[cur.depth];
      const int32_t others = deepest();
      size_t pick = (*choice)[i];
      double pick_rho = r_now * (1.0 + 1e-12);
      for (size_t c = begin_[i]; c < end_[i]; ++c) {
        if (c == (*choice)[i]) continue;
        const Option& o = opts_[c];
        const int64_t n = nodes - cur.nodes + o.nodes;
        const double t =
            StepSeconds(std::max(others, o.depth), seq_levels - cur.depth + o.depth, n);
        const double r = (e - cur.e_decide + o.e_decide) / t;
        if (r > pick_rho) {
          pick_rho = r;
          pick = c;
        }
      }
      const Option& o = opts_[pick];
      ++at_depth[o.depth];
      if (pick == (*choice)[i]) {
        settled.push_back(state);
        continue;
      }
      settled.clear();
      nodes += o.nodes - cur.nodes;
      seq_levels += o.depth - cur.depth;
      e += o.e_decide - cur.e_decide;
      (*choice)[i] = pick;
      r_now = pick_rho;
      changed = true;
    }
    if (!changed) break;
  }
  return r_now;
}

void ShapeSearch::Polish() {
  rho_ = std::max(rho_, PolishChoice(&best_));
  // Past a knee the best plan often fills the pass up to the knee exactly,
  // which neither linear piece proposes and single changes from below cannot
  // reach when the drafter's per-call cost needs several trees to pay. So
  // the plans that ignore the knee and overshoot it are polished too (from
  // above, dropping trees until the knee).
  if (!has_knee_) return;
  std::vector<size_t> trial(best_.size());
  for (int32_t max_depth : depths_) {
    if (max_depth < std::max(min_depth_, 1)) continue;
    Subproblem(max_depth, 0.0, rho_, &trial);
    int64_t tokens = nb_;
    for (size_t c : trial) tokens += opts_[c].nodes;
    if (tokens <= cost_.v.knee_tokens) continue;
    const double r = PolishChoice(&trial);
    if (r > rho_ * (1.0 + 1e-12)) {
      rho_ = r;
      best_ = trial;
    }
  }
}

ShapePlan ShapeSearch::MakePlan() const {
  ShapePlan plan;
  double e_dec, e_mean, t_draft, t_verify;
  Score(best_, &e_dec, &e_mean, &t_draft, &t_verify);
  plan.total_expected_tokens = e_mean;
  plan.draft_seconds = t_draft;
  plan.verify_seconds = t_verify;
  plan.step_seconds = t_draft + t_verify + cost_.overhead;
  plan.plain_seconds = cost_.Verify(nb_, nb_, context_) + cost_.overhead;
  for (size_t c : best_) {
    const Option& o = opts_[c];
    plan.expected_tokens.push_back(o.e_mean);
    if (o.shape == nullptr) {
      plan.shapes.push_back(std::nullopt);
      continue;
    }
    plan.call_drafter = true;
    std::vector<int32_t> f(o.shape->fanouts.begin(), o.shape->fanouts.begin() + o.depth);
    absl::StatusOr<TreeShape> s = TreeShape::FromFanouts(std::move(f));
    TS_CHECK(s.ok());  // a prefix of a valid shape
    plan.shapes.push_back(*std::move(s));
  }
  return plan;
}

}  // namespace

absl::Status PlannerOptions::Validate() const {
  if (!std::isfinite(explore) || explore < 0.0) {
    return absl::InvalidArgumentError(
        absl::StrCat("explore must be finite and >= 0, got ", explore));
  }
  for (const auto& [name, scale] : {std::pair<const char*, double>{"plain_time_scale",
                                                                   plain_time_scale},
                                     {"added_time_scale", added_time_scale}}) {
    if (!std::isfinite(scale) || scale <= 0.0) {
      return absl::InvalidArgumentError(
          absl::StrCat(name, " must be finite and > 0, got ", scale));
    }
  }
  if (!(draft_time_scale >= 0.0 && draft_time_scale <= 1.0)) {
    return absl::InvalidArgumentError(
        absl::StrCat("draft_time_scale must be in [0, 1], got ", draft_time_scale));
  }
  if (!std::isfinite(overhead_seconds) || overhead_seconds < 0.0) {
    return absl::InvalidArgumentError(
        absl::StrCat("overhead_seconds must be finite and >= 0, got ", overhead_seconds));
  }
  if (max_step_tokens < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("max_step_tokens must be >= 0, got ", max_step_tokens));
  }
  return absl::OkStatus();
}

absl::StatusOr<ShapePlan> PlanShapes(absl::Span<const PlanSequence> batch,
                                     absl::Span<const TreeShape> candidates,
                                     const AcceptanceModel& acceptance,
                                     const VerifyCostModel& verify, const DraftCostModel& draft,
                                     const PlannerOptions& options) {
  TS_RETURN_IF_ERROR(options.Validate());
  TS_RETURN_IF_ERROR(ValidateBatch(batch));
  ShapeSearch search(batch, verify, draft, options);
  search.BuildOptions(batch, candidates, acceptance);
  search.Dinkelbach();
  search.Polish();
  return search.MakePlan();
}

}  // namespace treespec
