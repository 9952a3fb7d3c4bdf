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

namespace {

// DraftSequence -> DraftSpec; a malformed field gives `bad` (the spec is then
// not drafted).
DraftSpec SpecOf(const v1::DraftSequence& s, absl::Status* bad) {
  DraftSpec spec;
  spec.id = s.sequence_id();
  spec.step = s.step();
  spec.new_tokens.assign(s.new_tokens().begin(), s.new_tokens().end());
  spec.catch_up = s.catch_up();
  absl::StatusOr<TreeShape> shape = spec.catch_up ? TreeShape::Chain(1) : TreeShape::Parse(s.tree());
  if (shape.ok()) {
    spec.shape = *shape;
  } else {
    *bad = shape.status();
  }
  spec.temperature = s.temperature();
  spec.top_k = s.top_k();
  spec.seed = s.seed();
  if (bad->ok()) *bad = FromProto(s.features(), "features", &spec.features);
  return spec;
}

AheadSpec AheadOf(const v1::AheadSequence& a, absl::Status* bad) {
  AheadSpec spec;
  spec.id = a.sequence_id();
  spec.step = a.step();
  absl::StatusOr<TreeShape> shape = TreeShape::Parse(a.tree());
  if (shape.ok()) {
    spec.shape = *shape;
  } else {
    *bad = shape.status();
  }
  spec.temperature = a.temperature();
  spec.top_k = a.top_k();
  spec.seed = a.seed();
  spec.max_candidates = a.max_candidates();
  return spec;
}

int64_t NsSince(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - t0)
      .count();
}

}  // namespace

grpc::Status DrafterService::Draft(grpc::ServerContext*, const v1::DraftRequest* req,
                                   v1::DraftResponse* resp) {
  if (debug_draft_delay_.count() > 0) std::this_thread::sleep_for(debug_draft_delay_);
  auto t0 = std::chrono::steady_clock::now();
  // Items with a malformed field are answered without drafting.
  std::vector<absl::Status> bad(req->sequences_size());
  std::vector<DraftSpec> good;
  std::vector<int> good_index;
  for (int i = 0; i < req->sequences_size(); ++i) {
    DraftSpec spec = SpecOf(req->sequences(i), &bad[i]);
    if (!bad[i].ok()) continue;
    good.push_back(std::move(spec));
    good_index.push_back(i);
  }
  std::vector<absl::Status> bad_ahead(req->ahead_size());
  std::vector<AheadSpec> ahead;
  std::vector<int> ahead_index;
  for (int i = 0; i < req->ahead_size(); ++i) {
    AheadSpec spec = AheadOf(req->ahead(i), &bad_ahead[i]);
    if (!bad_ahead[i].ok()) continue;
    ahead.push_back(std::move(spec));
    ahead_index.push_back(i);
  }
  std::vector<DraftOutcome> out;
  std::vector<AheadOutcome> ahead_out;
  if (ahead.empty()) {
    out = drafter_->Draft(good);
  } else {
    ahead_out = drafter_->DraftAhead(good, ahead, &out);
  }
  const int64_t drafted_ns = NsSince(t0);
  std::vector<const DraftOutcome*> by_index(req->sequences_size(), nullptr);
  for (size_t g = 0; g < out.size(); ++g) by_index[good_index[g]] = &out[g];
  for (int i = 0; i < req->sequences_size(); ++i) {
    const v1::DraftSequence& s = req->sequences(i);
    v1::DraftResult* r = resp->add_results();
    r->set_sequence_id(s.sequence_id());
    r->set_step(s.step());
    const DraftOutcome* o = by_index[i];
    if (o == nullptr) {
      ToProto(bad[i], r->mutable_status());
      continue;
    }
    ToProto(o->status, r->mutable_status());
    if (o->status.ok() && !s.omit_tree()) ToProto(o->tree, r->mutable_tree());
    r->set_predraft_hit(o->is_predraft_hit);
    r->set_answer_ns(o->answer_ns);
  }
  std::vector<const AheadOutcome*> ahead_by_index(req->ahead_size(), nullptr);
  for (size_t g = 0; g < ahead_out.size(); ++g) ahead_by_index[ahead_index[g]] = &ahead_out[g];
  for (int i = 0; i < req->ahead_size(); ++i) {
    v1::AheadResult* r = resp->add_ahead();
    r->set_sequence_id(req->ahead(i).sequence_id());
    r->set_step(req->ahead(i).step());
    const AheadOutcome* o = ahead_by_index[i];
    ToProto(o == nullptr ? bad_ahead[i] : o->status, r->mutable_status());
    if (o == nullptr) continue;
    for (const AheadCandidate& c : o->candidates) {
      v1::AheadCandidate* pc = r->add_candidates();
      pc->mutable_new_tokens()->Assign(c.new_tokens.begin(), c.new_tokens.end());
      ToProto(c.tree, pc->mutable_tree());
    }
  }
  resp->set_draft_ns(drafted_ns);
  return grpc::Status::OK;
}

grpc::Status DrafterService::DraftStream(
    grpc::ServerContext* ctx, grpc::ServerReaderWriter<v1::DraftResponse, v1::DraftRequest>* stream) {
  return streams_.Serve(ctx, stream, kDrafterDraftMethod,
                        [&](const v1::DraftRequest* req, v1::DraftResponse* resp) {
                          return Draft(ctx, req, resp);
                        });
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
  resp->set_max_ahead_candidates(drafter_->max_ahead_candidates());
  resp->set_max_ahead_batch(drafter_->max_ahead_batch());
  *resp->mutable_draft_cost() = draft_cost_;
  const std::vector<int32_t> layers = drafter_->feature_layers();
  for (int32_t l : layers) resp->add_feature_layers(l);
  if (!layers.empty()) {
    resp->set_target_model_kind(drafter_->target_model_kind());
    resp->set_target_hidden_size(drafter_->feature_width() / static_cast<int64_t>(layers.size()));
  }
  return grpc::Status::OK;
}

}  // namespace treespec
