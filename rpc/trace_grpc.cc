#include "rpc/trace_grpc.h"

namespace treespec {
namespace {

absl::string_view Value(const GrpcMetadata& metadata, const char* key) {
  auto it = metadata.find(key);
  if (it == metadata.end()) return {};
  return absl::string_view(it->second.data(), it->second.size());
}

}  // namespace

SpanContext ExtractTraceparent(const GrpcMetadata& metadata) {
  std::optional<SpanContext> ctx = ParseTraceparent(Value(metadata, kTraceparentHeader));
  return ctx.has_value() ? *ctx : SpanContext{};
}

std::vector<SpanContext> ExtractTraceLinks(const GrpcMetadata& metadata) {
  return ParseTraceLinks(Value(metadata, kTraceLinksHeader));
}

void InjectTraceContext(grpc::ClientContext* ctx) {
  const OutgoingTrace* t = CurrentOutgoingTrace();
  if (t == nullptr || !t->parent.valid()) return;
  ctx->AddMetadata(kTraceparentHeader, FormatTraceparent(t->parent));
  if (!t->links.empty()) ctx->AddMetadata(kTraceLinksHeader, FormatTraceLinks(t->links));
}

}  // namespace treespec
