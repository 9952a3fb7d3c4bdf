#include "core/spec/step_cost_model.h"

#include <cmath>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace treespec {
namespace {

using ::testing::HasSubstr;

// A synthetic verify pass: t = a + b·B + c·N + d·C + e·max(0, N − knee).
struct TrueVerify {
  double a = 2e-3, b = 1e-4, c = 2e-5, d = 1e-8, e = 0.0;
  int64_t knee = 0;
  double operator()(const VerifyStepFeatures& f) const {
    const double past = knee > 0 ? std::max<int64_t>(0, f.tree_tokens - knee) : 0;
    return a + b * f.batch + c * f.tree_tokens + d * f.context_tokens + e * past;
  }
};

std::vector<VerifyStepFeatures> Grid() {
  return VerifyGrid({1, 2, 4, 8, 16, 32}, {1, 4, 8, 16, 32, 64}, {128, 512, 2048});
}

// Multiplicative noise of `rel` (normal) and, with probability `outlier_p`, a
// step 3–10× slower (a stall).
double Noisy(double t, double rel, double outlier_p, std::mt19937_64& rng) {
  std::normal_distribution<double> n(0.0, rel);
  std::uniform_real_distribution<double> u(0.0, 1.0);
  double v = t * (1.0 + n(rng));
  if (u(rng) < outlier_p) v *= 3.0 + 7.0 * u(rng);
  return v;
}

std::vector<VerifySample> Profile(const TrueVerify& truth, double rel, double outlier_p,
                                  uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<VerifySample> out;
  for (const VerifyStepFeatures& f : Grid())
    out.push_back({f, Noisy(truth(f), rel, outlier_p, rng)});
  return out;
}

double RelErr(double got, double want) { return std::fabs(got - want) / want; }

TEST(StepCostModelTest, RecoversVerifyCoefficientsFromNoisyProfileWithOutliers) {
  const TrueVerify truth;
  absl::StatusOr<VerifyCostModel> m = VerifyCostModel::FitProfile(Profile(truth, 0.02, 0.05, 1));
  ASSERT_TRUE(m.ok()) << m.status();
  const VerifyCostModel::Coefficients c = m->coefficients();
  EXPECT_LT(RelErr(c.per_step, truth.a), 0.10) << c.per_step;
  EXPECT_LT(RelErr(c.per_sequence, truth.b), 0.15) << c.per_sequence;
  EXPECT_LT(RelErr(c.per_token, truth.c), 0.10) << c.per_token;
  EXPECT_LT(RelErr(c.per_context_token, truth.d), 0.25) << c.per_context_token;
  EXPECT_LT(c.per_token_past_knee, 0.1 * truth.c) << "spurious knee at " << c.knee_tokens;
  for (const VerifyStepFeatures& f : Grid()) {
    EXPECT_LT(RelErr(m->Predict(f), truth(f)), 0.04)
        << "batch " << f.batch << " tokens " << f.tree_tokens << " context " << f.context_tokens;
  }
}

TEST(StepCostModelTest, FindsTheRooflineKnee) {
  TrueVerify truth;
  truth.knee = 256;
  truth.e = 1e-4;  // past 256 tokens every token costs 6× more
  absl::StatusOr<VerifyCostModel> m = VerifyCostModel::FitProfile(Profile(truth, 0.01, 0.0, 2));
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(m->knee_tokens(), 256);
  EXPECT_LT(RelErr(m->coefficients().per_token_past_knee, truth.e), 0.1);
  for (const VerifyStepFeatures& f : Grid()) {
    EXPECT_LT(RelErr(m->Predict(f), truth(f)), 0.04) << "tokens " << f.tree_tokens;
  }
}

// Live steps at random batch/tree/context points of a server.
VerifyStepFeatures RandomStep(std::mt19937_64& rng) {
  std::uniform_int_distribution<int64_t> batch(1, 32), tokens(1, 48), ctx(64, 2048);
  VerifyStepFeatures f;
  f.batch = batch(rng);
  f.tree_tokens = f.batch * tokens(rng);
  f.context_tokens = f.batch * ctx(rng);
  return f;
}

TEST(StepCostModelTest, TracksDriftOnlineAndIgnoresStalls) {
  const TrueVerify before;
  absl::StatusOr<VerifyCostModel> m = VerifyCostModel::FitProfile(Profile(before, 0.02, 0.0, 3));
  ASSERT_TRUE(m.ok()) << m.status();
  TrueVerify after = before;
  after.a = 3e-3;  // e.g. the GPU clocks down
  after.c = 4e-5;
  std::mt19937_64 rng(4);
  const VerifyStepFeatures probe{16, 16 * 24, 16 * 1000};
  EXPECT_GT(RelErr(m->Predict(probe), after(probe)), 0.3) << "the drift should be visible first";
  for (int i = 0; i < 400; ++i) {
    const VerifyStepFeatures f = RandomStep(rng);
    m->Observe(f, Noisy(after(f), 0.02, 0.08, rng));
  }
  for (int i = 0; i < 50; ++i) {
    const VerifyStepFeatures f = RandomStep(rng);
    EXPECT_LT(RelErr(m->Predict(f), after(f)), 0.05)
        << "batch " << f.batch << " tokens " << f.tree_tokens << " context " << f.context_tokens;
  }
  EXPECT_LT(RelErr(m->coefficients().per_token, after.c), 0.1);
  // Bad measurements are dropped, not fitted.
  const double p = m->Predict(probe);
  m->Observe(probe, -1.0);
  m->Observe(probe, NAN);
  EXPECT_EQ(m->model().num_rejected(), 2);
  EXPECT_DOUBLE_EQ(m->Predict(probe), p);
}

TEST(StepCostModelTest, ADirectionLiveTrafficNeverVariesKeepsItsProfiledValue) {
  const TrueVerify truth;
  absl::StatusOr<VerifyCostModel> m = VerifyCostModel::FitProfile(Profile(truth, 0.01, 0.0, 5));
  ASSERT_TRUE(m.ok()) << m.status();
  std::mt19937_64 rng(6);
  for (int i = 0; i < 600; ++i) {  // a single-user server: batch 1 only
    VerifyStepFeatures f = RandomStep(rng);
    f.tree_tokens /= f.batch;
    f.context_tokens /= f.batch;
    f.batch = 1;
    m->Observe(f, Noisy(truth(f), 0.02, 0.0, rng));
  }
  const VerifyStepFeatures big{32, 32 * 16, 32 * 1024};
  EXPECT_LT(RelErr(m->Predict(big), truth(big)), 0.06);
}

TEST(StepCostModelTest, RecoversDraftPerLevelCosts) {
  // Per call 1 ms, per level 0.3 ms + 20 µs per sequence + 4 µs per node.
  auto truth = [](const DraftStepFeatures& f) {
    return 1e-3 + 3e-4 * f.levels + 2e-5 * f.seq_levels + 4e-6 * f.nodes;
  };
  std::mt19937_64 rng(7);
  std::vector<DraftSample> samples;
  for (const DraftStepFeatures& f : DraftGrid({1, 4, 16, 64}, {1, 2, 4, 6}, {1, 2, 4, 8})) {
    samples.push_back({f, Noisy(truth(f), 0.02, 0.05, rng)});
  }
  absl::StatusOr<DraftCostModel> m = DraftCostModel::FitProfile(samples);
  ASSERT_TRUE(m.ok()) << m.status();
  const DraftCostModel::Coefficients c = m->coefficients();
  EXPECT_LT(RelErr(c.per_call, 1e-3), 0.15) << c.per_call;
  EXPECT_LT(RelErr(c.per_level, 3e-4), 0.15) << c.per_level;
  EXPECT_LT(RelErr(c.per_sequence_level, 2e-5), 0.15) << c.per_sequence_level;
  EXPECT_LT(RelErr(c.per_node, 4e-6), 0.15) << c.per_node;
  EXPECT_EQ(m->Predict(DraftStepFeatures{}), 0.0) << "no levels: the drafter is not called";
}

TEST(StepCostModelTest, RejectsBadProfiles) {
  std::vector<VerifySample> few = {{{1, 1, 10}, 1e-3}};
  EXPECT_EQ(VerifyCostModel::FitProfile(few).status().code(), absl::StatusCode::kInvalidArgument);
  std::vector<VerifySample> bad = Profile(TrueVerify{}, 0.0, 0.0, 1);
  bad[3].seconds = -2.0;
  absl::Status s = VerifyCostModel::FitProfile(bad).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()), HasSubstr("samples[3].seconds"));
}

