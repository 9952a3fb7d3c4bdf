// Status mapping at the gRPC edge: absl::Status <-> grpc::Status and the
// per-sequence SequenceStatus carried in batched responses. Codes are kept end
// to end (absl and gRPC share the canonical code numbers).
#pragma once

#include "absl/status/status.h"
#include "grpcpp/support/status.h"
#include "treespec/v1/common.pb.h"

namespace treespec {

grpc::Status ToGrpc(const absl::Status& status);
absl::Status FromGrpc(const grpc::Status& status);
void ToProto(const absl::Status& status, v1::SequenceStatus* out);
absl::Status FromProto(const v1::SequenceStatus& status);

}  // namespace treespec
