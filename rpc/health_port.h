// HealthPort: a plaintext gRPC server that serves only grpc.health.v1, for
// Kubernetes gRPC probes (which cannot speak TLS) beside a service port that
// may use TLS. Two health "services":
//   ""          readiness: NOT_SERVING until the binary's service is up, and
//               again from SIGTERM on, while in-flight streams drain;
//   "liveness"  SERVING for as long as the process can serve (a draining
//               process is alive: a liveness probe must not restart it
//               mid-drain); NOT_SERVING once it is broken for good (a worker
//               whose tensor-parallel group failed), so it gets restarted.
// Thread-safe.
#pragma once

#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "grpcpp/grpcpp.h"

namespace treespec {

class HealthPort {
 public:
  // Listens on HOST:PORT (port 0: any free port).
  static absl::StatusOr<std::unique_ptr<HealthPort>> Start(const std::string& host, int port);
  ~HealthPort();
  static constexpr char kLivenessService[] = "liveness";

  const std::string& address() const { return address_; }
  // Readiness (service ""); ignored once broken.
  void SetServing(bool serving);
  // Both services NOT_SERVING, for good.
  void SetBroken();
  void Shutdown();

 private:
  HealthPort() = default;
  absl::Mutex mu_;
  std::unique_ptr<grpc::Server> server_ ABSL_GUARDED_BY(mu_);
  bool broken_ ABSL_GUARDED_BY(mu_) = false;
  std::string address_;
};

}  // namespace treespec
