// The start and end every service binary (treespec-worker, -drafter,
// -coordinator) shares: the flags below, command-line set-up, one way to fail,
// observability and the server from those flags, and serving until
// SIGTERM/SIGINT followed by a graceful drain (health NOT_SERVING, no new
// calls, in-flight calls get the grace period, traces flushed).
//
//   --listen HOST:PORT   gRPC address (port 0: any free port)
//   --shutdown_grace_s   seconds in-flight calls may take after SIGTERM
//   --tls_cert --tls_key --tls_ca   TLS; with --tls_ca, mutual TLS (rpc/server.h)
//   --sched_slice_us     scheduler slice for every thread (core/util/sched_hints.h)
//
// plus the observability flags (rpc/observability.h). A binary's main():
//
//   InitServiceMain(argc, argv, usage);
//   auto obs = StartServiceObservability("treespec-worker");
//   if (!obs.ok()) return FailService(obs.status());
//   RegisterWorkerTelemetry(&service, obs->get());
//   auto server = StartServiceServer({&service}, obs->get());
//   if (!server.ok()) return FailService(server.status());
//   return ServeUntilSignal(&*server, obs->get());
//
// Not thread-safe: for main()'s thread.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "rpc/observability.h"
#include "rpc/server.h"

namespace treespec {

struct ServiceFlags {
  std::string listen;
  std::chrono::seconds shutdown_grace{30};
  TlsFiles tls;
};
// The flags above as parsed (after InitServiceMain).
ServiceFlags GetServiceFlags();

// Blocks termination signals (call before any thread starts), installs --help
// listing the binary's flags, accepts dashed flag names, parses argv and asks
// for --sched_slice_us.
void InitServiceMain(int argc, char** argv, const char* usage);

// Prints "<program>: <CODE>: <message>" on stderr and returns 1, the exit
// code of a service that could not start.
int FailService(const absl::Status& status);

// ServiceObservability::Start with the flags; `rank` >= 0 labels traces
// treespec.rank.
absl::StatusOr<std::unique_ptr<ServiceObservability>> StartServiceObservability(
    const std::string& default_service_name, int rank = -1);

// StartServer on --listen with the TLS flags and `obs`'s interceptors;
// `untraced` methods get metrics but no server span. With --tls_ca, clients
// must present a certificate signed by it unless `require_client_cert` is
// false (the coordinator's --public_client_certs=optional); one they present
// is verified either way.
absl::StatusOr<RunningServer> StartServiceServer(const std::vector<grpc::Service*>& services,
                                                 ServiceObservability* obs,
                                                 std::set<std::string> untraced = {},
                                                 bool require_client_cert = true);

// Marks the service serving, prints `listening on HOST:PORT`, waits for
// SIGTERM/SIGINT, then drains for at most --shutdown_grace_s. `at_grace_end`
// runs shortly before the grace runs out if calls are still in flight, so
// they can end with a status of their own before gRPC cancels them;
// `after_drain` runs once in-flight calls have finished, before observability
// shuts down. Returns the process exit code.
int ServeUntilSignal(RunningServer* server, ServiceObservability* obs,
                     const std::function<void()>& after_drain = nullptr,
                     const std::function<void()>& at_grace_end = nullptr);

}  // namespace treespec
