// The coordinator's view of workers and drafters: small interfaces over the
// internal RPCs so that lanes and routing can be tested with fakes, plus the
// gRPC implementations. Messages are the treespec.v1 protos (plain data).
// Thread-safe: calls may come from several lanes at once.
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <thread>

#include "absl/status/statusor.h"
#include "rpc/server.h"
#include "treespec/v1/drafter.pb.h"
#include "treespec/v1/worker.pb.h"

namespace treespec {

class WorkerClient {
 public:
  virtual ~WorkerClient() = default;
  virtual const std::string& address() const = 0;
  virtual absl::StatusOr<v1::WorkerOpenResponse> Open(const v1::WorkerOpenRequest& req,
                                                      std::chrono::milliseconds timeout) = 0;
  virtual absl::StatusOr<v1::VerifyResponse> Verify(const v1::VerifyRequest& req,
                                                    std::chrono::milliseconds timeout) = 0;
  virtual absl::Status Release(const v1::ReleaseRequest& req,
                               std::chrono::milliseconds timeout) = 0;
  virtual absl::StatusOr<v1::WorkerInfo> Info(std::chrono::milliseconds timeout) = 0;
};

// A Draft call in flight (DrafterClient::StartDraft).
class PendingDraft {
 public:
  virtual ~PendingDraft() = default;  // cancels the call if not waited for
  // Blocks until the call ends; call once.
  virtual absl::StatusOr<v1::DraftResponse> Wait() = 0;
};

class DrafterClient {
 public:
  virtual ~DrafterClient() = default;
  // Sends a Draft call and returns at once, so that the caller can make
  // another call meanwhile (draft-ahead beside a Verify). The default runs
  // Draft on a thread of its own; the gRPC client sends it from the calling
  // thread and reads the answer in Wait, without a thread hop.
  virtual std::unique_ptr<PendingDraft> StartDraft(const v1::DraftRequest& req,
                                                   std::chrono::milliseconds timeout);
  virtual const std::string& address() const = 0;
  virtual absl::StatusOr<v1::DrafterOpenResponse> Open(const v1::DrafterOpenRequest& req,
                                                       std::chrono::milliseconds timeout) = 0;
  virtual absl::StatusOr<v1::DraftResponse> Draft(const v1::DraftRequest& req,
                                                  std::chrono::milliseconds timeout) = 0;
  virtual absl::Status Release(const v1::ReleaseDraftsRequest& req,
                               std::chrono::milliseconds timeout) = 0;
  virtual absl::StatusOr<v1::DrafterInfoResponse> Info(std::chrono::milliseconds timeout) = 0;
};

std::unique_ptr<WorkerClient> MakeGrpcWorkerClient(const std::string& address,
                                                   const TlsFiles& tls);
std::unique_ptr<DrafterClient> MakeGrpcDrafterClient(const std::string& address,
                                                     const TlsFiles& tls);

}  // namespace treespec
