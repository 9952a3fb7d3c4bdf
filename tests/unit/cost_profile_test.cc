#include "rpc/cost_profile.h"

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "gtest/gtest.h"
#include "tests/testing/test_util.h"

namespace treespec {
namespace {

// A path `name` that does not exist yet, inside a fresh directory removed
// when `tmp` goes.
std::string FreshPath(const testing::TempDir& tmp, const std::string& name) {
  return tmp.path() + "/" + name;
}

StepCostModel SomeModel(double scale) {
  VerifyCostModel::Coefficients v;
  v.per_step = 1e-3 * scale;
  v.per_sequence = 2e-5 * scale;
  v.per_token = 3e-5 * scale;
  v.per_context_token = 1e-8 * scale;
  v.per_token_past_knee = 4e-5 * scale;
  v.knee_tokens = 64;
  DraftCostModel::Coefficients d{5e-4 * scale, 1e-4 * scale, 2e-5 * scale, 1e-6 * scale};
  StepCostModel m;
  m.verify = *VerifyCostModel::FromCoefficients(v);
  m.draft = *DraftCostModel::FromCoefficients(d);
  return m;
}

// A measure function that counts its calls.
MeasureFn Counting(int* calls, double scale) {
  return [calls, scale]() -> absl::StatusOr<StepCostModel> {
    ++*calls;
    return SomeModel(scale);
  };
}

void ExpectSameVerify(const VerifyCostModel& a, const VerifyCostModel& b) {
  const auto x = a.coefficients(), y = b.coefficients();
  EXPECT_DOUBLE_EQ(x.per_step, y.per_step);
  EXPECT_DOUBLE_EQ(x.per_sequence, y.per_sequence);
  EXPECT_DOUBLE_EQ(x.per_token, y.per_token);
  EXPECT_DOUBLE_EQ(x.per_context_token, y.per_context_token);
  EXPECT_DOUBLE_EQ(x.per_token_past_knee, y.per_token_past_knee);
  EXPECT_EQ(x.knee_tokens, y.knee_tokens);
}

TEST(CostProfileTest, MeasuresOnceThenReadsTheCache) {
  const testing::TempDir tmp;
  const std::string dir = FreshPath(tmp, "roundtrip");
  int calls = 0;
  std::ostringstream warn;
  auto first = LoadOrMeasureProfile(dir, "verify m cfg=1", "cpu f32", Counting(&calls, 1), warn);
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_EQ(first->source, v1::COST_PROFILE_SOURCE_MEASURED);
  EXPECT_EQ(calls, 1);
  EXPECT_TRUE(std::filesystem::exists(
      dir + "/" + StepCostModel::CacheFileName("verify m cfg=1", "cpu f32")));

  auto second = LoadOrMeasureProfile(dir, "verify m cfg=1", "cpu f32", Counting(&calls, 7), warn);
  ASSERT_TRUE(second.ok()) << second.status();
  EXPECT_EQ(second->source, v1::COST_PROFILE_SOURCE_CACHE);
  EXPECT_EQ(calls, 1) << "a cached profile must not be measured again";
  EXPECT_EQ(second->profile_ns, 0);
  ExpectSameVerify(first->model.verify, second->model.verify);
  EXPECT_DOUBLE_EQ(second->model.draft.coefficients().per_node,
                   first->model.draft.coefficients().per_node);
  EXPECT_TRUE(warn.str().empty()) << warn.str();
}

TEST(CostProfileTest, AnotherDeviceIsMeasuredAfresh) {
  const testing::TempDir tmp;
  const std::string dir = FreshPath(tmp, "device");
  int calls = 0;
  std::ostringstream warn;
  ASSERT_TRUE(LoadOrMeasureProfile(dir, "m", "cpu f32", Counting(&calls, 1), warn).ok());
  auto other = LoadOrMeasureProfile(dir, "m", "cuda:0:bf16", Counting(&calls, 2), warn);
  ASSERT_TRUE(other.ok());
  EXPECT_EQ(other->source, v1::COST_PROFILE_SOURCE_MEASURED);
  EXPECT_EQ(calls, 2);
  EXPECT_DOUBLE_EQ(other->model.verify.coefficients().per_step, 2e-3);
}

TEST(CostProfileTest, MismatchedEntryIsIgnoredWithAWarning) {
  const testing::TempDir tmp;
  const std::string dir = FreshPath(tmp, "mismatch");
  int calls = 0;
  std::ostringstream warn;
  ASSERT_TRUE(LoadOrMeasureProfile(dir, "model-a", "cpu", Counting(&calls, 1), warn).ok());
  // An entry whose key differs from its file name (a sanitising clash, or a
  // file copied between machines): model-a's entry under model-b's name.
  std::filesystem::copy_file(dir + "/" + StepCostModel::CacheFileName("model-a", "cpu"),
                             dir + "/" + StepCostModel::CacheFileName("model-b", "cpu"));
  auto b = LoadOrMeasureProfile(dir, "model-b", "cpu", Counting(&calls, 3), warn);
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ(b->source, v1::COST_PROFILE_SOURCE_MEASURED);
  EXPECT_EQ(calls, 2);
  EXPECT_DOUBLE_EQ(b->model.verify.coefficients().per_step, 3e-3);
  EXPECT_NE(warn.str().find("model-a"), std::string::npos) << warn.str();
  // The fresh profile replaced the wrong entry.
  auto again = LoadOrMeasureProfile(dir, "model-b", "cpu", Counting(&calls, 9), warn);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->source, v1::COST_PROFILE_SOURCE_CACHE);
  EXPECT_DOUBLE_EQ(again->model.verify.coefficients().per_step, 3e-3);
}

TEST(CostProfileTest, CorruptEntryIsIgnoredWithAWarning) {
  const testing::TempDir tmp;
  const std::string dir = FreshPath(tmp, "corrupt");
  std::filesystem::create_directories(dir);
  for (const std::string& text :
       {std::string("{not json"), std::string("{\"format_version\": 1, \"model\": \"m\"}"),
        std::string("{\"format_version\": 99, \"model\": \"m\", \"device\": \"cpu\"}")}) {
    std::ofstream(dir + "/" + StepCostModel::CacheFileName("m", "cpu")) << text;
    int calls = 0;
    std::ostringstream warn;
    auto p = LoadOrMeasureProfile(dir, "m", "cpu", Counting(&calls, 1), warn);
    ASSERT_TRUE(p.ok()) << text << ": " << p.status();
    EXPECT_EQ(p->source, v1::COST_PROFILE_SOURCE_MEASURED) << text;
    EXPECT_EQ(calls, 1) << text;
    EXPECT_NE(warn.str().find("ignoring"), std::string::npos) << text << ": " << warn.str();
  }
}

TEST(CostProfileTest, NoCacheDirNeitherReadsNorWrites) {
  int calls = 0;
  std::ostringstream warn;
  auto p = LoadOrMeasureProfile("", "m", "cpu", Counting(&calls, 1), warn);
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(p->source, v1::COST_PROFILE_SOURCE_MEASURED);
  EXPECT_TRUE(warn.str().empty());
}

TEST(CostProfileTest, UnwritableCacheWarnsButKeepsTheProfile) {
  const testing::TempDir tmp;
  const std::string dir = FreshPath(tmp, "unwritable");
  std::ofstream(dir) << "a file where the directory should be";
  int calls = 0;
  std::ostringstream warn;
  auto p = LoadOrMeasureProfile(dir, "m", "cpu", Counting(&calls, 1), warn);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->source, v1::COST_PROFILE_SOURCE_MEASURED);
  EXPECT_NE(warn.str().find("not cached"), std::string::npos) << warn.str();
  std::filesystem::remove(dir);
}

