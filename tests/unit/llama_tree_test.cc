// Tree verification and KV compaction on a random-weight Llama: every tree
// node's logits equal decoding its root-to-node path one token at a time, and
// after compaction decoding continues as if only the accepted path was fed.
#include <cmath>
#include <memory>
#include <vector>

#include "core/model/llama.h"
#include "gtest/gtest.h"

namespace treespec {
namespace {

LlamaConfig TinyConfig() {
  LlamaConfig c;
  c.vocab_size = 97;
  c.hidden_size = 32;
  c.intermediate_size = 48;
  c.num_layers = 2;
  c.num_heads = 4;
  c.num_kv_heads = 2;
  c.head_dim = 8;
  c.rms_norm_eps = 1e-5;
  c.rope_theta = 10000.0;
  c.max_position_embeddings = 256;
  return c;
}

class LlamaTreeTest : public ::testing::Test {
 protected:
  void SetUp() override {
    backend_ = CreateCpuBackend();
    WeightLoader loader(/*seed=*/7, /*scale=*/0.2f, backend_.get());
    auto m = LlamaModel::Create(TinyConfig(), &loader, nullptr);
    ASSERT_TRUE(m.ok()) << m.status();
    model_ = std::move(*m);
    auto c = PagedKvCache::Create(model_->KvOptions(64, 4), backend_.get());
    ASSERT_TRUE(c.ok()) << c.status();
    cache_ = std::move(*c);
  }

  // Feeds `tokens` one at a time to a fresh sequence; returns each step's logits.
  std::vector<std::vector<float>> Sequential(const std::vector<int32_t>& tokens) {
    int64_t seq = cache_->CreateSequence();
    std::vector<std::vector<float>> out;
    for (int32_t t : tokens) {
      EXPECT_TRUE(cache_->Reserve(seq, cache_->length(seq) + 1).ok());
      ForwardOutput fo;
      EXPECT_TRUE(model_->Forward({{seq, {t}, {}, LogitsMode::kLast}}, cache_.get(), &fo).ok());
      EXPECT_TRUE(cache_->Commit(seq, 1).ok());
      out.push_back(fo.logits);
    }
    cache_->Release(seq);
    return out;
  }

