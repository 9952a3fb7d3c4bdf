#include "coordinator/lane_rpc.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "rpc/proto_convert.h"
#include "rpc/status_convert.h"

namespace treespec {
namespace {

using Clock = std::chrono::steady_clock;

int64_t Ns(Clock::duration d) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(d).count();
}

absl::Status Bad(absl::string_view field, absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat("drafted tree: ", field, " ", what));
}

// Marks the endpoint's health by the RPC's outcome.
template <typename T>
void Note(EndpointHealth& health, const absl::StatusOr<T>& r) {
  if (r.ok()) {
    health.MarkHealthy();
  } else {
    health.MarkFailed(Clock::now());
  }
}

}  // namespace

absl::Status ValidateDraftedTree(const v1::TokenTree& tree, int64_t vocab_size,
                                 int64_t max_tree_nodes) {
  const int n = tree.tokens_size();
  if (n < 1) return Bad("tokens", "is empty");
  if (tree.parents_size() != n) {
    return Bad("parents", absl::StrCat("has ", tree.parents_size(), " entries for ", n, " tokens"));
  }
  if (max_tree_nodes > 0 && n > max_tree_nodes) {
    return Bad("tokens", absl::StrCat("has ", n, " nodes; at most ", max_tree_nodes));
  }
  if (tree.draft_size() > n) {
    return Bad("draft", absl::StrCat("has ", tree.draft_size(), " distributions for ", n, " nodes"));
  }
  for (int i = 0; i < n; ++i) {
    const int32_t t = tree.tokens(i);
    if (t < 0 || (vocab_size > 0 && t >= vocab_size)) {
      return Bad(absl::StrCat("tokens[", i, "]"),
                 absl::StrCat(t, " is outside the vocabulary [0, ", vocab_size, ")"));
    }
    const int32_t p = tree.parents(i);
    if (i == 0 ? p != -1 : (p < 0 || p >= i)) {
      return Bad(absl::StrCat("parents[", i, "]"),
                 i == 0 ? absl::StrCat(p, " is not -1")
                        : absl::StrCat(p, " is outside [0, ", i, ")"));
    }
  }
  for (int i = 0; i < tree.draft_size(); ++i) {
    const v1::SparseDistribution& q = tree.draft(i);
    if (q.probs_size() != q.tokens_size()) {
      return Bad(absl::StrCat("draft[", i, "].probs"),
                 absl::StrCat("has ", q.probs_size(), " entries for ", q.tokens_size(), " tokens"));
    }
    for (int k = 0; k < q.tokens_size(); ++k) {
      if (q.tokens(k) < 0 || (vocab_size > 0 && q.tokens(k) >= vocab_size)) {
        return Bad(absl::StrCat("draft[", i, "].tokens[", k, "]"),
                   absl::StrCat(q.tokens(k), " is outside the vocabulary [0, ", vocab_size, ")"));
      }
      if (!(q.probs(k) >= 0.0f && q.probs(k) <= 1.0f)) {
        return Bad(absl::StrCat("draft[", i, "].probs[", k, "]"),
                   absl::StrCat(q.probs(k), " is not a probability"));
      }
    }
  }
  return absl::OkStatus();
}

LaneRpc::LaneRpc(WorkerEndpoint* worker, DrafterEndpoint* drafter, LaneRpcOptions options)
    : worker_(worker), drafter_(drafter), options_(options) {}

absl::StatusOr<std::vector<WorkerOpenReply>> LaneRpc::OpenWorker(
    const std::vector<WorkerOpenItem>& items) {
  v1::WorkerOpenRequest req;
  for (const WorkerOpenItem& it : items) {
    v1::WorkerOpenSequence* ws = req.add_sequences();
    ws->set_sequence_id(it.id);
    ws->mutable_prompt()->Assign(it.prompt.begin(), it.prompt.end());
    ToProto(it.sampling, it.seed, ws->mutable_sampling());
    ws->set_max_total_tokens(it.max_total_tokens);
    if (it.with_drafter && drafter_ != nullptr) {
      for (int32_t l : drafter_->feature_layers()) ws->add_feature_layers(l);
    }
  }
  absl::StatusOr<v1::WorkerOpenResponse> resp = worker_->client->Open(req, options_.open_timeout);
  Note(worker_->health, resp);
  if (!resp.ok()) return resp.status();
  std::vector<WorkerOpenReply> out(items.size());
  for (size_t i = 0; i < items.size(); ++i) {
    if (static_cast<int>(i) >= resp->results_size()) {
      out[i].status = absl::InternalError("worker returned too few Open results");
      continue;
    }
    const v1::WorkerOpenResult& r = resp->results(static_cast<int>(i));
    out[i].status = FromProto(r.status());
    out[i].first_token = r.first_token();
    if (out[i].status.ok() && r.has_prompt_features()) LogFeatures(items[i].id, r.prompt_features());
  }
  return out;
}

