#include "coordinator/spec_planner.h"

#include <algorithm>
#include <cmath>
#include <optional>
#include <utility>

namespace treespec {
namespace {

AcceptanceModel MakeAcceptance(const AcceptanceModelOptions& o) {
  absl::StatusOr<AcceptanceModel> m = AcceptanceModel::Create(o);
  if (m.ok()) return *std::move(m);
  return *AcceptanceModel::Create();
}

constexpr double kOverheadDecay = 0.9;
constexpr double kMinFactor = 0.25, kMaxFactor = 8.0;
constexpr int64_t kMaxCheckBackoff = 16;

}  // namespace

SpecPlanner::SpecPlanner(SpecPlannerOptions options)
    : options_(std::move(options)),
      check_interval_(options_.check_every),
      next_check_(options_.check_every),
      greedy_(MakeAcceptance(options_.acceptance)),
      sampling_(MakeAcceptance(options_.acceptance)) {
  std::fill(std::begin(draft_share_), std::end(draft_share_), -1.0);
}

void SpecPlanner::SetVerifyProfile(VerifyCostModel verify) {
  verify_ = std::move(verify);
  ready_ = true;
  learned_ = true;
}

void SpecPlanner::SetDraftProfile(DraftCostModel draft) {
  draft_ = std::move(draft);
  has_draft_prior_ = true;
  learned_ = true;
}

void SpecPlanner::SeedPrior(const VerifyStepFeatures& f, double s) {
  const double b = static_cast<double>(std::max<int64_t>(1, f.batch));
  if (!ready_) {
    // Synthetic samples of the prior; FitProfile makes them the ridge target.
    std::vector<VerifySample> v;
    for (int64_t batch : {1, 4, 16}) {
      for (int64_t per_seq : {1, 4, 16}) {
        VerifyStepFeatures x{batch, batch * per_seq, 0};
        v.push_back({x, s / 2 + s / (2 * b) * x.tree_tokens});
      }
    }
    absl::StatusOr<VerifyCostModel> m = VerifyCostModel::FitProfile(v);
    if (m.ok()) verify_ = *std::move(m);
    ready_ = true;
  }
  if (!has_draft_prior_) {
    std::vector<DraftSample> d;
    for (int64_t batch : {1, 4, 16}) {
      for (int64_t depth : {1, 3, 6}) {
        for (int64_t width : {1, 3}) {
          DraftStepFeatures x{depth, batch * depth, batch * depth * width};
          d.push_back({x, s / 4 + s / (4 * b) * x.seq_levels + s / (16 * b) * x.nodes});
        }
      }
    }
    absl::StatusOr<DraftCostModel> m = DraftCostModel::FitProfile(d);
    if (m.ok()) draft_ = *std::move(m);
    has_draft_prior_ = true;
  }
}

absl::StatusOr<ShapePlan> SpecPlanner::Plan(absl::Span<const PlanSequence> batch, bool greedy) {
  AcceptanceModel& a = greedy ? greedy_ : sampling_;
  a.AdvanceRound();
  PlannerOptions o = options_.planner;
  o.overhead_seconds = overhead_;
  std::vector<PlanSequence> seqs(batch.begin(), batch.end());
  for (PlanSequence& s : seqs) s.context_tokens = 0;  // see SpecPlannerOptions
  batch = seqs;
  if (probes_ < options_.probe_steps) {
    // Probe: draft the probe shape (cut to the budget) for every sequence that may.
    ShapePlan p;
    for (const PlanSequence& s : batch) {
      std::optional<TreeShape> shape = s.fixed_shape;
      if (s.can_draft && !shape.has_value() && s.remaining_tokens > 1) {
        const int depth =
            static_cast<int>(std::min<int64_t>(options_.probe.Depth(), s.remaining_tokens - 1));
        std::vector<int32_t> f(options_.probe.fanouts().begin(),
                               options_.probe.fanouts().begin() + depth);
        absl::StatusOr<TreeShape> cut = TreeShape::FromFanouts(f);
        if (cut.ok()) shape = *cut;
      }
      p.call_drafter |= shape.has_value() && s.can_draft;
      p.expected_tokens.push_back(shape.has_value() ? a.ExpectedTokens(*shape) : 1.0);
      p.shapes.push_back(std::move(shape));
    }
    probes_ += p.call_drafter;
    last_batch_ = 0;
    return p;
  }
  const int64_t b = static_cast<int64_t>(batch.size());
  const double raw_plain = verify_.Predict({b, b, 0}) + overhead_;
  const double kp = time_factor(false, b), km = time_factor(true, b);
  ++planned_;
  const bool check_step = options_.check_every > 0 && planned_ >= next_check_;
  if (check_step) {
    feeds_check_ = false;
  } else if (prefers_plain_ && options_.check_every > 0 && options_.check_lead > 0 &&
             planned_ + options_.check_lead >= next_check_ && lead_for_check_ != next_check_) {
    // The check ahead drafts when the uncalibrated models say speculation
    // pays (as below); if it will, its sequences' backlogs are fed first.
    lead_for_check_ = next_check_;
    absl::StatusOr<ShapePlan> raw = CalibratedPlan(batch, a, o, kp, 1.0);
    feeds_check_ = km != 1.0 && raw.ok() && Pays(*raw);
  }
  if (KeepsPlain(batch, greedy, check_step, kp * raw_plain)) {
    last_batch_ = b;
    last_raw_plain_ = raw_plain;
    ShapePlan p;
    p.shapes.resize(batch.size());
    p.expected_tokens.assign(batch.size(), 1.0);
    return p;
  }
  replan_at_ = planned_ + options_.plain_replan_every;
  plan_greedy_ = greedy;
  plan_plain_seconds_ = kp * raw_plain;
  learned_ = false;
  ++searches_;
  absl::StatusOr<ShapePlan> plan = CalibratedPlan(batch, a, o, kp, km);
  if (!plan.ok()) return plan;
  double km_used = km;
  bool speculate = Pays(*plan);
  prefers_plain_ = !speculate;
  if (speculate && check_interval_ != options_.check_every) {
    check_interval_ = options_.check_every;
    next_check_ = std::min(next_check_, planned_ + check_interval_);
  }
  if (check_step) {
    if (speculate) {
      speculate = false;  // measure plain again
    } else if (km != 1.0) {
      // Measure speculation again, as the uncalibrated models would plan it
      // (when they say it pays for the batch), for a few of the sequences
      // only; while that keeps losing, ever more rarely (see the header
      // comment).
      absl::StatusOr<ShapePlan> raw = CalibratedPlan(batch, a, o, kp, 1.0);
      if (raw.ok() && Pays(*raw)) {
        if (static_cast<int64_t>(batch.size()) > options_.check_max_sequences) {
          raw = CalibratedPlan(CheckSubset(batch, checks_++), a, o, kp, 1.0);
        }
        if (raw.ok() && raw->call_drafter) {
          plan = std::move(raw);
          km_used = 1.0;
          speculate = true;
          check_interval_ =
              std::min<int64_t>(2 * check_interval_, kMaxCheckBackoff * options_.check_every);
        }
      }
    }
    next_check_ = planned_ + check_interval_;
  }
  last_batch_ = b;
  last_plan_batch_ = b;
  last_raw_plain_ = raw_plain;
  last_raw_marginal_ = (plan->step_seconds - plan->plain_seconds) / km_used;
  if (!speculate) MakePlain(batch, &*plan);
  return plan;
}

bool SpecPlanner::KeepsPlain(absl::Span<const PlanSequence> batch, bool greedy, bool check_step,
                             double plain_seconds) const {
  if (!prefers_plain_ || check_step || learned_ || planned_ >= replan_at_ ||
      greedy != plan_greedy_ || static_cast<int64_t>(batch.size()) != last_plan_batch_ ||
      std::abs(plain_seconds - plan_plain_seconds_) >
          options_.plain_replan_change * plan_plain_seconds_) {
    return false;
  }
  // A named shape is drafted whatever the plan: such a batch is planned.
  return std::none_of(batch.begin(), batch.end(), [](const PlanSequence& s) {
    return s.can_draft && s.fixed_shape.has_value();
  });
}

std::vector<PlanSequence> SpecPlanner::CheckSubset(absl::Span<const PlanSequence> batch,
                                                   int64_t round) const {
  std::vector<PlanSequence> out(batch.begin(), batch.end());
  const int64_t n = static_cast<int64_t>(out.size());
  const int64_t most = std::max<int64_t>(1, options_.check_max_sequences);
  if (n <= most) return out;
  // The sequences whose drafter is least behind (a long backlog fed with the
  // check's Draft call would be timed as the trees' cost), ties taken from an
  // offset that moves with each check.
  std::vector<int64_t> order(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) order[i] = (i + round) % n;
  std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) {
    return out[a].draft_backlog < out[b].draft_backlog;
  });
  for (int64_t k = most; k < n; ++k) {
    PlanSequence& p = out[order[k]];
    if (!p.fixed_shape.has_value()) p.can_draft = false;
  }
  return out;
}

