// Step streams: a per-step unary method (Worker.Verify, Drafter.Draft) served
// on long-lived bidirectional streams (Worker.VerifyStream,
// Drafter.DraftStream), one request answered per response, in order.
//
// Why: a step loop makes one or two of these calls per step, and a unary gRPC
// call costs its setup and teardown every time (initial metadata, trailers, a
// new HTTP/2 stream, the server's call object and the interceptors). On the
// 2-core VMs here an empty unary round trip on loopback took 96-115 us with
// the async API and 150-220 us through the sync stubs, against 52-62 us for
// a message each way on an open stream and 42 us for a bare socketpair
// ping-pong (measured 2026-11-27; tools/bench/spec_bench prints both floors
// and the per-step RPC time; docs/operations.md has the tables).
//
// Semantics match the unary call's, so that callers need not care which
// carries their request:
// - The server answers each request with exactly what the unary handler
//   gives. Where the handler fails a request, the stream ends with that status,
//   which the client returns for that request; the next request opens a new
//   stream.
// - A stream that ends without an answer (the server is shutting down, the
//   connection broke) fails the pending request with UNAVAILABLE, as a unary
//   call would; such a request was not handled.
// - Each request has its own deadline on the client. When it passes, the
//   client cancels the stream (the server finishes the request, as it would a
//   unary call whose deadline passed, and drops the answer).
// - Trace context: a unary call carries the caller's OutgoingTrace in its
//   metadata; a stream request carries it in its `trace` field (CallTrace),
//   and the server records each request as the unary method (metrics and a
//   SERVER span; rpc/server_telemetry.h).
// - Servers that do not know the stream method (UNIMPLEMENTED before any
//   answer) get unary calls from then on.
//
// Shutdown: a server's open streams would hold its Shutdown for the whole
// grace period, so RunningServer::Shutdown first closes them (Close): idle
// streams end at once and busy ones after their answer; new streams are
// refused with UNAVAILABLE.
#pragma once

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/strings/str_cat.h"
#include "grpcpp/grpcpp.h"
#include "grpcpp/support/async_stream.h"
#include "grpcpp/support/sync_stream.h"
#include "obs/span.h"
#include "rpc/status_convert.h"
#include "rpc/trace_grpc.h"
#include "treespec/v1/common.pb.h"

namespace treespec {

// The methods' full names.
inline constexpr char kWorkerVerifyMethod[] = "/treespec.v1.Worker/Verify";
inline constexpr char kWorkerVerifyStreamMethod[] = "/treespec.v1.Worker/VerifyStream";
inline constexpr char kDrafterDraftMethod[] = "/treespec.v1.Drafter/Draft";
inline constexpr char kDrafterDraftStreamMethod[] = "/treespec.v1.Drafter/DraftStream";

// ---------------------------------------------------------------- server

// One request handled on a step stream, for telemetry (rpc/server_telemetry.h).
struct StreamCall {
  std::string method;  // the unary method's full name ("/treespec.v1.Worker/Verify")
  std::chrono::steady_clock::time_point start, end;
  int64_t start_unix_ns = 0;
  grpc::Status status;
  const v1::CallTrace* trace = nullptr;  // the request's
};
using StreamCallRecorder = std::function<void(const StreamCall&)>;

// The server side of a service's step streams. Thread-safe.
class StepStreamServer {
 public:
  void SetRecorder(StreamCallRecorder recorder) { recorder_ = std::move(recorder); }

  // Serves `stream` until the client half-closes (OK), a request fails
  // (that status), the client goes away or Close. `handle(req, resp)` is the
  // unary method's handler; `unary_method` its full name.
  template <typename Req, typename Resp, typename Handle>
  grpc::Status Serve(grpc::ServerContext* ctx, grpc::ServerReaderWriter<Resp, Req>* stream,
                     const char* unary_method, Handle&& handle);

  void Close();

 private:
  // Registers `ctx` as idle; false once closed.
  bool Enter(grpc::ServerContext* ctx);
  void Leave(grpc::ServerContext* ctx);
  // Marks `ctx` busy (true) or idle; false once closed.
  bool SetBusy(grpc::ServerContext* ctx, bool busy);
  void Record(const char* method, std::chrono::steady_clock::time_point start,
              int64_t start_unix_ns, const grpc::Status& status, const v1::CallTrace& trace);

