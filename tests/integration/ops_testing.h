// Test helpers for the operations tests (observability, shutdown, loadgen):
// service binaries as processes whose stdout and stderr go to files (so a
// test can read the addresses they print and check their logs), a
// three-process deployment, an in-process OTLP/HTTP receiver, /metrics
// scraping and grpc.health.v1 checks.
//
// Header-only (the integration CMake builds one executable per *_test.cc).
// ServiceProcess must be created on the test's main thread (the child dies
// with the thread that forked it, PR_SET_PDEATHSIG).
#pragma once

#include <fcntl.h>
#include <httplib.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <future>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/mutex.h"
#include "grpcpp/generic/generic_stub.h"
#include "grpcpp/grpcpp.h"
#include "opentelemetry/proto/collector/trace/v1/trace_service.pb.h"
#include "tests/integration/cluster.h"

namespace treespec::testing {

inline std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// A fresh directory for the services' logs, removed when the test binary
// exits (the test suites' fixtures keep their services, and so the logs they
// write into it, until then).
inline std::string TempDir() {
  struct Created {
    absl::Mutex mu;
    std::vector<std::string> dirs;
    ~Created() {
      std::error_code ec;
      for (const std::string& d : dirs) std::filesystem::remove_all(d, ec);
    }
  };
  static Created created;
  std::string tmpl = (std::filesystem::temp_directory_path() / "treespec-ops-XXXXXX").string();
  const char* d = mkdtemp(tmpl.data());
  if (d == nullptr) return std::filesystem::temp_directory_path().string();
  absl::MutexLock lock(&created.mu);
  created.dirs.push_back(d);
  return d;
}

// A service binary whose stdout and stderr are written to `log_prefix`.out /
// .err. Start() returns once the child printed a line starting with
// `ready` ("listening on " by default); the "metrics on", "health on" and
// "listening on" lines printed by then are parsed.
class ServiceProcess {
 public:
  static absl::StatusOr<std::unique_ptr<ServiceProcess>> Start(
      const std::vector<std::string>& argv, const std::string& log_prefix,
      std::chrono::milliseconds timeout = std::chrono::milliseconds(60000),
      const std::string& ready = "listening on ") {
    auto p = std::unique_ptr<ServiceProcess>(new ServiceProcess());
    p->out_path_ = log_prefix + ".out";
    p->err_path_ = log_prefix + ".err";
    std::vector<char*> args;
    for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    const int out = open(p->out_path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    const int err = open(p->err_path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (out < 0 || err < 0) return absl::InternalError("cannot create log files");
    const pid_t pid = fork();
    if (pid < 0) return absl::InternalError("fork failed");
    if (pid == 0) {
      prctl(PR_SET_PDEATHSIG, SIGKILL);
      dup2(out, 1);
      dup2(err, 2);
      execv(args[0], args.data());
      _exit(127);
    }
    close(out);
    close(err);
    p->pid_ = pid;
    const auto until = std::chrono::steady_clock::now() + timeout;
    while (std::chrono::steady_clock::now() < until) {
      bool is_ready = false;
      for (absl::string_view line : absl::StrSplit(ReadFile(p->out_path_), '\n')) {
        is_ready |= absl::StartsWith(line, ready);
        if (absl::ConsumePrefix(&line, "metrics on ")) p->metrics_ = std::string(line);
        if (absl::ConsumePrefix(&line, "health on ")) p->health_ = std::string(line);
        if (absl::ConsumePrefix(&line, "listening on ")) p->address_ = std::string(line);
      }
      if (is_ready) return p;
      int status = 0;
      if (waitpid(pid, &status, WNOHANG) == pid) {
        p->pid_ = -1;
        return absl::UnavailableError(absl::StrCat("`", argv[0], "` exited (status ", status,
                                                   "): ", ReadFile(p->err_path_)));
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return absl::DeadlineExceededError(absl::StrCat("`", argv[0], "` printed no address"));
  }

  ~ServiceProcess() {
    if (pid_ > 0) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
  }

  const std::string& address() const { return address_; }
  const std::string& metrics() const { return metrics_; }
  const std::string& health() const { return health_; }
  std::string log() const { return ReadFile(out_path_) + ReadFile(err_path_); }
  // The rest of the first stdout line starting with `prefix` ("" if none yet).
  std::string Line(const std::string& prefix) const {
    for (absl::string_view line : absl::StrSplit(ReadFile(out_path_), '\n')) {
      if (absl::ConsumePrefix(&line, prefix)) return std::string(line);
    }
    return "";
  }
  void Signal(int sig) {
    if (pid_ > 0) kill(pid_, sig);
  }
  bool running() {
    if (pid_ <= 0) return false;
    if (waitpid(pid_, &status_, WNOHANG) == pid_) pid_ = -1;
    return pid_ > 0;
  }
  // Waits for the exit; returns the wait status, or -1 on timeout.
  int Wait(std::chrono::milliseconds timeout) {
    const auto until = std::chrono::steady_clock::now() + timeout;
    while (running()) {
      if (std::chrono::steady_clock::now() >= until) return -1;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return status_;
  }

 private:
  ServiceProcess() = default;
  pid_t pid_ = -1;
  int status_ = -1;
  std::string out_path_, err_path_, address_, metrics_, health_;
};

inline bool HaveDemoModels() {
  return std::ifstream(std::string(TREESPEC_SOURCE_DIR) + "/models/demo/target/config.json").good() &&
         std::ifstream(std::string(TREESPEC_SOURCE_DIR) + "/models/demo/mamba-drafter/config.json")
             .good();
}
inline std::string DemoModel(const std::string& name) {
  return std::string(TREESPEC_SOURCE_DIR) + "/models/demo/" + name;
}

// Worker, Mamba drafter ("mamba") and coordinator binaries on loopback with
// the demo models (text prompts work: the coordinator has the tokenizer).
struct Deployment {
  std::string dir;  // logs
  std::unique_ptr<ServiceProcess> worker, drafter, coordinator;

  static absl::StatusOr<std::unique_ptr<Deployment>> Start(
      const std::vector<std::string>& common_flags,
      const std::vector<std::string>& coordinator_flags = {}) {
    auto d = std::make_unique<Deployment>();
    d->dir = TempDir();
    auto with = [&](std::vector<std::string> argv, const std::vector<std::string>& more) {
      argv.insert(argv.end(), common_flags.begin(), common_flags.end());
      argv.insert(argv.end(), more.begin(), more.end());
      return argv;
    };
    auto w = ServiceProcess::Start(
        with({BinaryPath("treespec-worker"), "--model", DemoModel("target"), "--listen",
              "127.0.0.1:0", "--kv_tokens", "8192"},
             {}),
        d->dir + "/worker");
    if (!w.ok()) return w.status();
    d->worker = std::move(*w);
    auto dr = ServiceProcess::Start(
        with({BinaryPath("treespec-drafter"), "--kind", "mamba", "--model",
              DemoModel("mamba-drafter"), "--listen", "127.0.0.1:0"},
             {}),
        d->dir + "/drafter");
    if (!dr.ok()) return dr.status();
    d->drafter = std::move(*dr);
    auto c = ServiceProcess::Start(
        with({BinaryPath("treespec-coordinator"), "--listen", "127.0.0.1:0", "--workers",
              d->worker->address(), "--drafters", "mamba=" + d->drafter->address(),
              "--tokenizer", DemoModel("target")},
             coordinator_flags),
        d->dir + "/coordinator");
    if (!c.ok()) return c.status();
    d->coordinator = std::move(*c);
    return d;
  }

  std::unique_ptr<v1::Generation::Stub> Stub() const {
    return v1::Generation::NewStub(
        grpc::CreateChannel(coordinator->address(), grpc::InsecureChannelCredentials()));
  }
  // Everything the three processes logged.
  std::string Logs() const { return worker->log() + drafter->log() + coordinator->log(); }
};

// A text-prompt request.
inline v1::GenerateRequest TextRequest(const std::string& text, int max_tokens,
                                       const std::string& drafter = "mamba") {
  v1::GenerateRequest r;
  r.set_text(text);
  r.set_max_tokens(max_tokens);
  r.set_ignore_eos(true);
  r.mutable_speculation()->set_drafter(drafter);
  return r;
}

struct StreamResult {
  grpc::Status status;
  std::string text;
  int tokens = 0;
  v1::GenerateResponse final_chunk;
};

// One Generate call with optional metadata (e.g. traceparent).
inline StreamResult Stream(v1::Generation::Stub* stub, const v1::GenerateRequest& req,
                           const std::multimap<std::string, std::string>& metadata = {},
                           std::function<void(int tokens)> on_chunk = nullptr) {
  StreamResult out;
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(120));
  for (const auto& [k, v] : metadata) ctx.AddMetadata(k, v);
  auto reader = stub->Generate(&ctx, req);
  v1::GenerateResponse chunk;
  while (reader->Read(&chunk)) {
    out.text += chunk.text();
    out.tokens += chunk.token_ids_size();
    if (chunk.finish_reason() != v1::FINISH_REASON_UNSPECIFIED) out.final_chunk = chunk;
    if (on_chunk) on_chunk(out.tokens);
  }
  out.status = reader->Finish();
  return out;
}

// grpc.health.v1.Health/Check for `service`: 1 SERVING, 2 NOT_SERVING, -1
// on an RPC error (e.g. nothing listening, or an unknown service).
inline int HealthStatus(const std::string& address, const std::string& service = "") {
  auto channel = grpc::CreateChannel(address, grpc::InsecureChannelCredentials());
  grpc::GenericStub stub(channel);
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::milliseconds(2000));
  // HealthCheckRequest{service = 1 (string)}.
  std::string req_bytes;
  if (!service.empty()) req_bytes = std::string("\x0a") + static_cast<char>(service.size()) + service;
  grpc::Slice req_slice(req_bytes);
  grpc::ByteBuffer request(&req_slice, 1), response;
  std::promise<grpc::Status> done;
  stub.UnaryCall(&ctx, "/grpc.health.v1.Health/Check", grpc::StubOptions(), &request, &response,
                 [&](grpc::Status s) { done.set_value(s); });
  grpc::Status st = done.get_future().get();
  if (!st.ok()) return -1;
  std::vector<grpc::Slice> slices;
  if (!response.Dump(&slices).ok()) return -1;
  std::string bytes;
  for (const grpc::Slice& s : slices) bytes.append(reinterpret_cast<const char*>(s.begin()), s.size());
  if (bytes.size() == 2 && bytes[0] == 0x08) return bytes[1];
  return bytes.empty() ? 0 : -1;
}

// GET http://HOST:PORT/metrics; empty on failure.
inline std::string ScrapeMetrics(const std::string& host_port) {
  httplib::Client client("http://" + host_port);
  client.set_connection_timeout(std::chrono::seconds(5));
  client.set_read_timeout(std::chrono::seconds(5));
  httplib::Result r = client.Get("/metrics");
  if (!r || r->status != 200) return "";
  return r->body;
}

// The value of the sample `series` (name plus labels exactly as exported,
// e.g. `treespec_requests_total{code="OK"}`) in a scrape; -1 if absent.
inline double MetricValue(const std::string& text, const std::string& series) {
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    if (absl::ConsumePrefix(&line, series) && absl::ConsumePrefix(&line, " ")) {
      return std::stod(std::string(line));
    }
  }
  return -1;
}

// The sum of every sample of `name` (any labels) in a scrape.
inline double MetricSum(const std::string& text, const std::string& name) {
  double sum = 0;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    if (line.empty() || line[0] == '#' || !absl::StartsWith(line, name)) continue;
    absl::string_view rest = line.substr(name.size());
    if (!(absl::StartsWith(rest, "{") || absl::StartsWith(rest, " "))) continue;
    sum += std::stod(std::string(line.substr(line.rfind(' ') + 1)));
  }
  return sum;
}

// An OTLP/HTTP trace receiver on 127.0.0.1 (POST /v1/traces, protobuf).
class OtlpReceiver {
 public:
  struct Span {
    std::string service;
    int64_t rank = -1;  // treespec.rank resource attribute
    opentelemetry::proto::trace::v1::Span span;
  };

