// Device-side views of the SsmTreeBatch layouts of ssm_tree_layout.h (index
// arrays uploaded as one i32 buffer) and the scan's scratch buffers: the
// parameters the host launchers of ssm_tree_conv.h / ssm_tree_scan.h pass to
// the per-element math of ssm_tree_math.h. Plain data (pointers into device
// memory); thread-compatible.
#pragma once

#include <cstdint>

namespace treespec::cuda::ssm {

// Device views of an SsmConvLayout (ssm_tree_layout.h).
struct ConvIndex {
  const int32_t* src = nullptr;       // [R, K] window sources
  const int32_t* slot = nullptr;      // [R]
  const int32_t* out_row = nullptr;   // [O]
  const int32_t* out_slot = nullptr;  // [O]
  int32_t num_rows = 0, K = 0, num_out = 0;
};

// Device views of an SsmScanLayout (ssm_tree_layout.h).
struct ScanIndex {
  const int32_t* parent = nullptr;     // [R]
  const int32_t* slot = nullptr;       // [R]
  const int32_t* seg_off = nullptr;    // [R]
  const int32_t* seg_len = nullptr;    // [R]
  const int32_t* start = nullptr;      // [R] state index of the anchor, -1: committed
  const int32_t* state_row = nullptr;  // [M]
  const int32_t* state_off = nullptr;  // [M]
  const int32_t* out_state = nullptr;  // [O]
  const int32_t* out_slot = nullptr;   // [O]
  int32_t num_rows = 0, num_states = 0, num_out = 0;
  int64_t num_entries = 0, num_state_entries = 0;
};

// Scratch of one scan (f32 / i32 device buffers; sizes in brackets).
struct ScanScratch {
  int32_t* seg = nullptr;    // [E] segment rows of every row, root first
  int32_t* owner = nullptr;  // [E] the row each entry belongs to
  float* dt = nullptr;       // [R, H] clamped softplus
  float* logd = nullptr;     // [R, H] s_r: Σ dt_j·A over r's segment
  float* coef = nullptr;     // [SE, H] state rows: exp(s_k - s_j)·dt_j per entry
  float* full = nullptr;     // [M, H, P, N] the state rows' states
  float* cb = nullptr;       // [E, G] C_i·B_j per entry (with y only)
};

}  // namespace treespec::cuda::ssm
