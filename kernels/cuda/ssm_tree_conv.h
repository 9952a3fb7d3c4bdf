// Mamba-2's depthwise causal conv + SiLU along the root paths of packed token
// trees (Backend::SsmTreeConv; STree, paper 001 §3) on the device. Host
// launcher; thread-compatible: enqueues on the caller's stream.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "core/tensor/dtype.h"
#include "kernels/cuda/ssm_tree_index.h"

namespace treespec::cuda {

// in: x [R, Cd], w [Cd, K], b [Cd], ix (device views of an SsmConvLayout);
// inout: states [S, Cd, K] (slot ix.out_slot[o] gets the window of row
// ix.out_row[o]); out: out [R, Cd]. All of `dtype`. One thread per (row,
// channel), then one per (output, channel).
cudaError_t LaunchSsmTreeConv(DType dtype, const void* x, int64_t Cd, const void* w,
                              const void* b, const ssm::ConvIndex& ix, void* states, void* out,
                              cudaStream_t stream);

}  // namespace treespec::cuda
