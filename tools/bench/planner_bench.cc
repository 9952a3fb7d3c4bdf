// planner_bench: how long the per-step tree decisions of tree_planner.h take,
// to check them against the bound (<= 2% of a step). For batch sizes
// and tree sizes it prints the time of
//   shapes  PlanShapes over the candidate shapes of at most N draft nodes
//   prune   PruneTrees over drafted trees of N nodes per sequence
//   update  the online bookkeeping after the step: AcceptanceModel::ObserveBatch
//           of the step's trees and one VerifyCostModel::Observe (with its refit)
// and each as a share of a 1 ms step (the fastest CPU demo verify step) and
// of a modelled step t = base + per_token·(batch·(N + 1)) (flags).
//
//   build/bin/planner_bench [--batches 1,16,64] [--nodes 8,16,32,64]
//       [--step_base_ms 1.0] [--step_us_per_token 2.0] [--min_seconds 0.4]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "core/spec/acceptance_model.h"
#include "core/spec/step_cost_model.h"
#include "core/spec/tree_planner.h"
#include "core/util/cli_args.h"

ABSL_FLAG(std::string, batches, "1,16,64", "Batch sizes");
ABSL_FLAG(std::string, nodes, "8,16,32,64", "Draft nodes per tree");
ABSL_FLAG(double, step_base_ms, 1.0, "Modelled verify step: fixed part (ms)");
ABSL_FLAG(double, step_us_per_token, 2.0, "Modelled verify step: per packed token (µs)");
ABSL_FLAG(double, min_seconds, 0.4, "Time spent measuring each cell");

