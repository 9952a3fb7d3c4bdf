// Coordinator::Start refuses a drafter that reads the target's hidden
// features (EAGLE, EAGLE-3, ReDrafter heads) when the workers serve another
// kind of model or another hidden size, naming the drafter and both sides;
// it accepts the matching pairing, token drafters with any target, and
// workers or drafters that do not say (older ones).
#include <memory>
#include <string>
#include <vector>

#include "coordinator/coordinator.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/unit/fake_clients.h"

namespace treespec::testing {
namespace {

using ::testing::HasSubstr;

absl::Status StartWith(FakeWorker* worker, FakeDrafter* drafter) {
  std::vector<std::unique_ptr<WorkerClient>> workers;
  workers.push_back(std::make_unique<FakeWorkerClient>(worker));
  std::vector<DrafterSpec> drafters;
  drafters.push_back({"head", std::make_unique<FakeDrafterClient>(drafter)});
  CoordinatorOptions options;
  options.startup_timeout = std::chrono::milliseconds(1000);
  auto c = Coordinator::Create(options, std::move(workers), std::move(drafters), nullptr);
  if (!c.ok()) return c.status();
  return (*c)->Start();
}

void MakeEagleHead(FakeDrafter* d) {
  d->feature_layers = {7};
  d->target_model_kind = "llama";
  d->target_hidden_size = 256;
}

// An EAGLE head built for a llama of width 256, started beside a worker that
// serves a `kind` model of width `hidden`.
absl::Status StartHeadOn(const std::string& kind, int64_t hidden) {
  FakeWorker worker;
  worker.model_kind = kind;
  worker.hidden_size = hidden;
  FakeDrafter head;
  MakeEagleHead(&head);
  return StartWith(&worker, &head);
}

TEST(CoordinatorDrafterFitTest, FeatureHeadOfALlamaTargetOnAHybridWorkerIsRefused) {
  const absl::Status st = StartHeadOn("hybrid", 256);
  EXPECT_EQ(st.code(), absl::StatusCode::kFailedPrecondition) << st;
  EXPECT_THAT(st.message(), HasSubstr("drafter head at fake-drafter"));
  EXPECT_THAT(st.message(), HasSubstr("was built for a llama target"));
  EXPECT_THAT(st.message(), HasSubstr("the workers serve fake, a hybrid model"));
}

TEST(CoordinatorDrafterFitTest, FeatureHeadOfAnotherWidthIsRefused) {
  const absl::Status st = StartHeadOn("llama", 192);
  EXPECT_EQ(st.code(), absl::StatusCode::kFailedPrecondition) << st;
  EXPECT_THAT(st.message(), HasSubstr("of width 256"));
  EXPECT_THAT(st.message(), HasSubstr("has hidden size 192"));
}

TEST(CoordinatorDrafterFitTest, MatchingHeadTokenDraftersAndSilentPeersAreAccepted) {
  EXPECT_TRUE(StartHeadOn("llama", 256).ok());
  {
    FakeWorker worker;  // a token drafter serves any target
    worker.model_kind = "mamba2";
    worker.hidden_size = 192;
    FakeDrafter drafter;
    EXPECT_TRUE(StartWith(&worker, &drafter).ok());
  }
  {
    FakeWorker worker;  // an older worker says nothing of its model
    FakeDrafter head;
    MakeEagleHead(&head);
    EXPECT_TRUE(StartWith(&worker, &head).ok());
  }
}

}  // namespace
}  // namespace treespec::testing
