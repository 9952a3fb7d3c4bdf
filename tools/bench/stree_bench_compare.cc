#include "tools/bench/stree_bench_compare.h"

#include <algorithm>
#include <cmath>
#include <memory>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/util/status_macros.h"

namespace treespec::bench {
namespace {

constexpr Method kMethods[2] = {Method::kTree, Method::kUnrolled};

// Bytes a method would hold at `batch`: weights, pools, and the logits of
// every token it computes, on the device and on the host.
int64_t EstimateBytes(Method method, const BenchModel& model, const BenchTree& tree,
                      const VerifyArm::Options& o) {
  const int64_t tokens = method == Method::kTree ? tree.num_nodes() : tree.unrolled_tokens();
  return 4 * model.config.NumParameters() + VerifyArm::EstimatePoolBytes(method, model, tree, o) +
         2 * 4 * o.max_batch * tokens * model.config.vocab_size;
}

// Compares n values; keeps the largest difference in *max_diff. INTERNAL
// naming `what` and the element when one is out of tolerance.
absl::Status Agree(const float* a, const float* b, int64_t n, double tol, const std::string& what,
                   double* max_diff) {
  for (int64_t i = 0; i < n; ++i) {
    const double d = std::fabs(static_cast<double>(a[i]) - b[i]);
    *max_diff = std::max(*max_diff, d);
    if (!(d <= tol * (1.0 + std::fabs(static_cast<double>(b[i]))))) {
      return absl::InternalError(absl::StrFormat(
          "tree scan and unrolled verification disagree: %s, element %d: %.9g vs %.9g", what, i,
          a[i], b[i]));
    }
  }
  return absl::OkStatus();
}

struct CheckData {
  ForwardOutput out;
  std::vector<float> next;                // logits of the token after the commit
  std::vector<std::vector<float>> state;  // committed states (pure Mamba-2)
};

// Every node's logits in the tree pass against each branch holding the node,
// then what follows the commit.
absl::Status Check(const BenchTree& tree, int batch, const CheckData& t, const CheckData& u,
                   double tol, double* max_diff) {
  const int64_t V = t.out.vocab_size, k = tree.num_branches();
  for (int b = 0; b < batch; ++b) {
    for (int64_t j = 0; j < k; ++j) {
      const std::vector<int32_t>& path = tree.branches[j];
      for (size_t d = 0; d < path.size(); ++d) {
        const float* a = t.out.row_logits(t.out.row_start[b] + path[d]);
        const float* x = u.out.row_logits(u.out.row_start[b * k + j] + static_cast<int64_t>(d));
        TS_RETURN_IF_ERROR(Agree(a, x, V, tol,
                                 absl::StrCat("sequence ", b, " node ", path[d], " (branch ", j,
                                              ") logits"),
                                 max_diff));
      }
    }
  }
  if (t.next.size() != u.next.size() || t.state.size() != u.state.size()) {
    return absl::InternalError(
        "tree scan and unrolled verification: different outputs after the commit");
  }
  TS_RETURN_IF_ERROR(Agree(t.next.data(), u.next.data(), static_cast<int64_t>(t.next.size()), tol,
                           "logits of the token after the commit", max_diff));
  for (size_t b = 0; b < t.state.size(); ++b) {
    TS_RETURN_IF_ERROR(Agree(t.state[b].data(), u.state[b].data(),
                             static_cast<int64_t>(t.state[b].size()), tol,
                             absl::StrCat("sequence ", b, " committed state"), max_diff));
  }
  return absl::OkStatus();
}

// One batch size: the check round, then the timed rounds. arms[m] is null
// where method m does not run at this batch.
absl::Status RunBatch(VerifyArm* arms[2], const BenchTree& tree, int batch,
                      const CompareOptions& o, CompareRow* row) {
  MethodResult* res[2] = {&row->tree_scan, &row->unrolled};
  CheckData check[2];
  for (int m = 0; m < 2; ++m) {
    if (arms[m] == nullptr) continue;
    TS_RETURN_IF_ERROR(arms[m]->Open(batch));
    TS_RETURN_IF_ERROR(arms[m]->Verify(&check[m].out, &res[m]->mem).status());
    TS_RETURN_IF_ERROR(arms[m]->Continue(&check[m].next, &check[m].state));
    arms[m]->Close();
    res[m]->weight_bytes = arms[m]->weight_bytes();
  }
  if (arms[0] != nullptr && arms[1] != nullptr) {
    TS_RETURN_IF_ERROR(Check(tree, batch, check[0], check[1], o.tolerance, &row->max_diff));
  }
  for (int r = 0; r < o.rounds; ++r) {
    double total[2] = {0, 0}, cpu[2] = {0, 0};
    for (int i = 0; i < 2; ++i) {
      const int m = (r % 2 == 0) ? i : 1 - i;  // alternate which goes first
      if (arms[m] == nullptr) continue;
      TS_RETURN_IF_ERROR(arms[m]->Open(batch));
      ForwardOutput out;
      TS_ASSIGN_OR_RETURN(VerifySample s, arms[m]->Verify(&out, nullptr));
      arms[m]->Close();
      res[m]->samples.push_back(s);
      total[m] = s.total_ms();
      cpu[m] = s.cpu_ms;
    }
    if (arms[0] != nullptr && arms[1] != nullptr) {
      row->speedups.push_back(total[1] / total[0]);
      row->cpu_speedups.push_back(cpu[1] / cpu[0]);
    }
  }
  return absl::OkStatus();
}

std::string SkipReason(int64_t bytes, int64_t budget) {
  return absl::StrFormat("needs ~%.1f GiB > --max_gib %.1f", bytes / 1073741824.0,
                         budget / 1073741824.0);
}

}  // namespace

double Median(std::vector<double> v) {
  if (v.empty()) return 0.0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 == 1 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

absl::StatusOr<std::vector<CompareRow>> CompareMethods(const BenchModel& model,
                                                       const BenchTree& tree,
                                                       const CompareOptions& o,
                                                       Backend* backend) {
  VerifyArm::Options ao;
  ao.prompt = o.prompt;
  ao.accept = o.accept > 0 ? std::min(o.accept, tree.depth) : tree.depth;
  ao.kv_block_size = o.kv_block_size;
  // Each method's pools are sized for the largest batch that fits the budget.
  std::unique_ptr<VerifyArm> arms[2];
  for (int m = 0; m < 2; ++m) {
    ao.max_batch = 0;
    for (int b : o.batches) {
      VerifyArm::Options probe = ao;
      probe.max_batch = b;
      if (EstimateBytes(kMethods[m], model, tree, probe) <= o.max_bytes) {
        ao.max_batch = std::max(ao.max_batch, b);
      }
    }
    if (ao.max_batch == 0) continue;
    TS_ASSIGN_OR_RETURN(arms[m], VerifyArm::Create(kMethods[m], model, tree, ao, backend));
  }
  std::vector<CompareRow> rows;
  for (int b : o.batches) {
    CompareRow row;
    row.model = model.name;
    row.tree = tree.name;
    row.nodes = tree.num_nodes();
    row.unrolled_tokens = tree.unrolled_tokens();
    row.branches = tree.num_branches();
    row.batch = b;
    VerifyArm* use[2] = {nullptr, nullptr};
    MethodResult* res[2] = {&row.tree_scan, &row.unrolled};
    for (int m = 0; m < 2; ++m) {
      ao.max_batch = b;
      const int64_t need = EstimateBytes(kMethods[m], model, tree, ao);
      if (need > o.max_bytes) {
        res[m]->skipped = SkipReason(need, o.max_bytes);
      } else {
        use[m] = arms[m].get();
      }
    }
    TS_RETURN_IF_ERROR(RunBatch(use, tree, b, o, &row));
    rows.push_back(std::move(row));
  }
  return rows;
}

}  // namespace treespec::bench
