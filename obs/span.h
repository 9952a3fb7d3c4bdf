// A finished span as the tracer queues and exports it: plain data, no
// behaviour. Attribute values are strings, integers, doubles or booleans.
// Request content (prompt and completion text, token ids) never goes into a
// span; attributes carry counts, shapes, names and codes only.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "obs/trace_context.h"

namespace treespec {

using AttributeValue = std::variant<std::string, int64_t, double, bool>;

struct Attribute {
  std::string key;
  AttributeValue value;
};

struct SpanEvent {
  int64_t time_unix_ns = 0;
  std::string name;
  std::vector<Attribute> attributes;
};

enum class SpanKind { kInternal = 1, kServer = 2, kClient = 3 };
enum class SpanStatus { kUnset = 0, kOk = 1, kError = 2 };

struct SpanData {
  SpanContext context;
  std::array<uint8_t, 8> parent_span_id{};  // all zero: a root span
  std::string name;
  SpanKind kind = SpanKind::kInternal;
  int64_t start_unix_ns = 0;
  int64_t end_unix_ns = 0;
  std::vector<Attribute> attributes;
  std::vector<SpanEvent> events;
  std::vector<SpanContext> links;
  SpanStatus status = SpanStatus::kUnset;
  std::string status_message;  // a status code name and server message, never request text

  void Add(std::string key, AttributeValue value) {
    attributes.push_back({std::move(key), std::move(value)});
  }
};

// Nanoseconds since the Unix epoch of a steady_clock time point (as of now:
// the two clocks' offset is read at each call).
inline int64_t UnixNanos(std::chrono::steady_clock::time_point t) {
  const auto sys_now = std::chrono::system_clock::now();
  const auto steady_now = std::chrono::steady_clock::now();
  return std::chrono::duration_cast<std::chrono::nanoseconds>(sys_now.time_since_epoch() -
                                                              (steady_now - t))
      .count();
}

inline int64_t NowUnixNanos() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

}  // namespace treespec
