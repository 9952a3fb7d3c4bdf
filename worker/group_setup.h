// Forming a tensor-parallel worker group at start-up (treespec-worker
// --tp-size N --tp-rank R --rendezvous HOST:PORT).
//
//  1. Rank 0 starts the rendezvous store on HOST:PORT (port 0: any; the
//     bound address is announced). Every rank connects to it, retrying DNS
//     and connection for rendezvous_timeout.
//  2. Ranks > 0 open their liveness session (a duplicate --tp-rank or a
//     different --tp-size is refused here); rank 0's store reports lost
//     ranks to the GroupHealth from now on.
//  3. Gloo connects the full mesh: the control communicator, which carries
//     the step frames, and the model's communicator on CPU. With a CUDA
//     backend rank 0 also makes an NCCL unique id, the others read it from
//     the store, and NCCL becomes the model's communicator.
//  4. After every rank has loaded its shard, AwaitGroupReady checks that all
//     ranks agree on the model and KV geometry (a mismatch would make their
//     caches diverge) and waits until all are ready.
//
// Thread-compatible (start-up only).
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "core/comm/communicator.h"
#include "core/comm/rendezvous.h"
#include "core/tensor/backend.h"
#include "worker/group_health.h"

namespace treespec {

struct GroupOptions {
  int rank = 0;
  int size = 1;
  std::string rendezvous;  // HOST:PORT
  std::string host;        // address to advertise for Gloo ("": automatic)
  std::chrono::milliseconds rendezvous_timeout{std::chrono::seconds(300)};
  std::chrono::milliseconds collective_timeout{std::chrono::seconds(30)};
  int cuda_device = 0;  // for NCCL when the backend is CUDA
  absl::Status Validate() const;

  // Derived: liveness and heartbeat cadence follow the collective timeout.
  RendezvousOptions Rendezvous() const;
  std::chrono::milliseconds HeartbeatInterval() const;
};

struct WorkerGroup {
  std::unique_ptr<RendezvousServer> server;  // rank 0 only
  std::unique_ptr<RendezvousClient> store;
  std::unique_ptr<Communicator> control;     // Gloo
  std::unique_ptr<Communicator> nccl;        // with a CUDA backend
  Communicator* data() const { return nccl != nullptr ? nccl.get() : control.get(); }
};

// Steps 1-3. `announce` receives rank 0's bound store address; `health`
// (rank 0; may be null elsewhere) receives lost ranks; `on_leader_lost`
// (ranks > 0) is called from a background thread when rank 0 goes away.
absl::StatusOr<std::unique_ptr<WorkerGroup>> JoinWorkerGroup(
    const GroupOptions& options, Backend* backend, GroupHealth* health,
    const std::function<void(const std::string&)>& announce,
    std::function<void(const std::string&)> on_leader_lost);

// Step 4. `fingerprint` describes the model and KV geometry of this rank.
absl::Status AwaitGroupReady(WorkerGroup* group, const GroupOptions& options,
                             const std::string& fingerprint, const GroupHealth* health);

}  // namespace treespec
