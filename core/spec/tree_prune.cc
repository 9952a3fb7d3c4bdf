// PruneTrees and KeepNodes of tree_planner.h (the derivation is there).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/spec/tree_planner.h"
#include "core/spec/tree_planner_internal.h"
#include "core/util/status_macros.h"

namespace treespec {

using planner_internal::StepCost;
using planner_internal::ValidateBatch;

absl::StatusOr<PrunePlan> PruneTrees(absl::Span<const PlanSequence> batch,
                                     absl::Span<const TokenTree> trees,
                                     const AcceptanceModel& acceptance,
                                     const VerifyCostModel& verify, double draft_seconds,
                                     const PlannerOptions& options) {
  TS_RETURN_IF_ERROR(options.Validate());
  TS_RETURN_IF_ERROR(ValidateBatch(batch));
  if (trees.size() != batch.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("trees: ", trees.size(), " trees for a batch of ", batch.size()));
  }
  if (!std::isfinite(draft_seconds) || draft_seconds < 0.0) {
    return absl::InvalidArgumentError(
        absl::StrCat("draft_seconds must be finite and >= 0, got ", draft_seconds));
  }
  for (size_t i = 0; i < trees.size(); ++i) {
    const TokenTree& t = trees[i];
    if (t.tokens.empty() || t.parents.size() != t.tokens.size() || t.parents[0] != -1 ||
        (!t.draft.empty() && t.draft.size() != t.tokens.size())) {
      return absl::InvalidArgumentError(
          absl::StrCat("trees[", i, "]: needs a root and equal tokens/parents/draft sizes"));
    }
    for (int32_t v = 1; v < t.num_nodes(); ++v) {
      if (t.parents[v] < 0 || t.parents[v] >= v) {
        return absl::InvalidArgumentError(absl::StrCat(
            "trees[", i, "].parents[", v, "] = ", t.parents[v], " is not in [0, ", v, ")"));
      }
    }
  }
  const StepCost cost(verify, nullptr, options.overhead_seconds);
  const int64_t nb = static_cast<int64_t>(batch.size());
  int64_t context = 0;
  for (const PlanSequence& s : batch) context += s.context_tokens;

  // Candidates sorted by one 64-bit key: the rank key's top 40 bits (sign,
  // exponent and 28 mantissa bits: truncation keeps the order, and ties
  // within 2^-28 go by index), inverted for descending order, then the
  // node's global index (sequence-major) for ties — parents and earlier
  // siblings first, so every prefix stays a valid set of trees.
  // A node whose rank key is below ρ_0·(per-token verify cost) is never
  // worth verifying (ρ_0: the rate with nothing kept): when the order's
  // gains decrease, E(n)/T(n) rises to its peak and falls after it (E concave,
  // T convex), so the last node of the best prefix has π ≥ ρ(n−1)·ΔT ≥ ρ_0·c.
  // Dropping such nodes before sorting keeps the result and most of the sort.
  const double rate0 = nb / (draft_seconds + cost.Verify(nb, nb, context) + cost.overhead);
  const double threshold = rate0 * cost.v.per_token * (1.0 - 1e-9);
  std::vector<uint64_t> order;
  std::vector<double> flat_pi;
  std::vector<int32_t> flat_seq, flat_node;
  std::vector<double> a, pi, key;
  std::vector<int32_t> depth, last_child;
  for (int64_t i = 0; i < nb; ++i) {
    const TokenTree& t = trees[i];
    if (!batch[i].can_draft || t.num_nodes() <= 1) continue;
    acceptance.PathAcceptance(t, &a, &pi);
    const int64_t n = t.num_nodes();
    key.assign(n, 0.0);
    depth.assign(n, 0);
    last_child.assign(n, -1);
    key[0] = 1.0;
    for (int32_t v = 1; v < n; ++v) {
      const int32_t u = t.parents[v];
      depth[v] = depth[u] + 1;
      double k = std::min(pi[v], key[u]);
      if (options.sibling_prefix && last_child[u] >= 0) k = std::min(k, key[last_child[u]]);
      last_child[u] = v;
      if (depth[v] > batch[i].remaining_tokens - 1) k = 0.0;
      key[v] = k;
      if (!(k > 0.0) || k < threshold) continue;
      if (flat_pi.size() >= (size_t{1} << 24)) {
        return absl::InvalidArgumentError("trees: more than 2^24 draft nodes in one step");
      }
      uint64_t bits;
      std::memcpy(&bits, &k, sizeof(bits));
      order.push_back((~bits >> 24) << 24 | flat_pi.size());
      flat_pi.push_back(pi[v]);
      flat_seq.push_back(static_cast<int32_t>(i));
      flat_node.push_back(v);
    }
  }
  std::sort(order.begin(), order.end());
  constexpr uint64_t kIndexMask = (uint64_t{1} << 24) - 1;
  int64_t max_n = static_cast<int64_t>(order.size());
  if (options.max_step_tokens > 0)
    max_n = std::clamp<int64_t>(options.max_step_tokens - nb, 0, max_n);

  double gain = static_cast<double>(nb);
  double best_rate = gain / (draft_seconds + cost.Verify(nb, nb, context) + cost.overhead);
  int64_t best_n = 0;
  for (int64_t n = 1; n <= max_n; ++n) {
    gain += flat_pi[order[n - 1] & kIndexMask];
    const double rate = gain / (draft_seconds + cost.Verify(nb, nb + n, context) + cost.overhead);
    if (rate > best_rate) {
      best_rate = rate;
      best_n = n;
    }
  }

  PrunePlan plan;
  plan.kept.assign(nb, std::vector<int32_t>{0});
  plan.expected_tokens.assign(nb, 1.0);
  for (int64_t c = 0; c < best_n; ++c) {
    const uint64_t j = order[c] & kIndexMask;
    plan.kept[flat_seq[j]].push_back(flat_node[j]);
    plan.expected_tokens[flat_seq[j]] += flat_pi[j];
  }
  for (auto& k : plan.kept) std::sort(k.begin(), k.end());
  for (double e : plan.expected_tokens) plan.total_expected_tokens += e;
  plan.verify_tokens = nb + best_n;
  plan.draft_seconds = draft_seconds;
  plan.verify_seconds = cost.Verify(nb, nb + best_n, context);
  plan.step_seconds = draft_seconds + plan.verify_seconds + cost.overhead;
  return plan;
}

TokenTree KeepNodes(const TokenTree& tree, absl::Span<const int32_t> kept) {
  TokenTree out;
  std::vector<int32_t> index(tree.num_nodes(), -1);
  for (int32_t v : kept) {
    index[v] = static_cast<int32_t>(out.tokens.size());
    out.tokens.push_back(tree.tokens[v]);
    out.parents.push_back(v == 0 ? -1 : index[tree.parents[v]]);
    if (!tree.draft.empty()) out.draft.push_back(tree.draft[v]);
  }
  return out;
}

}  // namespace treespec
