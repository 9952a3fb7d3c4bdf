// Probes of a tensor-parallel group (k8s/overlays/gpu-tp2): every rank, also a
// follower that serves no gRPC, answers on its --health-port and serves
// /metrics; readiness turns SERVING once the group formed; SIGTERM to rank 0
// ends both ranks with exit code 0; a lost follower makes rank 0 report
// broken (readiness and liveness NOT_SERVING, so Kubernetes restarts it).
// Two CPU ranks over Gloo, fixture model.
#include "gtest/gtest.h"
#include "tests/integration/ops_testing.h"

namespace treespec::testing {
namespace {

using std::chrono::milliseconds;

std::vector<std::string> RankArgv(int rank, const std::string& rendezvous) {
  return std::vector<std::string>{
      BinaryPath("treespec-worker"), "--model", FixtureModel(kTargetModel), "--listen",
      "127.0.0.1:0", "--max-context", "256", "--kv-blocks", "256", "--tp-size", "2",
      "--tp-rank", std::to_string(rank), "--rendezvous", rendezvous, "--health-port", "0",
      "--metrics-port", "0", "--collective-timeout-s", "3"};
}

TEST(FollowerHealthTest, EveryRankServesHealthAndMetrics) {
  const std::string dir = TempDir();
  auto rank_argv = RankArgv;
  auto rank0 = ServiceProcess::Start(rank_argv(0, "127.0.0.1:0"), dir + "/rank0", milliseconds(60000),
                                     "rendezvous on ");
  ASSERT_TRUE(rank0.ok()) << rank0.status();
  auto rank1 = ServiceProcess::Start(rank_argv(1, (*rank0)->Line("rendezvous on ")),
                                     dir + "/rank1", milliseconds(60000), "health on ");
  ASSERT_TRUE(rank1.ok()) << rank1.status();
  ASSERT_TRUE(Eventually([&] { return !(*rank0)->Line("listening on ").empty(); },
                         milliseconds(60000)))
      << (*rank0)->log();
  const std::string health0 = (*rank0)->Line("health on ");
  const std::string health1 = (*rank1)->health();
  ASSERT_FALSE(health0.empty());
  ASSERT_FALSE(health1.empty());
  EXPECT_TRUE(Eventually([&] { return HealthStatus(health0) == 1; }, milliseconds(10000)));
  EXPECT_TRUE(Eventually([&] { return HealthStatus(health1) == 1; }, milliseconds(10000)));
  EXPECT_EQ(HealthStatus(health1, "liveness"), 1);
  EXPECT_NE(ScrapeMetrics((*rank0)->Line("metrics on ")).find("treespec_worker_kv_blocks"),
            std::string::npos);
  EXPECT_NE(ScrapeMetrics((*rank1)->Line("metrics on ")).find("process_start_time_seconds"),
            std::string::npos);

  (*rank0)->Signal(SIGTERM);
  const int s0 = (*rank0)->Wait(milliseconds(30000));
  EXPECT_TRUE(WIFEXITED(s0) && WEXITSTATUS(s0) == 0) << "rank 0 wait status " << s0;
  const int s1 = (*rank1)->Wait(milliseconds(30000));
  EXPECT_TRUE(WIFEXITED(s1) && WEXITSTATUS(s1) == 0) << "rank 1 wait status " << s1;
}

TEST(FollowerHealthTest, LostFollowerMarksRankZeroBroken) {
  const std::string dir = TempDir();
  auto rank0 = ServiceProcess::Start(RankArgv(0, "127.0.0.1:0"), dir + "/rank0",
                                     milliseconds(60000), "rendezvous on ");
  ASSERT_TRUE(rank0.ok()) << rank0.status();
  auto rank1 = ServiceProcess::Start(RankArgv(1, (*rank0)->Line("rendezvous on ")),
                                     dir + "/rank1", milliseconds(60000), "health on ");
  ASSERT_TRUE(rank1.ok()) << rank1.status();
  ASSERT_TRUE(Eventually([&] { return !(*rank0)->Line("listening on ").empty(); },
                         milliseconds(60000)));
  const std::string health0 = (*rank0)->Line("health on ");
  ASSERT_TRUE(Eventually([&] { return HealthStatus(health0) == 1; }, milliseconds(10000)));
  (*rank1)->Signal(SIGKILL);
  EXPECT_TRUE(Eventually(
      [&] { return HealthStatus(health0) == 2 && HealthStatus(health0, "liveness") == 2; },
      milliseconds(30000)))
      << (*rank0)->log();
}

}  // namespace
}  // namespace treespec::testing
