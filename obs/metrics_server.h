// MetricsServer: serves a MetricsRegistry as GET /metrics (Prometheus text
// format 0.0.4) over plain HTTP (cpp-httplib) on its own thread and a pool of
// two connection threads. Port 0 picks a free port. Thread-safe; Stop is
// idempotent and also runs in the destructor.
#pragma once

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "obs/metrics.h"

namespace treespec {

class MetricsServer {
 public:
  // `registry` must outlive the server.
  static absl::StatusOr<std::unique_ptr<MetricsServer>> Start(const std::string& host, int port,
                                                              const MetricsRegistry* registry);
  ~MetricsServer();
  // "HOST:PORT" actually bound.
  const std::string& address() const { return address_; }
  void Stop();

 private:
  struct Impl;
  MetricsServer() = default;
  std::unique_ptr<Impl> impl_;
  std::string address_;
};

}  // namespace treespec
