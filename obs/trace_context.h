// W3C Trace Context (https://www.w3.org/TR/trace-context/): span contexts,
// the `traceparent` header, id generation, and the context an outgoing RPC
// carries.
//
// `traceparent` is "VV-TTTT…(32 hex)-SSSS…(16 hex)-FF": version, trace id,
// parent span id, flags (bit 0: sampled). Parsing follows the spec's rules:
// lowercase hex only, version ff invalid, all-zero ids invalid, version 00
// exactly 55 characters, later versions may append "-…". Anything invalid
// parses to nullopt, so a caller starts a new root instead of failing.
//
// Outgoing context: a thread that is about to make internal RPCs installs an
// OutgoingTraceScope; the RPC client layer (rpc/trace_grpc.h) reads
// CurrentOutgoingTrace() and injects the headers. This is the usual
// implicit-context pattern of OpenTelemetry SDKs, kept to one thread-local
// slot that only scopes write. Ids come from a per-thread generator seeded
// from std::random_device. Everything here is thread-safe.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include "absl/strings/string_view.h"
#include <vector>

namespace treespec {

struct SpanContext {
  std::array<uint8_t, 16> trace_id{};
  std::array<uint8_t, 8> span_id{};
  uint8_t flags = 0;  // W3C trace flags; bit 0 = sampled

  bool valid() const;  // non-zero trace and span ids
  bool sampled() const { return (flags & 1) != 0; }
  bool operator==(const SpanContext& o) const {
    return trace_id == o.trace_id && span_id == o.span_id && flags == o.flags;
  }
};

inline constexpr char kTraceparentHeader[] = "traceparent";
// Further contexts a batched RPC serves (comma-separated traceparents); the
// server span links them (OTLP Span.links).
inline constexpr char kTraceLinksHeader[] = "treespec-trace-links";
// At most this many links travel with one RPC.
inline constexpr int kMaxTraceLinks = 16;

std::optional<SpanContext> ParseTraceparent(absl::string_view header);
std::string FormatTraceparent(const SpanContext& ctx);
// Comma-separated traceparents; invalid entries are skipped, at most
// kMaxTraceLinks kept.
std::vector<SpanContext> ParseTraceLinks(absl::string_view header);
std::string FormatTraceLinks(const std::vector<SpanContext>& links);

std::array<uint8_t, 16> NewTraceId();
std::array<uint8_t, 8> NewSpanId();
std::string HexId(const uint8_t* bytes, size_t n);

// What an internal RPC made on this thread carries: `parent` as traceparent
// (when valid) and `links` as treespec-trace-links.
struct OutgoingTrace {
  SpanContext parent;
  std::vector<SpanContext> links;
};

// The innermost OutgoingTraceScope's trace on this thread, or null.
const OutgoingTrace* CurrentOutgoingTrace();

class OutgoingTraceScope {
 public:
  explicit OutgoingTraceScope(OutgoingTrace trace);
  ~OutgoingTraceScope();
  OutgoingTraceScope(const OutgoingTraceScope&) = delete;
  OutgoingTraceScope& operator=(const OutgoingTraceScope&) = delete;

 private:
  OutgoingTrace trace_;
  const OutgoingTrace* previous_;
};

}  // namespace treespec
