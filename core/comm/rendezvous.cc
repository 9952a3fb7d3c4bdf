// RendezvousClient and the shared option checks (see rendezvous.h).
#include "core/comm/rendezvous.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <thread>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "core/comm/wire.h"

namespace treespec {

using wire::Clock;

absl::Status RendezvousOptions::Validate() const {
  if (size < 1) return absl::InvalidArgumentError(absl::StrCat("--tp-size ", size, " must be >= 1"));
  if (rank < 0 || rank >= size) {
    return absl::InvalidArgumentError(
        absl::StrCat("--tp-rank ", rank, " must be in [0, --tp-size ", size, ")"));
  }
  if (connect_timeout.count() <= 0 || liveness_timeout.count() <= 0 || ping_interval.count() <= 0) {
    return absl::InvalidArgumentError("rendezvous timeouts must be > 0");
  }
  if (ping_interval * 2 > liveness_timeout) {
    return absl::InvalidArgumentError(absl::StrCat(
        "rendezvous ping interval ", ping_interval.count(), " ms must be at most half the liveness "
        "timeout ", liveness_timeout.count(), " ms"));
  }
  return absl::OkStatus();
}

absl::Status SplitHostPort(const std::string& what, const std::string& address, std::string* host,
                           int* port) {
  const size_t colon = address.rfind(':');
  if (colon == std::string::npos || colon == 0 ||
      !absl::SimpleAtoi(address.substr(colon + 1), port) || *port < 0 || *port > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": '", address, "' is not HOST:PORT (port 0-65535)"));
  }
  *host = address.substr(0, colon);
  if (host->size() >= 2 && host->front() == '[' && host->back() == ']') {
    *host = host->substr(1, host->size() - 2);
  }
  return absl::OkStatus();
}

namespace {

// One connection attempt to every address `host` resolves to, each bounded
// by `attempt_timeout`. Returns the socket or the reason it failed.
absl::StatusOr<int> TryConnect(const std::string& host, int port,
                               std::chrono::milliseconds attempt_timeout) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  const std::string service = std::to_string(port);
  if (int rc = ::getaddrinfo(host.c_str(), service.c_str(), &hints, &res); rc != 0) {
    return absl::UnavailableError(absl::StrCat("cannot resolve '", host, "': ", gai_strerror(rc)));
  }
  std::string last = "no address";
  for (addrinfo* ai = res; ai != nullptr; ai = ai->ai_next) {
    int fd = ::socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, ai->ai_protocol);
    if (fd < 0) continue;
    int rc = ::connect(fd, ai->ai_addr, ai->ai_addrlen);
    if (rc != 0 && errno == EINPROGRESS) {
      pollfd pfd{fd, POLLOUT, 0};
      rc = ::poll(&pfd, 1, static_cast<int>(attempt_timeout.count()));
      int err = 0;
      socklen_t len = sizeof(err);
      if (rc == 1 && ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) == 0 && err == 0) {
        rc = 0;
      } else {
        errno = rc == 0 ? ETIMEDOUT : err;
        rc = -1;
      }
    }
    if (rc == 0) {
      ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) & ~O_NONBLOCK);
      int one = 1;
      ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
      ::freeaddrinfo(res);
      return fd;
    }
    last = std::strerror(errno);
    ::close(fd);
  }
  ::freeaddrinfo(res);
  return absl::UnavailableError(absl::StrCat("cannot connect: ", last));
}

