// The tree scan, recurrent form (STree, paper 001 §3).
//
// Why it is right: a Mamba-2 head is the linear recurrence
// state_t = exp(dt_t·A)·state_{t-1} + dt_t·x_t·B_tᵀ, y_t = C_t·state_t + D·x_t,
// so a token's output depends on the tokens before it only through the state
// after them. In a token tree, the tokens before a node are exactly its root
// path (the tree mask L of §3 Eq. 2), so the node's state is its parent's
// state advanced by the node itself; starting every root from the sequence's
// committed state and visiting rows in packed order (parents first) gives
// each node the state of decoding its path. §3 unrolls the same recurrence
// along L into A_tree = L·A_log and y = Mx·x0 + Mu·u (ssm_tree_matrix.cc),
// which computes all rows at once without per-row states: the form a GPU
// kernel wants.
//
// Why the CPU runs the recurrence instead: the matrix form sums the path's
// terms in another order (exp(A_tree_i − A_tree_j) instead of a product of
// per-step decays), so it agrees with token-by-token decoding only up to
// rounding, and greedy speculative output must equal plain decoding exactly.
// Here every row's state comes from StepState below, the one function that
// a decode step, a prompt (a chain), a tree node and activation replay
// (paper 001 Alg. 1) all run, with the same operands in the same order; the
// result is then bit for bit the state of sequential decoding. Memory stays
// small: per head only the batch's planned scratch buffers (one for a
// chain, one per live branch of a tree) hold states, not one per row.
#include <cmath>
#include <cstring>
#include <vector>

#include "kernels/cpu/mamba_ops.h"
#include "kernels/cpu/ssm_tree_ops.h"
#include "kernels/cpu/thread_pool.h"

namespace treespec::cpu {
namespace {

// One row of one head: h [P, N] <- decay·h + (dt·x[p])·B[n].
inline void StepState(float decay, float dt, const float* x, const float* B, int P, int N,
                      float* h) {
  for (int p = 0; p < P; ++p) {
    const float dx = dt * x[p];
    float* hp = h + static_cast<int64_t>(p) * N;
    for (int n = 0; n < N; ++n) hp[n] = decay * hp[n] + dx * B[n];
  }
}

// y[p] = Σ_n C[n]·h[p, n] + D·x[p].
inline void StateOutput(const float* h, const float* C, const float* x, float D, int P, int N,
                        float* y) {
  for (int p = 0; p < P; ++p) {
    const float* hp = h + static_cast<int64_t>(p) * N;
    float acc = 0.0f;
    for (int n = 0; n < N; ++n) acc += C[n] * hp[n];
    y[p] = acc + D * x[p];
  }
}

}  // namespace

float SsmDt(float raw, float bias, float lo, float hi) {
  const float dt = Softplus(raw + bias);
  return dt < lo ? lo : (dt > hi ? hi : dt);
}

void SsmTreeScan(const float* xbc, const float* dt_raw, const float* A, const float* dt_bias,
                 const float* D, const SsmScanParams& params, SsmScanDims dims,
                 const SsmTreeBatch& batch, float* states, float* y, int threads) {
  const int H = dims.H, P = dims.P, N = dims.N, G = static_cast<int>(params.n_groups);
  const int R = batch.num_rows();
  const int64_t W = static_cast<int64_t>(H) * P + 2 * static_cast<int64_t>(G) * N;
  const int64_t PN = static_cast<int64_t>(P) * N, HPN = H * PN;
  const int heads_per_group = H / G;
  std::vector<int32_t> out_slot(R, -1);
  for (size_t i = 0; i < batch.out_rows.size(); ++i) out_slot[batch.out_rows[i]] = batch.out_slots[i];
  const int64_t work = static_cast<int64_t>(R) * HPN;
  const int parts = work >= (1 << 16) ? threads : 1;
  ParallelChunks(parts, H, [&](int h) {
    std::vector<float> scratch(static_cast<size_t>(batch.num_buffers) * PN);
    const int g = h / heads_per_group;
    for (int r = 0; r < R; ++r) {
      float* buf = scratch.data() + batch.buffer[r] * PN;
      const int32_t p = batch.parent[r];
      if (p < 0) {
        std::memcpy(buf, states + batch.slot[r] * HPN + h * PN, sizeof(float) * PN);
      } else if (batch.buffer[p] != batch.buffer[r]) {
        std::memcpy(buf, scratch.data() + batch.buffer[p] * PN, sizeof(float) * PN);
      }
      const float* row = xbc + r * W;
      const float* x = row + static_cast<int64_t>(h) * P;
      const float* B = row + static_cast<int64_t>(H) * P + static_cast<int64_t>(g) * N;
      const float* C = B + static_cast<int64_t>(G) * N;
      const float dt = SsmDt(dt_raw[static_cast<int64_t>(r) * H + h], dt_bias[h], params.dt_min,
                             params.dt_max);
      StepState(std::exp(dt * A[h]), dt, x, B, P, N, buf);
      if (y != nullptr) {
        StateOutput(buf, C, x, D[h], P, N, y + static_cast<int64_t>(r) * H * P + h * P);
      }
      if (out_slot[r] >= 0) {
        std::memcpy(states + out_slot[r] * HPN + h * PN, buf, sizeof(float) * PN);
      }
    }
  });
}

}  // namespace treespec::cpu
