#include <cstring>

#include "absl/strings/str_cat.h"
#include "core/comm/communicator.h"

namespace treespec {

absl::Status CommOptions::Validate() const {
  if (timeout.count() <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("collective timeout ", timeout.count(), " ms must be > 0"));
  }
  return absl::OkStatus();
}

namespace {

class SingleRankCommunicator final : public Communicator {
 public:
  int rank() const override { return 0; }
  int size() const override { return 1; }
  std::string name() const override { return "single"; }
  absl::Status AllReduceSum(Tensor*) override { return absl::OkStatus(); }
  absl::Status AllGather(const Tensor& in, Tensor* out) override {
    if (in.raw() != out->raw()) std::memcpy(out->raw(), in.raw(), in.nbytes());
    return absl::OkStatus();
  }
  absl::Status Broadcast(void*, size_t, int) override { return absl::OkStatus(); }
  absl::Status Barrier() override { return absl::OkStatus(); }
};

}  // namespace

std::unique_ptr<Communicator> CreateSingleRankCommunicator() {
  return std::make_unique<SingleRankCommunicator>();
}

}  // namespace treespec
