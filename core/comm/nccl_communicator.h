// Factory for the NCCL communicator (GPU tensor parallelism). The
// implementation lives in core/comm/nccl/ and is built only with TREESPEC_CUDA;
// without it every function here returns UNAVAILABLE. This header includes no
// CUDA header.
//
// Timeouts: the communicator is created non-blocking and every collective is
// waited for on the host; one that has not completed within
// options.comm.timeout aborts the NCCL communicator (ncclCommAbort) and fails
// with DEADLINE_EXCEEDED; the failure is sticky (see Communicator).
#pragma once

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "core/comm/communicator.h"
#include "core/tensor/backend.h"

namespace treespec {

struct NcclOptions {
  int rank = 0;
  int size = 1;
  int device = 0;
  // Bytes of an ncclUniqueId made by rank 0 (CreateNcclUniqueId) and
  // distributed through the rendezvous store.
  std::string unique_id;
  // Collectives run on this backend's stream (a CUDA backend), so they are
  // ordered with its kernels; null: a stream of the communicator's own.
  Backend* backend = nullptr;
  // Bound on forming the communicator (every rank must call in).
  std::chrono::milliseconds init_timeout{std::chrono::seconds(120)};
  CommOptions comm;
};

// Rank 0: a fresh NCCL unique id (bytes to send through the rendezvous store).
absl::StatusOr<std::string> CreateNcclUniqueId();

absl::StatusOr<std::unique_ptr<Communicator>> CreateNcclCommunicator(const NcclOptions& options);

}  // namespace treespec
