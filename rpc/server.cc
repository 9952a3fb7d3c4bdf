#include "rpc/server.h"

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "core/util/mapped_file.h"
#include "grpcpp/ext/proto_server_reflection_plugin.h"
#include "grpcpp/health_check_service_interface.h"

namespace treespec {

absl::Status CheckHostPort(const std::string& flag, const std::string& value) {
  size_t colon = value.rfind(':');
  int port = -1;
  if (colon == std::string::npos || colon == 0 ||
      !absl::SimpleAtoi(value.substr(colon + 1), &port) || port < 0 || port > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat(flag, ": '", value, "' is not HOST:PORT (port 0-65535)"));
  }
  return absl::OkStatus();
}

absl::Status CheckTlsFiles(const TlsFiles& tls) {
  if (tls.cert.empty() != tls.key.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--tls_cert and --tls_key go together (got --tls_cert='", tls.cert, "', --tls_key='",
        tls.key, "')"));
  }
  if (!tls.ca.empty() && tls.cert.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--tls_ca='", tls.ca, "' without --tls_cert/--tls_key: the server would listen in "
        "plaintext"));
  }
  return absl::OkStatus();
}

namespace {

absl::StatusOr<std::string> ReadPem(const char* flag, const std::string& path) {
  absl::StatusOr<std::string> pem = ReadFileToString(path);
  if (!pem.ok()) {
    return absl::Status(pem.status().code(), absl::StrCat(flag, ": ", pem.status().message()));
  }
  return pem;
}

absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> ServerCredentials(const TlsFiles& tls) {
  if (!tls.enabled()) return grpc::InsecureServerCredentials();
  auto cert = ReadPem("--tls_cert", tls.cert);
  if (!cert.ok()) return cert.status();
  auto key = ReadPem("--tls_key", tls.key);
  if (!key.ok()) return key.status();
  grpc::SslServerCredentialsOptions opts;
  opts.pem_key_cert_pairs.push_back({*key, *cert});
  if (!tls.ca.empty()) {
    auto ca = ReadPem("--tls_ca", tls.ca);
    if (!ca.ok()) return ca.status();
    opts.pem_root_certs = *ca;
    // The default (GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE) would accept
    // any client: mutual TLS needs the server to ask and to verify.
    opts.client_certificate_request =
        tls.require_client_cert ? GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY
                                : GRPC_SSL_REQUEST_CLIENT_CERTIFICATE_AND_VERIFY;
  }
  return grpc::SslServerCredentials(opts);
}

}  // namespace

absl::StatusOr<RunningServer> StartServer(
    const std::string& listen, const std::vector<grpc::Service*>& services, const TlsFiles& tls,
    std::vector<std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>>
        interceptors,
    StreamCallRecorder stream_calls) {
  if (absl::Status st = CheckHostPort("--listen", listen); !st.ok()) return st;
  if (absl::Status st = CheckTlsFiles(tls); !st.ok()) return st;
  grpc::EnableDefaultHealthCheckService(true);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  grpc::ServerBuilder builder;
  absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> creds = ServerCredentials(tls);
  if (!creds.ok()) return creds.status();
  int port = 0;
  builder.AddListeningPort(listen, *creds, &port);
  builder.SetMaxReceiveMessageSize(64 << 20);
  builder.SetMaxSendMessageSize(64 << 20);
  RunningServer out;
  for (grpc::Service* s : services) {
    builder.RegisterService(s);
    if (auto* streams = dynamic_cast<StepStreamService*>(s); streams != nullptr) {
      streams->SetStreamCallRecorder(stream_calls);
      out.stream_services.push_back(streams);
    }
  }
  if (!interceptors.empty()) builder.experimental().SetInterceptorCreators(std::move(interceptors));
  out.server = builder.BuildAndStart();
  if (out.server == nullptr || port == 0) {
    return absl::UnavailableError(absl::StrCat("--listen: cannot listen on '", listen, "'"));
  }
  out.server->GetHealthCheckService()->SetServingStatus(true);
  out.address = absl::StrCat(listen.substr(0, listen.rfind(':')), ":", port);
  return out;
}

std::set<std::string> StepStreamMethods(const std::vector<grpc::Service*>& services) {
  std::set<std::string> out;
  for (grpc::Service* s : services) {
    if (auto* streams = dynamic_cast<StepStreamService*>(s); streams != nullptr) {
      for (std::string& m : streams->StreamMethods()) out.insert(std::move(m));
    }
  }
  return out;
}

void RunningServer::Shutdown(std::chrono::system_clock::time_point deadline) {
  for (StepStreamService* s : stream_services) s->CloseStreams();
  server->Shutdown(deadline);
  server->Wait();
}

std::shared_ptr<grpc::ChannelCredentials> ClientCredentials(const TlsFiles& tls) {
  if (tls.ca.empty()) return grpc::InsecureChannelCredentials();
  grpc::SslCredentialsOptions opts;
  auto ca = ReadFileToString(tls.ca);
  if (ca.ok()) opts.pem_root_certs = *ca;
  if (tls.enabled()) {
    auto cert = ReadFileToString(tls.cert);
    auto key = ReadFileToString(tls.key);
    if (cert.ok() && key.ok()) {
      opts.pem_cert_chain = *cert;
      opts.pem_private_key = *key;
    }
  }
  return grpc::SslCredentials(opts);
}

std::shared_ptr<grpc::Channel> MakeChannel(const std::string& address, const TlsFiles& tls) {
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(64 << 20);
  args.SetMaxSendMessageSize(64 << 20);
  return grpc::CreateCustomChannel(address, ClientCredentials(tls), args);
}

}  // namespace treespec
