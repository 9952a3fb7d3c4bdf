// RendezvousServer: rank 0's key-value store and session watcher (see
// rendezvous.h). One thread accepts; one thread serves each connection.
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <map>
#include <set>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "core/comm/rendezvous.h"
#include "core/comm/wire.h"

namespace treespec {

using wire::Clock;

class RendezvousServer::Impl {
 public:
  Impl(int listen_fd, int port, const RendezvousOptions& options)
      : listen_fd_(listen_fd), port_(port), options_(options) {
    if (::pipe(wake_) != 0) wake_[0] = wake_[1] = -1;
    accept_thread_ = std::thread([this] { AcceptLoop(); });
  }

  ~Impl() {
    {
      absl::MutexLock lock(&mu_);
      stop_ = true;
      for (int fd : fds_) ::shutdown(fd, SHUT_RDWR);
      cv_.SignalAll();
    }
    if (wake_[1] >= 0) (void)!::write(wake_[1], "x", 1);
    accept_thread_.join();
    std::vector<std::thread> threads;
    {
      absl::MutexLock lock(&mu_);
      threads.swap(threads_);
    }
    for (std::thread& t : threads) t.join();
    ::close(listen_fd_);
    if (wake_[0] >= 0) ::close(wake_[0]);
    if (wake_[1] >= 0) ::close(wake_[1]);
  }

  int port() const { return port_; }

  void SetLossCallback(LossCallback callback) {
    std::vector<std::pair<int, std::string>> replay;
    {
      absl::MutexLock lock(&mu_);
      callback_ = callback;
      replay = losses_;
    }
    if (!callback) return;
    for (auto& [rank, reason] : replay) callback(rank, reason);
  }

  void CloseSessions() {
    absl::MutexLock lock(&mu_);
    closing_ = true;
    for (int fd : session_fds_) ::shutdown(fd, SHUT_RDWR);
  }

 private:
  void AcceptLoop() {
    while (true) {
      pollfd pfds[2] = {{listen_fd_, POLLIN, 0}, {wake_[0], POLLIN, 0}};
      int rc = ::poll(pfds, wake_[0] >= 0 ? 2 : 1, 200);
      {
        absl::MutexLock lock(&mu_);
        if (stop_) return;
      }
      if (rc <= 0 || !(pfds[0].revents & POLLIN)) continue;
      int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
      if (fd < 0) continue;
      absl::MutexLock lock(&mu_);
      if (stop_) {
        ::close(fd);
        return;
      }
      fds_.insert(fd);
      threads_.emplace_back([this, fd] { Serve(fd); });
    }
  }

  static std::string Reply(wire::ReplyCode code, const std::string& payload) {
    return wire::Writer().U8(code).Str(payload).data();
  }

  // Serves one connection until it closes: KV requests, or a session.
  void Serve(int fd) {
    int session_rank = -1;
    while (true) {
      const Clock::time_point deadline =
          session_rank > 0 ? Clock::now() + options_.liveness_timeout
                           : Clock::time_point::max() - std::chrono::hours(1);
      absl::StatusOr<std::string> msg = wire::ReceiveMessage(fd, deadline);
      if (!msg.ok()) {
        if (session_rank > 0) {
          ReportLoss(session_rank,
                     msg.status().code() == absl::StatusCode::kDeadlineExceeded
                         ? absl::StrCat("sent no heartbeat for ", options_.liveness_timeout.count(),
                                        " ms (hung or cut off)")
                         : "closed its rendezvous session (the process exited or was killed)");
        }
        break;
      }
      wire::Reader in(*msg);
      const uint8_t type = in.U8();
      std::string reply;
      if (type == wire::kSet) {
        std::string key = in.Str(), value = in.Str();
        if (!in.ok()) break;
        absl::MutexLock lock(&mu_);
        kv_[key] = std::move(value);
        cv_.SignalAll();
        reply = Reply(wire::kOk, "");
      } else if (type == wire::kGet) {
        std::string key = in.Str();
        const uint32_t timeout_ms = in.U32();
        if (!in.ok()) break;
        reply = Get(key, std::chrono::milliseconds(timeout_ms));
      } else if (type == wire::kHello) {
        const int rank = in.I32(), size = in.I32();
        if (!in.ok()) break;
        reply = Hello(fd, rank, size);
        if (reply[0] == wire::kOk) session_rank = rank;
      } else if (type == wire::kPing) {
        reply = Reply(wire::kOk, "");
      } else {
        break;
      }
      if (!wire::SendMessage(fd, reply).ok()) {
        if (session_rank > 0) ReportLoss(session_rank, "closed its rendezvous session");
        break;
      }
    }
    absl::MutexLock lock(&mu_);
    fds_.erase(fd);
    session_fds_.erase(fd);
    ::close(fd);
  }

  std::string Get(const std::string& key, std::chrono::milliseconds timeout) {
    const absl::Time deadline = absl::Now() + absl::FromChrono(timeout);
    absl::MutexLock lock(&mu_);
    while (!stop_ && !kv_.count(key)) {
      if (cv_.WaitWithDeadline(&mu_, deadline)) break;
    }
    auto it = kv_.find(key);
    if (it == kv_.end()) return Reply(wire::kTimedOut, "");
    return Reply(wire::kOk, it->second);
  }

