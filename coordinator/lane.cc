#include "coordinator/lane.h"

#include <time.h>

#include <algorithm>
#include <utility>

#include "coordinator/lane_telemetry.h"

namespace treespec {
namespace {

using Clock = std::chrono::steady_clock;

int64_t Ns(Clock::duration d) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(d).count();
}

// CPU time of the calling thread.
int64_t ThreadCpuNs() {
  timespec t;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return int64_t{t.tv_sec} * 1000000000 + t.tv_nsec;
}

absl::Status ShuttingDown() { return absl::UnavailableError("server shutting down"); }

LaneRpcOptions RpcOptions(const LaneOptions& o) {
  LaneRpcOptions r;
  r.open_timeout = o.open_timeout;
  r.verify_timeout = o.verify_timeout;
  r.draft_timeout = o.draft_timeout;
  r.release_timeout = o.release_timeout;
  r.vocab_size = o.vocab_size;
  r.max_tree_nodes = o.max_tree_nodes;
  return r;
}

std::vector<SeqTelemetry*> Pointers(std::vector<SeqTelemetry>& tel) {
  std::vector<SeqTelemetry*> out;
  for (SeqTelemetry& t : tel) out.push_back(&t);
  return out;
}

template <typename Item>
std::vector<uint64_t> Ids(const std::vector<Item>& items) {
  std::vector<uint64_t> ids;
  for (const Item& it : items) ids.push_back(it.id);
  return ids;
}

}  // namespace

Lane::Lane(WorkerEndpoint* worker, DrafterEndpoint* drafter, LaneOptions options)
    : worker_(worker),
      drafter_(drafter),
      options_(std::move(options)),
      machine_([&] {
        StepMachineOptions m;
        m.bandit_shapes = options_.bandit_shapes;
        m.bandit = options_.bandit;
        m.plan_auto = options_.plan_auto;
        m.sampled_cost_batch = options_.max_batch;
        m.tokenizer = options_.tokenizer;
        m.telemetry = options_.telemetry;
        m.worker_name = worker->name;
        m.next_sequence_id = [ids = options_.next_sequence_id] { return ids->fetch_add(1); };
        m.on_finish = [worker, drafter] {
          worker->health.AddLoad(-1);
          if (drafter != nullptr) drafter->health.AddLoad(-1);
        };
        m.has_drafter = drafter != nullptr;
        m.reroute = options_.reroute;
        m.draft_ahead_sampled = options_.draft_ahead_sampled;
        m.verify_profile = worker->verify_profile.Get();
        if (drafter != nullptr) m.draft_profile = drafter->draft_profile.Get();
        return m;
      }()),
      rpc_(worker, drafter, RpcOptions(options_)),
      worker_releases_(options_.release_retry),
      drafter_releases_(options_.release_retry),
      pool_(std::max(2, options_.num_rpc_threads)) {
  thread_ = std::thread([this] { Run(); });
}

Lane::~Lane() { Shutdown(); }

void Lane::Shutdown() {
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
  }
  if (thread_.joinable()) thread_.join();
}

void Lane::Add(std::shared_ptr<RequestState> request) {
  {
    absl::MutexLock lock(&mu_);
    if (!stopped_) {
      arrivals_.push_back(std::move(request));
      return;
    }
  }
  request->Finish(ShuttingDown());
  worker_->health.AddLoad(-1);
  if (drafter_ != nullptr) drafter_->health.AddLoad(-1);
}

int64_t Lane::load() const {
  absl::MutexLock lock(&mu_);
  return live_count_ + opening_count_ + static_cast<int64_t>(arrivals_.size());
}

int64_t Lane::waiting() const {
  absl::MutexLock lock(&mu_);
  int64_t n = 0;
  for (const auto& r : arrivals_) n += !r->cancelled();
  for (const auto& r : opening_) n += !r->cancelled() && !r->finished();
  return n;
}

LaneStepStats Lane::stats() const {
  absl::MutexLock lock(&mu_);
  return stats_;
}

