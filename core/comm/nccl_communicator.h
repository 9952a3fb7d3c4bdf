// Factory for the NCCL communicator (GPU tensor parallelism). The
// implementation lives in core/comm/nccl/ and is built only with TREESPEC_CUDA;
// this header includes no CUDA header.
#pragma once

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "core/comm/communicator.h"

namespace treespec {

struct NcclOptions {
  int rank = 0;
  int size = 1;
  int device = 0;
  std::string unique_id;  // bytes of ncclUniqueId, distributed by rendezvous
  int timeout_ms = 60000;
};

absl::StatusOr<std::unique_ptr<Communicator>> CreateNcclCommunicator(const NcclOptions& options);

}  // namespace treespec
