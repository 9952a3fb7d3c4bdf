// stree_bench's comparison of the tree scan against unrolled verification
// (tools/bench/stree_bench_verify.h) for one model and tree over several
// batch sizes: both methods verify the same trees in interleaved rounds (the
// order alternating), after one untimed round that measures memory and
// checks that the two agree: every node's logits, then the logits of one
// more token after the commit (and, for pure Mamba-2, the committed state
// itself), bit for bit on the CPU. A disagreement is an error (INTERNAL:
// one of the two paths has a bug). Why bit for bit: a tree node's state is
// its parent's advanced by the same one-step arithmetic a chain uses
// (kernels/cpu/ssm_tree_scan.cc, paper 001 §3), attention masks a tree node
// to exactly the keys of its path, and every CPU matrix product is batch
// invariant (docs/cpu_engine.md), so a node computes the same numbers in a
// packed tree as at the same depth of its own branch. On a GPU the products
// and the scan's matrix form depend on the batch shape: a tolerance then.
// Thread-compatible.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "tools/bench/stree_bench_shapes.h"
#include "tools/bench/stree_bench_verify.h"

namespace treespec::bench {

struct CompareOptions {
  std::vector<int> batches = {1};
  int rounds = 5;  // timed, after the untimed check round
  int prompt = 128;
  int accept = 0;  // nodes of the accepted path; <= 0: the whole branch
  int64_t kv_block_size = 16;
  // A method whose model, pools and logits would take more than this for a
  // batch is not run at that batch (reported as skipped, as the paper's OOM).
  int64_t max_bytes = int64_t{4} << 30;
  // Logits and states agree when |a - b| <= tolerance · (1 + |b|).
  double tolerance = 0.0;
};

struct MethodResult {
  std::string skipped;  // non-empty: not run, and why
  std::vector<VerifySample> samples;
  VerifyMemory mem;
  int64_t weight_bytes = 0;
  bool ran() const { return skipped.empty(); }
};

struct CompareRow {
  std::string model, tree;
  int64_t nodes = 0, unrolled_tokens = 0, branches = 0;
  int batch = 0;
  MethodResult tree_scan, unrolled;
  std::vector<double> speedups;      // per round: unrolled time / tree time
  std::vector<double> cpu_speedups;  // the same in CPU time
  double max_diff = 0;           // largest |tree - unrolled| seen by the check
};

absl::StatusOr<std::vector<CompareRow>> CompareMethods(const BenchModel& model,
                                                       const BenchTree& tree,
                                                       const CompareOptions& options,
                                                       Backend* backend);

double Median(std::vector<double> v);

}  // namespace treespec::bench
