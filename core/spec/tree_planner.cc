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

}  // namespace

absl::Status PlannerOptions::Validate() const {
  if (!std::isfinite(explore) || explore < 0.0) {
    return absl::InvalidArgumentError(
        absl::StrCat("explore must be finite and >= 0, got ", explore));
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
  const StepCost cost(verify, &draft, options.overhead_seconds);
  const int64_t nb = static_cast<int64_t>(batch.size());
  int64_t context = 0;
  for (const PlanSequence& s : batch) context += s.context_tokens;

  // Reserved up front: options point into this vector.
  std::vector<ShapePrefixes> shapes;
  shapes.reserve(candidates.size() + batch.size());
  for (const TreeShape& s : candidates) shapes.emplace_back(s, acceptance, options.explore);
  // Options of sequence i: opts[begin[i] .. end[i]); the first is the
  // baseline (no tree, or the fixed shape). Sequences with the same options
  // (same budget cap, both drafting, no fixed shape) share one range and one
  // group: the per-sequence subproblem is solved once per group.
  std::vector<Option> opts;
  std::vector<size_t> begin, end;
  std::vector<int32_t> group;
  struct GroupKey {
    bool can_draft;
    int32_t cap;
    size_t begin, end;
    int32_t id;
  };
  std::vector<GroupKey> groups;
  int32_t num_groups = 0;
  std::vector<int32_t> depths = {0};
  int32_t min_depth = 0;  // the deepest fixed tree
  for (const PlanSequence& s : batch) {
    const int32_t cap =
        static_cast<int32_t>(std::min<int64_t>(s.remaining_tokens - 1, kMaxShapeDepth));
    auto add = [&](const ShapePrefixes* p) {
      const int32_t d = p == nullptr ? 0 : std::min<int32_t>(cap, p->fanouts.size());
      if (p != nullptr && d == 0) return;
      Option o;
      if (d > 0) o = {p, d, p->nodes[d], p->e_decide[d], p->e_mean[d]};
      opts.push_back(o);
      depths.push_back(d);
    };
    const size_t first = opts.size();
    if (s.can_draft && s.fixed_shape.has_value()) {
      shapes.emplace_back(*s.fixed_shape, acceptance, options.explore);
      add(&shapes.back());
      if (opts.size() == first) add(nullptr);
      min_depth = std::max(min_depth, opts.back().depth);
      begin.push_back(first);
      end.push_back(opts.size());
      group.push_back(num_groups++);
      continue;
    }
    const GroupKey* known = nullptr;
    for (const GroupKey& g : groups) {
      if (g.can_draft == s.can_draft && g.cap == cap) known = &g;
    }
    if (known != nullptr) {
      begin.push_back(known->begin);
      end.push_back(known->end);
      group.push_back(known->id);
      continue;
    }
    add(nullptr);
    if (s.can_draft) {
      for (size_t k = 0; k < candidates.size(); ++k) add(&shapes[k]);
    }
    groups.push_back({s.can_draft, cap, first, opts.size(), num_groups});
    begin.push_back(first);
    end.push_back(opts.size());
    group.push_back(num_groups++);
  }
  std::sort(depths.begin(), depths.end());
  depths.erase(std::unique(depths.begin(), depths.end()), depths.end());

  // The true E/T of a choice (one option index per sequence).
  auto score = [&](const std::vector<size_t>& choice, double* e_dec, double* e_mean,
                   double* t_draft, double* t_verify) {
    int64_t nodes = 0, seq_levels = 0, levels = 0;
    *e_dec = *e_mean = 0.0;
    for (size_t c : choice) {
      nodes += opts[c].nodes;
      seq_levels += opts[c].depth;
      levels = std::max<int64_t>(levels, opts[c].depth);
      *e_dec += opts[c].e_decide;
      *e_mean += opts[c].e_mean;
    }
    *t_draft = cost.Draft(levels, seq_levels, nodes);
    *t_verify = cost.Verify(nb, nb + nodes, context);
    return *e_dec / (*t_draft + *t_verify + cost.overhead);
  };

  std::vector<size_t> best(begin.begin(), begin.end());
  double e_dec = 0, e_mean = 0, t_draft = 0, t_verify = 0;
  double rho = score(best, &e_dec, &e_mean, &t_draft, &t_verify);
  const double plain_seconds = cost.Verify(nb, nb, context) + cost.overhead;

  const bool has_knee = cost.v.knee_tokens > 0 && cost.v.per_token_past_knee > 0.0;
  // Sequence i's best option of depth <= max_depth for ρ and a per-node price.
  constexpr size_t kNone = ~size_t{0};
  std::vector<size_t> group_pick;
  auto subproblem = [&](int32_t max_depth, double knee_price, double r,
                        std::vector<size_t>* choice) {
    const double per_node = cost.v.per_token + knee_price + cost.d.per_node;
    const double per_level = cost.d.per_sequence_level;
    group_pick.assign(num_groups, kNone);
    for (int64_t i = 0; i < nb; ++i) {
      size_t& pick = group_pick[group[i]];
      if (pick == kNone) {
        pick = begin[i];
        double pick_value = -1e300;
        for (size_t c = begin[i]; c < end[i]; ++c) {
          const Option& o = opts[c];
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
  };

  std::vector<size_t> trial(best.size());
  for (int iter = 0; iter < 64; ++iter) {
    double round_best = rho;
    std::vector<size_t> round_choice;
    for (int32_t max_depth : depths) {
      if (max_depth < min_depth) continue;
      for (int side = 0; side < (has_knee ? 2 : 1); ++side) {
        subproblem(max_depth, side == 1 ? cost.v.per_token_past_knee : 0.0, rho, &trial);
        double ed, em, td, tv;
        const double r = score(trial, &ed, &em, &td, &tv);
        if (r > round_best) {
          round_best = r;
          round_choice = trial;
        }
      }
    }
    if (round_choice.empty() || !(round_best > rho * (1.0 + 1e-12))) break;
    rho = round_best;
    best = std::move(round_choice);
  }

  // Greedy polish with the true T: coordinate ascent, each sequence in turn
  // takes its best option given the others, while a pass changes something.
  // Returns the final ρ of `choice`.
  auto polish = [&](std::vector<size_t>* choice) {
    int64_t nodes = 0, seq_levels = 0;
    double e = 0.0;
    std::vector<int32_t> at_depth(kMaxShapeDepth + 1, 0);
    for (size_t c : *choice) {
      nodes += opts[c].nodes;
      seq_levels += opts[c].depth;
      e += opts[c].e_decide;
      ++at_depth[opts[c].depth];
    }
    auto deepest = [&](int32_t with_depth) {
      int32_t d = kMaxShapeDepth;
      while (d > 0 && at_depth[d] == 0) --d;
      return std::max(d, with_depth);
    };
    double r_now = e / (cost.Draft(deepest(0), seq_levels, nodes) +
                        cost.Verify(nb, nb + nodes, context) + cost.overhead);
    // (group, option) pairs known to have no improving change since the
    // last change: an identical sequence in the same state has none either.
    std::vector<std::pair<int32_t, size_t>> settled;
    for (int pass = 0; pass < kMaxPolishPasses; ++pass) {
      bool changed = false;
      for (int64_t i = 0; i < nb; ++i) {
        if (end[i] - begin[i] < 2) continue;
        const std::pair<int32_t, size_t> state = {group[i], (*choice)[i]};
        if (std::find(settled.begin(), settled.end(), state) != settled.end()) continue;
        const Option& cur = opts[(*choice)[i]];
        --at_depth[cur.depth];
        const int32_t others = deepest(0);
        size_t pick = (*choice)[i];
        double pick_rho = r_now * (1.0 + 1e-12);
        for (size_t c = begin[i]; c < end[i]; ++c) {
          if (c == (*choice)[i]) continue;
          const Option& o = opts[c];
          const int64_t n = nodes - cur.nodes + o.nodes;
          const double t =
              cost.Draft(std::max(others, o.depth), seq_levels - cur.depth + o.depth, n) +
              cost.Verify(nb, nb + n, context) + cost.overhead;
          const double r = (e - cur.e_decide + o.e_decide) / t;
          if (r > pick_rho) {
            pick_rho = r;
            pick = c;
          }
        }
        const Option& o = opts[pick];
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
  };
  rho = std::max(rho, polish(&best));
  // Past a knee the best plan often fills the pass up to the knee exactly,
  // which neither linear piece proposes and single changes from below cannot
  // reach when the drafter's per-call cost needs several trees to pay. So
  // the plans that ignore the knee and overshoot it are polished too (from
  // above, dropping trees until the knee).
  if (has_knee) {
    for (int32_t max_depth : depths) {
      if (max_depth < std::max(min_depth, 1)) continue;
      subproblem(max_depth, 0.0, rho, &trial);
      int64_t tokens = nb;
      for (size_t c : trial) tokens += opts[c].nodes;
      if (tokens <= cost.v.knee_tokens) continue;
      const double r = polish(&trial);
      if (r > rho * (1.0 + 1e-12)) {
        rho = r;
        best = trial;
      }
    }
  }

  ShapePlan plan;
  score(best, &e_dec, &e_mean, &t_draft, &t_verify);
  plan.total_expected_tokens = e_mean;
  plan.draft_seconds = t_draft;
  plan.verify_seconds = t_verify;
  plan.step_seconds = t_draft + t_verify + cost.overhead;
  plan.plain_seconds = plain_seconds;
  for (size_t c : best) {
    const Option& o = opts[c];
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

}  // namespace treespec