namespace treespec {
namespace {

using Clock = std::chrono::steady_clock;

std::vector<int64_t> ParseList(absl::string_view flag, const std::string& text) {
  absl::StatusOr<std::vector<int>> v = ParsePositiveInts(flag, text);
  if (!v.ok()) {
    std::fprintf(stderr, "planner_bench: %s\n", v.status().ToString().c_str());
    std::exit(1);
  }
  return std::vector<int64_t>(v->begin(), v->end());
}

// Seconds per call of fn: the fastest of 20 rounds of calls, each round at
// least min_seconds / 20 long, so other work on a shared machine inflates
// the figure as little as possible.
template <typename Fn>
double TimeIt(const Fn& fn, double min_seconds) {
  fn();  // warm-up
  double best = 1e300;
  for (int round = 0; round < 20; ++round) {
    int64_t calls = 0;
    const Clock::time_point start = Clock::now();
    double elapsed = 0.0;
    do {
      fn();
      ++calls;
      elapsed = std::chrono::duration<double>(Clock::now() - start).count();
    } while (elapsed < min_seconds / 20);
    best = std::min(best, elapsed / calls);
  }
  return best;
}

SparseDist RandomDist(std::mt19937_64& rng) {
  std::gamma_distribution<double> g(0.5, 1.0);
  std::vector<double> w(5);
  double sum = 0;
  for (double& x : w) sum += (x = g(rng) + 1e-3);
  std::sort(w.begin(), w.end(), std::greater<double>());
  SparseDist q;
  for (int k = 0; k < 5; ++k) {
    q.tokens.push_back(20 + k);
    q.probs.push_back(static_cast<float>(w[k] / sum));
  }
  return q;
}

// A tree of exactly `nodes` draft nodes filled breadth first: the root gets
// up to 4 children, every other node up to 2, each from its own top-k q.
TokenTree RandomTree(int64_t nodes, std::mt19937_64& rng) {
  TokenTree t = TokenTree::Root(1);
  t.draft.resize(1);
  for (int32_t u = 0; t.num_nodes() <= nodes; ++u) {
    t.draft[u] = RandomDist(rng);
    const int fanout = u == 0 ? 4 : 2;
    for (int r = 0; r < fanout && t.num_nodes() <= nodes; ++r) t.AddNode(u, t.draft[u].tokens[r]);
  }
  return t;
}

std::vector<TreeShape> Candidates(int64_t max_nodes) {
  std::vector<TreeShape> out;
  for (const char* text : {"chain:2", "chain:4", "chain:8", "2,1,1,1", "2,2,1", "2,2,2,1",
                           "3,2,2,1", "3,2,2,1,1", "4,2,2,1,1", "4,2,2,2"}) {
    absl::StatusOr<TreeShape> s = TreeShape::Parse(text);
    if (s.ok() && s->NumDraftNodes() <= max_nodes) out.push_back(*s);
  }
  return out;
}

int Main() {
  const std::vector<int64_t> batches = ParseList("batches", absl::GetFlag(FLAGS_batches));
  const std::vector<int64_t> node_counts = ParseList("nodes", absl::GetFlag(FLAGS_nodes));
  const double base_s = absl::GetFlag(FLAGS_step_base_ms) * 1e-3;
  const double per_token_s = absl::GetFlag(FLAGS_step_us_per_token) * 1e-6;
  const double min_s = absl::GetFlag(FLAGS_min_seconds);
  std::mt19937_64 rng(1);

  // A verify model like the modelled step, with a knee (the planner's slower
  // path), and a drafter a tenth as costly.
  std::vector<VerifySample> profile;
  for (const VerifyStepFeatures& f : VerifyGrid({1, 4, 16, 64}, {1, 8, 32, 64}, {256, 1024})) {
    const double past = std::max<int64_t>(0, f.tree_tokens - 512);
    profile.push_back({f, base_s + per_token_s * f.tree_tokens + 1e-9 * f.context_tokens +
                              2.0 * per_token_s * past});
  }
  absl::StatusOr<VerifyCostModel> verify = VerifyCostModel::FitProfile(profile);
  std::vector<DraftSample> dprofile;
  for (const DraftStepFeatures& f : DraftGrid({1, 8, 64}, {1, 4, 8}, {1, 4})) {
    dprofile.push_back(
        {f, 0.1 * base_s + 1e-5 * f.levels + 1e-6 * f.seq_levels + 0.1 * per_token_s * f.nodes});
  }
  absl::StatusOr<DraftCostModel> draft = DraftCostModel::FitProfile(dprofile);
  absl::StatusOr<AcceptanceModel> acc = AcceptanceModel::Create();
  if (!verify.ok() || !draft.ok() || !acc.ok()) {
    std::fprintf(stderr, "setup failed\n");
    return 1;
  }
  // Calibrate on some drafted trees: the target accepts the first child 70%.
  for (int i = 0; i < 2000; ++i) {
    const TokenTree t = RandomTree(32, rng);
    std::vector<int32_t> path = {0};
    std::uniform_real_distribution<double> u(0.0, 1.0);
    while (true) {
      const std::vector<int32_t> kids = t.Children(path.back());
      if (kids.empty() || u(rng) > 0.7) break;
      path.push_back(kids[0]);
    }
    (void)acc->Observe(t, path);
  }
  PlannerOptions options;
  options.explore = 0.1;

  std::printf("planner_bench: decision time per step (µs) and share of a step\n");
  std::printf("modelled step = %.2f ms + %.2f µs/token; \"1ms%%\": share of a 1 ms step\n\n",
              base_s * 1e3, per_token_s * 1e6);
  std::printf("%6s %6s %6s | %9s %9s %9s | %8s %7s %7s | %8s %8s\n", "batch", "nodes", "shapes",
              "shapes_us", "prune_us", "update_us", "step_ms", "1ms%", "step%", "plan_tok",
              "kept_tok");
  for (int64_t nb : batches) {
    for (int64_t n : node_counts) {
      std::vector<PlanSequence> batch(nb);
      for (PlanSequence& s : batch) s.context_tokens = 512;
      const std::vector<TreeShape> cands = Candidates(n);
      std::vector<TokenTree> trees;
      std::vector<std::vector<int32_t>> paths;
      for (int64_t i = 0; i < nb; ++i) {
        trees.push_back(RandomTree(n, rng));
        paths.push_back({0, 1});
      }
      absl::StatusOr<ShapePlan> plan;
      absl::StatusOr<PrunePlan> prune;
      const double shapes_s =
          TimeIt([&] { plan = PlanShapes(batch, cands, *acc, *verify, *draft, options); }, min_s);
      const double prune_s =
          TimeIt([&] { prune = PruneTrees(batch, trees, *acc, *verify, 1e-4, options); }, min_s);
      AcceptanceModel scratch = *acc;
      VerifyCostModel vscratch = *verify;
      const VerifyStepFeatures f{nb, nb * (n + 1), nb * 512};
      const double update_s = TimeIt(
          [&] {
            (void)scratch.ObserveBatch(trees, paths);
            vscratch.Observe(f, verify->Predict(f));
          },
          min_s);
      if (!plan.ok() || !prune.ok()) {
        std::fprintf(stderr, "planner failed\n");
        return 1;
      }
      const double step_s = base_s + per_token_s * static_cast<double>(nb * (n + 1));
      const double decide_s = shapes_s + prune_s;
      std::printf("%6lld %6lld %6zu | %9.1f %9.1f %9.1f | %8.2f %6.2f%% %6.2f%% | %8.1f %8lld\n",
                  static_cast<long long>(nb), static_cast<long long>(n), cands.size(),
                  shapes_s * 1e6, prune_s * 1e6, update_s * 1e6, step_s * 1e3,
                  100.0 * decide_s / 1e-3, 100.0 * decide_s / step_s, plan->total_expected_tokens,
                  static_cast<long long>(prune->verify_tokens));
    }
  }
  std::printf(
      "\n1ms%%, step%%: (shapes + prune) over the step; update runs after the step, off the\n"
      "decision path, and is shown for completeness.\n");
  return 0;
}

}  // namespace
}  // namespace treespec

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  return treespec::Main();
}
