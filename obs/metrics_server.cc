#include "obs/metrics_server.h"

#include <httplib.h>

#include <thread>

#include "absl/strings/str_cat.h"

namespace treespec {

struct MetricsServer::Impl {
  httplib::Server server;
  std::thread thread;
};

absl::StatusOr<std::unique_ptr<MetricsServer>> MetricsServer::Start(
    const std::string& host, int port, const MetricsRegistry* registry) {
  auto s = std::unique_ptr<MetricsServer>(new MetricsServer());
  s->impl_ = std::make_unique<Impl>();
  httplib::Server& http = s->impl_->server;
  http.new_task_queue = [] { return new httplib::ThreadPool(2); };
  http.Get("/metrics", [registry](const httplib::Request&, httplib::Response& res) {
    res.set_content(registry->Render(), kPrometheusContentType);
  });
  http.Get("/", [](const httplib::Request&, httplib::Response& res) {
    res.set_content("treespec: metrics at /metrics\n", "text/plain");
  });
  std::string bind_host = host.empty() ? "0.0.0.0" : host;
  // "[::]" (gRPC's spelling of an IPv6 host) binds as "::".
  if (bind_host.size() > 2 && bind_host.front() == '[' && bind_host.back() == ']') {
    bind_host = bind_host.substr(1, bind_host.size() - 2);
  }
  int bound = port;
  if (port == 0) {
    bound = http.bind_to_any_port(bind_host);
  } else if (!http.bind_to_port(bind_host, port)) {
    bound = -1;
  }
  if (bound <= 0) {
    return absl::UnavailableError(
        absl::StrCat("--metrics_port: cannot listen on ", bind_host, ":", port));
  }
  s->address_ = absl::StrCat(host.empty() ? "0.0.0.0" : host, ":", bound);
  s->impl_->thread = std::thread([impl = s->impl_.get()] { impl->server.listen_after_bind(); });
  // stop() only interrupts a server that is already running.
  while (!http.is_running()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  return s;
}

MetricsServer::~MetricsServer() { Stop(); }

void MetricsServer::Stop() {
  if (impl_ == nullptr) return;
  impl_->server.stop();
  if (impl_->thread.joinable()) impl_->thread.join();
  impl_.reset();
}

}  // namespace treespec
