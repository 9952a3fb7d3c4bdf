// Gloo communicator: CPU tensor parallelism over TCP (libgloo 0.5.0). Ranks
// find each other through the rendezvous store (core/comm/rendezvous.h) and
// connect a full mesh; tensors are f32 in host memory.
//
// Gloo reports failures by throwing; every throw is caught inside this
// module and becomes a Status with the file:line of the failing call:
// DEADLINE_EXCEEDED when a peer did not answer within the timeout,
// UNAVAILABLE when a connection broke. The first failure is sticky (see
// Communicator). Time spent in collectives is accumulated in stats().
//
// Thread-compatible like every Communicator.
#pragma once

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "core/comm/communicator.h"
#include "core/comm/rendezvous.h"

namespace treespec {

struct GlooOptions {
  int rank = 0;
  int size = 1;
  // Address to listen on and advertise to peers; empty: the address this
  // rank uses to reach the rendezvous store.
  std::string host;
  // Store key prefix: groups sharing one store need distinct prefixes.
  std::string prefix = "gloo";
  // Bound on forming the full mesh (peers that never join).
  std::chrono::milliseconds connect_timeout{std::chrono::seconds(120)};
  CommOptions comm;
  absl::Status Validate() const;
};

// Forms the group; every rank calls this with its rank and the same size and
// prefix. `store` must stay alive until this returns.
absl::StatusOr<std::unique_ptr<Communicator>> CreateGlooCommunicator(const GlooOptions& options,
                                                                     RendezvousClient* store);

}  // namespace treespec