int64_t Lane::releases_dropped() const {
  absl::MutexLock lock(&mu_);
  return releases_dropped_;
}

void Lane::Post(std::function<void()> fn) {
  absl::MutexLock lock(&mu_);
  mailbox_.push_back(std::move(fn));
}

void Lane::RunMailbox() {
  std::vector<std::function<void()>> mail;
  {
    absl::MutexLock lock(&mu_);
    mail.swap(mailbox_);
  }
  for (auto& fn : mail) fn();
}

void Lane::Publish() {
  absl::MutexLock lock(&mu_);
  live_count_ = machine_.num_live();
  opening_count_ = machine_.num_opening();
  opening_ = machine_.opening_requests();
  releases_dropped_ = worker_releases_.dropped() + drafter_releases_.dropped();
}

void Lane::Run() {
  while (true) {
    {
      absl::MutexLock lock(&mu_);
      auto ready = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
        return stop_ || !arrivals_.empty() || !mailbox_.empty();
      };
      if (machine_.num_live() == 0) {
        mu_.AwaitWithTimeout(absl::Condition(&ready), absl::Milliseconds(50));
      }
      if (stop_) break;
    }
    Iterate();
  }
  EndRemaining();
}

void Lane::Iterate() {
  RunMailbox();
  std::vector<std::shared_ptr<RequestState>> arrivals;
  {
    absl::MutexLock lock(&mu_);
    const int64_t busy = machine_.num_live() + machine_.num_opening();
    const size_t room = busy < options_.max_batch ? options_.max_batch - busy : 0;
    const size_t take = std::min(room, arrivals_.size());
    arrivals.assign(arrivals_.begin(), arrivals_.begin() + take);
    arrivals_.erase(arrivals_.begin(), arrivals_.begin() + take);
  }
  if (!arrivals.empty()) {
    Admit(std::move(arrivals));
    Publish();  // they left arrivals_: count them as opening before the step
  }
  Reap();
  const Clock::time_point t0 = Clock::now();
  const int64_t cpu0 = ThreadCpuNs();
  if (drafter_ != nullptr && drafter_->health.MayTry(t0)) {
    std::vector<DrafterOpenItem> items = machine_.PlanDrafterOpens(t0);
    if (!items.empty()) {
      std::vector<SeqTelemetry> tel;
      for (SeqTelemetry* t : machine_.Telemetry(Ids(items))) tel.push_back(*t);
      OpenDrafts(std::move(items), std::move(tel));
    }
  } else if (drafter_ != nullptr) {
    machine_.DrafterUnavailable();
  }
  if (machine_.num_live() > 0) {
    Step();
    Reap();
    const int64_t cpu_ns = ThreadCpuNs() - cpu0;
    absl::MutexLock lock(&mu_);
    stats_.loop_ns += Ns(Clock::now() - t0);
    stats_.loop_cpu_ns += cpu_ns;
  }
  PumpReleases(false);
  Publish();
}

void Lane::Admit(std::vector<std::shared_ptr<RequestState>> arrivals) {
  const Clock::time_point now = Clock::now();
  const bool drafter_ok = drafter_ != nullptr && drafter_->health.MayTry(now);
  const bool reads_features = drafter_ != nullptr && !drafter_->feature_layers().empty();
  StepMachine::Admission a = machine_.Admit(std::move(arrivals), now, drafter_ok, reads_features);
  if (!a.drafter.empty()) OpenDrafts(std::move(a.drafter), std::move(a.drafter_tel));
  if (a.worker.empty()) return;
  struct Job {
    std::vector<WorkerOpenItem> items;
    std::vector<SeqTelemetry> tel;
  };
  auto job = std::make_shared<Job>(Job{std::move(a.worker), std::move(a.worker_tel)});
  pool_.Submit([this, job] {
    BatchRpcTrace trace(options_.telemetry, "prefill", Pointers(job->tel));
    absl::StatusOr<std::vector<WorkerOpenReply>> r = rpc_.OpenWorker(job->items);
    trace.End(r.status());
    Post([this, ids = Ids(job->items), r = std::move(r)] {
      machine_.OnWorkerOpened(ids, r, Clock::now());
    });
  });
}

