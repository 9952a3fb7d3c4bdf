#include "coordinator/clients.h"
#include "rpc/status_convert.h"
#include "rpc/step_stream.h"
#include "rpc/trace_grpc.h"
#include "treespec/v1/drafter.grpc.pb.h"
#include "treespec/v1/worker.grpc.pb.h"

namespace treespec {

namespace {

class ThreadPendingDraft final : public PendingDraft {
 public:
  ThreadPendingDraft(DrafterClient* client, v1::DraftRequest req, std::chrono::milliseconds timeout)
      : thread_([this, client, req = std::move(req), timeout] {
          result_ = client->Draft(req, timeout);
        }) {}
  ~ThreadPendingDraft() override {
    if (thread_.joinable()) thread_.join();
  }
  absl::StatusOr<v1::DraftResponse> Wait() override {
    thread_.join();
    return std::move(result_);
  }

 private:
  absl::StatusOr<v1::DraftResponse> result_ = absl::UnknownError("not done");
  std::thread thread_;  // last: it writes result_
};

}  // namespace

std::unique_ptr<PendingDraft> DrafterClient::StartDraft(const v1::DraftRequest& req,
                                                        std::chrono::milliseconds timeout) {
  return std::make_unique<ThreadPendingDraft>(this, req, timeout);
}

namespace {

template <typename Resp, typename Call>
absl::StatusOr<Resp> Unary(std::chrono::milliseconds timeout, Call call) {
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + timeout);
  InjectTraceContext(&ctx);  // the calling lane's batch trace, if any
  Resp resp;
  grpc::Status st = call(&ctx, &resp);
  if (!st.ok()) return FromGrpc(st);
  return resp;
}

class GrpcWorkerClient final : public WorkerClient {
 public:
  GrpcWorkerClient(std::string address, const TlsFiles& tls)
      : address_(std::move(address)),
        stub_(v1::Worker::NewStub(MakeChannel(address_, tls))),
        verify_streams_([stub = stub_.get()](grpc::ClientContext* c, grpc::CompletionQueue* cq) {
          return stub->PrepareAsyncVerifyStream(c, cq);
        }) {}
  const std::string& address() const override { return address_; }
  absl::StatusOr<v1::WorkerOpenResponse> Open(const v1::WorkerOpenRequest& req,
                                              std::chrono::milliseconds t) override {
    return Unary<v1::WorkerOpenResponse>(
        t, [&](grpc::ClientContext* c, v1::WorkerOpenResponse* r) { return stub_->Open(c, req, r); });
  }
  absl::StatusOr<v1::VerifyResponse> Verify(const v1::VerifyRequest& req,
                                            std::chrono::milliseconds t) override {
    return verify_streams_.Call(req, t, [&] {
      return Unary<v1::VerifyResponse>(t, [&](grpc::ClientContext* c, v1::VerifyResponse* r) {
        return stub_->Verify(c, req, r);
      });
    });
  }
  absl::Status Release(const v1::ReleaseRequest& req, std::chrono::milliseconds t) override {
    return Unary<v1::ReleaseResponse>(
               t, [&](grpc::ClientContext* c, v1::ReleaseResponse* r) {
                 return stub_->Release(c, req, r);
               })
        .status();
  }
  absl::StatusOr<v1::WorkerInfo> Info(std::chrono::milliseconds t) override {
    v1::GetWorkerInfoRequest req;
    return Unary<v1::WorkerInfo>(
        t, [&](grpc::ClientContext* c, v1::WorkerInfo* r) { return stub_->GetWorkerInfo(c, req, r); });
  }

 private:
  std::string address_;
  std::unique_ptr<v1::Worker::Stub> stub_;
  StepStreamPool<v1::VerifyRequest, v1::VerifyResponse> verify_streams_;
};

using DraftStreams = StepStreamPool<v1::DraftRequest, v1::DraftResponse>;

// A request on a step stream taken from the pool: sent from the calling
// thread; Wait polls the stream's queue for the answer and gives the stream
// back. Destroyed unwaited, it cancels the stream.
class StreamPendingDraft final : public PendingDraft {
 public:
  StreamPendingDraft(DrafterClient* client, DraftStreams* pool, const v1::DraftRequest& req,
                     std::chrono::milliseconds timeout)
      : client_(client),
        pool_(pool),
        timeout_(timeout),
        stream_(pool->Take()),
        deadline_(std::chrono::system_clock::now() + timeout) {
    stream_->Send(req);
    // Kept for the unary call while the server may not have the stream method.
    if (!pool->confirmed()) {
      req_ = req;
      kept_ = true;
    }
  }
  absl::StatusOr<v1::DraftResponse> Wait() override {
    absl::StatusOr<v1::DraftResponse> out = stream_->Receive(deadline_);
    const bool unimplemented = stream_->unimplemented();
    pool_->Give(std::move(stream_));
    // A server without the stream method: the unary call now.
    if (unimplemented && kept_) return client_->Draft(req_, timeout_);
    return out;
  }