// Retries resolution and connection with back-off until `timeout`.
absl::StatusOr<int> ConnectWithRetry(const RendezvousOptions& o, std::chrono::milliseconds timeout) {
  std::string host;
  int port = 0;
  if (absl::Status st = SplitHostPort("--rendezvous", o.address, &host, &port); !st.ok()) return st;
  if (port == 0) return absl::InvalidArgumentError("--rendezvous: port 0 is only for rank 0's server");
  const Clock::time_point deadline = Clock::now() + timeout;
  std::chrono::milliseconds backoff{50};
  absl::Status last;
  int attempts = 0;
  while (true) {
    ++attempts;
    absl::StatusOr<int> fd = TryConnect(host, port, std::chrono::milliseconds(2000));
    if (fd.ok()) return fd;
    last = fd.status();
    const Clock::time_point now = Clock::now();
    if (now >= deadline) break;
    std::this_thread::sleep_for(
        std::min<Clock::duration>(backoff, deadline - now));
    backoff = std::min<std::chrono::milliseconds>(backoff * 2, std::chrono::milliseconds(1000));
  }
  return absl::UnavailableError(absl::StrCat(
      "rendezvous: rank ", o.rank, " of ", o.size, " could not reach rank 0's store at ", o.address,
      " within ", timeout.count(), " ms (", attempts, " attempts; last: ", last.message(),
      "). Is rank 0 running with the same --rendezvous?"));
}

std::string LocalHost(int fd) {
  sockaddr_storage ss{};
  socklen_t len = sizeof(ss);
  char buf[INET6_ADDRSTRLEN] = {0};
  if (::getsockname(fd, reinterpret_cast<sockaddr*>(&ss), &len) != 0) return "";
  if (ss.ss_family == AF_INET6) {
    auto* a = reinterpret_cast<sockaddr_in6*>(&ss);
    if (IN6_IS_ADDR_V4MAPPED(&a->sin6_addr)) {
      ::inet_ntop(AF_INET, &a->sin6_addr.s6_addr[12], buf, sizeof(buf));
    } else {
      ::inet_ntop(AF_INET6, &a->sin6_addr, buf, sizeof(buf));
    }
  } else {
    ::inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(&ss)->sin_addr, buf, sizeof(buf));
  }
  return buf;
}

}  // namespace

class RendezvousClient::Impl {
 public:
  Impl(RendezvousOptions options, int fd)
      : options_(std::move(options)), fd_(fd), local_host_(LocalHost(fd)) {}

  ~Impl() {
    stop_.store(true);
    {
      absl::MutexLock lock(&session_mu_);
      if (session_fd_ >= 0) ::shutdown(session_fd_, SHUT_RDWR);
      session_cv_.SignalAll();
    }
    if (session_thread_.joinable()) session_thread_.join();
    if (session_fd_ >= 0) ::close(session_fd_);
    ::close(fd_);
  }

  // One request/response on the store connection.
  absl::StatusOr<std::string> Call(const std::string& request, std::chrono::milliseconds timeout,
                                   const std::string& what) {
    absl::MutexLock lock(&mu_);
    absl::Status st = wire::SendMessage(fd_, request);
    absl::StatusOr<std::string> reply =
        st.ok() ? wire::ReceiveMessage(fd_, Clock::now() + timeout) : st;
    if (!reply.ok()) {
      return absl::UnavailableError(absl::StrCat("rendezvous store at ", options_.address, ": ",
                                                 what, ": ", reply.status().message()));
    }
    wire::Reader in(*reply);
    const uint8_t code = in.U8();
    std::string payload = in.Str();
    if (!in.ok()) return absl::UnavailableError(absl::StrCat("rendezvous: bad reply to ", what));
    if (code == wire::kTimedOut) {
      return absl::DeadlineExceededError(absl::StrCat("rendezvous store at ", options_.address, ": ",
                                                      what, " timed out after ", timeout.count(),
                                                      " ms"));
    }
    if (code != wire::kOk) {
      return absl::FailedPreconditionError(
          absl::StrCat("rendezvous store at ", options_.address, ": ", payload));
    }
    return payload;
  }

