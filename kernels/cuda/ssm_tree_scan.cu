// The tree scan on the device: the paper's matrix form (STree, paper 001 §3),
// chunked along depth so that long root paths (prompt chains) stay linear.
//
// Why it is right: per head, with a_j = dt_j·A (row j's log decay) and the
// tree mask L of §3 Eq. 2, A_tree = L·a (Eq. 6) and
//   y_i = C_i·exp(A_tree_i)·x0 + Σ_j L_ij·(C_i·B_j)·exp(A_tree_i - A_tree_j)·dt_j·x_j + D·x_i,
// which is the Mamba-2 recurrence unrolled along row i's root path (x0 the
// committed state): y = Mx·x0 + Mu·u. The same sum without C_i is the state
// after row i. Both hold from any state on the path, not only x0: starting
// from the state x_a after an ancestor a, A_tree restarts at a. So we cut
// every root path at its anchors, the rows at depth chunk - 1 modulo chunk
// (ssm_tree_layout.h): a row's segment is its path after its nearest strict
// anchor ancestor, at most `chunk` rows, and its start state is that
// anchor's state (or x0). Anchor states come first, as in Mamba-2's chunked
// SSD: each anchor's segment alone (LocalState), then, in row order, one
// multiply-add per anchor, exp(s_a)·(its own anchor's state) + local_a
// (CombineStates); an anchor's anchor precedes it. Then every row's output
// is the matrix form over its segment from its start state (RowOutput), all
// rows at once. Trees shallower than `chunk` (verification) have no anchor:
// that is exactly §3's y = Mx·x0 + Mu·u with no per-node state. States
// written out (activation replay, a prompt's final state) are state rows
// too. exp(s_i - s_j) <= 1 (A < 0, dt >= 0): no overflow, and the sums
// within a segment stay short, so float rounding does not grow with depth.
//
// Cost per head (R rows, segments of length ≤ Q = chunk, M state rows):
// O(R·Q·(N + P) + R·P·N) for the outputs and O(M·Q·P·N) for the states;
// scratch (M·H·P·N + entries·(H + G)) floats. The result equals the CPU's
// sequential recurrence up to rounding (different summation order), not bit
// for bit: tests bound the difference.
//
// Every pass is one grid-stride kernel of one thread per output element
// (ssm_tree_math.h); passes are ordered by the stream.
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/for_each.cuh"
#include "kernels/cuda/ssm_tree_math.h"
#include "kernels/cuda/ssm_tree_scan.h"

namespace treespec::cuda {

cudaError_t LaunchSsmTreeScan(DType dtype, const void* xbc, const void* dt_raw, const float* A,
                              const float* dt_bias, const float* D, float dt_min, float dt_max,
                              int H, int P, int N, int G, const ssm::ScanIndex& ix,
                              const ssm::ScanScratch& scratch, float* states, void* y,
                              cudaStream_t stream) {
  if (H < 1 || P < 1 || N < 1 || G < 1 || H % G != 0) return cudaErrorInvalidValue;
  return DispatchFloat(dtype, [&](auto tag) {
    using T = decltype(tag);
    ssm::ScanArgs<T> a;
    a.xbc = static_cast<const T*>(xbc);
    a.dt_raw = static_cast<const T*>(dt_raw);
    a.A = A;
    a.dt_bias = dt_bias;
    a.D = D;
    a.dt_min = dt_min;
    a.dt_max = dt_max;
    a.H = H;
    a.P = P;
    a.N = N;
    a.G = G;
    a.states = states;
    a.y = static_cast<T*>(y);
    a.ix = ix;
    a.s = scratch;
    return ssm::RunScan(a, [&](int64_t n, const auto& op) { return ForEach(n, op, stream); });
  });
}

}  // namespace treespec::cuda
