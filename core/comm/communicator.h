// Communicator: the collectives a tensor-parallel worker group needs, behind one
// interface with single-rank, Gloo (CPU, TCP) and NCCL (GPU) implementations.
//
// Every collective is bounded by CommOptions::timeout: a peer that does not answer in time gives
// DEADLINE_EXCEEDED, a peer whose connection breaks gives UNAVAILABLE, never a
// hang. A failed collective leaves the group in an unknown state, so the
// failure is sticky: status() returns it and every later call fails with it.
//
// Thread-compatibility: collectives are issued by one thread at a time per
// rank, in the same order on every rank. status() and stats() may be read
// from any thread.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "core/tensor/tensor.h"

namespace treespec {

struct CommOptions {
  // Upper bound on one collective, from entering the call to its completion.
  std::chrono::milliseconds timeout{std::chrono::seconds(30)};
  absl::Status Validate() const;
};

// Time spent inside collectives (entry to return, waiting for peers included).
struct CommStats {
  int64_t num_calls = 0;
  int64_t total_ns = 0;
  int64_t bytes = 0;  // payload bytes of this rank's buffers
  int64_t allreduce_ns = 0;
  int64_t allgather_ns = 0;
  int64_t broadcast_ns = 0;
};

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual std::string name() const = 0;

  // inout: t (any shape; f32 on host for Gloo, f16/bf16/f32 on GPU for NCCL),
  // replaced by the element-wise sum over ranks.
  virtual absl::Status AllReduceSum(Tensor* t) = 0;
  // in: in [n...]; out: out [size * n...] holding rank r's input at block r.
  virtual absl::Status AllGather(const Tensor& in, Tensor* out) = 0;
  // inout: data [bytes] in host memory, sent by `root` and received by every
  // other rank.
  virtual absl::Status Broadcast(void* data, size_t bytes, int root) = 0;
  virtual absl::Status Barrier() = 0;

  // OK while the group is usable; else the first collective failure.
  virtual absl::Status status() const { return absl::OkStatus(); }
  virtual CommStats stats() const { return {}; }
  virtual void ResetStats() {}
};

// A group of one: every collective is the identity.
std::unique_ptr<Communicator> CreateSingleRankCommunicator();

}  // namespace treespec
