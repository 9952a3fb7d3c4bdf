// Small blocking-socket helpers for the rendezvous store: length-prefixed
// messages with deadlines, and a byte writer/reader for their fields (host
// byte order). Internal to core/comm. Thread-compatible.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace treespec::wire {

using Clock = std::chrono::steady_clock;

// Writes the whole buffer (no SIGPIPE); UNAVAILABLE when the peer is gone.
absl::Status WriteAll(int fd, const void* data, size_t n);
// Reads exactly n bytes by `deadline`: UNAVAILABLE on EOF or error,
// DEADLINE_EXCEEDED when the deadline passes.
absl::Status ReadAll(int fd, void* data, size_t n, Clock::time_point deadline);

absl::Status SendMessage(int fd, const std::string& body);
absl::StatusOr<std::string> ReceiveMessage(int fd, Clock::time_point deadline);

// The rendezvous protocol (see rendezvous.h).
enum MessageType : uint8_t { kSet = 1, kGet = 2, kHello = 3, kPing = 4 };
enum ReplyCode : uint8_t { kOk = 0, kTimedOut = 1, kError = 2 };

// Message bodies above this are refused (a corrupt length, not a real value).
inline constexpr uint32_t kMaxMessageBytes = 64u << 20;

class Writer {
 public:
  Writer& U8(uint8_t v) { return Raw(&v, 1); }
  Writer& U32(uint32_t v) { return Raw(&v, 4); }
  Writer& I32(int32_t v) { return Raw(&v, 4); }
  Writer& Str(const std::string& s) {
    U32(static_cast<uint32_t>(s.size()));
    return Raw(s.data(), s.size());
  }
  Writer& Raw(const void* p, size_t n) {
    out_.append(static_cast<const char*>(p), n);
    return *this;
  }
  const std::string& data() const { return out_; }

 private:
  std::string out_;
};

// Reads fields in order; any read past the end makes ok() false.
class Reader {
 public:
  explicit Reader(const std::string& in) : in_(in) {}
  uint8_t U8() { return Pod<uint8_t>(); }
  uint32_t U32() { return Pod<uint32_t>(); }
  int32_t I32() { return Pod<int32_t>(); }
  std::string Str();
  bool ok() const { return ok_; }

 private:
  template <typename T>
  T Pod() {
    T v{};
    if (pos_ + sizeof(T) > in_.size()) {
      ok_ = false;
      return v;
    }
    in_.copy(reinterpret_cast<char*>(&v), sizeof(T), pos_);
    pos_ += sizeof(T);
    return v;
  }
  const std::string& in_;
  size_t pos_ = 0;
  bool ok_ = true;
};

}  // namespace treespec::wire