void Lane::OpenDrafts(std::vector<DrafterOpenItem> items, std::vector<SeqTelemetry> tel) {
  struct Job {
    std::vector<DrafterOpenItem> items;
    std::vector<SeqTelemetry> tel;
  };
  auto job = std::make_shared<Job>(Job{std::move(items), std::move(tel)});
  pool_.Submit([this, job] {
    BatchRpcTrace trace(options_.telemetry, "drafter_open", Pointers(job->tel));
    absl::StatusOr<std::vector<absl::Status>> r = rpc_.OpenDrafter(job->items);
    trace.End(r.status());
    Post([this, ids = Ids(job->items), r = std::move(r)] {
      machine_.OnDrafterOpened(ids, r, Clock::now());
    });
  });
}

void Lane::FinishAhead(std::unique_ptr<LaneRpc::AheadCall> call, size_t batch) {
  const Clock::time_point verified = Clock::now();
  int64_t wall_ns = 0;
  absl::StatusOr<AheadReplies> replies = rpc_.FinishAhead(std::move(call), &wall_ns);
  const int64_t wait_ns = Ns(Clock::now() - verified);
  machine_.ApplyAhead(replies, wait_ns * 1e-9);
  if (options_.telemetry != nullptr) {
    const CoordinatorTelemetry::RpcMetrics& m = options_.telemetry->ForRpc("draft_ahead");
    if (m.seconds != nullptr) m.seconds->Observe(wall_ns * 1e-9);
    if (m.batch_size != nullptr) m.batch_size->Observe(static_cast<double>(batch));
  }
  absl::MutexLock lock(&mu_);
  stats_.ahead_calls += 1;
  stats_.ahead_ns += wall_ns;
  stats_.ahead_wait_ns += wait_ns;
}

void Lane::Step() {
  if (drafter_ != nullptr) {
    machine_.set_draft_ahead(std::min(options_.draft_ahead, drafter_->max_ahead_candidates()),
                             drafter_->max_ahead_batch());
  }
  std::vector<DraftItem> drafts = machine_.PlanDrafts();
  if (!drafts.empty()) {
    BatchRpcTrace trace(options_.telemetry, "draft", machine_.Telemetry(Ids(drafts)));
    absl::StatusOr<std::vector<DraftReply>> r = rpc_.Draft(drafts);
    trace.End(r.status());
    machine_.ApplyDrafts(r);  // inside the trace: OnDraft annotates the draft span
  }
  std::vector<VerifyItem> verify = machine_.PlanVerify();
  if (verify.empty()) return;
  // Draft-ahead: sent before the Verify, answered during it.
  AheadPlan plan = machine_.PlanAhead();
  const size_t ahead_batch = plan.commits.size() + plan.ahead.size();
  std::unique_ptr<LaneRpc::AheadCall> ahead =
      plan.empty() ? nullptr : rpc_.StartAhead(std::move(plan));
  std::vector<SeqTelemetry*> tel;
  for (const VerifyItem& v : verify) tel.push_back(v.tel);
  const Clock::time_point verify_start = Clock::now();
  BatchRpcTrace trace(options_.telemetry, "verify", std::move(tel));
  absl::StatusOr<std::vector<VerifyReply>> r = rpc_.Verify(verify);
  trace.End(r.status());
  if (ahead != nullptr) FinishAhead(std::move(ahead), ahead_batch);
  const int64_t verify_phase_ns = Ns(Clock::now() - verify_start);
  machine_.ApplyVerify(r);
  SendCatchUps();
  const LaneRpc::Timing t = rpc_.TakeTiming();
  const int64_t draft_ns = t.drafter_reported_ns > 0 ? t.drafter_reported_ns : t.draft_ns;
  if (r.ok()) {
    // The step as the cost models see it: the drafter's time and the verify
    // phase (the Verify RPC and any wait for draft-ahead candidates after
    // it; at least the worker's reported forward pass), both less the prompt
    // pieces that rode on the pass: an admission's cost is not the trees',
    // and counted in it made the planner see slower steps, take the pieces'
    // time for per-step overhead and grow the trees while a prompt was
    // admitted (4-token trees became 7-token ones in prefill_stall_test).
    const int64_t verify_rpc_ns = std::max<int64_t>(0, t.verify_ns - t.worker_prefill_ns);
    const int64_t verify_phase = std::max<int64_t>(0, verify_phase_ns - t.worker_prefill_ns);
    const int64_t step_ns = draft_ns + std::max(verify_phase, t.worker_forward_ns);
    machine_.OnStepTimes(draft_ns * 1e-9, t.worker_forward_ns * 1e-9, verify_rpc_ns * 1e-9,
                         step_ns * 1e-9, t.draft_ns * 1e-9);
  }
  absl::MutexLock lock(&mu_);
  stats_.steps += 1;
  stats_.draft_ns += t.draft_ns;
  stats_.verify_ns += t.verify_ns;
  stats_.worker_forward_ns += t.worker_forward_ns;
  stats_.drafter_reported_ns += t.drafter_reported_ns;
  stats_.worker_handler_ns += t.worker_handler_ns;
}

