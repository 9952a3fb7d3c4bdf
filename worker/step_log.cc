#include "worker/step_log.h"

#include <cstring>

#include "absl/strings/str_cat.h"
#include "core/util/status_macros.h"

namespace treespec {
namespace {

enum Opcode : uint8_t { kOpen = 1, kCommit = 3, kCommitPath = 4, kRelease = 5, kForward = 6 };

class LogReader {
 public:
  explicit LogReader(const std::string& in) : in_(in) {}
  bool done() const { return pos_ >= in_.size(); }
  template <typename T>
  absl::Status Get(T* v) {
    if (pos_ + sizeof(T) > in_.size()) {
      return absl::DataLossError(absl::StrCat("step log truncated at byte ", pos_));
    }
    std::memcpy(v, in_.data() + pos_, sizeof(T));
    pos_ += sizeof(T);
    return absl::OkStatus();
  }
  absl::Status GetI32s(std::vector<int32_t>* v) {
    uint32_t n = 0;
    TS_RETURN_IF_ERROR(Get(&n));
    if (pos_ + size_t{n} * 4 > in_.size()) {
      return absl::DataLossError(absl::StrCat("step log truncated at byte ", pos_));
    }
    v->resize(n);
    // memcpy from or to a null pointer is undefined even for 0 bytes (an
    // empty vector's data() may be null; UBSan caught it).
    if (n > 0) std::memcpy(v->data(), in_.data() + pos_, size_t{n} * 4);
    pos_ += size_t{n} * 4;
    return absl::OkStatus();
  }