absl::StatusOr<std::vector<absl::Status>> LaneRpc::OpenDrafter(
    const std::vector<DrafterOpenItem>& items) {
  v1::ReleaseDraftsRequest release;
  v1::DrafterOpenRequest req;
  for (const DrafterOpenItem& it : items) {
    if (it.release_first) release.add_sequence_ids(it.id);
    v1::DrafterOpenSequence* o = req.add_sequences();
    o->set_sequence_id(it.id);
    o->mutable_prompt()->Assign(it.prompt.begin(), it.prompt.end());
    if (!drafter_->feature_layers().empty() && !it.prompt.empty()) {
      CopyFeatures(it.id, 0, static_cast<int64_t>(it.prompt.size()) - 1, o->mutable_features());
    }
  }
  if (release.sequence_ids_size() > 0) {
    (void)drafter_->client->Release(release, options_.release_timeout);
  }
  absl::StatusOr<v1::DrafterOpenResponse> resp = drafter_->client->Open(req, options_.open_timeout);
  Note(drafter_->health, resp);
  if (!resp.ok()) return resp.status();
  std::vector<absl::Status> out(items.size());
  for (size_t i = 0; i < items.size(); ++i) {
    out[i] = static_cast<int>(i) < resp->results_size()
                 ? FromProto(resp->results(static_cast<int>(i)).status())
                 : absl::InternalError("drafter returned too few Open results");
  }
  return out;
}

v1::DraftRequest LaneRpc::DraftRequestOf(const std::vector<DraftItem>& items) {
  v1::DraftRequest req;
  for (const DraftItem& it : items) {
    v1::DraftSequence* d = req.add_sequences();
    d->set_sequence_id(it.id);
    d->set_step(it.step);
    d->mutable_new_tokens()->Assign(it.new_tokens.begin(), it.new_tokens.end());
    d->set_tree(it.shape);
    d->set_temperature(it.temperature);
    d->set_seed(it.seed);
    d->set_catch_up(it.catch_up);
    d->set_omit_tree(it.omit_tree);
    if (!drafter_->feature_layers().empty()) {
      CopyFeatures(it.id, it.feature_begin, static_cast<int64_t>(it.new_tokens.size()),
                   d->mutable_features());
    }
  }
  return req;
}

absl::StatusOr<std::vector<absl::Status>> LaneRpc::CatchUp(const std::vector<DraftItem>& items) {
  const v1::DraftRequest req = DraftRequestOf(items);
  absl::StatusOr<v1::DraftResponse> resp = drafter_->client->Draft(req, options_.draft_timeout);
  Note(drafter_->health, resp);
  if (!resp.ok()) return resp.status();
  std::vector<absl::Status> out(items.size());
  for (size_t i = 0; i < items.size(); ++i) {
    const int k = static_cast<int>(i);
    out[i] = k < resp->results_size() && resp->results(k).sequence_id() == items[i].id
                 ? FromProto(resp->results(k).status())
                 : absl::InternalError("drafter answered out of order");
  }
  return out;
}

