// OTLP trace export: spans encoded as an OTLP ExportTraceServiceRequest
// (protobuf, proto/opentelemetry — the official field numbers) and sent by
// HTTP POST to a collector's /v1/traces (OTLP/HTTP, Content-Type
// application/x-protobuf).
//
// Endpoint spelling: "http://host:4318" (the path defaults to /v1/traces),
// "host:4318" (http assumed) or a full URL "https://host/custom/path".
// OtlpHttpExporter is called from the tracer's export thread only.
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "obs/span.h"
#include "obs/tracer.h"

namespace treespec {

// The serialized ExportTraceServiceRequest of one resource and one scope
// ("treespec").
std::string EncodeOtlpTraces(const std::vector<Attribute>& resource,
                             const std::vector<SpanData>& spans);

struct OtlpEndpoint {
  std::string scheme_host_port;  // "http://host:port"
  std::string path;              // "/v1/traces"
};
absl::StatusOr<OtlpEndpoint> ParseOtlpEndpoint(const std::string& endpoint);

class OtlpHttpExporter final : public SpanExporter {
 public:
  static absl::StatusOr<std::unique_ptr<OtlpHttpExporter>> Create(
      const std::string& endpoint, std::chrono::milliseconds timeout = std::chrono::seconds(5));
  ~OtlpHttpExporter() override;
  absl::Status Export(const std::vector<Attribute>& resource,
                      const std::vector<SpanData>& spans) override;

 private:
  struct Impl;
  explicit OtlpHttpExporter(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace treespec
