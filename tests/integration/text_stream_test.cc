// Text through the whole path on a real trained model: ../shared/models
// stories260K, converted at test time by build/bin/treespec-convert-llama2c,
// served with its SentencePiece tokenizer and used as its own transformer
// drafter. Text prompts stream the same text and ids speculatively as plainly,
// stop strings cut an accepted run exactly where plain decoding stops, and a
// seeded sampled request streams the same text alone and inside a batch of 8.
// Skips itself without ../shared/models (label `shared`).
#include <sys/wait.h>

#include <filesystem>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/integration/cluster.h"
#include "tests/testing/test_util.h"

namespace treespec::testing {
namespace {

using ::testing::HasSubstr;

constexpr int kMaxTokens = 64;

v1::GenerateRequest TextRequest(const std::string& text, const std::string& drafter,
                                const std::string& tree = "3,2,2,1,1") {
  v1::GenerateRequest r;
  r.set_text(text);
  r.set_max_tokens(kMaxTokens);
  r.mutable_speculation()->set_drafter(drafter);
  r.mutable_speculation()->set_tree(tree);
  return r;
}

class SharedStoriesTextTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (!HaveSharedModels()) return;
    dir_ = new TempDir();
    const std::string model = dir_->path() + "/stories260K-hf";
    const std::string src = SharedModels() + "/stories260K/";
    auto run = RunProcess({BinaryPath("treespec-convert-llama2c"), src + "stories260K.bin",
                           src + "tok512.model", model},
                          std::chrono::milliseconds(120000));
    if (!run.ok()) {
      error_ = new std::string(run.status().ToString());
      return;
    }
    if (!WIFEXITED(run->wait_status) || WEXITSTATUS(run->wait_status) != 0) {
      error_ = new std::string("treespec-convert-llama2c failed: " + run->stdout_text);
      return;
    }
    ClusterConfig config;
    config.worker.model = model;
    config.mamba = false;
    config.garbage = false;
    config.tokenizer = model;
    auto c = Cluster::Start(config);
    if (!c.ok()) {
      error_ = new std::string(c.status().ToString());
      return;
    }
    cluster_ = c->release();
  }
  static void TearDownTestSuite() {
    delete cluster_;
    delete dir_;
    delete error_;
    cluster_ = nullptr;
    dir_ = nullptr;
    error_ = nullptr;
  }
  void SetUp() override {
    if (!HaveSharedModels()) {
      GTEST_SKIP() << "../shared/models is absent (looked for " << SharedModels() << ")";
    }
    ASSERT_EQ(error_, nullptr) << *error_;
    ASSERT_NE(cluster_, nullptr);
  }

  static TempDir* dir_;
  static std::string* error_;
  static Cluster* cluster_;
};

TempDir* SharedStoriesTextTest::dir_ = nullptr;
std::string* SharedStoriesTextTest::error_ = nullptr;
Cluster* SharedStoriesTextTest::cluster_ = nullptr;

TEST_F(SharedStoriesTextTest, SpeculativeTextEqualsPlainText) {
  for (const char* prompt : {"Once upon a time", "Lily and Ben went to the park."}) {
    GenerateResult plain = cluster_->Generate(TextRequest(prompt, "none"));
    ASSERT_TRUE(plain.status.ok()) << plain.status.error_message();
    ASSERT_TRUE(plain.has_final);
    EXPECT_FALSE(plain.text.empty());
    EXPECT_EQ(plain.text.find("\xEF\xBF\xBD"), std::string::npos) << "a broken UTF-8 delta";
    for (const char* tree : {"chain:4", "3,2,2,1,1", "4,2,1", "auto"}) {
      GenerateResult spec = cluster_->Generate(TextRequest(prompt, "self", tree));
      ASSERT_TRUE(spec.status.ok()) << spec.status.error_message();
      EXPECT_EQ(spec.ids, plain.ids) << prompt << " / " << tree;
      EXPECT_EQ(spec.text, plain.text) << prompt << " / " << tree;
      EXPECT_EQ(spec.final_chunk.finish_reason(), plain.final_chunk.finish_reason());
      EXPECT_EQ(spec.final_chunk.usage().completion_tokens(),
                plain.final_chunk.usage().completion_tokens());
      EXPECT_EQ(spec.final_chunk.usage().prompt_tokens(),
                plain.final_chunk.usage().prompt_tokens());
      const v1::SpeculationStats& sp = spec.final_chunk.speculation();
      if (std::string(tree) != "auto") {
        EXPECT_GT(sp.mean_accepted_length(), 2.0) << "the target drafting for itself";
      } else {
        // "auto" drafts only where its cost models say trees pay. Drafting
        // with the target itself costs about a target step per level, so on
        // a loaded machine or under ASan it may decode most steps plainly
        // (CI's ASan run, 2026-11-27: 1.24 tokens a step), which is its job.
        // The steps it did draft take at least one of the target's own
        // tokens each.
        const int drafted_steps = sp.steps() - sp.plain_steps();
        EXPECT_GE(sp.accepted_tokens(), drafted_steps)
            << "the target drafting for itself: " << sp.DebugString();
      }
    }
  }
}