bool SpecPlanner::Pays(const ShapePlan& plan) const {
  return plan.call_drafter &&
         plan.tokens_per_second() >= options_.min_gain * plan.plain_tokens_per_second();
}

absl::StatusOr<ShapePlan> SpecPlanner::CalibratedPlan(absl::Span<const PlanSequence> batch,
                                                      const AcceptanceModel& a, PlannerOptions o,
                                                      double kp, double km) const {
  o.plain_time_scale = kp;
  o.added_time_scale = km;
  o.draft_time_scale = draft_share(static_cast<int64_t>(batch.size()));
  return PlanShapes(batch, options_.candidates, a, verify_, draft_, o);
}

int SpecPlanner::Bucket(int64_t batch) {
  int k = 0;
  while (batch > 1 && k < kBuckets - 1) {
    batch >>= 1;
    ++k;
  }
  return k;
}

double SpecPlanner::time_factor(bool speculated, int64_t batch) const {
  const double* f = time_factor_[speculated ? 1 : 0];
  const int k = Bucket(batch);
  for (int d = 0; d < kBuckets; ++d) {
    if (k + d < kBuckets && f[k + d] > 0) return f[k + d];
    if (k - d >= 0 && f[k - d] > 0) return f[k - d];
  }
  return 1.0;
}