absl::StatusOr<std::vector<DraftReply>> LaneRpc::Draft(const std::vector<DraftItem>& items) {
  payloads_.clear();
  const v1::DraftRequest req = DraftRequestOf(items);
  const Clock::time_point t0 = Clock::now();
  absl::StatusOr<v1::DraftResponse> resp = drafter_->client->Draft(req, options_.draft_timeout);
  timing_.draft_ns += Ns(Clock::now() - t0);
  Note(drafter_->health, resp);
  if (!resp.ok()) return resp.status();
  timing_.drafter_reported_ns += resp->draft_ns();
  std::vector<DraftReply> out(items.size());
  for (size_t i = 0; i < items.size(); ++i) {
    DraftReply& r = out[i];
    if (static_cast<int>(i) >= resp->results_size() ||
        resp->results(static_cast<int>(i)).sequence_id() != items[i].id) {
      r.status = absl::InternalError("drafter answered out of order");
      continue;
    }
    v1::DraftResult* dr = resp->mutable_results(static_cast<int>(i));
    r.status = FromProto(dr->status());
    if (!r.status.ok()) continue;
    r.tree_status = ValidateDraftedTree(dr->tree(), options_.vocab_size, options_.max_tree_nodes);
    r.num_nodes = dr->tree().tokens_size();
    r.root = r.num_nodes > 0 ? dr->tree().tokens(0) : -1;
    r.predraft_hit = dr->predraft_hit();
    r.answer_ns = dr->answer_ns();
    if (r.tree_status.ok()) {
      r.parents.assign(dr->tree().parents().begin(), dr->tree().parents().end());
      payloads_[items[i].id].Swap(dr->mutable_tree());
    }
  }
  return out;
}

AheadReply LaneRpc::AheadReplyOf(const AheadItem& item, v1::AheadResult* r,
                                 std::vector<v1::TokenTree>* trees) const {
  AheadReply out;
  if (r == nullptr || r->sequence_id() != item.id) {
    out.status = absl::InternalError("drafter answered the ahead items out of order");
    return out;
  }
  out.status = FromProto(r->status());
  if (!out.status.ok()) return out;
  for (v1::AheadCandidate& c : *r->mutable_candidates()) {
    AheadCandidateInfo info;
    info.new_tokens.assign(c.new_tokens().begin(), c.new_tokens().end());
    info.tree_status = ValidateDraftedTree(c.tree(), options_.vocab_size, options_.max_tree_nodes);
    info.num_nodes = c.tree().tokens_size();
    info.root = info.num_nodes > 0 ? c.tree().tokens(0) : -1;
    if (info.tree_status.ok()) info.parents.assign(c.tree().parents().begin(), c.tree().parents().end());
    out.candidates.push_back(std::move(info));
    trees->emplace_back();
    trees->back().Swap(c.mutable_tree());
  }
  return out;
}

std::unique_ptr<LaneRpc::AheadCall> LaneRpc::StartAhead(AheadPlan plan) {
  auto call = std::make_unique<AheadCall>();
  call->plan = std::move(plan);
  v1::DraftRequest req = DraftRequestOf(call->plan.commits);
  for (const AheadItem& a : call->plan.ahead) {
    v1::AheadSequence* s = req.add_ahead();
    s->set_sequence_id(a.id);
    s->set_step(a.step);
    s->set_tree(a.shape);
    s->set_temperature(a.temperature);
    s->set_seed(a.seed);
    s->set_max_candidates(a.max_candidates);
  }
  call->start = Clock::now();
  call->pending = drafter_->client->StartDraft(req, options_.draft_timeout);
  return call;
}

absl::StatusOr<AheadReplies> LaneRpc::FinishAhead(std::unique_ptr<AheadCall> call,
                                                  int64_t* wall_ns) {
  absl::StatusOr<v1::DraftResponse> resp = call->pending->Wait();
  *wall_ns = Ns(Clock::now() - call->start);
  Note(drafter_->health, resp);
  candidates_.clear();
  if (!resp.ok()) return resp.status();
  const AheadPlan& plan = call->plan;
  AheadReplies out;
  out.drafter_ns = resp->draft_ns();
  for (size_t i = 0; i < plan.commits.size(); ++i) {
    const int k = static_cast<int>(i);
    out.commits.push_back(k < resp->results_size() &&
                                  resp->results(k).sequence_id() == plan.commits[i].id
                              ? FromProto(resp->results(k).status())
                              : absl::InternalError("drafter answered out of order"));
  }
  for (size_t i = 0; i < plan.ahead.size(); ++i) {
    const int k = static_cast<int>(i);
    out.ahead.push_back(AheadReplyOf(plan.ahead[i],
                                     k < resp->ahead_size() ? resp->mutable_ahead(k) : nullptr,
                                     &candidates_[plan.ahead[i].id]));
  }
  return out;
}

