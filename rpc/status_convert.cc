#include "rpc/status_convert.h"

#include <string>

namespace treespec {

grpc::Status ToGrpc(const absl::Status& status) {
  if (status.ok()) return grpc::Status::OK;
  return grpc::Status(static_cast<grpc::StatusCode>(status.code()), std::string(status.message()));
}

absl::Status FromGrpc(const grpc::Status& status) {
  if (status.ok()) return absl::OkStatus();
  return absl::Status(static_cast<absl::StatusCode>(status.error_code()), status.error_message());
}

void ToProto(const absl::Status& status, v1::SequenceStatus* out) {
  out->set_code(static_cast<int32_t>(status.code()));
  out->set_message(std::string(status.message()));
}

absl::Status FromProto(const v1::SequenceStatus& status) {
  if (status.code() == 0) return absl::OkStatus();
  if (status.code() < 0 || status.code() > 16) {
    return absl::UnknownError(status.message());
  }
  return absl::Status(static_cast<absl::StatusCode>(status.code()), status.message());
}

}  // namespace treespec
