#include "core/spec/bandit.h"

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace treespec {
namespace {

using ::testing::HasSubstr;

TreeShape Shape(const char* text) {
  absl::StatusOr<TreeShape> s = TreeShape::Parse(text);
  EXPECT_TRUE(s.ok()) << text;
  return *s;
}

TEST(BanditTest, RewardIsEquationTwo) {
  // r = −(1/N + λγ·γ/N)
  EXPECT_DOUBLE_EQ(UcbBandit::Reward(1, 5, 0.1), -(1.0 + 0.5));
  EXPECT_DOUBLE_EQ(UcbBandit::Reward(4, 5, 0.1), -(0.25 + 0.5 / 4));
  EXPECT_DOUBLE_EQ(UcbBandit::Reward(3, 2, 0.0), -1.0 / 3);
  // N_accept includes the bonus, so it is at least 1; smaller values clamp.
  EXPECT_DOUBLE_EQ(UcbBandit::Reward(0, 2, 0.5), UcbBandit::Reward(1, 2, 0.5));
  // More accepted tokens is better; a deeper tree for the same N is worse.
  EXPECT_GT(UcbBandit::Reward(5, 4, 0.1), UcbBandit::Reward(2, 4, 0.1));
  EXPECT_GT(UcbBandit::Reward(3, 2, 0.1), UcbBandit::Reward(3, 6, 0.1));
}

TEST(BanditTest, OptionsAndArmsAreValidated) {
  EXPECT_TRUE(BanditOptions{}.Validate().ok());
  EXPECT_THAT(std::string(BanditOptions{-1.0, 0.1}.Validate().message()),
              HasSubstr("lambda_ucb"));
  EXPECT_THAT(std::string(BanditOptions{1.0, NAN}.Validate().message()),
              HasSubstr("lambda_gamma"));
  EXPECT_EQ(UcbBandit::Create({}, {}).status().code(), absl::StatusCode::kInvalidArgument);
  absl::Status dup = UcbBandit::Create({Shape("chain:2"), Shape("3,2"), Shape("1,1")}, {}).status();
  EXPECT_EQ(dup.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(dup.message()), HasSubstr("tree_shapes[2] = \"chain:2\""));
  EXPECT_FALSE(UcbBandit::Create({Shape("chain:2")}, {1.0, -0.5}).ok());
}

TEST(BanditTest, ExploresEveryArmOnceInOrderFirst) {
  absl::StatusOr<UcbBandit> b =
      UcbBandit::Create({Shape("chain:1"), Shape("chain:4"), Shape("3,2,2,1,1")}, {});
  ASSERT_TRUE(b.ok());
  for (int k = 0; k < 3; ++k) {
    EXPECT_EQ(b->Select(), k);
    b->Update(k, 1);  // even a poor first result moves on to the next unexplored arm
  }
  for (int k = 0; k < 3; ++k) EXPECT_EQ(b->pulls(k), 1);
  EXPECT_EQ(b->rounds(), 3);
}

TEST(BanditTest, TiesGoToTheLowestIndex) {
  absl::StatusOr<UcbBandit> b = UcbBandit::Create({Shape("chain:2"), Shape("2,1")}, {1.0, 0.0});
  ASSERT_TRUE(b.ok());
  b->Update(0, 2);
  b->Update(1, 2);  // same γ, same reward, same pulls
  EXPECT_EQ(b->Select(), 0);
  EXPECT_DOUBLE_EQ(b->mean_reward(0), b->mean_reward(1));
}

TEST(BanditTest, FollowsEquationOne) {
  absl::StatusOr<UcbBandit> b = UcbBandit::Create({Shape("chain:1"), Shape("chain:3")}, {0.5, 0.1});
  ASSERT_TRUE(b.ok());
  b->Update(0, 2);
  b->Update(1, 4);
  b->Update(1, 1);
  const double t = 3;
  const double s0 = UcbBandit::Reward(2, 1, 0.1) + 0.5 * std::sqrt(2 * std::log(t) / 1);
  const double s1 = (UcbBandit::Reward(4, 3, 0.1) + UcbBandit::Reward(1, 3, 0.1)) / 2 +
                    0.5 * std::sqrt(2 * std::log(t) / 2);
  EXPECT_NEAR(b->mean_reward(1), (UcbBandit::Reward(4, 3, 0.1) + UcbBandit::Reward(1, 3, 0.1)) / 2,
              1e-12);
  EXPECT_EQ(b->Select(), s0 > s1 ? 0 : 1);
}

// A synthetic drafter: with arm k each depth is accepted with probability α_k
// until the first rejection, so a step emits N = 1 + min(Geometric, γ_k)
// tokens (accepted draft tokens plus the bonus).
struct SyntheticArm {
  const char* shape;
  double alpha;
};

double ExpectedReward(const SyntheticArm& arm, double lambda_gamma) {
  const int gamma = Shape(arm.shape).Depth();
  double e = 0.0;
  for (int a = 0; a <= gamma; ++a) {
    const double pmf = std::pow(arm.alpha, a) * (a < gamma ? 1 - arm.alpha : 1.0);
    e += pmf * UcbBandit::Reward(1 + a, gamma, lambda_gamma);
  }
  return e;
}

int32_t DrawNumAccepted(const TreeShape& shape, double alpha, std::mt19937& rng) {
  std::bernoulli_distribution accept(alpha);
  int32_t n = 1;
  while (n <= shape.Depth() && accept(rng)) ++n;
  return n;
}

TEST(BanditTest, ConvergesToTheBestArm) {
  const std::vector<SyntheticArm> env = {
      {"chain:1", 0.6}, {"chain:4", 0.5}, {"3,2,2,1,1", 0.8}, {"2,2,2,2,2,2,2,2", 0.8}};
  const BanditOptions options{0.5, 0.1};
  std::vector<TreeShape> arms;
  int best = 0;
  std::vector<double> expected;
  for (const SyntheticArm& a : env) {
    arms.push_back(Shape(a.shape));
    expected.push_back(ExpectedReward(a, options.lambda_gamma));
    if (expected.back() > expected[best]) best = static_cast<int>(expected.size()) - 1;
  }
  ASSERT_EQ(best, 2) << "environment: the paper's (3,2,2,1,1) should be best here";
  for (uint32_t seed : {1u, 2u, 3u}) {
    absl::StatusOr<UcbBandit> b = UcbBandit::Create(arms, options);
    ASSERT_TRUE(b.ok());
    std::mt19937 rng(seed);
    constexpr int kRounds = 5000;
    for (int round = 0; round < kRounds; ++round) {
      const int k = b->Select();
      b->Update(k, DrawNumAccepted(arms[k], env[k].alpha, rng));
    }
    EXPECT_EQ(b->MostPulled(), best) << "seed " << seed;
    EXPECT_EQ(b->Select(), best) << "seed " << seed;
    EXPECT_GT(b->pulls(best), kRounds * 8 / 10) << "seed " << seed;
    for (int k = 0; k < b->num_arms(); ++k) {
      EXPECT_GE(b->pulls(k), 1) << "arm " << k;
      EXPECT_NEAR(b->mean_reward(k), expected[k], k == best ? 0.02 : 0.3)
          << "seed " << seed << " arm " << k;
    }
  }
}

TEST(BanditTest, DeterministicGivenTheSameOutcomes) {
  const std::vector<TreeShape> arms = {Shape("chain:2"), Shape("2,2"), Shape("4,1,1")};
  std::vector<int> picks[2];
  for (int run = 0; run < 2; ++run) {
    absl::StatusOr<UcbBandit> b = UcbBandit::Create(arms, {});
    ASSERT_TRUE(b.ok());
    std::mt19937 rng(42);
    for (int round = 0; round < 300; ++round) {
      const int k = b->Select();
      picks[run].push_back(k);
      b->Update(k, 1 + static_cast<int>(rng() % (arms[k].Depth() + 1)));
    }
  }
  EXPECT_EQ(picks[0], picks[1]);
}

}  // namespace
}  // namespace treespec
