#include "obs/tracer.h"

#include "absl/strings/str_cat.h"

namespace treespec {

absl::Status TracerOptions::Validate() const {
  if (!(sample_ratio >= 0.0 && sample_ratio <= 1.0)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--trace_sample_ratio: ", sample_ratio, " is not in [0, 1]"));
  }
  if (queue_capacity < 1) return absl::InvalidArgumentError("--trace_queue_size must be >= 1");
  if (max_batch < 1) return absl::InvalidArgumentError("trace export batch must be >= 1");
  if (service_name.empty()) return absl::InvalidArgumentError("--service_name must not be empty");
  return absl::OkStatus();
}

Tracer::Tracer(TracerOptions options, std::unique_ptr<SpanExporter> exporter)
    : options_(std::move(options)), exporter_(std::move(exporter)) {
  resource_.push_back({"service.name", options_.service_name});
  resource_.push_back({"telemetry.sdk.name", std::string("treespec")});
  resource_.push_back({"telemetry.sdk.language", std::string("cpp")});
  for (const Attribute& a : options_.resource) resource_.push_back(a);
  thread_ = std::thread([this] { ExportLoop(); });
}

Tracer::~Tracer() { Shutdown(std::chrono::milliseconds(2000)); }

SpanContext Tracer::NewContext(const SpanContext& parent) const {
  SpanContext ctx;
  if (parent.valid()) {
    ctx.trace_id = parent.trace_id;
    ctx.flags = parent.flags;
  } else {
    ctx.trace_id = NewTraceId();
    uint64_t low = 0;
    for (int i = 8; i < 16; ++i) low = (low << 8) | ctx.trace_id[i];
    bool sampled;
    if (options_.sample_ratio >= 1.0) {
      sampled = true;
    } else if (options_.sample_ratio <= 0.0) {
      sampled = false;
    } else {
      // 2^64 · ratio, compared on the top 63 bits to stay inside double's range.
      sampled = static_cast<double>(low >> 1) < options_.sample_ratio * 9223372036854775808.0;
    }
    ctx.flags = sampled ? 1 : 0;
  }
  ctx.span_id = NewSpanId();
  return ctx;
}

void Tracer::Record(SpanData span) {
  if (!span.context.sampled()) return;
  absl::MutexLock lock(&mu_);
  if (stop_ || queue_.size() >= options_.queue_capacity) {
    stats_.dropped += 1;
    return;
  }
  queue_.push_back(std::move(span));
  enqueued_ += 1;
  stats_.recorded += 1;
}

void Tracer::ExportLoop() {
  while (true) {
    std::vector<SpanData> batch;
    bool stopping;
    {
      absl::MutexLock lock(&mu_);
      auto ready = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
        return stop_ || flush_now_ || queue_.size() >= options_.max_batch;
      };
      mu_.AwaitWithTimeout(absl::Condition(&ready),
                           absl::Milliseconds(options_.flush_interval.count()));
      stopping = stop_;
      const size_t n = std::min(queue_.size(), options_.max_batch);
      if (n == queue_.size()) {
        batch.swap(queue_);
        flush_now_ = false;
      } else {
        batch.assign(std::make_move_iterator(queue_.begin()),
                     std::make_move_iterator(queue_.begin() + n));
        queue_.erase(queue_.begin(), queue_.begin() + n);
      }
    }
    if (!batch.empty()) {
      absl::Status st = exporter_ != nullptr ? exporter_->Export(resource_, batch)
                                             : absl::OkStatus();
      absl::MutexLock lock(&mu_);
      processed_ += batch.size();
      if (st.ok()) {
        stats_.exported += batch.size();
      } else {
        stats_.export_failures += 1;
      }
      continue;  // more may be queued: look again before sleeping
    }
    if (stopping) return;
  }
}

bool Tracer::Flush(std::chrono::milliseconds timeout) {
  absl::MutexLock lock(&mu_);
  const uint64_t target = enqueued_;
  flush_now_ = true;
  auto done = [this, target]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return processed_ >= target;
  };
  return mu_.AwaitWithTimeout(absl::Condition(&done), absl::Milliseconds(timeout.count()));
}

void Tracer::Shutdown(std::chrono::milliseconds timeout) {
  if (joined_) return;
  Flush(timeout);
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
    // Whatever the flush did not send in time is dropped, not waited for.
    stats_.dropped += queue_.size();
    processed_ += queue_.size();
    queue_.clear();
  }
  thread_.join();
  joined_ = true;
}

TracerStats Tracer::stats() const {
  absl::MutexLock lock(&mu_);
  return stats_;
}

}  // namespace treespec