absl::StatusOr<std::vector<VerifyReply>> LaneRpc::Verify(const std::vector<VerifyItem>& items) {
  v1::VerifyRequest req;
  for (const VerifyItem& it : items) {
    v1::SequenceStep* st = req.add_steps();
    st->set_sequence_id(it.id);
    st->set_step(it.step);
    auto p = payloads_.find(it.id);
    auto c = it.candidate >= 0 ? candidates_.find(it.id) : candidates_.end();
    if (it.drafted && c != candidates_.end() &&
        it.candidate < static_cast<int32_t>(c->second.size())) {
      st->mutable_tree()->Swap(&c->second[it.candidate]);
    } else if (it.drafted && it.candidate < 0 && p != payloads_.end()) {
      st->mutable_tree()->Swap(&p->second);
    } else {
      st->mutable_tree()->add_tokens(it.root);
      st->mutable_tree()->add_parents(-1);
    }
    if (it.mode.has_value()) st->set_mode(ToProto(*it.mode));
  }
  payloads_.clear();
  candidates_.clear();
  const Clock::time_point t0 = Clock::now();
  absl::StatusOr<v1::VerifyResponse> resp = worker_->client->Verify(req, options_.verify_timeout);
  timing_.verify_ns += Ns(Clock::now() - t0);
  Note(worker_->health, resp);
  if (!resp.ok()) return resp.status();
  timing_.worker_forward_ns += resp->forward_ns();
  timing_.worker_handler_ns += resp->handler_ns();
  timing_.worker_prefill_ns += resp->prefill_ns();
  std::vector<VerifyReply> out(items.size());
  for (size_t i = 0; i < items.size(); ++i) {
    if (static_cast<int>(i) >= resp->results_size() ||
        resp->results(static_cast<int>(i)).sequence_id() != items[i].id) {
      out[i].status = absl::InternalError("worker answered out of order");
      continue;
    }
    const v1::StepResult& r = resp->results(static_cast<int>(i));
    out[i].status = FromProto(r.status());
    out[i].tokens.assign(r.tokens().begin(), r.tokens().end());
    out[i].num_accepted = r.num_accepted();
    out[i].accepted_nodes.assign(r.accepted_nodes().begin(), r.accepted_nodes().end());
    if (out[i].status.ok() && r.has_features()) LogFeatures(items[i].id, r.features());
  }
  return out;
}

void LaneRpc::LogFeatures(uint64_t id, const v1::Features& f) {
  absl::MutexLock lock(&features_mu_);
  FeatureLog& log = features_[id];
  if (log.width != f.width()) log = FeatureLog{f.width(), 0, {}};
  if (static_cast<int64_t>(f.f16().size()) != int64_t{f.num_rows()} * f.width() * 2) return;
  log.f16.append(f.f16());
  log.num_rows += f.num_rows();
}

void LaneRpc::CopyFeatures(uint64_t id, int64_t begin, int64_t n, v1::Features* out) {
  absl::MutexLock lock(&features_mu_);
  auto it = features_.find(id);
  if (it == features_.end() || begin < 0 || begin + n > it->second.num_rows) return;
  const FeatureLog& log = it->second;
  const int64_t row_bytes = int64_t{log.width} * 2;
  out->set_num_rows(static_cast<int32_t>(n));
  out->set_width(log.width);
  out->set_f16(log.f16.substr(begin * row_bytes, n * row_bytes));
}

absl::Status LaneRpc::ReleaseWorker(const std::vector<uint64_t>& ids) {
  {
    absl::MutexLock lock(&features_mu_);
    for (uint64_t id : ids) features_.erase(id);
  }
  v1::ReleaseRequest req;
  req.mutable_sequence_ids()->Assign(ids.begin(), ids.end());
  return worker_->client->Release(req, options_.release_timeout);
}

absl::Status LaneRpc::ReleaseDrafter(const std::vector<uint64_t>& ids) {
  v1::ReleaseDraftsRequest req;
  req.mutable_sequence_ids()->Assign(ids.begin(), ids.end());
  return drafter_->client->Release(req, options_.release_timeout);
}

LaneRpc::Timing LaneRpc::TakeTiming() { return std::exchange(timing_, Timing{}); }

}  // namespace treespec
