// The Mamba-2 selective scan over packed token trees (Backend::SsmTreeScan;
// STree, paper 001 §3) on the device, in the paper's matrix form, chunked
// along depth for long root paths (ssm_tree_scan.cu says how and why).
// Host launcher; thread-compatible: enqueues on the caller's stream.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "core/tensor/dtype.h"
#include "kernels/cuda/ssm_tree_index.h"

namespace treespec::cuda {

// in: xbc [R, H·P + 2·G·N] (x | B | C), dt_raw [R, H] (both of `dtype`),
//     A, dt_bias, D [H] f32, ix (device views of an SsmScanLayout);
// scratch: buffers sized as ssm::ScanScratch says (cb only with y);
// inout: states [S, H, P, N] f32 (slot ix.out_slot[o] gets the state after
//        the row of state index ix.out_state[o]);
// out: y [R, H·P] of `dtype`, or null for the states alone.
// dt = clamp(softplus(dt_raw + dt_bias), dt_min, dt_max).
cudaError_t LaunchSsmTreeScan(DType dtype, const void* xbc, const void* dt_raw, const float* A,
                              const float* dt_bias, const float* D, float dt_min, float dt_max,
                              int H, int P, int N, int G, const ssm::ScanIndex& ix,
                              const ssm::ScanScratch& scratch, float* states, void* y,
                              cudaStream_t stream);

}  // namespace treespec::cuda