TEST(CostProfileTest, MeasureErrorIsReturned) {
  std::ostringstream warn;
  auto p = LoadOrMeasureProfile(
      "", "m", "cpu", []() -> absl::StatusOr<StepCostModel> {
        return absl::FailedPreconditionError("no memory for the profile");
      },
      warn);
  EXPECT_EQ(p.status().code(), absl::StatusCode::kFailedPrecondition);
}

TEST(CostProfileTest, ProtoRoundTrip) {
  LoadedProfile p;
  p.model = SomeModel(1);
  p.model.model = "verify m";
  p.model.device = "cpu";
  p.source = v1::COST_PROFILE_SOURCE_CACHE;
  v1::VerifyCostProfile vp;
  ToProto(p, &vp);
  EXPECT_EQ(vp.source(), v1::COST_PROFILE_SOURCE_CACHE);
  EXPECT_EQ(vp.key(), "verify m on cpu");
  auto v = FromProto(vp);
  ASSERT_TRUE(v.ok()) << v.status();
  ExpectSameVerify(*v, p.model.verify);
  // Installed as the prior of the online refits, not only as coefficients.
  EXPECT_EQ(v->model().prior(), p.model.verify.model().coefficients());

  v1::DraftCostProfile dp;
  ToProto(p, &dp);
  auto d = FromProto(dp);
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_DOUBLE_EQ(d->coefficients().per_call, 5e-4);
  EXPECT_DOUBLE_EQ(d->coefficients().per_node, 1e-6);
  const DraftStepFeatures f{3, 12, 24};
  EXPECT_DOUBLE_EQ(d->Predict(f), p.model.draft.Predict(f));
}