  std::string Hello(int fd, int rank, int size) {
    absl::MutexLock lock(&mu_);
    if (size != options_.size) {
      return Reply(wire::kError, absl::StrCat("rank ", rank, " says the group has ", size,
                                              " ranks; rank 0 was started with --tp-size ",
                                              options_.size));
    }
    if (rank < 1 || rank >= options_.size) {
      return Reply(wire::kError, absl::StrCat("rank ", rank, " is outside [1, ", options_.size,
                                              ")"));
    }
    if (members_.count(rank)) {
      return Reply(wire::kError, absl::StrCat("rank ", rank, " has already joined this group",
                                              lost_.count(rank) ? " and was lost; restart rank 0"
                                                                : " (two processes with one --tp-rank?)"));
    }
    if (closing_) return Reply(wire::kError, "rank 0 has closed the group");
    members_.insert(rank);
    session_fds_.insert(fd);
    return Reply(wire::kOk, "");
  }

  void ReportLoss(int rank, const std::string& reason) {
    LossCallback callback;
    {
      absl::MutexLock lock(&mu_);
      if (stop_ || closing_ || lost_.count(rank)) return;
      lost_.insert(rank);
      losses_.emplace_back(rank, reason);
      callback = callback_;
    }
    if (callback) callback(rank, reason);
  }

  const int listen_fd_;
  const int port_;
  const RendezvousOptions options_;
  int wake_[2] = {-1, -1};
  std::thread accept_thread_;

  absl::Mutex mu_;
  absl::CondVar cv_;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  bool closing_ ABSL_GUARDED_BY(mu_) = false;
  std::map<std::string, std::string> kv_ ABSL_GUARDED_BY(mu_);
  std::set<int> fds_ ABSL_GUARDED_BY(mu_);
  std::set<int> session_fds_ ABSL_GUARDED_BY(mu_);
  std::set<int> members_ ABSL_GUARDED_BY(mu_);
  std::set<int> lost_ ABSL_GUARDED_BY(mu_);
  std::vector<std::pair<int, std::string>> losses_ ABSL_GUARDED_BY(mu_);
  LossCallback callback_ ABSL_GUARDED_BY(mu_);
  std::vector<std::thread> threads_ ABSL_GUARDED_BY(mu_);
};

namespace {

// Binds a listening socket for `host` (numeric: that address; else every
// interface, IPv6 dual-stack first) on `port`.
absl::StatusOr<int> Listen(const std::string& address, const std::string& host, int port) {
  sockaddr_storage ss{};
  socklen_t len = 0;
  auto* v4 = reinterpret_cast<sockaddr_in*>(&ss);
  auto* v6 = reinterpret_cast<sockaddr_in6*>(&ss);
  std::vector<std::pair<sockaddr_storage, socklen_t>> candidates;
  if (::inet_pton(AF_INET, host.c_str(), &v4->sin_addr) == 1) {
    v4->sin_family = AF_INET;
    v4->sin_port = htons(static_cast<uint16_t>(port));
    candidates.push_back({ss, sizeof(sockaddr_in)});
  } else if (::inet_pton(AF_INET6, host.c_str(), &v6->sin6_addr) == 1) {
    v6->sin6_family = AF_INET6;
    v6->sin6_port = htons(static_cast<uint16_t>(port));
    candidates.push_back({ss, sizeof(sockaddr_in6)});
  } else {
    sockaddr_storage any6{};
    auto* a6 = reinterpret_cast<sockaddr_in6*>(&any6);
    a6->sin6_family = AF_INET6;
    a6->sin6_addr = in6addr_any;
    a6->sin6_port = htons(static_cast<uint16_t>(port));
    candidates.push_back({any6, sizeof(sockaddr_in6)});
    sockaddr_storage any4{};
    auto* a4 = reinterpret_cast<sockaddr_in*>(&any4);
    a4->sin_family = AF_INET;
    a4->sin_addr.s_addr = htonl(INADDR_ANY);
    a4->sin_port = htons(static_cast<uint16_t>(port));
    candidates.push_back({any4, sizeof(sockaddr_in)});
  }
  std::string last;
  for (auto& [addr, addr_len] : candidates) {
    len = addr_len;
    int fd = ::socket(addr.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) {
      last = std::strerror(errno);
      continue;
    }
    int one = 1, zero = 0;
    ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (addr.ss_family == AF_INET6) ::setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof(zero));
    if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), len) == 0 && ::listen(fd, 64) == 0) {
      return fd;
    }
    last = std::strerror(errno);
    ::close(fd);
  }
  return absl::UnavailableError(
      absl::StrCat("--rendezvous ", address, ": cannot listen on port ", port, ": ", last));
}

int BoundPort(int fd) {
  sockaddr_storage ss{};
  socklen_t len = sizeof(ss);
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&ss), &len);
  if (ss.ss_family == AF_INET6) return ntohs(reinterpret_cast<sockaddr_in6*>(&ss)->sin6_port);
  return ntohs(reinterpret_cast<sockaddr_in*>(&ss)->sin_port);
}

}  // namespace

absl::StatusOr<std::unique_ptr<RendezvousServer>> RendezvousServer::Start(
    const std::string& address, const RendezvousOptions& options) {
  if (absl::Status st = options.Validate(); !st.ok()) return st;
  std::string host;
  int port = 0;
  if (absl::Status st = SplitHostPort("--rendezvous", address, &host, &port); !st.ok()) return st;
  absl::StatusOr<int> fd = Listen(address, host, port);
  if (!fd.ok()) return fd.status();
  auto impl = std::make_unique<Impl>(*fd, BoundPort(*fd), options);
  return std::unique_ptr<RendezvousServer>(new RendezvousServer(std::move(impl)));
}

RendezvousServer::RendezvousServer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
RendezvousServer::~RendezvousServer() = default;
int RendezvousServer::port() const { return impl_->port(); }
void RendezvousServer::SetLossCallback(LossCallback callback) {
  impl_->SetLossCallback(std::move(callback));
}
void RendezvousServer::CloseSessions() { impl_->CloseSessions(); }

}  // namespace treespec