TEST_F(SharedStoriesTextTest, StopStringInsideAnAcceptedRun) {
  GenerateResult plain = cluster_->Generate(TextRequest("Once upon a time", "none"));
  ASSERT_TRUE(plain.status.ok()) << plain.status.error_message();
  ASSERT_GE(plain.text.size(), 40u) << plain.text;
  // Stop strings cut from the middle of the plain text (one across a word
  // boundary), each ending the stream right before its first occurrence.
  for (size_t at : {size_t{12}, size_t{25}, size_t{33}}) {
    const std::string stop = plain.text.substr(at, 5);
    const std::string expected = plain.text.substr(0, plain.text.find(stop));
    GenerateResult none, self;
    for (const char* drafter : {"none", "self"}) {
      v1::GenerateRequest req = TextRequest("Once upon a time", drafter, "chain:4");
      req.add_stop(stop);
      GenerateResult r = cluster_->Generate(req);
      ASSERT_TRUE(r.status.ok()) << r.status.error_message();
      EXPECT_EQ(r.text, expected) << drafter << " stop '" << stop << "'";
      EXPECT_EQ(r.final_chunk.finish_reason(), v1::FINISH_REASON_STOP_STRING) << drafter;
      (std::string(drafter) == "none" ? none : self) = r;
    }
    EXPECT_EQ(self.ids, none.ids) << "stop '" << stop << "'";
    EXPECT_EQ(self.final_chunk.usage().completion_tokens(),
              none.final_chunk.usage().completion_tokens());
  }
}

TEST_F(SharedStoriesTextTest, SeededTextIsTheSameAloneAndInABatch) {
  auto sampled = [](const std::string& text, uint64_t seed, const std::string& drafter) {
    v1::GenerateRequest r = TextRequest(text, drafter);
    r.set_max_tokens(40);
    r.mutable_sampling()->set_temperature(0.8f);
    r.mutable_sampling()->set_seed(seed);
    return r;
  };
  const v1::GenerateRequest probe = sampled("Once upon a time", 11, "self");
  GenerateResult alone = cluster_->Generate(probe);
  ASSERT_TRUE(alone.status.ok()) << alone.status.error_message();
  ASSERT_FALSE(alone.text.empty());
  std::vector<v1::GenerateRequest> batch;
  const std::vector<std::string> prompts = {"The cat", "Tom had a ball.", "One day", "The sun"};
  for (int i = 0; i < 8; ++i) {
    batch.push_back(
        i == 5 ? probe : sampled(prompts[i % prompts.size()], 100 + i, i % 2 ? "self" : "none"));
  }
  std::vector<GenerateResult> rs = RunConcurrently(cluster_->stub(), batch);
  ASSERT_TRUE(rs[5].status.ok()) << rs[5].status.error_message();
  EXPECT_EQ(rs[5].text, alone.text);
  EXPECT_EQ(rs[5].ids, alone.ids);
  GenerateResult other_seed = cluster_->Generate(sampled("Once upon a time", 12, "self"));
  EXPECT_NE(other_seed.text, alone.text);
}

}  // namespace
}  // namespace treespec::testing
