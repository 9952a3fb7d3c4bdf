// Communicator: the collectives a tensor-parallel worker group needs, behind one
// interface with single-rank, Gloo (CPU, TCP) and NCCL (GPU) implementations.
// Every call takes the communicator's timeout; a peer that does not answer in
// time gives DEADLINE_EXCEEDED or UNAVAILABLE naming the rank, never a hang.
//
// Thread-compatibility: collectives are issued by one thread per rank, in the
// same order on every rank.
#pragma once

#include <chrono>
#include <cstddef>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "core/tensor/tensor.h"

namespace treespec {

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual std::string name() const = 0;

  // inout: t (any shape, f32 on host for Gloo, f16/bf16/f32 on GPU for NCCL).
  virtual absl::Status AllReduceSum(Tensor* t) = 0;
  // in: in [n...]; out: out [size * n...] holding rank r's input at block r.
  virtual absl::Status AllGather(const Tensor& in, Tensor* out) = 0;
  // inout: host bytes, sent by `root` and received by everyone else.
  virtual absl::Status Broadcast(void* data, size_t bytes, int root) = 0;
  virtual absl::Status Barrier() = 0;
};

// A group of one: every collective is the identity.
std::unique_ptr<Communicator> CreateSingleRankCommunicator();

}  // namespace treespec
