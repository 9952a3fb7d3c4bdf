// Tracer: decides span contexts (sampling) and exports finished spans from a
// bounded queue on a background thread.
//
// Sampling is parent-based: a child of a valid parent inherits the parent's
// sampled flag, so one decision (made where a trace starts) holds in every
// service; a new root is sampled when the low 64 bits of its trace id fall
// below sample_ratio · 2^64 (the OpenTelemetry TraceIdRatioBased rule, so
// every service decides the same for the same trace id).
//
// Record() never waits for I/O: it appends to a queue under a mutex held for
// an O(1) push and, when the queue is full, drops the span and counts it.
// The export thread sends batches of at most max_batch spans, at the latest
// flush_interval after they were queued. Flush() and Shutdown() drain the
// queue (bounded by a timeout) — the service binaries call Shutdown after
// their gRPC servers have drained, so a request's last spans are exported.
//
// Thread-safe.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "obs/span.h"

namespace treespec {

struct TracerOptions {
  std::string service_name = "treespec";
  std::vector<Attribute> resource;  // more resource attributes (treespec.rank, host.name, ...)
  double sample_ratio = 1.0;        // for new roots; children follow their parent
  size_t queue_capacity = 8192;     // spans waiting for export
  size_t max_batch = 512;           // spans per export call
  std::chrono::milliseconds flush_interval{500};
  absl::Status Validate() const;
};

// Where batches go (OTLP/HTTP in production, memory in tests). Called from
// the tracer's export thread only.
class SpanExporter {
 public:
  virtual ~SpanExporter() = default;
  virtual absl::Status Export(const std::vector<Attribute>& resource,
                              const std::vector<SpanData>& spans) = 0;
};

struct TracerStats {
  uint64_t recorded = 0;         // spans accepted into the queue
  uint64_t dropped = 0;          // spans dropped because the queue was full or closed
  uint64_t exported = 0;         // spans the exporter accepted
  uint64_t export_failures = 0;  // failed export calls (their spans are lost)
};

class Tracer {
 public:
  Tracer(TracerOptions options, std::unique_ptr<SpanExporter> exporter);
  ~Tracer();  // Shutdown(2 s) unless already shut down
  Tracer(const Tracer&) = delete;
  Tracer& operator=(const Tracer&) = delete;

  // The context for a new span: a child of `parent` if it is valid, else a
  // new root (see the sampling rule above).
  SpanContext NewContext(const SpanContext& parent) const;
  // Queues a finished span; unsampled spans are ignored.
  void Record(SpanData span);
  // Exports everything queued before the call; false on timeout.
  bool Flush(std::chrono::milliseconds timeout);
  // Flushes, then stops the export thread; later spans are dropped.
  void Shutdown(std::chrono::milliseconds timeout);

  TracerStats stats() const;
  const TracerOptions& options() const { return options_; }

 private:
  void ExportLoop();

  const TracerOptions options_;
  const std::unique_ptr<SpanExporter> exporter_;
  std::vector<Attribute> resource_;  // service.name first

  mutable absl::Mutex mu_;
  std::vector<SpanData> queue_ ABSL_GUARDED_BY(mu_);
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  bool flush_now_ ABSL_GUARDED_BY(mu_) = false;
  uint64_t enqueued_ ABSL_GUARDED_BY(mu_) = 0;   // spans ever queued
  uint64_t processed_ ABSL_GUARDED_BY(mu_) = 0;  // spans handed to the exporter, done
  TracerStats stats_ ABSL_GUARDED_BY(mu_);
  std::thread thread_;
  bool joined_ = false;  // Shutdown ran (owner thread only)
};

}  // namespace treespec
