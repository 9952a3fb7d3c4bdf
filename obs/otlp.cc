#include "obs/otlp.h"

#include <httplib.h>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "opentelemetry/proto/collector/trace/v1/trace_service.pb.h"

namespace treespec {
namespace {

namespace otlp = ::opentelemetry::proto;

void SetValue(const AttributeValue& v, otlp::common::v1::AnyValue* out) {
  if (const auto* s = std::get_if<std::string>(&v)) {
    out->set_string_value(*s);
  } else if (const auto* i = std::get_if<int64_t>(&v)) {
    out->set_int_value(*i);
  } else if (const auto* d = std::get_if<double>(&v)) {
    out->set_double_value(*d);
  } else if (const auto* b = std::get_if<bool>(&v)) {
    out->set_bool_value(*b);
  }
}

template <typename Repeated>
void SetAttributes(const std::vector<Attribute>& attrs, Repeated* out) {
  out->Reserve(static_cast<int>(attrs.size()));
  for (const Attribute& a : attrs) {
    otlp::common::v1::KeyValue* kv = out->Add();
    kv->set_key(a.key);
    SetValue(a.value, kv->mutable_value());
  }
}

std::string Bytes(const uint8_t* p, size_t n) { return std::string(reinterpret_cast<const char*>(p), n); }

bool AllZero(const std::array<uint8_t, 8>& a) {
  for (uint8_t b : a) {
    if (b != 0) return false;
  }
  return true;
}

}  // namespace

std::string EncodeOtlpTraces(const std::vector<Attribute>& resource,
                             const std::vector<SpanData>& spans) {
  otlp::collector::trace::v1::ExportTraceServiceRequest req;
  otlp::trace::v1::ResourceSpans* rs = req.add_resource_spans();
  SetAttributes(resource, rs->mutable_resource()->mutable_attributes());
  otlp::trace::v1::ScopeSpans* ss = rs->add_scope_spans();
  ss->mutable_scope()->set_name("treespec");
  ss->mutable_spans()->Reserve(static_cast<int>(spans.size()));
  for (const SpanData& s : spans) {
    otlp::trace::v1::Span* o = ss->add_spans();
    o->set_trace_id(Bytes(s.context.trace_id.data(), 16));
    o->set_span_id(Bytes(s.context.span_id.data(), 8));
    if (!AllZero(s.parent_span_id)) o->set_parent_span_id(Bytes(s.parent_span_id.data(), 8));
    o->set_flags(s.context.flags);
    o->set_name(s.name);
    o->set_kind(static_cast<otlp::trace::v1::Span::SpanKind>(s.kind));
    o->set_start_time_unix_nano(static_cast<uint64_t>(s.start_unix_ns));
    o->set_end_time_unix_nano(static_cast<uint64_t>(s.end_unix_ns));
    SetAttributes(s.attributes, o->mutable_attributes());
    for (const SpanEvent& e : s.events) {
      otlp::trace::v1::Span::Event* oe = o->add_events();
      oe->set_time_unix_nano(static_cast<uint64_t>(e.time_unix_ns));
      oe->set_name(e.name);
      SetAttributes(e.attributes, oe->mutable_attributes());
    }
    for (const SpanContext& l : s.links) {
      otlp::trace::v1::Span::Link* ol = o->add_links();
      ol->set_trace_id(Bytes(l.trace_id.data(), 16));
      ol->set_span_id(Bytes(l.span_id.data(), 8));
      ol->set_flags(l.flags);
    }
    if (s.status != SpanStatus::kUnset) {
      o->mutable_status()->set_code(static_cast<otlp::trace::v1::Status::StatusCode>(s.status));
      o->mutable_status()->set_message(s.status_message);
    }
  }
  return req.SerializeAsString();
}

absl::StatusOr<OtlpEndpoint> ParseOtlpEndpoint(const std::string& endpoint) {
  std::string rest = endpoint;
  std::string scheme = "http";
  if (const size_t p = rest.find("://"); p != std::string::npos) {
    scheme = rest.substr(0, p);
    rest = rest.substr(p + 3);
  }
  if (scheme != "http" && scheme != "https") {
    return absl::InvalidArgumentError(
        absl::StrCat("--otlp_endpoint: scheme '", scheme, "' in '", endpoint,
                     "' is not http or https"));
  }
  OtlpEndpoint out;
  const size_t slash = rest.find('/');
  const std::string host_port = rest.substr(0, slash);
  out.path = slash == std::string::npos ? "" : rest.substr(slash);
  if (out.path.empty() || out.path == "/") out.path = "/v1/traces";
  if (host_port.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--otlp_endpoint: '", endpoint, "' names no host"));
  }
  out.scheme_host_port = absl::StrCat(scheme, "://", host_port);
  return out;
}

struct OtlpHttpExporter::Impl {
  OtlpEndpoint endpoint;
  std::unique_ptr<httplib::Client> client;
};

OtlpHttpExporter::OtlpHttpExporter(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
OtlpHttpExporter::~OtlpHttpExporter() = default;

absl::StatusOr<std::unique_ptr<OtlpHttpExporter>> OtlpHttpExporter::Create(
    const std::string& endpoint, std::chrono::milliseconds timeout) {
  absl::StatusOr<OtlpEndpoint> e = ParseOtlpEndpoint(endpoint);
  if (!e.ok()) return e.status();
  auto impl = std::make_unique<Impl>();
  impl->endpoint = *e;
  impl->client = std::make_unique<httplib::Client>(e->scheme_host_port);
  if (!impl->client->is_valid()) {
    return absl::InvalidArgumentError(absl::StrCat("--otlp_endpoint: cannot use '", endpoint, "'"));
  }
  impl->client->set_connection_timeout(timeout);
  impl->client->set_read_timeout(timeout);
  impl->client->set_write_timeout(timeout);
  impl->client->set_keep_alive(true);
  return std::unique_ptr<OtlpHttpExporter>(new OtlpHttpExporter(std::move(impl)));
}

absl::Status OtlpHttpExporter::Export(const std::vector<Attribute>& resource,
                                      const std::vector<SpanData>& spans) {
  const std::string body = EncodeOtlpTraces(resource, spans);
  httplib::Result r = impl_->client->Post(impl_->endpoint.path, body, "application/x-protobuf");
  if (!r) {
    return absl::UnavailableError(absl::StrCat("OTLP export to ", impl_->endpoint.scheme_host_port,
                                               impl_->endpoint.path, ": ",
                                               httplib::to_string(r.error())));
  }
  if (r->status < 200 || r->status >= 300) {
    return absl::UnavailableError(absl::StrCat("OTLP export to ", impl_->endpoint.scheme_host_port,
                                               impl_->endpoint.path, ": HTTP ", r->status));
  }
  return absl::OkStatus();
}

}  // namespace treespec
