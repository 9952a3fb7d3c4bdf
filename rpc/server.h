// Starting a gRPC server the way every treespec binary does: listening on
// HOST:PORT (port 0 picks a free one), with grpc.health.v1 and server
// reflection registered, TLS when certificate files are given.
//
// TLS: with `cert` and `key` the server speaks TLS only. With `ca` as well it
// asks every client for a certificate and verifies it against `ca` (chain and
// validity period): a client without one is refused during the handshake
// unless `require_client_cert` is false, and a certificate that does not verify
// (another CA, expired) is refused either way. Clients (MakeChannel) verify the
// server against `ca` and present `cert` when given.
#pragma once

#include <chrono>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "grpcpp/grpcpp.h"
#include "grpcpp/support/server_interceptor.h"
#include "rpc/step_stream.h"

namespace treespec {

struct TlsFiles {
  std::string cert;  // PEM certificate chain; empty: plaintext
  std::string key;   // PEM private key
  std::string ca;    // PEM CA bundle for clients (and for verifying peers)
  // Server side, with `ca`: refuse clients that present no certificate.
  bool require_client_cert = true;
  bool enabled() const { return !cert.empty(); }
};

struct RunningServer {
  std::unique_ptr<grpc::Server> server;
  std::string address;  // HOST:PORT actually bound
  std::vector<StepStreamService*> stream_services;  // among the services

  // Closes the step streams (rpc/step_stream.h), then shuts the server down:
  // calls still running may finish until `deadline`. Then waits for it.
  void Shutdown(std::chrono::system_clock::time_point deadline);
};

// Builds and starts a server for `services` on `listen`. The health service
// reports SERVING for "" once started.
// `interceptors` (rpc/observability.h) are installed on the server;
// `stream_calls` records each request on a step stream (the services that are
// StepStreamServices get it).
absl::StatusOr<RunningServer> StartServer(
    const std::string& listen, const std::vector<grpc::Service*>& services,
    const TlsFiles& tls = {},
    std::vector<std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>>
        interceptors = {},
    StreamCallRecorder stream_calls = {});

// The full names of the step-stream methods among `services`.
std::set<std::string> StepStreamMethods(const std::vector<grpc::Service*>& services);

// INVALID_ARGUMENT naming the flags when a server's TLS files do not make
// sense: a certificate without its key (or the reverse), or a CA (client
// verification) on a server without a certificate, which would be plaintext.
absl::Status CheckTlsFiles(const TlsFiles& tls);

// Client channel credentials: TLS with `tls.ca` if set, else insecure.
std::shared_ptr<grpc::ChannelCredentials> ClientCredentials(const TlsFiles& tls);
std::shared_ptr<grpc::Channel> MakeChannel(const std::string& address, const TlsFiles& tls);

// Splits "host:port"; INVALID_ARGUMENT naming `flag` on a bad value.
absl::Status CheckHostPort(const std::string& flag, const std::string& value);

}  // namespace treespec
