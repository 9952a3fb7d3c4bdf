// The per-element math of the CUDA Mamba-2 tree ops (SsmTreeConv and the
// chunked matrix-form SsmTreeScan of ssm_tree_scan.cu), and the order in
// which the scan's passes run, written once for two runners: the .cu files
// launch every pass as a grid-stride kernel over its elements, and a plain
// loop can run the same code on the host. Every pass writes only element e
// of its output and reads only what earlier passes finished, so its
// elements may run in any order and concurrently.
//
// Included by ssm_tree_conv.cu / ssm_tree_scan.cu (after common.cuh, which
// gives ToF / FromF) and by host code that declares treespec::cuda::ToF and
// FromF<T> for its element types before including it.
#pragma once

#include <math.h>

#include <cstdint>

#include "kernels/cuda/ssm_tree_index.h"

// TS_SSM_FN: element math (device; the host where no CUDA compiler runs).
// TS_SSM_HD: index helpers the host-side RunScan also calls.
#ifdef __CUDACC__
#include "kernels/cuda/common.cuh"
#define TS_SSM_FN __device__ __forceinline__
#define TS_SSM_HD __host__ __device__ __forceinline__
#else
#define TS_SSM_FN inline
#define TS_SSM_HD inline
#endif

namespace treespec::cuda::ssm {

// ---- SsmTreeConv -------------------------------------------------------------

template <typename T>
struct ConvArgs {
  const T* x = nullptr;  // [R, Cd]
  const T* w = nullptr;  // [Cd, K]
  const T* b = nullptr;  // [Cd]
  T* states = nullptr;   // [S, Cd, K]
  T* out = nullptr;      // [R, Cd]
  int64_t Cd = 0;
  ConvIndex ix;
};

// Window entry k of row r, channel c (a storage-type value, copied exactly).
template <typename T>
TS_SSM_FN T ConvInput(const ConvArgs<T>& a, int64_t r, int64_t c, int k) {
  const int32_t s = a.ix.src[r * a.ix.K + k];
  if (s >= 0) return a.x[s * a.Cd + c];
  return a.states[(static_cast<int64_t>(a.ix.slot[r]) * a.Cd + c) * a.ix.K + (-1 - s)];
}

// e = r·Cd + c: out[r, c] = silu(Σ_k window[k]·w[c, k] + b[c]), summed as
// kernels/cpu/ssm_tree_conv.cc does (oldest first, bias last).
template <typename T>
TS_SSM_FN void ConvOutput(const ConvArgs<T>& a, int64_t e) {
  const int64_t r = e / a.Cd, c = e % a.Cd;
  float acc = 0.0f;
  for (int k = 0; k < a.ix.K; ++k) acc += ToF(ConvInput(a, r, c, k)) * ToF(a.w[c * a.ix.K + k]);
  acc += ToF(a.b[c]);
  a.out[e] = FromF<T>(acc / (1.0f + expf(-acc)));
}

// e = o·Cd + c: output o's slot gets the window of its row, channel c.
template <typename T>
TS_SSM_FN void ConvWindow(const ConvArgs<T>& a, int64_t e) {
  const int64_t o = e / a.Cd, c = e % a.Cd;
  const int64_t r = a.ix.out_row[o];
  T* dst = a.states + (static_cast<int64_t>(a.ix.out_slot[o]) * a.Cd + c) * a.ix.K;
  for (int k = 0; k < a.ix.K; ++k) dst[k] = ConvInput(a, r, c, k);
}

template <typename T>
struct ConvOutputOp {
  ConvArgs<T> a;
  TS_SSM_FN void operator()(int64_t e) const { ConvOutput(a, e); }
};
template <typename T>
struct ConvWindowOp {
  ConvArgs<T> a;
  TS_SSM_FN void operator()(int64_t e) const { ConvWindow(a, e); }
};

// Rows first, then the windows written out (which no row reads).
template <typename T, typename Run>
auto RunConv(const ConvArgs<T>& a, Run&& run) -> decltype(run(int64_t{0}, ConvOutputOp<T>{a})) {
  using Err = decltype(run(int64_t{0}, ConvOutputOp<T>{a}));
  Err err = run(static_cast<int64_t>(a.ix.num_rows) * a.Cd, ConvOutputOp<T>{a});
  if (err != Err{}) return err;
  return run(static_cast<int64_t>(a.ix.num_out) * a.Cd, ConvWindowOp<T>{a});
}

// ---- SsmTreeScan ---------------------------------------------------------------

template <typename T>
struct ScanArgs {
  const T* xbc = nullptr;     // [R, W], W = H·P + 2·G·N: x | B | C
  const T* dt_raw = nullptr;  // [R, H]
  const float* A = nullptr;   // [H]
  const float* dt_bias = nullptr;
  const float* D = nullptr;
  float dt_min = 0.0f, dt_max = 0.0f;
  int H = 0, P = 0, N = 0, G = 1;
  float* states = nullptr;  // [S, H, P, N]
  T* y = nullptr;           // [R, H·P] or null
  ScanIndex ix;
  ScanScratch s;

