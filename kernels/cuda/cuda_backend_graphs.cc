// CudaBackend CUDA graphs: capture of a body of ops from the backend's
// stream, replay by id.
#include <functional>

#include "absl/strings/str_cat.h"
#include "core/cuda/cuda_check.h"
#include "core/util/status_macros.h"
#include "kernels/cuda/cuda_backend_impl.h"

namespace treespec::cuda {

absl::StatusOr<int> CudaBackend::CaptureGraph(const std::function<absl::Status()>& body) {
  TS_RETURN_IF_ERROR(Enter("CaptureGraph"));
  TS_CUDA_RETURN_IF_ERROR(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal));
  capturing_ = true;
  const absl::Status body_status = body();
  capturing_ = false;
  cudaGraph_t graph = nullptr;
  const cudaError_t end = cudaStreamEndCapture(stream_, &graph);
  if (!body_status.ok() || end != cudaSuccess) {
    if (graph != nullptr) cudaGraphDestroy(graph);
    cudaGetLastError();
    if (!body_status.ok()) return body_status;
    TS_CUDA_RETURN_IF_ERROR(end);
  }
  cudaGraphExec_t exec = nullptr;
  const cudaError_t inst = cudaGraphInstantiate(&exec, graph, 0);
  cudaGraphDestroy(graph);
  TS_CUDA_RETURN_IF_ERROR(inst);
  graphs_.push_back(exec);
  return static_cast<int>(graphs_.size()) - 1;
}

absl::Status CudaBackend::ReplayGraph(int graph_id) {
  TS_RETURN_IF_ERROR(Enter("ReplayGraph"));
  if (graph_id < 0 || graph_id >= static_cast<int>(graphs_.size())) {
    return absl::InvalidArgumentError(absl::StrCat("ReplayGraph: no graph ", graph_id));
  }
  TS_CUDA_RETURN_IF_ERROR(cudaGraphLaunch(graphs_[graph_id], stream_));
  return absl::OkStatus();
}

}  // namespace treespec::cuda
