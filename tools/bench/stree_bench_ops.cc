#include "tools/bench/stree_bench_ops.h"

#include <time.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <random>

#include "absl/strings/str_format.h"
#include "core/tensor/ssm_tree_batch.h"
#include "core/util/status_macros.h"
#include "kernels/cpu/ssm_tree_ops.h"

namespace treespec::bench {
namespace {

// Milliseconds on the clock the table uses: the process's CPU time on the
// CPU backend (sub-millisecond ops on a shared machine are otherwise timed
// mostly by the scheduler), wall time elsewhere (the host waits on a device).
double NowMs(bool cpu_time) {
  if (cpu_time) {
    timespec ts{};
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
  }
  return std::chrono::duration<double, std::milli>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// One layer's scan inputs for `batch` trees (rows in packed order) and the
// same rows unrolled into chains (sequence b, branch j, depth d), on the device.
struct ScanProblem {
  int64_t H = 0, P = 0, N = 0, W = 0;
  SsmScanParams params;
  SsmTreeBatch tree_batch, chain_batch;
  std::vector<int32_t> copy_src, copy_dst;  // committed state -> each branch's slot
  std::vector<int32_t> chain_row;           // chain row -> tree row
  Tensor xbc, dt, xbc_u, dt_u, A, dt_bias, D, states, y, y_u;
};

absl::StatusOr<Tensor> Upload(Backend* be, const std::vector<float>& v, Shape shape, DType dtype) {
  TS_ASSIGN_OR_RETURN(Tensor t, be->Alloc(dtype, std::move(shape)));
  TS_RETURN_IF_ERROR(be->Upload(v.data(), DType::kF32, &t));
  return t;
}

std::vector<float> Gather(const std::vector<float>& v, int64_t width,
                          const std::vector<int32_t>& rows) {
  std::vector<float> out;
  for (int32_t r : rows) out.insert(out.end(), v.begin() + r * width, v.begin() + (r + 1) * width);
  return out;
}

absl::Status Build(const HybridConfig& c, const BenchTree& tree, int batch, Backend* be,
                   ScanProblem* p) {
  p->H = c.ssm_heads;
  p->P = c.ssm_head_dim;
  p->N = c.ssm_state;
  p->W = p->H * p->P + 2 * c.ssm_groups * p->N;
  p->params.n_groups = c.ssm_groups;
  const int64_t nodes = tree.num_nodes(), k = tree.num_branches(), R = batch * nodes;
  const int64_t S = batch + batch * k, HPN = p->H * p->P * p->N;
  for (int b = 0; b < batch; ++b) {
    p->tree_batch.AddSequence(b, static_cast<int32_t>(nodes), tree.parents);
    for (int64_t j = 0; j < k; ++j) {
      const int32_t slot = static_cast<int32_t>(batch + b * k + j);
      p->chain_batch.AddSequence(slot, static_cast<int32_t>(tree.branches[j].size()), {});
      p->copy_src.push_back(b);
      p->copy_dst.push_back(slot);
      for (int32_t v : tree.branches[j]) {
        p->chain_row.push_back(static_cast<int32_t>(b * nodes + v));
      }
    }
  }
  TS_RETURN_IF_ERROR(p->tree_batch.Plan(S));
  TS_RETURN_IF_ERROR(p->chain_batch.Plan(S));
  std::mt19937 rng(11);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<float> xbc(R * p->W), dt(R * p->H), st(S * HPN, 0.0f), A(p->H), bias(p->H, -4.0f),
      D(p->H, 1.0f);
  for (float& x : xbc) x = u(rng);
  for (float& x : dt) x = u(rng);
  for (int64_t i = 0; i < batch * HPN; ++i) st[i] = 0.1f * u(rng);
  for (int64_t h = 0; h < p->H; ++h) A[h] = -static_cast<float>(h + 1);
  const DType act = be->activation_dtype();
  const int64_t U = static_cast<int64_t>(p->chain_row.size());
  TS_ASSIGN_OR_RETURN(p->xbc, Upload(be, xbc, {R, p->W}, act));
  TS_ASSIGN_OR_RETURN(p->dt, Upload(be, dt, {R, p->H}, act));
  TS_ASSIGN_OR_RETURN(p->xbc_u, Upload(be, Gather(xbc, p->W, p->chain_row), {U, p->W}, act));
  TS_ASSIGN_OR_RETURN(p->dt_u, Upload(be, Gather(dt, p->H, p->chain_row), {U, p->H}, act));
  TS_ASSIGN_OR_RETURN(p->A, Upload(be, A, {p->H}, DType::kF32));
  TS_ASSIGN_OR_RETURN(p->dt_bias, Upload(be, bias, {p->H}, DType::kF32));
  TS_ASSIGN_OR_RETURN(p->D, Upload(be, D, {p->H}, DType::kF32));
  TS_ASSIGN_OR_RETURN(p->states, Upload(be, st, {S, p->H, p->P, p->N}, DType::kF32));
  TS_ASSIGN_OR_RETURN(p->y, be->Alloc(act, {R, p->H * p->P}));
  TS_ASSIGN_OR_RETURN(p->y_u, be->Alloc(act, {U, p->H * p->P}));
  return absl::OkStatus();
}

absl::StatusOr<double> TimeTree(ScanProblem* p, Backend* be) {
  const bool cpu = be->device() == DeviceKind::kCpu;
  const double t0 = NowMs(cpu);
  TS_RETURN_IF_ERROR(be->SsmTreeScan(p->xbc, p->dt, p->A, p->dt_bias, p->D, p->params,
                                     p->tree_batch, &p->states, &p->y));
  TS_RETURN_IF_ERROR(be->Synchronize());
  return NowMs(cpu) - t0;
}

absl::StatusOr<double> TimeUnrolled(ScanProblem* p, Backend* be) {
  const bool cpu = be->device() == DeviceKind::kCpu;
  const double t0 = NowMs(cpu);
  TS_RETURN_IF_ERROR(be->CopyRows(&p->states, p->copy_src, p->copy_dst));
  TS_RETURN_IF_ERROR(be->SsmTreeScan(p->xbc_u, p->dt_u, p->A, p->dt_bias, p->D, p->params,
                                     p->chain_batch, &p->states, &p->y_u));
  TS_RETURN_IF_ERROR(be->Synchronize());
  return NowMs(cpu) - t0;
}

// The matrix form on host tensors (CPU backend only). out: y [R, H·P].
double TimeMatrix(ScanProblem* p, std::vector<float>* y) {
  y->assign(p->y.numel(), 0.0f);
  const cpu::SsmScanDims dims{static_cast<int>(p->H), static_cast<int>(p->P),
                              static_cast<int>(p->N)};
  const double t0 = NowMs(true);
  cpu::SsmTreeScanMatrix(p->xbc.data<float>(), p->dt.data<float>(), p->A.data<float>(),
                         p->dt_bias.data<float>(), p->D.data<float>(), p->params, dims,
                         p->tree_batch, p->states.data<float>(), y->data());
  return NowMs(true) - t0;
}

// Tree rows against their chain rows (within `tolerance`, as the model
// check); the matrix form's largest difference, relative to the largest |y|.
absl::Status CheckOutputs(ScanProblem* p, Backend* be, double tolerance,
                          const std::vector<float>& y_matrix, ScanOpRow* row) {
  std::vector<float> y(p->y.numel()), y_u(p->y_u.numel());
  TS_RETURN_IF_ERROR(be->DownloadF32(p->y, y.data()));
  TS_RETURN_IF_ERROR(be->DownloadF32(p->y_u, y_u.data()));
  const int64_t width = p->H * p->P;
  for (size_t c = 0; c < p->chain_row.size(); ++c) {
    for (int64_t i = 0; i < width; ++i) {
      const float a = y[p->chain_row[c] * width + i], b = y_u[c * width + i];
      if (!(std::fabs(a - b) <= tolerance * (1.0 + std::fabs(b)))) {
        return absl::InternalError(absl::StrFormat(
            "scan op: tree row %d and its unrolled row %d differ at %d: %.9g vs %.9g",
            p->chain_row[c], c, i, a, b));
      }
    }
  }
  if (y_matrix.empty()) return absl::OkStatus();
  double max_diff = 0, max_y = 0;
  for (size_t i = 0; i < y.size(); ++i) {
    max_diff = std::max(max_diff, static_cast<double>(std::fabs(y_matrix[i] - y[i])));
    max_y = std::max(max_y, static_cast<double>(std::fabs(y[i])));
  }
  row->matrix_max_diff = max_diff / std::max(max_y, 1e-30);
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<ScanOpRow> TimeScanOp(const BenchModel& model, const BenchTree& tree, int batch,
                                     int rounds, double tolerance, Backend* backend) {
  ScanProblem p;
  TS_RETURN_IF_ERROR(Build(model.config, tree, batch, backend, &p));
  ScanOpRow row;
  row.model = model.name;
  row.tree = tree.name;
  row.batch = batch;
  row.rows_tree = p.tree_batch.num_rows();
  row.rows_unrolled = p.chain_batch.num_rows();
  const bool matrix = backend->device() == DeviceKind::kCpu;
  std::vector<float> y_matrix;
  for (int r = 0; r <= rounds; ++r) {  // round 0 warms up
    double t = 0, u = 0, m = -1;
    if (r % 2 == 0) {
      TS_ASSIGN_OR_RETURN(t, TimeTree(&p, backend));
      TS_ASSIGN_OR_RETURN(u, TimeUnrolled(&p, backend));
    } else {
      TS_ASSIGN_OR_RETURN(u, TimeUnrolled(&p, backend));
      TS_ASSIGN_OR_RETURN(t, TimeTree(&p, backend));
    }
    if (matrix) m = TimeMatrix(&p, &y_matrix);
    if (r == 0) continue;
    row.tree_ms.push_back(t);
    row.unrolled_ms.push_back(u);
    if (matrix) row.matrix_ms.push_back(m);
  }
  TS_RETURN_IF_ERROR(CheckOutputs(&p, backend, tolerance, y_matrix, &row));
  return row;
}

}  // namespace treespec::bench