  TS_SSM_HD int64_t W() const { return static_cast<int64_t>(H) * P + 2 * static_cast<int64_t>(G) * N; }
  TS_SSM_HD int64_t PN() const { return static_cast<int64_t>(P) * N; }
  TS_SSM_HD int64_t HPN() const { return H * PN(); }
  TS_SSM_HD int Group(int h) const { return h / (H / G); }
  TS_SSM_HD const T* X(int64_t r, int h) const { return xbc + r * W() + static_cast<int64_t>(h) * P; }
  TS_SSM_HD const T* B(int64_t r, int g) const {
    return xbc + r * W() + static_cast<int64_t>(H) * P + static_cast<int64_t>(g) * N;
  }
  TS_SSM_HD const T* C(int64_t r, int g) const { return B(r, g) + static_cast<int64_t>(G) * N; }
};

// As cpu::SsmDt: clamp(softplus(raw + bias), lo, hi), softplus as torch's.
TS_SSM_FN float SsmDt(float raw, float bias, float lo, float hi) {
  const float x = raw + bias;
  const float dt = x > 20.0f ? x : log1pf(expf(x));
  return dt < lo ? lo : (dt > hi ? hi : dt);
}

// e = r: the rows of r's segment, root first (its seg_len nearest path rows).
template <typename T>
TS_SSM_FN void WalkSegment(const ScanArgs<T>& a, int64_t e) {
  const int32_t off = a.ix.seg_off[e];
  int32_t j = static_cast<int32_t>(e);
  for (int32_t t = a.ix.seg_len[e] - 1; t >= 0 && j >= 0; --t) {
    a.s.seg[off + t] = j;
    a.s.owner[off + t] = static_cast<int32_t>(e);
    j = a.ix.parent[j];
  }
}

// e = r·H + h.
template <typename T>
TS_SSM_FN void RowDt(const ScanArgs<T>& a, int64_t e) {
  a.s.dt[e] = SsmDt(ToF(a.dt_raw[e]), a.dt_bias[e % a.H], a.dt_min, a.dt_max);
}

// e = r·H + h: s_r = Σ_{j in segment} dt_j·A[h], root first (A_tree = L·a of
// §3, restarted at the anchor).
template <typename T>
TS_SSM_FN void RowLogDecay(const ScanArgs<T>& a, int64_t e) {
  const int64_t r = e / a.H;
  const int h = static_cast<int>(e % a.H);
  const int32_t off = a.ix.seg_off[r], len = a.ix.seg_len[r];
  float s = 0.0f;
  for (int32_t t = 0; t < len; ++t) s += a.s.dt[static_cast<int64_t>(a.s.seg[off + t]) * a.H + h] * a.A[h];
  a.s.logd[e] = s;
}

// e = k·H + h: the decay-weighted dt of each entry of state row k's segment.
template <typename T>
TS_SSM_FN void StateCoefs(const ScanArgs<T>& a, int64_t e) {
  const int64_t k = e / a.H;
  const int h = static_cast<int>(e % a.H);
  const int64_t r = a.ix.state_row[k];
  const int32_t off = a.ix.seg_off[r], len = a.ix.seg_len[r];
  const int64_t so = a.ix.state_off[k];
  const float sr = a.s.logd[r * a.H + h];
  for (int32_t t = 0; t < len; ++t) {
    const int64_t jh = static_cast<int64_t>(a.s.seg[off + t]) * a.H + h;
    a.s.coef[(so + t) * a.H + h] = expf(sr - a.s.logd[jh]) * a.s.dt[jh];
  }
}

// e = ((k·H + h)·P + p)·N + n: state row k's segment alone (from a zero
// state): Σ_j exp(s_k - s_j)·dt_j·x_j[p]·B_j[n].
template <typename T>
TS_SSM_FN void LocalState(const ScanArgs<T>& a, int64_t e) {
  const int n = static_cast<int>(e % a.N);
  const int p = static_cast<int>((e / a.N) % a.P);
  const int h = static_cast<int>((e / a.PN()) % a.H);
  const int64_t k = e / a.HPN();
  const int g = a.Group(h);
  const int64_t r = a.ix.state_row[k];
  const int32_t off = a.ix.seg_off[r], len = a.ix.seg_len[r];
  const int64_t so = a.ix.state_off[k];
  float acc = 0.0f;
  for (int32_t t = 0; t < len; ++t) {
    const int64_t j = a.s.seg[off + t];
    acc += a.s.coef[(so + t) * a.H + h] * ToF(a.X(j, h)[p]) * ToF(a.B(j, g)[n]);
  }
  a.s.full[e] = acc;
}

// e = (h·P + p)·N + n, all state rows in row order (an anchor's own anchor
// precedes it): full_k = exp(s_k)·(state at k's anchor, or committed) + local_k.
template <typename T>
TS_SSM_FN void CombineStates(const ScanArgs<T>& a, int64_t e) {
  const int64_t hpn = a.HPN();
  const int h = static_cast<int>(e / a.PN());
  for (int32_t k = 0; k < a.ix.num_states; ++k) {
    const int64_t r = a.ix.state_row[k];
    const int32_t st = a.ix.start[r];
    const float prev = st < 0 ? a.states[a.ix.slot[r] * hpn + e] : a.s.full[st * hpn + e];
    float* cur = a.s.full + k * hpn + e;
    *cur = expf(a.s.logd[r * a.H + h]) * prev + *cur;
  }
}

// e = o·HPN + f: output o's slot gets its state row's state.
template <typename T>
TS_SSM_FN void WriteOutput(const ScanArgs<T>& a, int64_t e) {
  const int64_t hpn = a.HPN();
  const int64_t o = e / hpn, f = e % hpn;
  a.states[a.ix.out_slot[o] * hpn + f] = a.s.full[a.ix.out_state[o] * hpn + f];
}

// e = entry·G + g: C_i·B_j of the entry's row i and segment row j.
template <typename T>
TS_SSM_FN void EntryCb(const ScanArgs<T>& a, int64_t e) {
  const int64_t entry = e / a.G;
  const int g = static_cast<int>(e % a.G);
  const T* c = a.C(a.s.owner[entry], g);
  const T* b = a.B(a.s.seg[entry], g);
  float acc = 0.0f;
  for (int n = 0; n < a.N; ++n) acc += ToF(c[n]) * ToF(b[n]);
  a.s.cb[e] = acc;
}

// e = (h·R + i)·P + p: y[i, h·P + p] = (Mx·x0)_i + Σ_j (Mu)_ij·x_j + D·x_i,
// x0 the state at i's anchor (or the committed state). Neighbouring
// elements are rows of one head, which read the same x0 (cache reuse).
template <typename T>
TS_SSM_FN void RowOutput(const ScanArgs<T>& a, int64_t e) {
  const int p = static_cast<int>(e % a.P);
  const int64_t i = (e / a.P) % a.ix.num_rows;
  const int h = static_cast<int>(e / (static_cast<int64_t>(a.ix.num_rows) * a.P));
  const int g = a.Group(h);
  const float si = a.s.logd[i * a.H + h];
  const int32_t st = a.ix.start[i];
  const float* x0 = (st < 0 ? a.states + a.ix.slot[i] * a.HPN() : a.s.full + st * a.HPN()) +
                    h * a.PN() + static_cast<int64_t>(p) * a.N;
  const T* c = a.C(i, g);
  float acc0 = 0.0f;
  for (int n = 0; n < a.N; ++n) acc0 += ToF(c[n]) * x0[n];
  float acc = expf(si) * acc0;
  const int32_t off = a.ix.seg_off[i], len = a.ix.seg_len[i];
  for (int32_t t = 0; t < len; ++t) {
    const int64_t j = a.s.seg[off + t];
    const int64_t jh = j * a.H + h;
    acc += a.s.cb[static_cast<int64_t>(off + t) * a.G + g] * (expf(si - a.s.logd[jh]) * a.s.dt[jh]) *
           ToF(a.X(j, h)[p]);
  }
  a.y[(i * a.H + h) * a.P + p] = FromF<T>(acc + a.D[h] * ToF(a.X(i, h)[p]));
}

#define TS_SSM_OP(Name)                                                      \
  template <typename T>                                                      \
  struct Name##Op {                                                          \
    ScanArgs<T> a;                                                           \
    TS_SSM_FN void operator()(int64_t e) const { Name(a, e); }              \
  };