 private:
  DrafterClient* const client_;
  DraftStreams* const pool_;
  v1::DraftRequest req_;
  bool kept_ = false;
  const std::chrono::milliseconds timeout_;
  std::unique_ptr<DraftStreams::Stream> stream_;
  const std::chrono::system_clock::time_point deadline_;
};

// An async unary call on a completion queue of its own: sent from the
// calling thread; Wait polls the queue for the answer.
class GrpcPendingDraft final : public PendingDraft {
 public:
  GrpcPendingDraft(v1::Drafter::Stub* stub, const v1::DraftRequest& req,
                   std::chrono::milliseconds timeout) {
    ctx_.set_deadline(std::chrono::system_clock::now() + timeout);
    InjectTraceContext(&ctx_);
    reader_ = stub->PrepareAsyncDraft(&ctx_, req, &cq_);
    reader_->StartCall();
    reader_->Finish(&resp_, &status_, this);
  }
  ~GrpcPendingDraft() override {
    if (!waited_) {
      ctx_.TryCancel();
      Next();
    }
    cq_.Shutdown();
    void* tag;
    bool ok;
    while (cq_.Next(&tag, &ok)) {
    }
  }
  absl::StatusOr<v1::DraftResponse> Wait() override {
    Next();
    if (!status_.ok()) return FromGrpc(status_);
    return std::move(resp_);
  }

 private:
  void Next() {
    void* tag = nullptr;
    bool ok = false;
    cq_.Next(&tag, &ok);
    waited_ = true;
  }

  grpc::ClientContext ctx_;
  grpc::CompletionQueue cq_;
  v1::DraftResponse resp_;
  grpc::Status status_;
  std::unique_ptr<grpc::ClientAsyncResponseReader<v1::DraftResponse>> reader_;
  bool waited_ = false;
};

class GrpcDrafterClient final : public DrafterClient {
 public:
  GrpcDrafterClient(std::string address, const TlsFiles& tls)
      : address_(std::move(address)),
        stub_(v1::Drafter::NewStub(MakeChannel(address_, tls))),
        draft_streams_([stub = stub_.get()](grpc::ClientContext* c, grpc::CompletionQueue* cq) {
          return stub->PrepareAsyncDraftStream(c, cq);
        }) {}
  const std::string& address() const override { return address_; }
  absl::StatusOr<v1::DrafterOpenResponse> Open(const v1::DrafterOpenRequest& req,
                                               std::chrono::milliseconds t) override {
    return Unary<v1::DrafterOpenResponse>(t, [&](grpc::ClientContext* c, v1::DrafterOpenResponse* r) {
      return stub_->Open(c, req, r);
    });
  }
  absl::StatusOr<v1::DraftResponse> Draft(const v1::DraftRequest& req,
                                          std::chrono::milliseconds t) override {
    return draft_streams_.Call(req, t, [&] {
      return Unary<v1::DraftResponse>(
          t, [&](grpc::ClientContext* c, v1::DraftResponse* r) { return stub_->Draft(c, req, r); });
    });
  }
  std::unique_ptr<PendingDraft> StartDraft(const v1::DraftRequest& req,
                                           std::chrono::milliseconds t) override {
    if (draft_streams_.supported()) {
      return std::make_unique<StreamPendingDraft>(this, &draft_streams_, req, t);
    }
    return std::make_unique<GrpcPendingDraft>(stub_.get(), req, t);
  }
  absl::Status Release(const v1::ReleaseDraftsRequest& req, std::chrono::milliseconds t) override {
    return Unary<v1::ReleaseDraftsResponse>(t, [&](grpc::ClientContext* c,
                                                   v1::ReleaseDraftsResponse* r) {
             return stub_->Release(c, req, r);
           })
        .status();
  }
  absl::StatusOr<v1::DrafterInfoResponse> Info(std::chrono::milliseconds t) override {
    v1::GetDrafterInfoRequest req;
    return Unary<v1::DrafterInfoResponse>(t, [&](grpc::ClientContext* c, v1::DrafterInfoResponse* r) {
      return stub_->GetDrafterInfo(c, req, r);
    });
  }

 private:
  std::string address_;
  std::unique_ptr<v1::Drafter::Stub> stub_;
  DraftStreams draft_streams_;
};

}  // namespace

std::unique_ptr<WorkerClient> MakeGrpcWorkerClient(const std::string& address,
                                                   const TlsFiles& tls) {
  return std::make_unique<GrpcWorkerClient>(address, tls);
}

std::unique_ptr<DrafterClient> MakeGrpcDrafterClient(const std::string& address,
                                                     const TlsFiles& tls) {
  return std::make_unique<GrpcDrafterClient>(address, tls);
}

}  // namespace treespec