StepCostModel FittedPair() {
  StepCostModel m;
  m.model = "llama-68m+mamba-130m";
  m.device = "cpu 16t";
  m.verify = *VerifyCostModel::FitProfile(
      Profile(TrueVerify{0.002, 1e-4, 2e-5, 1e-8, 3e-5, 128}, 0.02, 0.0, 8));
  std::vector<DraftSample> d;
  for (const DraftStepFeatures& f : DraftGrid({1, 8}, {1, 3}, {1, 4})) {
    d.push_back({f, 1e-3 + 1e-4 * f.levels + 1e-5 * f.nodes});
  }
  m.draft = *DraftCostModel::FitProfile(d);
  return m;
}

TEST(StepCostModelTest, JsonRoundTripsExactly) {
  const StepCostModel m = FittedPair();
  absl::StatusOr<StepCostModel> back = StepCostModel::FromJsonText(m.ToJsonText());
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->model, m.model);
  EXPECT_EQ(back->device, m.device);
  EXPECT_EQ(back->verify.knee_tokens(), m.verify.knee_tokens());
  EXPECT_EQ(back->verify.model().coefficients(), m.verify.model().coefficients());
  EXPECT_EQ(back->draft.model().coefficients(), m.draft.model().coefficients());
  for (const VerifyStepFeatures& f : Grid()) {
    EXPECT_EQ(back->verify.Predict(f), m.verify.Predict(f));
  }
  EXPECT_EQ(back->draft.Predict({3, 24, 100}), m.draft.Predict({3, 24, 100}));
}

