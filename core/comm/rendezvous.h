// Rendezvous: how the ranks of a worker group find each other, the same way on
// a laptop and in Kubernetes.
//
// Rank 0 serves a small key-value store over TCP on the port of
// --rendezvous HOST:PORT; every rank, rank 0 included, connects to HOST:PORT
// as a client. Clients retry name resolution and connection until
// connect_timeout (a headless service's DNS record appears some time after
// the pod starts), then fail with UNAVAILABLE naming the address. Gloo's
// connection setup and the NCCL unique id travel through the store.
//
// The same server watches the group: each rank > 0 opens a session (HELLO
// with its rank) and pings every ping_interval. A session that closes, or
// stays silent for liveness_timeout, is reported once to the server's loss
// callback with the rank (so rank 0 can say WHICH rank is gone); a client
// whose pings go unanswered for liveness_timeout, or whose session closes,
// reports rank 0 lost. A second HELLO for a live rank, or a rank outside
// [1, size), is refused with a clear error.
//
// Wire format (host byte order; all ranks run the same build): each message
// is u32 body length, then body = u8 type, then fields (strings are u32
// length + bytes). Requests: SET key value; GET key u32 timeout_ms; HELLO
// i32 rank i32 size; PING. Replies: u8 code (0 ok, 1 timed out, 2 error),
// string payload.
//
// Thread-safety: RendezvousServer and RendezvousClient are thread-safe.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace treespec {

struct RendezvousOptions {
  std::string address;  // HOST:PORT of rank 0's store
  int rank = 0;
  int size = 1;
  // How long a client keeps retrying DNS resolution and connection.
  std::chrono::milliseconds connect_timeout{std::chrono::seconds(120)};
  // A session silent for this long is a lost peer.
  std::chrono::milliseconds liveness_timeout{std::chrono::seconds(10)};
  std::chrono::milliseconds ping_interval{std::chrono::milliseconds(200)};
  absl::Status Validate() const;
};

// Splits "host:port" (IPv6 as "[::1]:port"); INVALID_ARGUMENT naming `what`.
absl::Status SplitHostPort(const std::string& what, const std::string& address,
                           std::string* host, int* port);

class RendezvousServer {
 public:
  using LossCallback = std::function<void(int rank, const std::string& reason)>;

  // Listens on the port of `address` (port 0: any free port), on HOST when it
  // is a numeric IP address, otherwise on every interface.
  static absl::StatusOr<std::unique_ptr<RendezvousServer>> Start(const std::string& address,
                                                                 const RendezvousOptions& options);
  ~RendezvousServer();

  int port() const;
  // Called at most once per rank, from a server thread. Set before the
  // followers connect; a loss seen before is replayed when it is set.
  void SetLossCallback(LossCallback callback);
  // Ends every session: followers see rank 0 gone and exit.
  void CloseSessions();

  class Impl;

 private:
  explicit RendezvousServer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

class RendezvousClient {
 public:
  // Connects to options.address, retrying until options.connect_timeout.
  static absl::StatusOr<std::unique_ptr<RendezvousClient>> Connect(
      const RendezvousOptions& options);
  ~RendezvousClient();

  absl::Status Set(const std::string& key, const std::string& value);
  // Waits until `key` is set; DEADLINE_EXCEEDED naming the key after `timeout`.
  absl::StatusOr<std::string> Get(const std::string& key, std::chrono::milliseconds timeout);
  // This end's IP address on the connection to rank 0: the address peers can
  // reach this rank on (advertised for Gloo's connections).
  const std::string& local_host() const;
  const RendezvousOptions& options() const;

  // Rank > 0: opens the liveness session (HELLO, then pings). `on_lost` is
  // called once, from the session thread, when rank 0 ends the session or
  // stops answering.
  absl::Status StartSession(std::function<void(const std::string& reason)> on_lost);

  class Impl;

 private:
  explicit RendezvousClient(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace treespec
