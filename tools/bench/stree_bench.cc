// stree_bench: paper 001 §5.1 (STree) on treespec's Mamba-2 and hybrid
// targets. The tree scan (one Forward of the packed token tree, then
// CommitPath by activation replay) against unrolled verification (every
// root-to-leaf branch a sequence of its own, forked from the committed state,
// all branches in one batched Forward as chains, then the accepted branch
// committed and the others released), for the paper's full binary trees of
// 4, 5 and 6 levels (15, 31, 63 nodes) and the drafters' tree shapes, after
// a committed prompt, at several batch sizes. tools/bench/stree_bench_verify.h
// says exactly what each method does; both produce every node's logits, and
// an untimed first round checks that they agree (bit for bit on the CPU:
// node logits, the logits after the commit, the committed Mamba-2 state) and
// exits non-zero otherwise.
//
//   build/bin/stree_bench [--device cpu[:N]|cuda] [--models mamba2-demo,bamba-demo]
//       [--trees "binary:4;binary:5;binary:6;3,2,2,1,1;..."] [--batches 1,4,16]
//       [--rounds 5] [--prompt 128] [--max_gib 4] [--op_table] [--op_batches 1,4]
//
// Models (random weights; --models also takes a checkpoint directory):
// mamba2-demo and bamba-demo (hidden 256, 8 layers, vocab 2048, the demo
// target's size), mamba2-130m (state-spaces/mamba2-130m's shape) and
// bamba-136m (a Bamba layout of similar size: 12 layers, 2 of attention).
//
// Tables (per model): time per verify, median over --rounds interleaved
// rounds (the order alternates) with the min-max spread, split into forks /
// Forward / commit; tokens computed (tree nodes vs the branches' summed
// lengths); speed = unrolled time / tree time per round (median, min-max),
// as the paper's "1.05x"; states held per sequence (state slots of the
// model, 2 per sequence: committed + scratch, plus the scan's live-branch
// buffers of one head each); memory beyond the sequences at rest: state
// slots and KV blocks taken (from the pools), activation-cache rows written,
// the backend allocator's peak over the verify with the workspace dropped
// first (activations) and the logits returned; memory = tree / unrolled as
// the paper's "0.91x", of that extra and of everything resident (weights +
// committed sequences + extra). Then, with --op_table, one layer's scan op
// alone: recurrent tree scan vs unrolled (state copies + scan) vs, on the
// CPU, the paper's matrix form. Methods that would exceed --max_gib at a
// batch are skipped there, as the paper's OOM entries. docs/stree.md has
// the measured tables and what they mean.
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "core/tensor/backend.h"
#include "core/util/cli_args.h"
#include "core/util/status_macros.h"
#include "tools/bench/stree_bench_compare.h"
#include "tools/bench/stree_bench_ops.h"
#include "tools/bench/stree_bench_print.h"

ABSL_FLAG(std::string, device, "cpu", "Backend: cpu[:THREADS] or cuda[:N][:f16|bf16]");
ABSL_FLAG(std::string, models, "mamba2-demo,bamba-demo",
          "Comma-separated: mamba2-demo, bamba-demo, mamba2-130m, bamba-136m, or a checkpoint "
          "directory");
ABSL_FLAG(std::string, trees,
          "binary:4;binary:5;binary:6;2,2,1,1;4,2,1;3,2,2,1,1;3,3,2,1;4,2,2,1,1;chain:4",
          "Semicolon-separated trees: binary:D (D levels, root included) or a tree shape");
ABSL_FLAG(std::string, batches, "1,4,16",
          "Comma-separated batch sizes (sequences verified at once)");
ABSL_FLAG(int32_t, rounds, 5, "Timed rounds per configuration, after one untimed check round");
ABSL_FLAG(int32_t, prompt, 128, "Committed prompt tokens before the tree");
ABSL_FLAG(int32_t, accept, 0, "Nodes of the accepted path (0: the whole leftmost branch)");
ABSL_FLAG(double, max_gib, 4.0,
          "Skip a method at a batch when it would need more memory than this");
ABSL_FLAG(int32_t, kv_block_size, 16, "KV cache block size of the attention layers");
ABSL_FLAG(double, tolerance, -1.0,
          "Agreement tolerance |a - b| <= t·(1 + |b|); < 0: 0 (bit for bit) on the CPU, "
          "0.05 on CUDA");
ABSL_FLAG(bool, verify_table, true, "Compare the two methods on whole models (the main tables)");
ABSL_FLAG(bool, op_table, true, "Also time one layer's scan op alone");
ABSL_FLAG(std::string, op_batches, "1,4", "Batch sizes of the op-level table");
ABSL_FLAG(int32_t, op_rounds, 20, "Timed rounds of the op-level table");

