#include "tools/bench/stree_bench_print.h"

#include <algorithm>
#include <cstdio>
#include <string>

#include "absl/strings/str_format.h"

namespace treespec::bench {
namespace {

constexpr double kMiB = 1048576.0;

// "median[unit] [min-max]" of `v`.
std::string Spread(const std::vector<double>& v, const char* fmt = "%.2f",
                   const char* unit = "") {
  if (v.empty()) return "-";
  const auto [lo, hi] = std::minmax_element(v.begin(), v.end());
  char med[32], a[32], b[32];
  std::snprintf(med, sizeof(med), fmt, Median(v));
  std::snprintf(a, sizeof(a), fmt, *lo);
  std::snprintf(b, sizeof(b), fmt, *hi);
  return absl::StrFormat("%s%s [%s-%s]", med, unit, a, b);
}

std::vector<double> Field(const MethodResult& r, double (*get)(const VerifySample&)) {
  std::vector<double> v;
  for (const VerifySample& s : r.samples) v.push_back(get(s));
  return v;
}

double Total(const VerifySample& s) { return s.total_ms(); }
double Fork(const VerifySample& s) { return s.fork_ms; }
double Fwd(const VerifySample& s) { return s.forward_ms; }
double Commit(const VerifySample& s) { return s.commit_ms; }
double Cpu(const VerifySample& s) { return s.cpu_ms; }

std::string Phases(const MethodResult& r, bool with_fork) {
  if (!r.ran()) return "-";
  std::string s = with_fork ? absl::StrFormat("%.2f / ", Median(Field(r, Fork))) : "";
  return s + absl::StrFormat("%.2f / %.2f", Median(Field(r, Fwd)), Median(Field(r, Commit)));
}

std::string TimeCell(const MethodResult& r) {
  return r.ran() ? Spread(Field(r, Total)) : "skipped: " + r.skipped;
}

std::string CpuCell(const MethodResult& r) { return r.ran() ? Spread(Field(r, Cpu)) : "-"; }

std::string States(const MethodResult& r, int batch) {
  if (!r.ran()) return "-";
  return absl::StrFormat("%d slots + %d buf", r.mem.slots / batch, r.mem.scan_buffers);
}

std::string Extra(const MethodResult& r) {
  if (!r.ran()) return "skipped: " + r.skipped;
  const VerifyMemory& m = r.mem;
  return absl::StrFormat("%.2f (%.2f / %.2f / %.2f / %.2f / %.2f)", m.extra() / kMiB,
                         m.state_bytes / kMiB, m.kv_bytes / kMiB, m.cache_bytes / kMiB,
                         m.act_bytes / kMiB, m.logits_bytes / kMiB);
}

int64_t Resident(const MethodResult& r) {
  return r.weight_bytes + r.mem.rest_bytes + r.mem.extra();
}

}  // namespace

void PrintTimeTable(const std::vector<CompareRow>& rows, bool cpu_time) {
  std::printf(
      "\nTime per verify, ms: median [min-max] over the timed rounds; phases are medians. "
      "speed = unrolled / tree per round, median [min-max] (paper 001 §5.1: 1.05x-1.49x)%s.\n\n"
      "| tree | nodes | B | tokens tree / unrolled | tree ms | unrolled ms "
      "| tree fwd / commit | unrolled fork / fwd / commit | speed |%s\n"
      "|---|---:|---:|---:|---:|---:|---:|---:|---:|%s\n",
      cpu_time ? "; then the same in process CPU time (all threads)" : "",
      cpu_time ? " tree CPU ms | unrolled CPU ms | speed (CPU) |" : "",
      cpu_time ? "---:|---:|---:|" : "");
  for (const CompareRow& r : rows) {
    std::printf("| %s | %lld | %d | %lld / %lld | %s | %s | %s | %s | %s |", r.tree.c_str(),
                static_cast<long long>(r.nodes), r.batch,
                static_cast<long long>(r.nodes * r.batch),
                static_cast<long long>(r.unrolled_tokens * r.batch), TimeCell(r.tree_scan).c_str(),
                TimeCell(r.unrolled).c_str(), Phases(r.tree_scan, false).c_str(),
                Phases(r.unrolled, true).c_str(),
                r.speedups.empty() ? "-" : Spread(r.speedups, "%.2f", "x").c_str());
    if (cpu_time) {
      std::printf(" %s | %s | %s |", CpuCell(r.tree_scan).c_str(), CpuCell(r.unrolled).c_str(),
                  r.cpu_speedups.empty() ? "-" : Spread(r.cpu_speedups, "%.2f", "x").c_str());
    }
    std::printf("\n");
  }
}

void PrintMemoryTable(const std::vector<CompareRow>& rows) {
  std::printf(
      "\nMemory per verify beyond the B sequences at rest, MiB: total (state slots / KV blocks / "
      "activation-cache rows / allocator peak / logits). States per sequence: model state slots "
      "+ the scan's live-branch buffers (one head each). memory = tree / unrolled of the extra, "
      "and of everything resident (weights + sequences + extra; paper 001 §5.1: 0.91x-0.57x). "
      "Largest |tree - unrolled| in the check.\n\n"
      "| tree | B | states tree | states unrolled | extra tree | extra unrolled | memory (extra) "
      "| resident tree / unrolled | memory (resident) | max diff |\n"
      "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
  for (const CompareRow& r : rows) {
    const bool both = r.tree_scan.ran() && r.unrolled.ran();
    std::string ratio = "-", resident = "-", resident_ratio = "-";
    if (both) {
      ratio = absl::StrFormat("%.2fx", static_cast<double>(r.tree_scan.mem.extra()) /
                                           static_cast<double>(r.unrolled.mem.extra()));
      resident = absl::StrFormat("%.1f / %.1f", Resident(r.tree_scan) / kMiB,
                                 Resident(r.unrolled) / kMiB);
      resident_ratio = absl::StrFormat("%.2fx", static_cast<double>(Resident(r.tree_scan)) /
                                                    static_cast<double>(Resident(r.unrolled)));
    }
    std::printf("| %s | %d | %s | %s | %s | %s | %s | %s | %s | %s |\n", r.tree.c_str(), r.batch,
                States(r.tree_scan, r.batch).c_str(), States(r.unrolled, r.batch).c_str(),
                Extra(r.tree_scan).c_str(), Extra(r.unrolled).c_str(), ratio.c_str(),
                resident.c_str(), resident_ratio.c_str(),
                both ? absl::StrFormat("%.3g", r.max_diff).c_str() : "-");
  }
}

void PrintOpTable(const std::vector<ScanOpRow>& rows, bool matrix) {
  std::printf(
      "\nOne layer's scan op alone, ms (%s): median [min-max]. unrolled = state copies + scan "
      "over the branches as chains. %s\n\n"
      "| tree | B | rows tree / unrolled | tree (recurrent) | unrolled | tree (matrix form) "
      "| unrolled / tree | matrix / recurrent | matrix max rel diff |\n"
      "|---|---:|---:|---:|---:|---:|---:|---:|---:|\n",
      matrix ? "process CPU time" : "wall time",
      matrix ? "The matrix form (paper 001 §3) is the single-threaded plain-loop reference."
             : "The device's SsmTreeScan is its own form (no separate matrix column).");
  for (const ScanOpRow& r : rows) {
    const double t = Median(r.tree_ms), u = Median(r.unrolled_ms), m = Median(r.matrix_ms);
    std::printf("| %s | %d | %lld / %lld | %s | %s | %s | %.2fx | %s | %s |\n", r.tree.c_str(),
                r.batch, static_cast<long long>(r.rows_tree),
                static_cast<long long>(r.rows_unrolled), Spread(r.tree_ms, "%.3f").c_str(),
                Spread(r.unrolled_ms, "%.3f").c_str(),
                matrix ? Spread(r.matrix_ms, "%.3f").c_str() : "-", u / t,
                matrix ? absl::StrFormat("%.2fx", m / t).c_str() : "-",
                r.matrix_max_diff >= 0 ? absl::StrFormat("%.2g", r.matrix_max_diff).c_str() : "-");
  }
}

}  // namespace treespec::bench