// Plain decoding, except for sequences that named a shape.
void SpecPlanner::MakePlain(absl::Span<const PlanSequence> batch, ShapePlan* plan) {
  plan->call_drafter = false;
  for (size_t i = 0; i < batch.size(); ++i) {
    if (batch[i].fixed_shape.has_value() && batch[i].can_draft) {
      plan->call_drafter = true;
      continue;
    }
    plan->shapes[i].reset();
    plan->expected_tokens[i] = 1.0;
  }
}

void SpecPlanner::ObserveStepRate(int64_t batch, int64_t committed, double wall_seconds,
                                  bool speculated) {
  if (batch < 1 || committed < 1 || !(wall_seconds > 0) || !ready_) return;
  const bool planned = batch == last_batch_ && last_raw_plain_ > 0;
  last_batch_ = 0;  // one observation per plan
  if (!planned) return;
  // Bounded: one step held up by something else (a prefill riding on the
  // pass, another process) must not switch an arm off on its own.
  double k;
  if (!speculated) {
    k = wall_seconds / last_raw_plain_;
  } else if (last_raw_marginal_ > 0) {
    k = (wall_seconds - time_factor(false, batch) * last_raw_plain_) / last_raw_marginal_;
  } else {
    return;
  }
  k = std::clamp(k, kMinFactor, kMaxFactor);
  double& f = time_factor_[speculated ? 1 : 0][Bucket(batch)];
  f = f == 0.0 ? k : options_.calibration_decay * f + (1 - options_.calibration_decay) * k;
  learned_ |= speculated;
}

void SpecPlanner::ObserveDraftShare(int64_t batch, double share) {
  if (batch < 1 || !(share >= 0.0)) return;
  share = std::min(share, 1.0);
  double& f = draft_share_[Bucket(batch)];
  f = f < 0.0 ? share : options_.calibration_decay * f + (1 - options_.calibration_decay) * share;
  learned_ = true;
}

double SpecPlanner::draft_share(int64_t batch) const {
  const int k = Bucket(batch);
  for (int d = 0; d < kBuckets; ++d) {
    if (k + d < kBuckets && draft_share_[k + d] >= 0.0) return draft_share_[k + d];
    if (k - d >= 0 && draft_share_[k - d] >= 0.0) return draft_share_[k - d];
  }
  return 1.0;
}

void SpecPlanner::ObserveTrees(absl::Span<const TokenTree> trees,
                               absl::Span<const std::vector<int32_t>> paths, bool greedy) {
  if (trees.empty()) return;
  (void)(greedy ? greedy_ : sampling_).ObserveBatch(trees, paths);
  learned_ = true;
}

void SpecPlanner::ObserveVerify(const VerifyStepFeatures& f, double forward_seconds,
                                double rpc_seconds) {
  // A worker that reports no forward time is timed by the RPC.
  if (!(forward_seconds > 0)) forward_seconds = rpc_seconds;
  if (!(forward_seconds > 0) || f.batch < 1) return;
  const VerifyStepFeatures g{f.batch, f.tree_tokens, 0};
  SeedPrior(g, forward_seconds);
  verify_.Observe(g, forward_seconds);
  const double extra = std::max(0.0, rpc_seconds - forward_seconds);
  overhead_ = overhead_ == 0.0 ? extra : kOverheadDecay * overhead_ + (1 - kOverheadDecay) * extra;
}

void SpecPlanner::ObserveDraft(const DraftStepFeatures& f, double seconds) {
  if (!(seconds > 0) || f.levels < 1) return;
  draft_.Observe(f, seconds);
  learned_ = true;
}

}  // namespace treespec