TS_SSM_OP(WalkSegment)
TS_SSM_OP(RowDt)
TS_SSM_OP(RowLogDecay)
TS_SSM_OP(StateCoefs)
TS_SSM_OP(LocalState)
TS_SSM_OP(CombineStates)
TS_SSM_OP(WriteOutput)
TS_SSM_OP(EntryCb)
TS_SSM_OP(RowOutput)
#undef TS_SSM_OP

// The passes in order; run(n, op) runs op(e) for every e in [0, n) and
// returns a success value equal to Err{} (cudaSuccess on the device). The
// scratch must be sized as ScanScratch says; cb only when y is set.
template <typename T, typename Run>
auto RunScan(const ScanArgs<T>& a, Run&& run) -> decltype(run(int64_t{0}, RowDtOp<T>{a})) {
  using Err = decltype(run(int64_t{0}, RowDtOp<T>{a}));
  const int64_t R = a.ix.num_rows, M = a.ix.num_states, O = a.ix.num_out;
  const int64_t RH = R * a.H, hpn = a.HPN();
  Err err{};
  if ((err = run(R, WalkSegmentOp<T>{a})) != Err{}) return err;
  if ((err = run(RH, RowDtOp<T>{a})) != Err{}) return err;
  if ((err = run(RH, RowLogDecayOp<T>{a})) != Err{}) return err;
  if (M > 0) {
    if ((err = run(M * a.H, StateCoefsOp<T>{a})) != Err{}) return err;
    if ((err = run(M * hpn, LocalStateOp<T>{a})) != Err{}) return err;
    if ((err = run(hpn, CombineStatesOp<T>{a})) != Err{}) return err;
  }
  if (O > 0 && (err = run(O * hpn, WriteOutputOp<T>{a})) != Err{}) return err;
  if (a.y != nullptr) {
    if ((err = run(a.ix.num_entries * a.G, EntryCbOp<T>{a})) != Err{}) return err;
    if ((err = run(RH * a.P, RowOutputOp<T>{a})) != Err{}) return err;
  }
  return err;
}

}  // namespace treespec::cuda::ssm