// Off the step thread: the next steps decode these sequences plainly
// meanwhile (StepMachine::PlanCatchUps).
void Lane::SendCatchUps() {
  if (drafter_ == nullptr) return;
  std::vector<DraftItem> items = machine_.PlanCatchUps();
  if (items.empty()) return;
  std::vector<uint64_t> ids;
  for (const DraftItem& it : items) ids.push_back(it.id);
  pool_.Submit([this, items = std::move(items), ids = std::move(ids)] {
    absl::StatusOr<std::vector<absl::Status>> r = rpc_.CatchUp(items);
    Post([this, ids, r = std::move(r)] { machine_.OnCaughtUp(ids, r); });
  });
}

void Lane::Reap() {
  StepMachine::Released rel = machine_.Reap(Clock::now());
  const Clock::time_point now = Clock::now();
  worker_releases_.Add(rel.worker, now);
  if (drafter_ != nullptr) drafter_releases_.Add(rel.drafter, now);
}

void Lane::PumpReleases(bool final) {
  const Clock::time_point now = Clock::now();
  std::vector<uint64_t> w = worker_releases_.TakeDue(now);
  if (!w.empty()) {
    if (final) {
      worker_releases_.OnResult(rpc_.ReleaseWorker(w).ok(), now);
    } else {
      pool_.Submit([this, w] {
        const bool ok = rpc_.ReleaseWorker(w).ok();
        Post([this, ok] { worker_releases_.OnResult(ok, Clock::now()); });
      });
    }
  }
  if (drafter_ == nullptr) return;
  std::vector<uint64_t> d = drafter_releases_.TakeDue(now);
  if (d.empty()) return;
  if (final) {
    drafter_releases_.OnResult(rpc_.ReleaseDrafter(d).ok(), now);
  } else {
    pool_.Submit([this, d] {
      const bool ok = rpc_.ReleaseDrafter(d).ok();
      Post([this, ok] { drafter_releases_.OnResult(ok, Clock::now()); });
    });
  }
}

// Shutdown: every request gets its final status first, then the Opens in
// flight return (so the lane knows what it owns) and one last release goes out.
void Lane::EndRemaining() {
  std::vector<std::shared_ptr<RequestState>> queued;
  {
    absl::MutexLock lock(&mu_);
    stopped_ = true;
    queued.swap(arrivals_);
  }
  for (auto& req : queued) {
    req->Finish(ShuttingDown());
    worker_->health.AddLoad(-1);
    if (drafter_ != nullptr) drafter_->health.AddLoad(-1);
  }
  machine_.FinishAll(ShuttingDown());
  pool_.Wait();
  RunMailbox();
  Reap();
  PumpReleases(true);
  Publish();
}

}  // namespace treespec
