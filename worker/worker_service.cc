#include "worker/worker_service.h"

#include <chrono>

#include "absl/strings/str_cat.h"

#include "rpc/proto_convert.h"
#include "rpc/status_convert.h"

namespace treespec {
namespace {

int64_t FeatureWidth(const std::vector<float>& features, size_t rows) {
  return rows == 0 ? 0 : static_cast<int64_t>(features.size() / rows);
}

}  // namespace

grpc::Status WorkerService::Open(grpc::ServerContext*, const v1::WorkerOpenRequest* req,
                                 v1::WorkerOpenResponse* resp) {
  std::vector<OpenSpec> specs;
  for (const v1::WorkerOpenSequence& s : req->sequences()) {
    OpenSpec spec;
    spec.id = s.sequence_id();
    spec.prompt.assign(s.prompt().begin(), s.prompt().end());
    spec.sampling = FromProto(s.sampling());
    spec.seed = s.sampling().seed();
    spec.max_total_tokens = s.max_total_tokens();
    spec.feature_layers.assign(s.feature_layers().begin(), s.feature_layers().end());
    specs.push_back(std::move(spec));
  }
  auto t0 = std::chrono::steady_clock::now();
  std::vector<OpenOutcome> out = runner_->Open(specs);
  resp->set_prefill_ns(std::chrono::duration_cast<std::chrono::nanoseconds>(
                           std::chrono::steady_clock::now() - t0)
                           .count());
  for (size_t i = 0; i < out.size(); ++i) {
    const OpenOutcome& o = out[i];
    v1::WorkerOpenResult* r = resp->add_results();
    r->set_sequence_id(o.id);
    ToProto(o.status, r->mutable_status());
    r->set_first_token(o.first_token);
    if (o.status.ok() && !specs[i].feature_layers.empty()) {
      ToProto(o.features, FeatureWidth(o.features, specs[i].prompt.size()),
              r->mutable_prompt_features());
    }
  }
  return grpc::Status::OK;
}

grpc::Status WorkerService::Verify(grpc::ServerContext*, const v1::VerifyRequest* req,
                                   v1::VerifyResponse* resp) {
  std::vector<StepSpec> steps;
  for (const v1::SequenceStep& s : req->steps()) {
    StepSpec spec;
    spec.id = s.sequence_id();
    spec.step = s.step();
    spec.tree = FromProto(s.tree());
    if (!v1::VerificationMode_IsValid(s.mode())) {
      spec.invalid = absl::InvalidArgumentError(
          absl::StrCat("steps.mode: unknown verification mode ", static_cast<int>(s.mode())));
    } else if (s.mode() != v1::VERIFICATION_MODE_UNSPECIFIED) {
      spec.mode = FromProto(s.mode(), {});
    }
    steps.push_back(std::move(spec));
  }
  StepTimings timings;
  const auto start = std::chrono::steady_clock::now();
  std::vector<StepOutcome> out = runner_->Verify(steps, &timings);
  resp->set_forward_ns(timings.forward_ns);
  resp->set_verify_ns(timings.verify_ns);
  resp->set_prefill_ns(timings.prefill_ns);
  for (const StepOutcome& o : out) {
    v1::StepResult* r = resp->add_results();
    r->set_sequence_id(o.id);
    r->set_step(o.step);
    ToProto(o.status, r->mutable_status());
    r->mutable_tokens()->Assign(o.tokens.begin(), o.tokens.end());
    r->set_num_accepted(o.num_accepted);
    r->mutable_accepted_nodes()->Assign(o.accepted_nodes.begin(), o.accepted_nodes.end());
    if (!o.features.empty()) {
      ToProto(o.features, FeatureWidth(o.features, o.accepted_nodes.size()), r->mutable_features());
    }
  }
  resp->set_handler_ns(std::chrono::duration_cast<std::chrono::nanoseconds>(
      std::chrono::steady_clock::now() - start).count());
  return grpc::Status::OK;
}

grpc::Status WorkerService::VerifyStream(
    grpc::ServerContext* ctx,
    grpc::ServerReaderWriter<v1::VerifyResponse, v1::VerifyRequest>* stream) {
  return streams_.Serve(ctx, stream, kWorkerVerifyMethod,
                        [&](const v1::VerifyRequest* req, v1::VerifyResponse* resp) {
                          return Verify(ctx, req, resp);
                        });
}

std::vector<std::string> WorkerService::StreamMethods() const {
  return {kWorkerVerifyStreamMethod};
}

grpc::Status WorkerService::Release(grpc::ServerContext*, const v1::ReleaseRequest* req,
                                    v1::ReleaseResponse* resp) {
  std::vector<uint64_t> ids(req->sequence_ids().begin(), req->sequence_ids().end());
  resp->set_num_released(runner_->Release(ids));
  return grpc::Status::OK;
}

grpc::Status WorkerService::GetWorkerInfo(grpc::ServerContext*, const v1::GetWorkerInfoRequest*,
                                          v1::WorkerInfo* resp) {
  TargetRunnerStats s = runner_->Stats();
  resp->set_model(identity_.model);
  resp->set_vocab_size(static_cast<int32_t>(runner_->vocab_size()));
  resp->set_max_context(static_cast<int32_t>(runner_->options().max_context));
  resp->set_num_sequences(static_cast<int32_t>(s.num_sequences));
  resp->set_kv_blocks_used(s.kv_blocks_used);
  resp->set_kv_blocks_free(s.kv_blocks_free);
  resp->set_kv_block_size(static_cast<int32_t>(s.kv_block_size));
  resp->mutable_eos_token_ids()->Assign(identity_.eos_token_ids.begin(),
                                        identity_.eos_token_ids.end());
  resp->set_tp_size(identity_.tp_size);
  resp->set_device(identity_.device);
  resp->set_model_kind(ModelKindName(runner_->model_info().kind));
  resp->set_hidden_size(runner_->model_info().hidden_size);
  *resp->mutable_verify_cost() = identity_.verify_cost;
  return grpc::Status::OK;
}

}  // namespace treespec
