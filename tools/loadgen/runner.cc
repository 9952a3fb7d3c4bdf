#include "tools/loadgen/runner.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <random>
#include <thread>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"

namespace treespec::loadgen {
namespace {

using Clock = std::chrono::steady_clock;

double Since(Clock::time_point t0, Clock::time_point t) {
  return std::chrono::duration<double>(t - t0).count();
}

struct Progress {
  std::atomic<int64_t> started{0}, done{0}, errors{0}, tokens{0};
};

RequestResult RunOne(v1::Generation::Stub* stub, const v1::GenerateRequest& req, int64_t index,
                     Clock::time_point run_start, double scheduled_s, const LoadOptions& options,
                     Progress* progress) {
  RequestResult r;
  r.client_cancelled = options.cancel_every > 0 && index % options.cancel_every ==
                                                       options.cancel_every - 1;
  grpc::ClientContext ctx;
  if (!options.authorization.empty()) ctx.AddMetadata("authorization", options.authorization);
  ctx.set_deadline(std::chrono::system_clock::now() +
                   std::chrono::milliseconds(static_cast<int64_t>(options.timeout_s * 1000)));
  const Clock::time_point sent = Clock::now();
  r.start_s = Since(run_start, sent);
  r.scheduled_s = scheduled_s < 0 ? r.start_s : scheduled_s;
  TokenTimeline timeline(r.start_s);
  progress->started.fetch_add(1);
  auto reader = stub->Generate(&ctx, req);
  v1::GenerateResponse chunk;
  while (reader->Read(&chunk)) {
    const int k = chunk.token_ids_size();
    timeline.OnChunk(Since(run_start, Clock::now()), k);
    progress->tokens.fetch_add(k);
    if (r.client_cancelled && k > 0) ctx.TryCancel();
    if (chunk.finish_reason() != v1::FINISH_REASON_UNSPECIFIED) {
      r.prompt_tokens = chunk.usage().prompt_tokens();
      r.steps = chunk.speculation().steps();
      r.drafted_tokens = chunk.speculation().drafted_tokens();
      r.accepted_tokens = chunk.speculation().accepted_tokens();
    }
  }
  grpc::Status st = reader->Finish();
  r.e2e_s = Since(sent, Clock::now());
  timeline.Finish(&r);
  r.ok = st.ok();
  r.code = absl::StatusCodeToString(static_cast<absl::StatusCode>(st.error_code()));
  r.message = st.error_message();
  if (!r.ok && !(r.client_cancelled && st.error_code() == grpc::StatusCode::CANCELLED)) {
    progress->errors.fetch_add(1);
  }
  progress->done.fetch_add(1);
  if (options.on_result) options.on_result(r);
  return r;
}

// Closed loop for options.duration_s: a client checks the clock before it
// takes the next index, so the indices run are exactly 0 .. count-1.
std::vector<RequestResult> RunClosedLoopFor(v1::Generation::Stub* stub,
                                            const std::vector<v1::GenerateRequest>& workload,
                                            const LoadOptions& options, Clock::time_point t0,
                                            Progress* progress) {
  const Clock::time_point until =
      t0 + std::chrono::duration_cast<Clock::duration>(
               std::chrono::duration<double>(options.duration_s));
  std::atomic<int64_t> next{0};
  std::vector<std::vector<std::pair<int64_t, RequestResult>>> per_client(options.concurrency);
  std::vector<std::thread> clients;
  for (int c = 0; c < options.concurrency; ++c) {
    clients.emplace_back([&, c] {
      while (Clock::now() < until) {
        const int64_t i = next.fetch_add(1);
        if (i >= options.num_requests) break;
        per_client[c].emplace_back(
            i, RunOne(stub, workload[i % workload.size()], i, t0, -1, options, progress));
      }
    });
  }
  for (auto& c : clients) c.join();
  std::vector<RequestResult> results(std::min(next.load(), options.num_requests));
  for (auto& results_of_client : per_client) {
    for (auto& [i, r] : results_of_client) results[i] = std::move(r);
  }
  return results;
}

}  // namespace

absl::Status LoadOptions::Validate() const {
  if ((concurrency > 0) == (rate > 0)) {
    return absl::InvalidArgumentError("give exactly one of --concurrency C or --rate R");
  }
  if (concurrency < 0) return absl::InvalidArgumentError("--concurrency must be > 0");
  if (rate < 0) return absl::InvalidArgumentError("--rate must be > 0");
  if (num_requests < 1) return absl::InvalidArgumentError("--num_requests must be >= 1");
  if (timeout_s <= 0) return absl::InvalidArgumentError("--timeout_s must be > 0");
  if (duration_s < 0) return absl::InvalidArgumentError("--duration_s must be >= 0");
  if (duration_s > 0 && rate > 0) {
    return absl::InvalidArgumentError("--duration_s needs the closed loop (--concurrency)");
  }
  if (cancel_every < 0) return absl::InvalidArgumentError("--cancel_every must be >= 0");
  return absl::OkStatus();
}

absl::StatusOr<LoadRun> RunLoad(v1::Generation::Stub* stub,
                                const std::vector<v1::GenerateRequest>& workload,
                                const LoadOptions& options) {
  if (absl::Status st = options.Validate(); !st.ok()) return st;
  if (workload.empty()) return absl::InvalidArgumentError("the workload holds no requests");
  const int64_t n = options.num_requests;
  LoadRun run;
  if (options.duration_s <= 0) run.results.resize(n);
  Progress progress;
  const Clock::time_point t0 = Clock::now();

  std::atomic<bool> finished{false};
  std::thread reporter;
  if (options.progress_interval_s > 0) {
    reporter = std::thread([&] {
      auto next = t0;
      while (!finished.load()) {
        next += std::chrono::milliseconds(static_cast<int64_t>(options.progress_interval_s * 1000));
        while (!finished.load() && Clock::now() < next) {
          std::this_thread::sleep_for(std::chrono::milliseconds(20));
        }
        if (finished.load()) break;
        const double t = Since(t0, Clock::now());
        const int64_t done = progress.done.load();
        std::fprintf(stderr, "[%7.1fs] %lld/%lld done, %lld in flight, %lld errors, %.1f tok/s\n", t,
                     static_cast<long long>(done), static_cast<long long>(n),
                     static_cast<long long>(progress.started.load() - done),
                     static_cast<long long>(progress.errors.load()),
                     t > 0 ? progress.tokens.load() / t : 0.0);
      }
    });
  }

  if (options.concurrency > 0 && options.duration_s > 0) {
    run.results = RunClosedLoopFor(stub, workload, options, t0, &progress);
  } else if (options.concurrency > 0) {
    std::atomic<int64_t> next{0};
    std::vector<std::thread> clients;
    for (int c = 0; c < options.concurrency; ++c) {
      clients.emplace_back([&] {
        for (int64_t i = next.fetch_add(1); i < n; i = next.fetch_add(1)) {
          run.results[i] = RunOne(stub, workload[i % workload.size()], i, t0, -1, options,
                                  &progress);
        }
      });
    }
    for (auto& c : clients) c.join();
  } else {
    // Poisson process: exponential gaps with mean 1/rate, one thread per
    // request so that arrivals never wait for completions.
    std::mt19937_64 rng(options.seed);
    std::exponential_distribution<double> gap(options.rate);
    std::vector<std::thread> inflight;
    double at = 0;
    for (int64_t i = 0; i < n; ++i) {
      if (i > 0) at += gap(rng);
      std::this_thread::sleep_until(t0 + std::chrono::duration_cast<Clock::duration>(
                                             std::chrono::duration<double>(at)));
      inflight.emplace_back([&, i, at] {
        run.results[i] = RunOne(stub, workload[i % workload.size()], i, t0, at, options,
                                &progress);
      });
    }
    for (auto& t : inflight) t.join();
  }
  run.duration_s = Since(t0, Clock::now());
  finished.store(true);
  if (reporter.joinable()) reporter.join();
  return run;
}

}  // namespace treespec::loadgen
