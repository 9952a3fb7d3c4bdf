#include "coordinator/coordinator.h"

#include <iostream>
#include <limits>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "core/util/status_macros.h"
#include "rpc/cost_profile.h"

namespace treespec {
namespace {

using Clock = std::chrono::steady_clock;
constexpr std::chrono::milliseconds kProbeTimeout{2000};

// Keeps the start-up cost profile an endpoint reported, the first time it
// reports a usable one. A malformed profile is ignored with a warning: the
// lanes then learn the costs online.
ProfileSlot<VerifyCostModel>& Slot(WorkerEndpoint* e) { return e->verify_profile; }
ProfileSlot<DraftCostModel>& Slot(DrafterEndpoint* e) { return e->draft_profile; }

template <typename Endpoint, typename Proto>
void TakeProfile(Endpoint* e, const Proto& profile, const char* what) {
  auto& slot = Slot(e);
  if (slot.Get().has_value()) return;
  auto model = FromProto(profile);
  if (model.ok()) {
    slot.Set(*std::move(model));
  } else if (!absl::IsNotFound(model.status())) {
    std::cerr << "treespec-coordinator: warning: ignoring the cost profile of " << what << " "
              << e->name << ": " << model.status().message() << std::endl;
  }
}

// Whether drafter `d` can serve the workers (checked at Start and when the
// prober first reaches a drafter). It needs their vocabulary. A drafter that
// reads the target's hidden features (EAGLE, EAGLE-3, ReDrafter heads) was
// trained on, and reads the embedding and LM head of, one target: paired with
// a worker serving another kind of model, or one of another hidden size, it
// would draft from features it does not understand (or fail every Draft on
// their width). Such a pairing is a configuration error, refused by name.
// Workers and drafters that do not say (older ones) pass that part.
absl::Status DrafterFitsWorker(const DrafterEndpoint& d, const v1::DrafterInfoResponse& info,
                               int64_t vocab_size, const v1::WorkerInfo& worker) {
  if (info.vocab_size() != vocab_size) {
    return absl::FailedPreconditionError(absl::StrCat(
        "drafter ", d.name, " at ", d.client->address(), " has a vocabulary of ", info.vocab_size(),
        " but the target has ", vocab_size));
  }
  if (info.feature_layers().empty()) return absl::OkStatus();
  const std::string what = absl::StrCat("drafter ", d.name, " at ", d.client->address(), " (kind ",
                                        info.kind(), ") reads the target's hidden features");
  if (!info.target_model_kind().empty() && !worker.model_kind().empty() &&
      info.target_model_kind() != worker.model_kind()) {
    return absl::FailedPreconditionError(absl::StrCat(
        what, " and was built for a ", info.target_model_kind(), " target, but the workers serve ",
        worker.model(), ", a ", worker.model_kind(), " model"));
  }
  if (info.target_hidden_size() > 0 && worker.hidden_size() > 0 &&
      info.target_hidden_size() != worker.hidden_size()) {
    return absl::FailedPreconditionError(
        absl::StrCat(what, " of width ", info.target_hidden_size(), ", but the workers' model ",
                     worker.model(), " has hidden size ", worker.hidden_size()));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status CoordinatorOptions::Validate() const {
  if (max_queue < 1) return absl::InvalidArgumentError("--max_queue must be >= 1");
  if (max_batch < 1) return absl::InvalidArgumentError("--max_batch must be >= 1");
  if (max_tree_nodes < 1) return absl::InvalidArgumentError("--max_tree_nodes must be >= 1");
  if (default_max_tokens < 1) return absl::InvalidArgumentError("--default_max_tokens must be >= 1");
  if (lane.draft_ahead < 0 || lane.draft_ahead > 16) {
    return absl::InvalidArgumentError(
        absl::StrCat("--draft_ahead must be in [0, 16], got ", lane.draft_ahead));
  }
  if (default_tree != "auto") TS_RETURN_IF_ERROR(TreeShape::Parse(default_tree).status());
  for (absl::string_view t : absl::StrSplit(bandit_trees, ';', absl::SkipEmpty())) {
    absl::StatusOr<TreeShape> s = TreeShape::Parse(t);
    if (!s.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("--bandit_trees: ", s.status().message()));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<Coordinator>> Coordinator::Create(
    CoordinatorOptions options, std::vector<std::unique_ptr<WorkerClient>> workers,
    std::vector<DrafterSpec> drafters, std::unique_ptr<Tokenizer> tokenizer) {
  TS_RETURN_IF_ERROR(options.Validate());
  if (workers.empty()) return absl::InvalidArgumentError("--workers: at least one worker is needed");
  auto c = std::unique_ptr<Coordinator>(new Coordinator());
  c->tokenizer_ = std::move(tokenizer);
  for (auto& w : workers) {
    auto e = std::make_unique<WorkerEndpoint>();
    e->name = w->address();
    e->client = std::move(w);
    c->workers_.push_back(std::move(e));
  }
  for (auto& d : drafters) {
    if (d.name == "none" || d.name == "auto" || d.name.empty()) {
      return absl::InvalidArgumentError(absl::StrCat("--drafters: '", d.name,
                                                     "' cannot be used as a drafter name"));
    }
    auto e = std::make_unique<DrafterEndpoint>();
    e->name = d.name;
    e->client = std::move(d.client);
    c->ctx_.drafters.insert(e->name);
    c->drafters_.push_back(std::move(e));
  }
  if (options.default_drafter.empty()) {
    options.default_drafter = c->drafters_.empty() ? "none" : c->drafters_[0]->name;
  }
  if (options.default_drafter != "none" && !c->ctx_.drafters.count(options.default_drafter)) {
    return absl::InvalidArgumentError(absl::StrCat("--default_drafter: '", options.default_drafter,
                                                   "' is not in --drafters"));
  }
  for (absl::string_view t : absl::StrSplit(options.bandit_trees, ';', absl::SkipEmpty())) {
    options.lane.bandit_shapes.push_back(*TreeShape::Parse(t));
  }
  options.lane.tokenizer = c->tokenizer_.get();
  // A random base: ids of coordinators sharing a worker never collide.
  c->next_sequence_id_.store(absl::Uniform<uint64_t>(absl::IntervalClosed, absl::BitGen(), 1,
                                                     uint64_t{1} << 62));
  options.lane.next_sequence_id = &c->next_sequence_id_;
  options.lane.max_tree_nodes = options.max_tree_nodes;
  options.lane.max_batch = options.max_batch;
  options.lane.telemetry = options.telemetry;
  c->ctx_.tokenizer = c->tokenizer_.get();
  c->ctx_.default_drafter = options.default_drafter;
  c->ctx_.default_tree = options.default_tree;
  c->ctx_.max_tree_nodes = options.max_tree_nodes;
  c->ctx_.default_max_tokens = options.default_max_tokens;
  c->options_ = std::move(options);
  return c;
}

Coordinator::~Coordinator() { Shutdown(); }

void Coordinator::Shutdown() {
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
  }
  if (prober_.joinable()) prober_.join();
  std::map<std::pair<int, int>, std::unique_ptr<Lane>> lanes;
  {
    absl::MutexLock lock(&mu_);
    lanes.swap(lanes_);
  }
  for (auto& [key, lane] : lanes) lane->Shutdown();
}

absl::Status Coordinator::Start() {
  const Clock::time_point until = Clock::now() + options_.startup_timeout;
  absl::Status last = absl::UnavailableError("no worker answered");
  bool have = false;
  while (!have && Clock::now() < until) {
    for (auto& w : workers_) {
      absl::StatusOr<v1::WorkerInfo> info = w->client->Info(kProbeTimeout);
      if (!info.ok()) {
        last = absl::UnavailableError(absl::StrCat("worker ", w->name, ": ", info.status().message()));
        w->health.MarkFailed(Clock::now());
        continue;
      }
      w->health.MarkHealthy();
      TakeProfile(w.get(), info->verify_cost(), "worker");
      if (!have) {
        have = true;
        ctx_.vocab_size = info->vocab_size();
        options_.lane.vocab_size = info->vocab_size();
        ctx_.max_context = info->max_context();
        ctx_.eos_token_ids.assign(info->eos_token_ids().begin(), info->eos_token_ids().end());
        model_name_ = info->model();
        worker_info_ = *info;
      } else if (info->vocab_size() != ctx_.vocab_size) {
        return absl::FailedPreconditionError(absl::StrCat("worker ", w->name, " serves a vocabulary of ",
                                                          info->vocab_size(), ", others ",
                                                          ctx_.vocab_size));
      }
    }
    if (!have) std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  if (!have) return last;
  if (tokenizer_ != nullptr && tokenizer_->vocab_size() > ctx_.vocab_size) {
    return absl::FailedPreconditionError(absl::StrCat("--tokenizer has ", tokenizer_->vocab_size(),
                                                      " tokens but the model only ",
                                                      ctx_.vocab_size));
  }
  for (auto& d : drafters_) {
    absl::StatusOr<v1::DrafterInfoResponse> info = d->client->Info(kProbeTimeout);
    if (!info.ok()) {
      d->health.MarkFailed(Clock::now());
      continue;
    }
    TS_RETURN_IF_ERROR(DrafterFitsWorker(*d, *info, ctx_.vocab_size, worker_info_));
    TakeProfile(d.get(), info->draft_cost(), "drafter");
    d->SetInfo(*info);
  }
  prober_ = std::thread([this] { ProbeLoop(); });
  return absl::OkStatus();
}

void Coordinator::ProbeLoop() {
  while (true) {
    {
      absl::MutexLock lock(&mu_);
      auto stopping = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return stop_; };
      if (mu_.AwaitWithTimeout(absl::Condition(&stopping), absl::Milliseconds(500))) return;
    }
    const Clock::time_point now = Clock::now();
    for (auto& w : workers_) {
      if (w->health.healthy() || !w->health.MayTry(now)) continue;
      if (absl::StatusOr<v1::WorkerInfo> info = w->client->Info(kProbeTimeout); info.ok()) {
        TakeProfile(w.get(), info->verify_cost(), "worker");
        w->health.MarkHealthy();
      } else {
        w->health.MarkFailed(Clock::now());
      }
    }
    for (auto& d : drafters_) {
      if (d->health.healthy() || !d->health.MayTry(now)) continue;
      absl::StatusOr<v1::DrafterInfoResponse> info = d->client->Info(kProbeTimeout);
      if (info.ok()) {
        // A drafter first reached now gets the checks of Start; one that
        // fails them stays out of service.
        const absl::Status fits = DrafterFitsWorker(*d, *info, ctx_.vocab_size, worker_info_);
        if (!fits.ok()) {
          if (!d->refused.exchange(true)) {
            std::cerr << "treespec-coordinator: refusing " << fits.message() << std::endl;
          }
          d->health.MarkFailed(Clock::now());
          continue;
        }
        TakeProfile(d.get(), info->draft_cost(), "drafter");
        d->SetInfo(*info);
        d->health.MarkHealthy();
      } else {
        d->health.MarkFailed(Clock::now());
      }
    }
  }
}

Lane* Coordinator::LaneFor(int worker, int drafter) {
  auto key = std::make_pair(worker, drafter);
  auto it = lanes_.find(key);
  if (it != lanes_.end()) return it->second.get();
  LaneOptions lane_options = options_.lane;
  lane_options.reroute = [this, worker, drafter](const std::shared_ptr<RequestState>& request) {
    return Reroute(request, worker, drafter);
  };
  auto lane = std::make_unique<Lane>(workers_[worker].get(),
                                     drafter >= 0 ? drafters_[drafter].get() : nullptr,
                                     std::move(lane_options));
  Lane* raw = lane.get();
  lanes_[key] = std::move(lane);
  return raw;
}

int Coordinator::PickWorker(int except) const {
  int best = -1;
  for (int i = 0; i < static_cast<int>(workers_.size()); ++i) {
    if (i == except || !workers_[i]->health.healthy()) continue;
    if (best < 0 || workers_[i]->health.load() < workers_[best]->health.load()) best = i;
  }
  return best;
}

// Runs on the lane thread of (worker, drafter) after its worker Open failed
// as a whole; the request has streamed nothing, so any group may serve it.
bool Coordinator::Reroute(const std::shared_ptr<RequestState>& request, int worker, int drafter) {
  absl::MutexLock lock(&mu_);
  if (stop_) return false;
  const int other = PickWorker(worker);
  if (other < 0) return false;
  workers_[other]->health.AddLoad(1);
  if (drafter >= 0) drafters_[drafter]->health.AddLoad(1);
  LaneFor(other, drafter)->Add(request);
  return true;
}

absl::StatusOr<std::shared_ptr<RequestState>> Coordinator::Submit(
    const v1::GenerateRequest& request, Clock::time_point received,
    std::optional<Clock::time_point> deadline, const SpanContext& trace) {
  TS_ASSIGN_OR_RETURN(GenerationRequest g, ValidateRequest(request, ctx_));
  absl::MutexLock lock(&mu_);
  if (stop_) return absl::UnavailableError("server shutting down");
  if (!request.sampling().has_seed()) g.seed = absl::Uniform<uint64_t>(rng_);
  int64_t waiting = 0;
  for (auto& [key, lane] : lanes_) waiting += lane->waiting();
  if (waiting >= options_.max_queue) {
    return absl::ResourceExhaustedError(absl::StrCat("queue full: ", waiting,
                                                     " requests waiting (limit ",
                                                     options_.max_queue, "); retry later"));
  }
  const Clock::time_point now = Clock::now();
  const int best_worker = PickWorker(-1);
  if (best_worker < 0) {
    return absl::UnavailableError("no healthy worker group; retry later");
  }
  int best_drafter = -1;
  if (g.drafter != "none") {
    for (int i = 0; i < static_cast<int>(drafters_.size()); ++i) {
      if (drafters_[i]->name != g.drafter) continue;
      auto better = [&](int a, int b) {
        const bool ha = drafters_[a]->health.MayTry(now), hb = drafters_[b]->health.MayTry(now);
        if (ha != hb) return ha;
        return drafters_[a]->health.load() < drafters_[b]->health.load();
      };
      if (best_drafter < 0 || better(i, best_drafter)) best_drafter = i;
    }
  }
  auto state = std::make_shared<RequestState>(std::move(g), received, deadline, trace);
  workers_[best_worker]->health.AddLoad(1);
  if (best_drafter >= 0) drafters_[best_drafter]->health.AddLoad(1);
  LaneFor(best_worker, best_drafter)->Add(state);
  return state;
}

v1::ModelInfo Coordinator::ModelInfo() const {
  v1::ModelInfo info;
  info.set_model(model_name_);
  info.set_vocab_size(static_cast<int32_t>(ctx_.vocab_size));
  info.set_max_context(static_cast<int32_t>(ctx_.max_context));
  info.mutable_eos_token_ids()->Assign(ctx_.eos_token_ids.begin(), ctx_.eos_token_ids.end());
  std::set<std::string> seen;
  for (const auto& d : drafters_) {
    if (seen.count(d->name)) continue;
    seen.insert(d->name);
    v1::DrafterInfo* di = info.add_drafters();
    di->set_name(d->name);
    di->set_kind(d->kind());
    bool healthy = false;
    for (const auto& e : drafters_) healthy |= e->name == d->name && e->health.healthy();
    di->set_healthy(healthy);
  }
  info.set_default_drafter(ctx_.default_drafter);
  info.set_default_tree(ctx_.default_tree);
  info.set_num_workers(static_cast<int32_t>(workers_.size()));
  return info;
}

LaneStepStats Coordinator::TotalStats() const {
  absl::MutexLock lock(&mu_);
  LaneStepStats t;
  for (const auto& [key, lane] : lanes_) {
    LaneStepStats s = lane->stats();
    t.steps += s.steps;
    t.draft_ns += s.draft_ns;
    t.verify_ns += s.verify_ns;
    t.worker_forward_ns += s.worker_forward_ns;
    t.drafter_reported_ns += s.drafter_reported_ns;
    t.worker_handler_ns += s.worker_handler_ns;
    t.loop_ns += s.loop_ns;
    t.loop_cpu_ns += s.loop_cpu_ns;
    t.ahead_calls += s.ahead_calls;
    t.ahead_ns += s.ahead_ns;
    t.ahead_wait_ns += s.ahead_wait_ns;
  }
  return t;
}

int64_t Coordinator::NumWaiting() const {
  absl::MutexLock lock(&mu_);
  int64_t n = 0;
  for (const auto& [key, lane] : lanes_) n += lane->waiting();
  return n;
}

std::vector<GaugeSource::Health> Coordinator::WorkerHealth() const {
  std::vector<Health> out;
  for (const auto& w : workers_) out.push_back({w->name, w->health.healthy()});
  return out;
}

std::vector<GaugeSource::Health> Coordinator::DrafterHealth() const {
  std::vector<Health> out;
  const v1::ModelInfo info = ModelInfo();
  for (const auto& d : info.drafters()) out.push_back({d.name(), d.healthy()});
  return out;
}

int64_t Coordinator::NumLive() const {
  absl::MutexLock lock(&mu_);
  int64_t n = 0;
  for (const auto& [key, lane] : lanes_) n += lane->load() - lane->waiting();
  return n;
}

}  // namespace treespec
