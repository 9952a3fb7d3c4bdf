// The tree scan in the paper's matrix form (STree, paper 001 §3), written as
// the plain-loop reference of a parallel kernel.
//
// Per head, with a_j = dt_j·A (the log of row j's decay, diag(log A_j) of
// §3) and the tree mask L (L_ij = 1 when row j is on row i's root path,
// Eq. 2):
//   A_tree = L·a                                     (Eq. 6)
//   (Mx)_i  = C_i · diag(exp(A_tree_i))              acts on x0, the committed state
//   (Mu)_ij = L_ij · (C_i·B_j) · exp(A_tree_i − A_tree_j) · dt_j   acts on u_j = x_j
//   y = Mx·x0 + Mu·u + D·x.
// Rows of different sequences never share a root path, so L is block
// diagonal and one mask covers a whole batch. Nothing here depends on other
// rows' states, only on L: every row's output is independent of the others,
// which is what lets a GPU compute them in parallel. The state after an
// output row (activation replay) is the same sum without C:
//   state_i = exp(A_tree_i)·x0 + Σ_j L_ij·exp(A_tree_i − A_tree_j)·dt_j·x_j·B_jᵀ.
// The exponent differences keep every factor <= 1 (A < 0), the segment-sum
// trick of Mamba-2's chunked scan.
#include <cmath>
#include <vector>

#include "kernels/cpu/ssm_tree_ops.h"

namespace treespec::cpu {

void SsmTreeScanMatrix(const float* xbc, const float* dt_raw, const float* A,
                       const float* dt_bias, const float* D, const SsmScanParams& params,
                       SsmScanDims dims, const SsmTreeBatch& batch, float* states, float* y) {
  const int H = dims.H, P = dims.P, N = dims.N, G = static_cast<int>(params.n_groups);
  const int R = batch.num_rows();
  const int64_t W = static_cast<int64_t>(H) * P + 2 * static_cast<int64_t>(G) * N;
  const int64_t PN = static_cast<int64_t>(P) * N, HPN = H * PN;
  // L: row i's root path, as a dense mask (rows in packed order, L_ij = 0 for j > i).
  std::vector<uint8_t> L(static_cast<size_t>(R) * R, 0);
  for (int i = 0; i < R; ++i) {
    for (int j = i; j >= 0; j = batch.parent[j]) L[static_cast<size_t>(i) * R + j] = 1;
  }
  std::vector<int32_t> out_slot(R, -1);
  for (size_t k = 0; k < batch.out_rows.size(); ++k) out_slot[batch.out_rows[k]] = batch.out_slots[k];
  std::vector<float> dt(R), a(R), a_tree(R), mu(static_cast<size_t>(R) * R);
  for (int h = 0; h < H; ++h) {
    const int g = h / (H / G);
    auto x_of = [&](int r) { return xbc + r * W + static_cast<int64_t>(h) * P; };
    auto b_of = [&](int r) { return xbc + r * W + static_cast<int64_t>(H) * P + g * N; };
    auto c_of = [&](int r) { return b_of(r) + static_cast<int64_t>(G) * N; };
    for (int j = 0; j < R; ++j) {
      dt[j] = SsmDt(dt_raw[static_cast<int64_t>(j) * H + h], dt_bias[h], params.dt_min,
                    params.dt_max);
      a[j] = dt[j] * A[h];
    }
    for (int i = 0; i < R; ++i) {  // A_tree = L·a
      float s = 0.0f;
      for (int j = 0; j <= i; ++j) s += L[static_cast<size_t>(i) * R + j] ? a[j] : 0.0f;
      a_tree[i] = s;
    }
    for (int i = 0; i < R; ++i) {  // Mu
      for (int j = 0; j < R; ++j) {
        float m = 0.0f;
        if (L[static_cast<size_t>(i) * R + j]) {
          float cb = 0.0f;
          for (int n = 0; n < N; ++n) cb += c_of(i)[n] * b_of(j)[n];
          m = cb * std::exp(a_tree[i] - a_tree[j]) * dt[j];
        }
        mu[static_cast<size_t>(i) * R + j] = m;
      }
    }
    for (int i = 0; i < R; ++i) {
      const float* x0 = states + batch.slot[i] * HPN + h * PN;
      const float decay = std::exp(a_tree[i]);
      if (y != nullptr) {
        for (int p = 0; p < P; ++p) {
          float acc = 0.0f;  // Mx·x0
          for (int n = 0; n < N; ++n) acc += c_of(i)[n] * decay * x0[p * N + n];
          for (int j = 0; j <= i; ++j) acc += mu[static_cast<size_t>(i) * R + j] * x_of(j)[p];
          y[static_cast<int64_t>(i) * H * P + h * P + p] = acc + D[h] * x_of(i)[p];
        }
      }
      if (out_slot[i] < 0) continue;
      float* dst = states + out_slot[i] * HPN + h * PN;
      for (int p = 0; p < P; ++p) {
        for (int n = 0; n < N; ++n) {
          float s = decay * x0[p * N + n];
          for (int j = 0; j <= i; ++j) {
            if (!L[static_cast<size_t>(i) * R + j]) continue;
            s += std::exp(a_tree[i] - a_tree[j]) * dt[j] * x_of(j)[p] * b_of(j)[n];
          }
          dst[p * N + n] = s;
        }
      }
    }
  }
}

}  // namespace treespec::cpu
