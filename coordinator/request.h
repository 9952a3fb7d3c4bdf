// A validated generation request and the channel between the gRPC handler
// thread that streams it and the lane thread that runs its steps.
//
// RequestState is shared (std::shared_ptr) by the two threads: the lane pushes
// chunks and finally a terminal status; the handler pops and writes them, and
// sets `cancelled` when the client goes away. Thread-safe.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "core/spec/sampling.h"
#include "core/spec/tree_shape.h"
#include "core/spec/verify.h"
#include "obs/trace_context.h"
#include "treespec/v1/generation.pb.h"

namespace treespec {

struct GenerationRequest {
  std::vector<int32_t> prompt;
  SamplingParams sampling;
  uint64_t seed = 0;
  int32_t max_tokens = 128;
  std::vector<std::string> stop_strings;
  std::vector<int32_t> stop_token_ids;  // request ids plus EOS unless ignore_eos
  std::string drafter;                  // resolved name, "none" for plain decoding
  std::optional<TreeShape> tree;        // fixed shape; unset with auto_tree or "none"
  bool auto_tree = false;               // UCB bandit over the configured shapes
  std::optional<VerifyMode> mode;       // unset: worker default by temperature
};

class RequestState {
 public:
  using Clock = std::chrono::steady_clock;

  RequestState(GenerationRequest request, Clock::time_point received,
               std::optional<Clock::time_point> deadline, SpanContext trace = {})
      : request_(std::move(request)), received_(received), deadline_(deadline), trace_(trace) {}

  const GenerationRequest& request() const { return request_; }
  Clock::time_point received() const { return received_; }
  std::optional<Clock::time_point> deadline() const { return deadline_; }
  // The request's `generate` span (coordinator/telemetry.h); invalid if untraced.
  const SpanContext& trace() const { return trace_; }

  void Cancel() { cancelled_.store(true); }
  bool cancelled() const { return cancelled_.load(); }
  // Finish was called (the stream is over, or ends once its chunks are popped).
  bool finished() const;

  // Lane side.
  void Push(v1::GenerateResponse chunk);
  void Finish(absl::Status status);  // the last call; OK after a final chunk

  // Handler side: waits up to `timeout` for a chunk. Returns true with a
  // chunk, or false when there is none yet; `done` is set once the stream is
  // over and everything was popped, with its status.
  bool Pop(absl::Duration timeout, v1::GenerateResponse* chunk, bool* done, absl::Status* status);

 private:
  const GenerationRequest request_;
  const Clock::time_point received_;
  const std::optional<Clock::time_point> deadline_;
  const SpanContext trace_;
  std::atomic<bool> cancelled_{false};
  mutable absl::Mutex mu_;
  std::deque<v1::GenerateResponse> chunks_ ABSL_GUARDED_BY(mu_);
  bool finished_ ABSL_GUARDED_BY(mu_) = false;
  absl::Status status_ ABSL_GUARDED_BY(mu_);
};

}  // namespace treespec