TEST(CostProfileTest, FromProtoRejectsMissingAndBadProfiles) {
  EXPECT_EQ(FromProto(v1::VerifyCostProfile()).status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(FromProto(v1::DraftCostProfile()).status().code(), absl::StatusCode::kNotFound);
  v1::VerifyCostProfile vp;
  vp.set_source(v1::COST_PROFILE_SOURCE_MEASURED);
  vp.set_per_token_s(-1e-3);
  auto v = FromProto(vp);
  EXPECT_EQ(v.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(v.status().message().find("verify_cost.per_token_s"), std::string::npos)
      << v.status();
  v1::DraftCostProfile dp;
  dp.set_source(v1::COST_PROFILE_SOURCE_MEASURED);
  dp.set_per_node_s(std::nan(""));
  auto d = FromProto(dp);
  EXPECT_EQ(d.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(d.status().message().find("draft_cost.per_node_s"), std::string::npos) << d.status();
}

TEST(CostProfileTest, ModelIdentityFollowsTheConfig) {
  const testing::TempDir tmp;
  const std::string dir = FreshPath(tmp, "identity");
  std::filesystem::create_directories(dir + "/model");
  std::ofstream(dir + "/model/config.json") << "{\"hidden_size\": 64}";
  const std::string a = ModelIdentity(dir + "/model/");
  EXPECT_EQ(a.rfind("model cfg=", 0), 0u) << a;
  EXPECT_EQ(ModelIdentity(dir + "/model"), a);
  std::ofstream(dir + "/model/config.json") << "{\"hidden_size\": 128}";
  EXPECT_NE(ModelIdentity(dir + "/model"), a);
}

// The id is the main program's GNU build-id note, as binutils' readelf reads
// it from the file: a relinked engine gets a new cache key.
TEST(CostProfileTest, EngineBuildIdIsTheExecutablesBuildIdNote) {
  const std::string id = EngineBuildId();
  ASSERT_FALSE(id.empty());
  EXPECT_EQ(EngineBuildId(), id);
  const std::string exe = std::filesystem::read_symlink("/proc/self/exe").string();
  FILE* pipe = popen(("readelf -n '" + exe + "'").c_str(), "r");
  ASSERT_NE(pipe, nullptr);
  std::string text;
  char buf[4096];
  for (size_t n; (n = fread(buf, 1, sizeof(buf), pipe)) > 0;) text.append(buf, n);
  ASSERT_EQ(pclose(pipe), 0) << "readelf -n " << exe;
  EXPECT_NE(text.find("Build ID: " + id), std::string::npos) << "id " << id << "\n" << text;
}

}  // namespace
}  // namespace treespec