 private:
  const std::string& in_;
  size_t pos_ = 0;
};

// Whether rank 0 must have failed the same forward pass in the same way:
// errors decided from the inputs and the cache before any collective.
bool IsDeterministicInputError(const absl::Status& st) {
  switch (st.code()) {
    case absl::StatusCode::kInvalidArgument:
    case absl::StatusCode::kFailedPrecondition:
    case absl::StatusCode::kOutOfRange:
    case absl::StatusCode::kResourceExhausted:
      return true;
    default:
      return false;
  }
}

absl::Status Check(bool leader_ok, const absl::Status& here, const char* op, int64_t kv) {
  if (leader_ok == here.ok()) return absl::OkStatus();
  return absl::InternalError(absl::StrCat("diverged from rank 0: ", op, " of sequence ", kv,
                                          leader_ok ? " succeeded on rank 0 but failed here: "
                                                    : " failed on rank 0 but succeeded here",
                                          here.message()));
}

}  // namespace

void StepLog::PutI32s(const std::vector<int32_t>& v) {
  Put<uint32_t>(static_cast<uint32_t>(v.size()));
  bytes_.append(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(int32_t));
}

void StepLog::Open(int64_t handle, int64_t capacity, bool ok) {
  Put<uint8_t>(kOpen);
  Put<int64_t>(handle);
  Put<int64_t>(capacity);
  Put<uint8_t>(ok);
}

void StepLog::Commit(int64_t kv, int64_t n, bool ok) {
  Put<uint8_t>(kCommit);
  Put<int64_t>(kv);
  Put<int64_t>(n);
  Put<uint8_t>(ok);
}

void StepLog::CommitPath(int64_t kv, const std::vector<int32_t>& path, bool ok) {
  Put<uint8_t>(kCommitPath);
  Put<int64_t>(kv);
  PutI32s(path);
  Put<uint8_t>(ok);
}

void StepLog::Release(int64_t kv) {
  Put<uint8_t>(kRelease);
  Put<int64_t>(kv);
}

void StepLog::Forward(const std::vector<ForwardSeq>& seqs) {
  Put<uint8_t>(kForward);
  Put<uint32_t>(static_cast<uint32_t>(seqs.size()));
  for (const ForwardSeq& s : seqs) {
    Put<int64_t>(s.kv_seq);
    Put<int32_t>(s.num_prior);
    Put<uint8_t>(static_cast<uint8_t>(s.logits));
    PutI32s(s.tokens);
    PutI32s(s.parents);
  }
}

absl::Status SendFrame(Communicator* comm, FrameKind kind, uint64_t number, const std::string& log) {
  FrameHeader h;
  h.kind = kind;
  h.number = number;
  h.log_bytes = log.size();
  char frame[kFrameBytes];
  std::memcpy(frame, &h, sizeof(h));
  const size_t inline_bytes = std::min(log.size(), kFrameBytes - sizeof(h));
  std::memcpy(frame + sizeof(h), log.data(), inline_bytes);
  TS_RETURN_IF_ERROR(comm->Broadcast(frame, kFrameBytes, /*root=*/0));
  if (inline_bytes < log.size()) {
    std::string rest = log.substr(inline_bytes);
    TS_RETURN_IF_ERROR(comm->Broadcast(rest.data(), rest.size(), /*root=*/0));
  }
  return absl::OkStatus();
}

absl::Status ReceiveFrame(Communicator* comm, FrameHeader* header, std::string* log) {
  char frame[kFrameBytes];
  TS_RETURN_IF_ERROR(comm->Broadcast(frame, kFrameBytes, /*root=*/0));
  std::memcpy(header, frame, sizeof(*header));
  if (header->magic != FrameHeader::kMagic || header->version != 1) {
    return absl::DataLossError(absl::StrCat("frame ", header->number,
                                            " from rank 0 has a bad magic/version (mixed builds?)"));
  }
  const size_t inline_bytes =
      std::min<size_t>(header->log_bytes, kFrameBytes - sizeof(*header));
  log->assign(frame + sizeof(*header), inline_bytes);
  if (inline_bytes < header->log_bytes) {
    std::string rest(header->log_bytes - inline_bytes, '\0');
    TS_RETURN_IF_ERROR(comm->Broadcast(rest.data(), rest.size(), /*root=*/0));
    log->append(rest);
  }
  return absl::OkStatus();
}

absl::Status ReplayStepLog(const std::string& log, SequenceModel* model) {
  LogReader in(log);
  while (!in.done()) {
    uint8_t op = 0;
    TS_RETURN_IF_ERROR(in.Get(&op));
    int64_t kv = 0;
    uint8_t ok = 0;
    switch (op) {
      case kOpen: {
        int64_t capacity = 0;
        TS_RETURN_IF_ERROR(in.Get(&kv));
        TS_RETURN_IF_ERROR(in.Get(&capacity));
        TS_RETURN_IF_ERROR(in.Get(&ok));
        absl::StatusOr<int64_t> mine = model->Open(capacity);
        TS_RETURN_IF_ERROR(Check(ok, mine.status(), "Open", kv));
        if (mine.ok() && *mine != kv) {
          return absl::InternalError(absl::StrCat("diverged from rank 0: new sequence ", *mine,
                                                  " here, ", kv, " on rank 0"));
        }
        break;
      }
      case kCommit: {
        int64_t n = 0;
        TS_RETURN_IF_ERROR(in.Get(&kv));
        TS_RETURN_IF_ERROR(in.Get(&n));
        TS_RETURN_IF_ERROR(in.Get(&ok));
        TS_RETURN_IF_ERROR(Check(ok, model->Commit(kv, n), "Commit", kv));
        break;
      }
      case kCommitPath: {
        std::vector<int32_t> path;
        TS_RETURN_IF_ERROR(in.Get(&kv));
        TS_RETURN_IF_ERROR(in.GetI32s(&path));
        TS_RETURN_IF_ERROR(in.Get(&ok));
        TS_RETURN_IF_ERROR(Check(ok, model->CommitPath(kv, path), "CommitPath", kv));
        break;
      }
      case kRelease:
        TS_RETURN_IF_ERROR(in.Get(&kv));
        model->Release(kv);
        break;
      case kForward: {
        uint32_t n = 0;
        TS_RETURN_IF_ERROR(in.Get(&n));
        std::vector<ForwardSeq> seqs(n);
        for (ForwardSeq& s : seqs) {
          uint8_t mode = 0;
          TS_RETURN_IF_ERROR(in.Get(&s.kv_seq));
          TS_RETURN_IF_ERROR(in.Get(&s.num_prior));
          TS_RETURN_IF_ERROR(in.Get(&mode));
          s.logits = static_cast<LogitsMode>(mode);
          TS_RETURN_IF_ERROR(in.GetI32s(&s.tokens));
          TS_RETURN_IF_ERROR(in.GetI32s(&s.parents));
        }
        ForwardOutput out;
        absl::Status st = model->Forward(seqs, &out);
        if (!st.ok() && !IsDeterministicInputError(st)) return st;
        break;
      }
      default:
        return absl::DataLossError(absl::StrCat("step log: unknown opcode ", int{op}));
    }
  }
  return absl::OkStatus();
}

}  // namespace treespec
