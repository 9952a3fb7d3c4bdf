// Built when TREESPEC_CUDA is OFF: the NCCL communicator is not available.
#include "core/comm/nccl_communicator.h"

namespace treespec {

absl::StatusOr<std::unique_ptr<Communicator>> CreateNcclCommunicator(const NcclOptions&) {
  return absl::UnavailableError("treespec was built without CUDA/NCCL (TREESPEC_CUDA=OFF)");
}

}  // namespace treespec
