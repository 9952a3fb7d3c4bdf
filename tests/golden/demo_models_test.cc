// The committed demo models (models/demo) load, agree in vocabulary and
// tokenizer, stay within the drafter size budget, and the target's greedy
// continuation of a fixed prompt equals the one Hugging Face transformers
// produced from the same files (tests/golden/data/demo/manifest.json).
#include <fstream>

#include "core/model/config.h"
#include "core/model/llama.h"
#include "core/model/mamba.h"
#include "core/tokenizer/tokenizer.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/testing/test_util.h"

namespace treespec {
namespace {

std::string Demo(const std::string& name) {
  return testing::SourceDir() + "/models/demo/" + name;
}

nlohmann::json Manifest() {
  return nlohmann::json::parse(
      testing::ReadFile(testing::SourceDir() + "/tests/golden/data/demo/manifest.json"));
}

TEST(DemoModelsTest, LoadAndShareTheVocabulary) {
  auto target = LoadModelConfig(Demo("target"));
  auto mamba = LoadModelConfig(Demo("mamba-drafter"));
  auto small = LoadModelConfig(Demo("transformer-drafter"));
  ASSERT_TRUE(target.ok()) << target.status();
  ASSERT_TRUE(mamba.ok()) << mamba.status();
  ASSERT_TRUE(small.ok()) << small.status();
  EXPECT_EQ(target->arch, Architecture::kLlama);
  EXPECT_EQ(mamba->arch, Architecture::kMamba);
  EXPECT_EQ(small->arch, Architecture::kLlama);
  EXPECT_EQ(target->vocab_size(), mamba->vocab_size());
  EXPECT_EQ(target->vocab_size(), small->vocab_size());
  const int64_t tp = target->llama.NumParameters();
  EXPECT_GE(tp, 5'000'000);
  EXPECT_LE(tp, 10'000'000);
  EXPECT_LE(mamba->mamba.NumParameters() * 20, tp) << "mamba drafter over 1/20 of the target";
  EXPECT_LE(small->llama.NumParameters() * 20, tp) << "transformer drafter over 1/20 of the target";
  auto backend = CreateCpuBackend();
  EXPECT_TRUE(LlamaModel::Load(Demo("target"), backend.get()).ok());
  EXPECT_TRUE(MambaModel::Load(Demo("mamba-drafter"), backend.get()).ok());
  EXPECT_TRUE(LlamaModel::Load(Demo("transformer-drafter"), backend.get()).ok());
}

TEST(DemoModelsTest, TargetGreedyContinuationIsStable) {
  const nlohmann::json m = Manifest();
  auto tok = LoadTokenizer(Demo("target"));
  ASSERT_TRUE(tok.ok()) << tok.status();
  auto ids = (*tok)->Encode(m["prompt"].get<std::string>(), true);
  ASSERT_TRUE(ids.ok()) << ids.status();
  EXPECT_EQ(*ids, m["prompt_ids"].get<std::vector<int32_t>>());

  auto backend = CreateCpuBackend();
  auto model = LlamaModel::Load(Demo("target"), backend.get());
  ASSERT_TRUE(model.ok()) << model.status();
  auto cache = PagedKvCache::Create((*model)->KvOptions(16, 16), backend.get());
  ASSERT_TRUE(cache.ok());
  const int64_t seq = (*cache)->CreateSequence();
  ASSERT_TRUE((*cache)->Reserve(seq, 128).ok());
  std::vector<int32_t> feed = *ids, got;
  const auto want = m["greedy_ids"].get<std::vector<int32_t>>();
  for (size_t i = 0; i < want.size(); ++i) {
    ForwardOutput fo;
    ASSERT_TRUE((*model)->Forward({{seq, feed, {}, LogitsMode::kLast}}, cache->get(), &fo).ok());
    ASSERT_TRUE((*cache)->Commit(seq, static_cast<int64_t>(feed.size())).ok());
    int32_t best = 0;
    for (int32_t v = 1; v < fo.vocab_size; ++v) {
      if (fo.logits[v] > fo.logits[best]) best = v;
    }
    got.push_back(best);
    feed = {best};
  }
  EXPECT_EQ(got, want);
  EXPECT_EQ((*tok)->Decode(got), m["text"].get<std::string>());
}

}  // namespace
}  // namespace treespec
