// Temperature / top-k / top-p on the device, the same transform as
// core/spec/sampling.h's ProcessLogits (host launcher).
// Thread-compatible: enqueues on the caller's stream.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "core/tensor/dtype.h"

namespace treespec::cuda {

// Device scratch LaunchProcessLogits needs for R rows of V logits.
size_t ProcessLogitsWorkspaceBytes(int64_t R, int64_t V);

// in: logits [R, V] of dtype; out: probs [R, V] f32: softmax(logits /
// temperature) over the top_k largest (0: all; ties by lower id), cut to the
// shortest prefix in descending order whose mass reaches top_p, renormalised;
// zero elsewhere. workspace: ProcessLogitsWorkspaceBytes(R, V) bytes, 256-aligned.
cudaError_t LaunchProcessLogits(DType dtype, const void* logits, int64_t R, int64_t V,
                                float temperature, int top_k, float top_p, float* probs,
                                void* workspace, size_t workspace_bytes, cudaStream_t stream);

}  // namespace treespec::cuda