namespace treespec::bench {
namespace {

std::string LoadAverage() {
  std::ifstream f("/proc/loadavg");
  std::string a, b, c;
  f >> a >> b >> c;
  return a.empty() ? "unknown" : a + " " + b + " " + c;
}

std::string Now() {
  return absl::FormatTime("%Y-%m-%d %H:%M:%S UTC", absl::Now(), absl::UTCTimeZone());
}

absl::Status RunModel(const BenchModel& model, const std::vector<BenchTree>& trees,
                      const CompareOptions& co, Backend* be) {
  std::printf("\n## %s: %s\n\ndevice %s, prompt %d tokens, %d timed rounds, %s, load average %s\n",
              model.name.c_str(), model.Describe().c_str(), be->name().c_str(), co.prompt,
              co.rounds, Now().c_str(), LoadAverage().c_str());
  if (absl::GetFlag(FLAGS_verify_table)) {
    std::vector<CompareRow> rows;
    for (const BenchTree& t : trees) {
      std::fprintf(stderr, "[stree_bench] %s %s ...\n", model.name.c_str(), t.name.c_str());
      TS_ASSIGN_OR_RETURN(std::vector<CompareRow> r, CompareMethods(model, t, co, be));
      rows.insert(rows.end(), r.begin(), r.end());
    }
    PrintTimeTable(rows, be->device() == DeviceKind::kCpu);
    PrintMemoryTable(rows);
  }
  if (absl::GetFlag(FLAGS_op_table)) {
    TS_ASSIGN_OR_RETURN(std::vector<int> op_batches,
                        ParsePositiveInts("op_batches", absl::GetFlag(FLAGS_op_batches)));
    std::vector<ScanOpRow> ops;
    for (const BenchTree& t : trees) {
      for (int b : op_batches) {
        TS_ASSIGN_OR_RETURN(ScanOpRow r, TimeScanOp(model, t, b, absl::GetFlag(FLAGS_op_rounds),
                                                    co.tolerance, be));
        ops.push_back(std::move(r));
      }
    }
    PrintOpTable(ops, be->device() == DeviceKind::kCpu);
  }
  std::printf("\nload average at the end: %s\n", LoadAverage().c_str());
  std::fflush(stdout);
  return absl::OkStatus();
}

absl::Status Run() {
  TS_ASSIGN_OR_RETURN(std::unique_ptr<Backend> be, CreateBackend(absl::GetFlag(FLAGS_device)));
  CompareOptions co;
  TS_ASSIGN_OR_RETURN(co.batches, ParsePositiveInts("batches", absl::GetFlag(FLAGS_batches)));
  co.rounds = absl::GetFlag(FLAGS_rounds);
  co.prompt = absl::GetFlag(FLAGS_prompt);
  co.accept = absl::GetFlag(FLAGS_accept);
  co.kv_block_size = absl::GetFlag(FLAGS_kv_block_size);
  co.max_bytes = static_cast<int64_t>(absl::GetFlag(FLAGS_max_gib) * 1073741824.0);
  co.tolerance = absl::GetFlag(FLAGS_tolerance);
  if (co.tolerance < 0) co.tolerance = be->device() == DeviceKind::kCpu ? 0.0 : 0.05;
  if (co.rounds < 0 || co.prompt < 1) {
    return absl::InvalidArgumentError("--rounds must be >= 0 and --prompt >= 1");
  }
  std::vector<BenchTree> trees;
  for (absl::string_view s : absl::StrSplit(absl::GetFlag(FLAGS_trees), ';', absl::SkipEmpty())) {
    TS_ASSIGN_OR_RETURN(BenchTree t, ParseBenchTree(std::string(s)));
    trees.push_back(std::move(t));
  }
  std::vector<BenchModel> models;
  for (absl::string_view s : absl::StrSplit(absl::GetFlag(FLAGS_models), ',', absl::SkipEmpty())) {
    TS_ASSIGN_OR_RETURN(BenchModel m, ParseBenchModel(std::string(s)));
    models.push_back(std::move(m));
  }
  std::printf("# stree_bench: tree scan vs unrolled verification (paper 001 §5.1)\n");
  for (const BenchModel& m : models) TS_RETURN_IF_ERROR(RunModel(m, trees, co, be.get()));
  return absl::OkStatus();
}

}  // namespace
}  // namespace treespec::bench

int main(int argc, char** argv) {
  treespec::ParseFlags(argc, argv);
  const absl::Status st = treespec::bench::Run();
  if (!st.ok()) {
    std::fprintf(stderr, "stree_bench: %s\n", st.ToString().c_str());
    return st.code() == absl::StatusCode::kInternal ? 3 : 1;
  }
  return 0;
}