  std::unique_ptr<Backend> backend_;
  std::unique_ptr<LlamaModel> model_;
  std::unique_ptr<PagedKvCache> cache_;
};

TEST_F(LlamaTreeTest, PrefillEqualsSequentialDecode) {
  std::vector<int32_t> prompt = {5, 17, 3, 88, 41, 2, 9, 60, 33};
  auto seq_logits = Sequential(prompt);
  int64_t seq = cache_->CreateSequence();
  ASSERT_TRUE(cache_->Reserve(seq, prompt.size()).ok());
  ForwardOutput fo;
  ASSERT_TRUE(model_->Forward({{seq, prompt, {}, LogitsMode::kAll}}, cache_.get(), &fo).ok());
  for (size_t i = 0; i < prompt.size(); ++i) {
    for (int v = 0; v < 97; ++v) {
      ASSERT_NEAR(fo.logits[i * 97 + v], seq_logits[i][v], 1e-5) << "position " << i;
    }
  }
}

TEST_F(LlamaTreeTest, TreeNodeLogitsEqualPathDecoding) {
  const std::vector<int32_t> prefix = {11, 22, 33, 44, 55};
  // Tree rooted at token 66: children 1,2; grandchildren under both; a chain.
  const std::vector<int32_t> tokens = {66, 70, 71, 72, 73, 74, 75, 76};
  const std::vector<int32_t> parents = {-1, 0, 0, 1, 1, 2, 3, 6};
  int64_t seq = cache_->CreateSequence();
  ASSERT_TRUE(cache_->Reserve(seq, prefix.size() + tokens.size()).ok());
  ForwardOutput fo;
  ASSERT_TRUE(model_->Forward({{seq, prefix, {}, LogitsMode::kNone}}, cache_.get(), &fo).ok());
  ASSERT_TRUE(cache_->Commit(seq, prefix.size()).ok());
  ASSERT_TRUE(model_->Forward({{seq, tokens, parents, LogitsMode::kAll}}, cache_.get(), &fo).ok());
  for (size_t node = 0; node < tokens.size(); ++node) {
    std::vector<int32_t> path;
    for (int n = static_cast<int>(node); n >= 0; n = parents[n]) path.insert(path.begin(), tokens[n]);
    std::vector<int32_t> full = prefix;
    full.insert(full.end(), path.begin(), path.end());
    auto ref = Sequential(full).back();
    float max_rel = 0.0f;
    for (int v = 0; v < 97; ++v) {
      float d = std::fabs(fo.logits[node * 97 + v] - ref[v]);
      max_rel = std::max(max_rel, d / std::max(1e-6f, std::fabs(ref[v])));
      ASSERT_LE(d, 1e-5f * std::max(1.0f, std::fabs(ref[v]))) << "node " << node << " vocab " << v;
    }
  }
}

TEST_F(LlamaTreeTest, TreeGrownLevelByLevelEqualsOneCall) {
  const std::vector<int32_t> prefix = {4, 8, 15, 16};
  const std::vector<int32_t> tokens = {23, 42, 43, 50, 51, 52};
  const std::vector<int32_t> parents = {-1, 0, 0, 1, 2, 2};
  int64_t a = cache_->CreateSequence(), b = cache_->CreateSequence();
  ForwardOutput one, lvl;
  for (int64_t s : {a, b}) {
    ASSERT_TRUE(cache_->Reserve(s, 16).ok());
    ASSERT_TRUE(model_->Forward({{s, prefix, {}, LogitsMode::kNone}}, cache_.get(), &one).ok());
    ASSERT_TRUE(cache_->Commit(s, prefix.size()).ok());
  }
  ASSERT_TRUE(model_->Forward({{a, tokens, parents, LogitsMode::kAll}}, cache_.get(), &one).ok());
  // Levels {0}, {1, 2}, {3, 4, 5} in three calls.
  std::vector<float> got;
  const std::vector<std::pair<int, int>> levels = {{0, 1}, {1, 3}, {3, 6}};
  for (auto [lo, hi] : levels) {
    ForwardSeq fs{b, std::vector<int32_t>(tokens.begin() + lo, tokens.begin() + hi),
                  std::vector<int32_t>(parents.begin(), parents.begin() + hi), LogitsMode::kAll};
    fs.num_prior = lo;
    ASSERT_TRUE(model_->Forward({fs}, cache_.get(), &lvl).ok());
    got.insert(got.end(), lvl.logits.begin(), lvl.logits.end());
  }
  ASSERT_EQ(got.size(), one.logits.size());
  for (size_t i = 0; i < got.size(); ++i) ASSERT_EQ(got[i], one.logits[i]) << "element " << i;
}

TEST_F(LlamaTreeTest, CompactionKeepsOnlyAcceptedPath) {
  const std::vector<int32_t> prefix = {1, 2, 3};
  const std::vector<int32_t> tokens = {10, 20, 21, 30, 31, 40};
  const std::vector<int32_t> parents = {-1, 0, 0, 2, 2, 4};
  const std::vector<int32_t> path = {0, 2, 4, 5};  // 10 -> 21 -> 31 -> 40
  int64_t seq = cache_->CreateSequence();
  ASSERT_TRUE(cache_->Reserve(seq, 32).ok());
  ForwardOutput fo;
  ASSERT_TRUE(model_->Forward({{seq, prefix, {}, LogitsMode::kNone}}, cache_.get(), &fo).ok());
  ASSERT_TRUE(cache_->Commit(seq, prefix.size()).ok());
  ASSERT_TRUE(model_->Forward({{seq, tokens, parents, LogitsMode::kAll}}, cache_.get(), &fo).ok());
  ASSERT_TRUE(cache_->CommitPath(seq, path).ok());
  EXPECT_EQ(cache_->length(seq), 7);
  // Continue decoding three more tokens on the compacted cache.
  const std::vector<int32_t> cont = {50, 51, 52};
  std::vector<std::vector<float>> got;
  for (int32_t t : cont) {
    ASSERT_TRUE(model_->Forward({{seq, {t}, {}, LogitsMode::kLast}}, cache_.get(), &fo).ok());
    ASSERT_TRUE(cache_->Commit(seq, 1).ok());
    got.push_back(fo.logits);
  }
  auto ref = Sequential({1, 2, 3, 10, 21, 31, 40, 50, 51, 52});
  for (int i = 0; i < 3; ++i) {
    for (int v = 0; v < 97; ++v) {
      ASSERT_EQ(got[i][v], ref[7 + i][v]) << "step " << i << " vocab " << v;
    }
  }
}

TEST_F(LlamaTreeTest, KvCacheExhaustionIsResourceExhausted) {
  int64_t a = cache_->CreateSequence();
  ASSERT_TRUE(cache_->Reserve(a, 60 * 4).ok());
  int64_t b = cache_->CreateSequence();
  absl::Status s = cache_->Reserve(b, 5 * 4);
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted) << s;
  EXPECT_EQ(cache_->capacity(b), 0);  // all-or-nothing
  EXPECT_EQ(cache_->capacity(a), 240);
  cache_->Release(a);
  EXPECT_TRUE(cache_->Reserve(b, 5 * 4).ok());
}

}  // namespace
}  // namespace treespec
