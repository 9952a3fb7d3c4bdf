// stree_bench's tables (markdown): time per verify, memory per verify, and
// the op-level scan table. Plain functions writing to stdout.
#pragma once

#include <vector>

#include "tools/bench/stree_bench_compare.h"
#include "tools/bench/stree_bench_ops.h"

namespace treespec::bench {

// `cpu_time`: also the process CPU time columns (CPU backends).
void PrintTimeTable(const std::vector<CompareRow>& rows, bool cpu_time);
void PrintMemoryTable(const std::vector<CompareRow>& rows);
// `matrix`: the rows have the CPU matrix form's timings.
void PrintOpTable(const std::vector<ScanOpRow>& rows, bool matrix);

}  // namespace treespec::bench
