// Plain-loop float32 kernels for Mamba-2 layers over packed token trees
// (STree, paper 001 §3): the causal conv along root paths, the selective
// scan in two forms, and the gated RMSNorm. Rows, parents and state slots
// come from an SsmTreeBatch (core/tensor/ssm_tree_batch.h), planned.
//
// Layouts as in Hugging Face's Mamba2Mixer: conv state [Cd, K] holds the
// last K conv inputs, oldest first; SSM state [H, P, N] (heads, head dim,
// state size); conv output rows are x [H·P] | B [G·N] | C [G·N].
// Functions of their arguments that write only their outputs: calls on
// disjoint outputs may run concurrently.
#pragma once

#include <cstdint>

#include "core/tensor/backend.h"
#include "core/tensor/ssm_tree_batch.h"

namespace treespec::cpu {

// in: x [R, Cd], w [Cd, K], b [Cd]; inout: states [S, Cd, K] (batch's
// out_slots get their rows' windows); out: out [R, Cd] = silu(b + Σ_k w·window).
void SsmTreeConv(const float* x, int Cd, const float* w, const float* b, int K,
                 const SsmTreeBatch& batch, float* states, float* out);

// The dimensions of one scan: heads, head dim, state size.
struct SsmScanDims {
  int H = 0, P = 0, N = 0;
};

// The recurrent form: every row's state is computed with the arithmetic of
// a one-token decode step from its parent's state, so a tree node's output
// equals decoding its root path bit for bit (ssm_tree_scan.cc says why).
// in: xbc [R, H·P + 2·G·N], dt_raw [R, H], A, dt_bias, D [H]; inout: states
// [S, H, P, N] (batch's out_slots); out: y [R, H·P] (may be null). Heads are
// spread over up to `threads` threads; results do not depend on how many.
void SsmTreeScan(const float* xbc, const float* dt_raw, const float* A, const float* dt_bias,
                 const float* D, const SsmScanParams& params, SsmScanDims dims,
                 const SsmTreeBatch& batch, float* states, float* y, int threads = 1);

// The paper's matrix form (§3, Eq. 6 and after): the tree mask L, the
// accumulated transition A_tree = L·A_log, and y = Mx·x0 + Mu·u, with no
// per-row state. Same contract as SsmTreeScan, equal to it up to rounding:
// the reference for parallel (GPU) kernels.
void SsmTreeScanMatrix(const float* xbc, const float* dt_raw, const float* A,
                       const float* dt_bias, const float* D, const SsmScanParams& params,
                       SsmScanDims dims, const SsmTreeBatch& batch, float* states, float* y);

// dt of one row and head: clamp(softplus(raw + bias), lo, hi).
float SsmDt(float raw, float bias, float lo, float hi);

// in: y, z [R, W]; out: g [R, W] = y·silu(z) (may alias y), ss [R, W / group].
void GateSumSquares(const float* y, const float* z, int R, int W, int group, float* g, float* ss);
// in: g [R, W], ss [R, W / group], w [W]; out: out [R, W] = w·g / sqrt(ss / count + eps).
void GroupRmsScale(const float* g, const float* ss, const float* w, int R, int W, int group,
                   int count, float eps, float* out);

}  // namespace treespec::cpu
