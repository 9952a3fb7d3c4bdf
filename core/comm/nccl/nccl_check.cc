#include "core/comm/nccl/nccl_check.h"

#include "absl/strings/str_cat.h"

namespace treespec::cuda {

absl::Status ToStatus(ncclResult_t code, const char* expr, const char* file, int line) {
  if (code == ncclSuccess) return absl::OkStatus();
  const char* detail = ncclGetLastError(nullptr);
  std::string msg = absl::StrCat(file, ":", line, ": ", expr, " failed: ", ncclGetErrorString(code),
                                 detail != nullptr && detail[0] != '\0' ? absl::StrCat(" (", detail, ")")
                                                                        : std::string());
  switch (code) {
    case ncclSystemError:
    case ncclRemoteError:
    case ncclUnhandledCudaError:
    case ncclInProgress:
      return absl::UnavailableError(msg);
    case ncclInvalidArgument:
    case ncclInvalidUsage:
      return absl::InvalidArgumentError(msg);
    default:
      return absl::InternalError(msg);
  }
}

}  // namespace treespec::cuda
