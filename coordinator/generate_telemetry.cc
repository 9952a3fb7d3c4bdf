#include "coordinator/generate_telemetry.h"

#include "absl/strings/str_cat.h"

namespace treespec {
namespace {

double Seconds(std::chrono::steady_clock::duration d) {
  return std::chrono::duration<double>(d).count();
}

const char* ReasonName(v1::FinishReason r) {
  switch (r) {
    case v1::FINISH_REASON_STOP: return "stop";
    case v1::FINISH_REASON_STOP_STRING: return "stop_string";
    case v1::FINISH_REASON_LENGTH: return "length";
    default: return "unspecified";
  }
}

}  // namespace

GenerateTelemetry::GenerateTelemetry(CoordinatorTelemetry* t, const SpanContext& incoming,
                                     Clock::time_point received)
    : t_(t), received_(received), incoming_(incoming) {
  if (t_ != nullptr && t_->tracer() != nullptr) ctx_ = t_->tracer()->NewContext(incoming);
}

GenerateTelemetry::~GenerateTelemetry() {
  if (!finished_) Finish(grpc::Status(grpc::StatusCode::CANCELLED, "handler ended"));
}

void GenerateTelemetry::Admitted(const GenerationRequest& g) {
  if (t_ == nullptr) return;
  admitted_ = true;
  drafter_ = g.drafter;
  itl_ = t_->itl->WithLabels({drafter_});
  t_->prompt_tokens->WithLabels({drafter_})->Inc(g.prompt.size());
  if (!ctx_.sampled()) return;
  attributes_ = {{"treespec.drafter", g.drafter},
                 {"treespec.tree", g.auto_tree ? std::string("auto")
                                   : g.tree.has_value() ? g.tree->ToString()
                                                        : std::string("none")},
                 {"treespec.max_tokens", static_cast<int64_t>(g.max_tokens)},
                 {"treespec.temperature", static_cast<double>(g.sampling.temperature)},
                 {"treespec.prompt_tokens", static_cast<int64_t>(g.prompt.size())}};
}

void GenerateTelemetry::OnChunk(const v1::GenerateResponse& chunk) {
  if (t_ == nullptr) return;
  const Clock::time_point now = Clock::now();
  const int k = chunk.token_ids_size();
  if (k > 0 && itl_ != nullptr) {
    if (tokens_ == 0) {
      first_token_ = now;
      t_->ttft->WithLabels({drafter_})->Observe(Seconds(now - received_));
    } else {
      itl_->Observe(Seconds(now - last_token_));
    }
    // The rest of the chunk arrives with its first token.
    itl_->ObserveZeros(static_cast<uint64_t>(k - 1));
    tokens_ += k;
    last_token_ = now;
  }
  if (chunk.finish_reason() != v1::FINISH_REASON_UNSPECIFIED) {
    final_ = chunk;
    has_final_ = true;
  }
}

grpc::Status GenerateTelemetry::Finish(grpc::Status status) {
  if (t_ == nullptr || finished_) return status;
  finished_ = true;
  const Clock::time_point now = Clock::now();
  const std::string code =
      absl::StatusCodeToString(static_cast<absl::StatusCode>(status.error_code()));
  t_->requests->WithLabels({code})->Inc();
  if (admitted_) {
    t_->e2e->WithLabels({drafter_})->Observe(Seconds(now - received_));
    t_->completion_tokens->WithLabels({drafter_})->Inc(static_cast<uint64_t>(tokens_));
    if (tokens_ > 1) {
      t_->tpot->WithLabels({drafter_})->Observe(Seconds(last_token_ - first_token_) /
                                                static_cast<double>(tokens_ - 1));
    }
  }
  if (status.ok() && has_final_) t_->finished->WithLabels({ReasonName(final_.finish_reason())})->Inc();
  if (!ctx_.sampled()) return status;
  SpanData s;
  s.context = ctx_;
  if (incoming_.valid()) s.parent_span_id = incoming_.span_id;
  s.name = "generate";
  s.kind = SpanKind::kServer;
  s.start_unix_ns = UnixNanos(received_);
  s.end_unix_ns = UnixNanos(now);
  s.attributes = std::move(attributes_);
  s.Add("rpc.system", std::string("grpc"));
  s.Add("rpc.service", std::string("treespec.v1.Generation"));
  s.Add("rpc.method", std::string("Generate"));
  s.Add("rpc.grpc.status_code", static_cast<int64_t>(status.error_code()));
  s.Add("treespec.completion_tokens", tokens_);
  if (has_final_) {
    s.Add("treespec.finish_reason", std::string(ReasonName(final_.finish_reason())));
    const v1::SpeculationStats& sp = final_.speculation();
    s.Add("treespec.steps", static_cast<int64_t>(sp.steps()));
    s.Add("treespec.drafted_tokens", static_cast<int64_t>(sp.drafted_tokens()));
    s.Add("treespec.accepted_tokens", static_cast<int64_t>(sp.accepted_tokens()));
    s.Add("treespec.fallback_steps", static_cast<int64_t>(sp.fallback_steps()));
    s.Add("treespec.mean_accepted_length", sp.mean_accepted_length());
    s.Add("treespec.ttft_ns", static_cast<int64_t>(final_.timings().ttft_ns()));
  }
  if (!status.ok()) {
    s.status = SpanStatus::kError;
    s.status_message = code;
  }
  t_->tracer()->Record(std::move(s));
  return status;
}

}  // namespace treespec