  StreamCallRecorder recorder_;
  absl::Mutex mu_;
  bool closed_ ABSL_GUARDED_BY(mu_) = false;
  std::map<grpc::ServerContext*, bool> open_ ABSL_GUARDED_BY(mu_);  // -> busy
};

// A service with step streams derives from this as well as from its
// generated Service and serves them with `streams_`; StartServer finds these
// among its services, hands them the telemetry recorder and closes them on
// Shutdown.
class StepStreamService {
 public:
  virtual ~StepStreamService() = default;
  // Before serving.
  void SetStreamCallRecorder(StreamCallRecorder recorder) {
    streams_.SetRecorder(std::move(recorder));
  }
  // Ends the open streams (idle ones now, busy ones after their answer) and
  // refuses new ones. Thread-safe.
  void CloseStreams() { streams_.Close(); }
  // The stream methods' full names: server-wide interceptors leave them alone
  // (each request is recorded as its unary method instead).
  virtual std::vector<std::string> StreamMethods() const = 0;

 protected:
  StepStreamServer streams_;
};

grpc::Status StreamClosedStatus();

template <typename Req, typename Resp, typename Handle>
grpc::Status StepStreamServer::Serve(grpc::ServerContext* ctx,
                                     grpc::ServerReaderWriter<Resp, Req>* stream,
                                     const char* unary_method, Handle&& handle) {
  if (!Enter(ctx)) return StreamClosedStatus();
  grpc::Status result = grpc::Status::OK;
  Req req;
  Resp resp;
  while (stream->Read(&req)) {
    if (!SetBusy(ctx, true)) {
      result = StreamClosedStatus();
      break;
    }
    const auto start = std::chrono::steady_clock::now();
    const int64_t start_unix_ns = NowUnixNanos();
    resp.Clear();
    grpc::Status st = handle(&req, &resp);
    Record(unary_method, start, start_unix_ns, st, req.trace());
    if (!st.ok()) {
      result = std::move(st);
      break;
    }
    if (!stream->Write(resp)) break;  // the client went away
    if (!SetBusy(ctx, false)) {
      result = StreamClosedStatus();
      break;
    }
    req.Clear();
  }
  Leave(ctx);
  return result;
}

// ---------------------------------------------------------------- client

// One open stream on the client: Send then Receive, one request at a time.
// Not thread-safe: a StepStreamPool lends each to one caller at a time.
template <typename Req, typename Resp>
class ClientStepStream {
 public:
  using ReaderWriter = grpc::ClientAsyncReaderWriter<Req, Resp>;
  using Prepare =
      std::function<std::unique_ptr<ReaderWriter>(grpc::ClientContext*, grpc::CompletionQueue*)>;

  explicit ClientStepStream(const Prepare& prepare) {
    // The stream's headers go with its first request (StartCall sends
    // nothing, and completes no tag).
    ctx_.set_initial_metadata_corked(true);
    rw_ = prepare(&ctx_, &cq_);
    rw_->StartCall(nullptr);
  }
  ~ClientStepStream() {
    if (!ended_) {
      ctx_.TryCancel();
      Drain();
      End();
    }
    cq_.Shutdown();
    void* tag;
    bool ok;
    while (cq_.Next(&tag, &ok)) {
    }
  }
  ClientStepStream(const ClientStepStream&) = delete;
  ClientStepStream& operator=(const ClientStepStream&) = delete;

  // Sends `req` (with the calling thread's trace context) and asks for its
  // answer; Receive waits for it.
  void Send(const Req& req) {
    const OutgoingTrace* t = CurrentOutgoingTrace();
    if (t != nullptr && t->parent.valid()) {
      Req copy = req;
      copy.mutable_trace()->set_traceparent(FormatTraceparent(t->parent));
      if (!t->links.empty()) copy.mutable_trace()->set_links(FormatTraceLinks(t->links));
      rw_->Write(copy, Tag(kWrite));
    } else {
      rw_->Write(req, Tag(kWrite));
    }
    rw_->Read(&resp_, Tag(kRead));
    pending_ += 2;
  }

  // The answer to the last Send, or why there is none; after a failure the
  // stream is broken() and is dropped.
  absl::StatusOr<Resp> Receive(std::chrono::system_clock::time_point deadline) {
    bool failed = false;
    while (pending_ > 0) {
      void* tag = nullptr;
      bool ok = false;
      const auto next = cq_.AsyncNext(&tag, &ok, deadline);
      if (next == grpc::CompletionQueue::TIMEOUT) {
        ctx_.TryCancel();
        Drain();
        End();
        return absl::DeadlineExceededError("Deadline Exceeded");
      }
      if (next == grpc::CompletionQueue::SHUTDOWN) {
        failed = true;
        break;
      }
      --pending_;
      if (!ok) failed = true;
    }
    if (!failed) {
      ++answered_;
      return std::move(resp_);
    }
    End();
    if (status_.ok()) return absl::UnavailableError("step stream ended without an answer");
    if (status_.error_code() == grpc::StatusCode::CANCELLED) {
      // The server cancelled the stream (closing it for shutdown).
      return absl::UnavailableError(
          absl::StrCat("step stream closed by the server: ", status_.error_message()));
    }
    return FromGrpc(status_);
  }