  OtlpReceiver() {
    server_.Post("/v1/traces", [this](const httplib::Request& req, httplib::Response& res) {
      opentelemetry::proto::collector::trace::v1::ExportTraceServiceRequest export_req;
      if (req.get_header_value("Content-Type") != "application/x-protobuf" ||
          !export_req.ParseFromString(req.body)) {
        res.status = 400;
        return;
      }
      absl::MutexLock lock(&mu_);
      raw_ += req.body;
      for (const auto& rs : export_req.resource_spans()) {
        std::string service;
        int64_t rank = -1;
        for (const auto& kv : rs.resource().attributes()) {
          if (kv.key() == "service.name") service = kv.value().string_value();
          if (kv.key() == "treespec.rank") rank = kv.value().int_value();
        }
        for (const auto& ss : rs.scope_spans()) {
          for (const auto& s : ss.spans()) spans_.push_back({service, rank, s});
        }
      }
      res.set_content("", "application/x-protobuf");
    });
    port_ = server_.bind_to_any_port("127.0.0.1");
    thread_ = std::thread([this] { server_.listen_after_bind(); });
    while (!server_.is_running()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  ~OtlpReceiver() {
    server_.stop();
    thread_.join();
  }
  std::string endpoint() const { return absl::StrCat("http://127.0.0.1:", port_); }
  std::vector<Span> spans() {
    absl::MutexLock lock(&mu_);
    return spans_;
  }
  // Every request body received, concatenated (to search for leaked text).
  std::string raw() {
    absl::MutexLock lock(&mu_);
    return raw_;
  }

 private:
  httplib::Server server_;
  int port_ = 0;
  std::thread thread_;
  absl::Mutex mu_;
  std::vector<Span> spans_;
  std::string raw_;
};

inline std::string Hex(const std::string& bytes) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  for (unsigned char c : bytes) {
    out += kHex[c >> 4];
    out += kHex[c & 15];
  }
  return out;
}

}  // namespace treespec::testing
