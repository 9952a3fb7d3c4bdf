#include "drafter_service/drafter_service.h"

#include <chrono>
#include <thread>

#include "rpc/proto_convert.h"
#include "rpc/status_convert.h"

namespace treespec {

grpc::Status DrafterService::Open(grpc::ServerContext*, const v1::DrafterOpenRequest* req,
                                  v1::DrafterOpenResponse* resp) {
  // Sequences with malformed features are answered without opening.
  std::vector<DrafterOpenSpec> good;
  std::vector<absl::Status> out(req->sequences_size());
  std::vector<int> good_index;
  for (int i = 0; i < req->sequences_size(); ++i) {
    const v1::DrafterOpenSequence& s = req->sequences(i);
    DrafterOpenSpec spec{s.sequence_id(), {s.prompt().begin(), s.prompt().end()}, {}};
    out[i] = FromProto(s.features(), "features", &spec.features);
    if (!out[i].ok()) continue;
    good.push_back(std::move(spec));
    good_index.push_back(i);
  }
  std::vector<absl::Status> opened = drafter_->Open(good);
  for (size_t g = 0; g < opened.size(); ++g) out[good_index[g]] = opened[g];
  for (int i = 0; i < req->sequences_size(); ++i) {
    v1::DrafterOpenResult* r = resp->add_results();
    r->set_sequence_id(req->sequences(i).sequence_id());
    ToProto(out[i], r->mutable_status());
  }
  return grpc::Status::OK;
}

grpc::Status DrafterService::Draft(grpc::ServerContext*, const v1::DraftRequest* req,
                                   v1::DraftResponse* resp) {
  if (debug_draft_delay_.count() > 0) std::this_thread::sleep_for(debug_draft_delay_);
  auto t0 = std::chrono::steady_clock::now();
  std::vector<DraftSpec> specs;
  std::vector<absl::Status> bad(req->sequences_size());
  for (int i = 0; i < req->sequences_size(); ++i) {
    const v1::DraftSequence& s = req->sequences(i);
    DraftSpec spec;
    spec.id = s.sequence_id();
    spec.step = s.step();
    spec.new_tokens.assign(s.new_tokens().begin(), s.new_tokens().end());
    spec.catch_up = s.catch_up();
    absl::StatusOr<TreeShape> shape =
        spec.catch_up ? TreeShape::Chain(1) : TreeShape::Parse(s.tree());
    if (shape.ok()) {
      spec.shape = *shape;
    } else {
      bad[i] = shape.status();
      spec.shape = *TreeShape::Chain(1);
    }
    spec.temperature = s.temperature();
    spec.top_k = s.top_k();
    spec.seed = s.seed();
    if (bad[i].ok()) bad[i] = FromProto(s.features(), "features", &spec.features);
    specs.push_back(std::move(spec));
  }
  // Sequences with a malformed shape are answered without drafting.
  std::vector<DraftSpec> good;
  std::vector<int> good_index;
  for (int i = 0; i < static_cast<int>(specs.size()); ++i) {
    if (bad[i].ok()) {
      good.push_back(specs[i]);
      good_index.push_back(i);
    }
  }
  std::vector<DraftOutcome> out = drafter_->Draft(good);
  std::vector<const DraftOutcome*> by_index(specs.size(), nullptr);
  for (size_t g = 0; g < out.size(); ++g) by_index[good_index[g]] = &out[g];
  for (size_t i = 0; i < specs.size(); ++i) {
    v1::DraftResult* r = resp->add_results();
    r->set_sequence_id(specs[i].id);
    r->set_step(specs[i].step);
    if (by_index[i] == nullptr) {
      ToProto(bad[i], r->mutable_status());
      continue;
    }
    ToProto(by_index[i]->status, r->mutable_status());
    if (by_index[i]->status.ok()) ToProto(by_index[i]->tree, r->mutable_tree());
    r->set_predraft_hit(by_index[i]->is_predraft_hit);
    r->set_answer_ns(by_index[i]->answer_ns);
  }
  resp->set_draft_ns(std::chrono::duration_cast<std::chrono::nanoseconds>(
                         std::chrono::steady_clock::now() - t0)
                         .count());
  return grpc::Status::OK;
}

grpc::Status DrafterService::Release(grpc::ServerContext*, const v1::ReleaseDraftsRequest* req,
                                     v1::ReleaseDraftsResponse* resp) {
  std::vector<uint64_t> ids(req->sequence_ids().begin(), req->sequence_ids().end());
  resp->set_num_released(drafter_->Release(ids));
  return grpc::Status::OK;
}

grpc::Status DrafterService::GetDrafterInfo(grpc::ServerContext*, const v1::GetDrafterInfoRequest*,
                                            v1::DrafterInfoResponse* resp) {
  DrafterStats s = drafter_->Stats();
  resp->set_kind(drafter_->kind());
  resp->set_model(model_);
  resp->set_vocab_size(static_cast<int32_t>(drafter_->vocab_size()));
  resp->set_num_sequences(static_cast<int32_t>(s.num_sequences));
  resp->set_slots_free(s.slots_free);
  resp->set_slots_total(s.slots_total);
  resp->set_predraft_hits(s.predraft_hits - baseline_.predraft_hits);
  resp->set_predraft_misses(s.predraft_misses - baseline_.predraft_misses);
  resp->set_predraft_unprepared(s.predraft_unprepared - baseline_.predraft_unprepared);
  *resp->mutable_draft_cost() = draft_cost_;
  for (int32_t l : drafter_->feature_layers()) resp->add_feature_layers(l);
  return grpc::Status::OK;
}

}  // namespace treespec