  bool broken() const { return ended_; }
  bool answered() const { return answered_ > 0; }
  // Whether the stream ended UNIMPLEMENTED before any answer: the server does
  // not know the stream method.
  bool unimplemented() const {
    return ended_ && answered_ == 0 && status_.error_code() == grpc::StatusCode::UNIMPLEMENTED;
  }

 private:
  enum TagKind : intptr_t { kWrite = 1, kRead, kFinish };
  static void* Tag(TagKind k) { return reinterpret_cast<void*>(k); }

  // Waits for every pending operation.
  void Drain() {
    while (pending_ > 0) {
      void* tag;
      bool ok;
      if (!cq_.Next(&tag, &ok)) break;
      --pending_;
    }
  }
  // Gets the stream's final status (after every pending operation).
  void End() {
    if (ended_) return;
    ended_ = true;
    rw_->Finish(&status_, Tag(kFinish));
    void* tag;
    bool ok;
    cq_.Next(&tag, &ok);
  }

  grpc::ClientContext ctx_;
  grpc::CompletionQueue cq_;
  std::unique_ptr<ReaderWriter> rw_;
  Resp resp_;
  grpc::Status status_;
  int pending_ = 0;
  int64_t answered_ = 0;
  bool ended_ = false;
};

// The open streams of one client of one method; callers take one, use it and
// give it back. Thread-safe.
template <typename Req, typename Resp>
class StepStreamPool {
 public:
  using Stream = ClientStepStream<Req, Resp>;
  explicit StepStreamPool(typename Stream::Prepare prepare,
                          std::chrono::steady_clock::duration max_idle = std::chrono::seconds(10))
      : prepare_(std::move(prepare)), max_idle_(max_idle) {}

  // Whether the server has the stream method (as far as is known), and
  // whether it is known to (a stream has answered).
  bool supported() const {
    absl::MutexLock lock(&mu_);
    return supported_;
  }
  bool confirmed() const {
    absl::MutexLock lock(&mu_);
    return confirmed_;
  }
  // The most recently used idle stream, or a new one. Streams idle for
  // longer than `max_idle` are closed instead: a connection idle that long
  // may have been cut by something between (a proxy's idle timeout), which
  // the next request would find as a failure, where a new stream on the
  // channel reconnects first.
  std::unique_ptr<Stream> Take() {
    std::vector<std::unique_ptr<Stream>> stale;
    std::unique_ptr<Stream> s;
    {
      absl::MutexLock lock(&mu_);
      const auto now = std::chrono::steady_clock::now();
      size_t fresh = 0;  // idle_ is in order of return: the stale ones first
      while (fresh < idle_.size() && now - idle_[fresh].since > max_idle_) ++fresh;
      for (size_t i = 0; i < fresh; ++i) stale.push_back(std::move(idle_[i].stream));
      idle_.erase(idle_.begin(), idle_.begin() + static_cast<std::ptrdiff_t>(fresh));
      if (!idle_.empty()) {
        s = std::move(idle_.back().stream);
        idle_.pop_back();
      }
    }
    if (s == nullptr) s = std::make_unique<Stream>(prepare_);
    return s;
  }
  // Keeps `s` for the next caller unless it broke.
  void Give(std::unique_ptr<Stream> s) {
    absl::MutexLock lock(&mu_);
    if (s->unimplemented()) supported_ = false;
    if (s->answered()) confirmed_ = true;
    if (!s->broken()) idle_.push_back({std::move(s), std::chrono::steady_clock::now()});
  }

  // One request's round trip; `unary` makes the call instead when the server
  // has no stream method.
  template <typename Unary>
  absl::StatusOr<Resp> Call(const Req& req, std::chrono::milliseconds timeout, Unary&& unary) {
    if (!supported()) return unary();
    std::unique_ptr<Stream> s = Take();
    s->Send(req);
    absl::StatusOr<Resp> out = s->Receive(std::chrono::system_clock::now() + timeout);
    const bool unimplemented = s->unimplemented();
    Give(std::move(s));
    if (unimplemented) return unary();
    return out;
  }

 private:
  struct Idle {
    std::unique_ptr<Stream> stream;
    std::chrono::steady_clock::time_point since;
  };
  const typename Stream::Prepare prepare_;
  const std::chrono::steady_clock::duration max_idle_;
  mutable absl::Mutex mu_;
  bool supported_ ABSL_GUARDED_BY(mu_) = true;
  bool confirmed_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<Idle> idle_ ABSL_GUARDED_BY(mu_);
};

}  // namespace treespec