TEST(StepCostModelTest, CacheIsKeyedByModelAndDevice) {
  const std::string dir = ::testing::TempDir();
  StepCostModel m = FittedPair();
  ASSERT_TRUE(m.SaveToCache(dir).ok());
  absl::StatusOr<StepCostModel> back = StepCostModel::LoadFromCache(dir, m.model, m.device);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->verify.Predict({4, 40, 4000}), m.verify.Predict({4, 40, 4000}));
  EXPECT_EQ(StepCostModel::LoadFromCache(dir, m.model, "H100").status().code(),
            absl::StatusCode::kNotFound);
  // "cpu_16t" sanitises to the same file name as "cpu 16t" but is another device.
  EXPECT_EQ(StepCostModel::LoadFromCache(dir, m.model, "cpu_16t").status().code(),
            absl::StatusCode::kFailedPrecondition);
  std::remove((dir + "/" + StepCostModel::CacheFileName(m.model, m.device)).c_str());
  EXPECT_EQ(m.SaveToCache(dir + "/no/such/dir").code(), absl::StatusCode::kUnavailable);
}

TEST(StepCostModelTest, BadCacheTextIsInvalidArgumentNamingTheField) {
  std::string text = FittedPair().ToJsonText();
  absl::StatusOr<StepCostModel> v2 = StepCostModel::FromJsonText(
      text.replace(text.find("\"format_version\": 1"), 19, "\"format_version\": 2"));
  EXPECT_EQ(v2.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(v2.status().message()), HasSubstr("format_version"));
  nlohmann::json j = nlohmann::json::parse(FittedPair().ToJsonText());
  j["verify"]["coefficients"][2] = -1.0;
  absl::StatusOr<StepCostModel> neg = StepCostModel::FromJsonText(j.dump());
  EXPECT_EQ(neg.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(neg.status().message()), HasSubstr("coefficients[2]"));
  EXPECT_EQ(StepCostModel::FromJsonText("{").status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(StepCostModelTest, ProfileRunsTheGridAndKeepsTheMedian) {
  std::vector<VerifyStepFeatures> seen;
  int calls = 0;
  const VerifyStepFn step = [&](const VerifyStepFeatures& f) -> absl::StatusOr<double> {
    seen.push_back(f);
    ++calls;
    // Every third call is a stall; the median of 3 never is.
    return (calls % 3 == 0 ? 100.0 : 1.0) * 1e-3 * f.tree_tokens;
  };
  const std::vector<VerifyStepFeatures> grid = VerifyGrid({1, 2}, {4, 8}, {16});
  absl::StatusOr<std::vector<VerifySample>> s = ProfileVerify(step, grid, 3);
  ASSERT_TRUE(s.ok()) << s.status();
  ASSERT_EQ(s->size(), grid.size());
  EXPECT_EQ(calls, 1 + 3 * static_cast<int>(grid.size()));  // one warm-up
  for (size_t i = 0; i < grid.size(); ++i) {
    EXPECT_EQ((*s)[i].features.tree_tokens, grid[i].tree_tokens);
    EXPECT_DOUBLE_EQ((*s)[i].seconds, 1e-3 * grid[i].tree_tokens) << "point " << i;
  }
  const VerifyStepFn failing = [](const VerifyStepFeatures&) -> absl::StatusOr<double> {
    return absl::UnavailableError("worker gone");
  };
  EXPECT_EQ(ProfileVerify(failing, grid, 3).status().code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(ProfileVerify(step, grid, 0).status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace treespec
