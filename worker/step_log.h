// StepLog: the SequenceModel operations rank 0 of a tensor-parallel group
// applied to its model state since its last frame, serialized so the other ranks can replay
// them on their shard, and the frames that carry logs over the group's
// control communicator.
//
// Record format (host byte order; every rank runs the same build): a sequence
// of records, each a u8 opcode then its fields.
//   kOpen        i64 handle (-1 on failure), i64 capacity, u8 ok
//   kCommit      i64 kv, i64 n, u8 ok
//   kCommitPath  i64 kv, u32 n, i32 path[n], u8 ok
//   kRelease     i64 kv
//   kForward     u32 num_seqs, then per sequence: i64 kv, i32 num_prior,
//                u8 logits mode, u32 n, i32 tokens[n], u32 m, i32 parents[m]
// `ok` is whether the operation succeeded on rank 0: a follower whose result
// (or handle) differs has diverged and stops. Hidden-state requests are not
// logged: they add no collective, so followers need not repeat them. A forward pass is the last record of a log
// (rank 0 sends the log just before running it).
//
// Frame: a fixed kFrameBytes broadcast holding a FrameHeader and the first
// bytes of the log; the rest, if any, follows in a second broadcast.
//
// Thread-compatible.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "core/comm/communicator.h"
#include "core/model/forward_batch.h"
#include "core/model/sequence_model.h"

namespace treespec {

enum class FrameKind : uint16_t {
  kLog = 1,        // replay the log
  kHeartbeat = 2,  // nothing to do; rank 0 is alive (it may carry a log too)
  kShutdown = 3,   // rank 0 is stopping; exit cleanly
};

struct FrameHeader {
  uint32_t magic = kMagic;
  uint16_t version = 1;
  FrameKind kind = FrameKind::kHeartbeat;
  uint64_t number = 0;  // frames sent so far by rank 0, for diagnostics
  uint64_t log_bytes = 0;
  static constexpr uint32_t kMagic = 0x50545354;  // "TSTP"
};

inline constexpr size_t kFrameBytes = 4096;

class StepLog {
 public:
  void Open(int64_t handle, int64_t capacity, bool ok);
  void Commit(int64_t kv, int64_t n, bool ok);
  void CommitPath(int64_t kv, const std::vector<int32_t>& path, bool ok);
  void Release(int64_t kv);
  void Forward(const std::vector<ForwardSeq>& seqs);

  const std::string& bytes() const { return bytes_; }
  bool empty() const { return bytes_.empty(); }
  void Clear() { bytes_.clear(); }

 private:
  template <typename T>
  void Put(T v) {
    bytes_.append(reinterpret_cast<const char*>(&v), sizeof(T));
  }
  void PutI32s(const std::vector<int32_t>& v);
  std::string bytes_;
};

// Rank 0: sends one frame (header + log) from root 0 over `comm`.
absl::Status SendFrame(Communicator* comm, FrameKind kind, uint64_t number, const std::string& log);
// Other ranks: receives one frame; `log` gets its log bytes.
absl::Status ReceiveFrame(Communicator* comm, FrameHeader* header, std::string* log);

// Replays `log` on this rank's shard. A forward pass whose failure rank 0
// must have seen too (bad input, no capacity: decided before any collective)
// is skipped; any other failure, or a cache result that differs from rank
// 0's, is returned (the follower then leaves the group).
absl::Status ReplayStepLog(const std::string& log, SequenceModel* model);

}  // namespace treespec
