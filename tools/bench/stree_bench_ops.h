// stree_bench's op-level table: one Mamba-2 layer's selective scan alone
// (Backend::SsmTreeScan, the shape of a model's mixer, random inputs) over
// `batch` packed trees against the same trees unrolled into chains, each
// branch from its own copy of the committed state (Backend::CopyRows, timed
// with it), and on the CPU the paper's matrix form (cpu::SsmTreeScanMatrix,
// a single-threaded plain loop: the reference of the GPU kernel) over the
// packed trees. The tree and unrolled outputs must agree (bit for bit on the
// CPU); the matrix form's largest difference is reported. Timed in process
// CPU time on the CPU backend, wall time on others. Thread-compatible.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "core/tensor/backend.h"
#include "tools/bench/stree_bench_shapes.h"

namespace treespec::bench {

struct ScanOpRow {
  std::string model, tree;
  int batch = 0;
  int64_t rows_tree = 0, rows_unrolled = 0;
  std::vector<double> tree_ms, unrolled_ms, matrix_ms;  // per round; matrix: CPU only
  double matrix_max_diff = -1;  // max |matrix - recurrent| / max |recurrent|; -1: not run
};

absl::StatusOr<ScanOpRow> TimeScanOp(const BenchModel& model, const BenchTree& tree, int batch,
                                     int rounds, double tolerance, Backend* backend);

}  // namespace treespec::bench
