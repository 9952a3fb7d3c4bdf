#include "rpc/health_port.h"

#include "absl/strings/str_cat.h"
#include "grpcpp/health_check_service_interface.h"

namespace treespec {

absl::StatusOr<std::unique_ptr<HealthPort>> HealthPort::Start(const std::string& host, int port) {
  grpc::EnableDefaultHealthCheckService(true);
  grpc::ServerBuilder builder;
  int bound = 0;
  const std::string listen = absl::StrCat(host, ":", port);
  builder.AddListeningPort(listen, grpc::InsecureServerCredentials(), &bound);
  auto h = std::unique_ptr<HealthPort>(new HealthPort());
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (server == nullptr || bound == 0) {
    return absl::UnavailableError(absl::StrCat("--health_port: cannot listen on '", listen, "'"));
  }
  server->GetHealthCheckService()->SetServingStatus("", false);
  server->GetHealthCheckService()->SetServingStatus(kLivenessService, true);
  absl::MutexLock lock(&h->mu_);
  h->server_ = std::move(server);
  h->address_ = absl::StrCat(host, ":", bound);
  return h;
}

HealthPort::~HealthPort() { Shutdown(); }

void HealthPort::SetServing(bool serving) {
  absl::MutexLock lock(&mu_);
  if (server_ == nullptr || broken_) return;
  server_->GetHealthCheckService()->SetServingStatus("", serving);
}

void HealthPort::SetBroken() {
  absl::MutexLock lock(&mu_);
  broken_ = true;
  if (server_ == nullptr) return;
  server_->GetHealthCheckService()->SetServingStatus("", false);
  server_->GetHealthCheckService()->SetServingStatus(kLivenessService, false);
}

void HealthPort::Shutdown() {
  std::unique_ptr<grpc::Server> server;
  {
    absl::MutexLock lock(&mu_);
    server = std::move(server_);
  }
  if (server != nullptr) server->Shutdown(std::chrono::system_clock::now());
}

}  // namespace treespec
