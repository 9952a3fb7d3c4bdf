// Periodic (the services' lease sweepers): runs its function repeatedly on
// its own thread, not before the first period, and never after destruction.
#include "core/util/periodic.h"

#include <atomic>
#include <chrono>
#include <thread>

#include "gtest/gtest.h"

namespace treespec {
namespace {

TEST(PeriodicTest, RunsRepeatedlyAndStopsOnDestruction) {
  std::atomic<int> runs{0};
  {
    Periodic p(absl::Milliseconds(5), [&] { ++runs; });
    for (int i = 0; i < 2000 && runs.load() < 3; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    EXPECT_GE(runs.load(), 3);
  }
  const int after = runs.load();
  std::this_thread::sleep_for(std::chrono::milliseconds(30));
  EXPECT_EQ(runs.load(), after) << "ran after destruction";
}

TEST(PeriodicTest, WaitsAPeriodBeforeTheFirstRunAndStopsPromptly) {
  std::atomic<int> runs{0};
  const auto t0 = std::chrono::steady_clock::now();
  {
    Periodic p(absl::Seconds(60), [&] { ++runs; });
  }
  EXPECT_EQ(runs.load(), 0);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(5))
      << "destruction waited for the period";
}

}  // namespace
}  // namespace treespec
