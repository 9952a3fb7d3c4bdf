#include "core/comm/wire.h"

#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace treespec::wire {

absl::Status WriteAll(int fd, const void* data, size_t n) {
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    ssize_t w = ::send(fd, p, n, MSG_NOSIGNAL);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return absl::UnavailableError(absl::StrCat("send: ", std::strerror(errno)));
    p += w;
    n -= static_cast<size_t>(w);
  }
  return absl::OkStatus();
}

absl::Status ReadAll(int fd, void* data, size_t n, Clock::time_point deadline) {
  char* p = static_cast<char*>(data);
  while (n > 0) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    if (left.count() <= 0) return absl::DeadlineExceededError("timed out waiting for the peer");
    pollfd pfd{fd, POLLIN, 0};
    int rc = ::poll(&pfd, 1, static_cast<int>(std::min<int64_t>(left.count(), 1 << 30)));
    if (rc < 0 && errno == EINTR) continue;
    if (rc < 0) return absl::UnavailableError(absl::StrCat("poll: ", std::strerror(errno)));
    if (rc == 0) continue;
    ssize_t r = ::recv(fd, p, n, 0);
    if (r < 0 && (errno == EINTR || errno == EAGAIN)) continue;
    if (r == 0) return absl::UnavailableError("connection closed by peer");
    if (r < 0) return absl::UnavailableError(absl::StrCat("recv: ", std::strerror(errno)));
    p += r;
    n -= static_cast<size_t>(r);
  }
  return absl::OkStatus();
}

absl::Status SendMessage(int fd, const std::string& body) {
  std::string buf;
  const uint32_t n = static_cast<uint32_t>(body.size());
  buf.append(reinterpret_cast<const char*>(&n), 4);
  buf.append(body);
  return WriteAll(fd, buf.data(), buf.size());
}

absl::StatusOr<std::string> ReceiveMessage(int fd, Clock::time_point deadline) {
  uint32_t n = 0;
  if (absl::Status st = ReadAll(fd, &n, 4, deadline); !st.ok()) return st;
  if (n > kMaxMessageBytes) {
    return absl::UnavailableError(absl::StrCat("message of ", n, " bytes: not a treespec peer"));
  }
  std::string body(n, '\0');
  if (absl::Status st = ReadAll(fd, body.data(), n, deadline); !st.ok()) return st;
  return body;
}

std::string Reader::Str() {
  const uint32_t n = U32();
  if (!ok_ || pos_ + n > in_.size()) {
    ok_ = false;
    return {};
  }
  std::string s = in_.substr(pos_, n);
  pos_ += n;
  return s;
}

}  // namespace treespec::wire