  absl::Status StartSession(std::function<void(const std::string&)> on_lost) {
    absl::StatusOr<int> fd = ConnectWithRetry(options_, options_.connect_timeout);
    if (!fd.ok()) return fd.status();
    const std::string hello =
        wire::Writer().U8(wire::kHello).I32(options_.rank).I32(options_.size).data();
    absl::Status st = wire::SendMessage(*fd, hello);
    absl::StatusOr<std::string> reply =
        st.ok() ? wire::ReceiveMessage(*fd, Clock::now() + options_.liveness_timeout) : st;
    if (!reply.ok()) {
      ::close(*fd);
      return absl::UnavailableError(absl::StrCat("rendezvous: joining the group at ",
                                                 options_.address, ": ", reply.status().message()));
    }
    wire::Reader in(*reply);
    const uint8_t code = in.U8();
    const std::string message = in.Str();
    if (code != wire::kOk) {
      ::close(*fd);
      return absl::FailedPreconditionError(
          absl::StrCat("rendezvous at ", options_.address, ": ", message));
    }
    {
      absl::MutexLock lock(&session_mu_);
      session_fd_ = *fd;
    }
    session_thread_ = std::thread([this, on_lost = std::move(on_lost)] { Session(on_lost); });
    return absl::OkStatus();
  }

  const RendezvousOptions& options() const { return options_; }
  const std::string& local_host() const { return local_host_; }

 private:
  void Session(const std::function<void(const std::string&)>& on_lost) {
    const std::string ping = wire::Writer().U8(wire::kPing).data();
    while (!stop_.load()) {
      absl::Status st = wire::SendMessage(session_fd_, ping);
      absl::StatusOr<std::string> pong =
          st.ok() ? wire::ReceiveMessage(session_fd_, Clock::now() + options_.liveness_timeout) : st;
      if (stop_.load()) return;
      if (!pong.ok()) {
        on_lost(pong.status().code() == absl::StatusCode::kDeadlineExceeded
                    ? absl::StrCat("rank 0 did not answer for ", options_.liveness_timeout.count(),
                                   " ms")
                    : "rank 0 closed the group (it exited, was killed or lost another rank)");
        return;
      }
      absl::MutexLock lock(&session_mu_);
      session_cv_.WaitWithTimeout(&session_mu_, absl::FromChrono(options_.ping_interval));
    }
  }

  const RendezvousOptions options_;
  const int fd_;
  const std::string local_host_;
  absl::Mutex mu_;  // one request at a time on fd_

  std::atomic<bool> stop_{false};
  absl::Mutex session_mu_;
  absl::CondVar session_cv_;
  int session_fd_ = -1;
  std::thread session_thread_;
};

absl::StatusOr<std::unique_ptr<RendezvousClient>> RendezvousClient::Connect(
    const RendezvousOptions& options) {
  if (absl::Status st = options.Validate(); !st.ok()) return st;
  absl::StatusOr<int> fd = ConnectWithRetry(options, options.connect_timeout);
  if (!fd.ok()) return fd.status();
  return std::unique_ptr<RendezvousClient>(
      new RendezvousClient(std::make_unique<Impl>(options, *fd)));
}

RendezvousClient::RendezvousClient(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
RendezvousClient::~RendezvousClient() = default;

absl::Status RendezvousClient::Set(const std::string& key, const std::string& value) {
  return impl_
      ->Call(wire::Writer().U8(wire::kSet).Str(key).Str(value).data(),
             impl_->options().liveness_timeout, absl::StrCat("set '", key, "'"))
      .status();
}

absl::StatusOr<std::string> RendezvousClient::Get(const std::string& key,
                                                  std::chrono::milliseconds timeout) {
  const uint32_t ms = static_cast<uint32_t>(std::min<int64_t>(timeout.count(), 1u << 31));
  return impl_->Call(wire::Writer().U8(wire::kGet).Str(key).U32(ms).data(),
                     timeout + impl_->options().liveness_timeout,
                     absl::StrCat("waiting for key '", key, "'"));
}

const std::string& RendezvousClient::local_host() const { return impl_->local_host(); }
const RendezvousOptions& RendezvousClient::options() const { return impl_->options(); }

absl::Status RendezvousClient::StartSession(std::function<void(const std::string&)> on_lost) {
  return impl_->StartSession(std::move(on_lost));
}

}  // namespace treespec
