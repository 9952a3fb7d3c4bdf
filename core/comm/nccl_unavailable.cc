// Built when TREESPEC_CUDA is OFF: the NCCL communicator is not available.
// (core/CMakeLists.txt globs comm/*.cc, so this file is compiled in CUDA
// builds too, where core/comm/nccl/ defines these functions instead.)
#include "core/comm/nccl_communicator.h"

#ifndef TREESPEC_HAVE_CUDA

namespace treespec {

absl::StatusOr<std::string> CreateNcclUniqueId() {
  return absl::UnavailableError("treespec was built without CUDA/NCCL (TREESPEC_CUDA=OFF)");
}

absl::StatusOr<std::unique_ptr<Communicator>> CreateNcclCommunicator(const NcclOptions&) {
  return absl::UnavailableError("treespec was built without CUDA/NCCL (TREESPEC_CUDA=OFF)");
}

}  // namespace treespec

#endif  // TREESPEC_HAVE_CUDA
