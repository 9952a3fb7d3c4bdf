// TargetRunner without gRPC: the worker's sequence table and speculative step
// on the fixture target (tiny_llama_gqa).
//  - plain steps (root-only trees) equal sequential greedy decoding;
//  - a tree holding the greedy continuation is accepted up to its first
//    mistake, and the bonus is the greedy token there;
//  - repeated and out-of-order steps are ABORTED and commit nothing;
//  - failures in one batch stay with their sequence;
//  - capacity exhaustion (KV blocks, sequence slots) fails the new sequence
//    only and never harms existing ones; Release gives the blocks back;
//  - a seeded sampled sequence gives the same tokens whatever else is batched;
//  - a Mamba target serves through the same runner (SequenceModel);
//  - prompts are prefilled in chunks: the result is unchanged, a Verify issued
//    during a long Open completes before it, the opening sequence is invisible
//    to Verify, and releasing it cancels its Open;
//  - leases: sequences nobody touched for the lease are released, Verify
//    renews the lease;
//  - sampled verification from rows processed by the backend and fetched
//    one by one gives the tokens of the host computation from all logits,
//    and fetches fewer rows than the trees have nodes;
//  - while Verify calls come, pieces of a waiting prompt ride on their
//    passes, and the opened sequence is the one a plain Open gives;
//  - an Open does not wait for the Verify of a stream that was released;
//  - the pieces grow with the batch they ride on, and with the number of
//    prompts waiting per live stream.
#include "worker/target_runner.h"

#include <atomic>
#include <chrono>
#include <memory>
#include <optional>
#include <thread>
#include <vector>

#include "core/model/sequence_model.h"
#include "core/tensor/backend.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/test_util.h"
#include "tools/cli/local_model.h"

namespace treespec {
namespace {

using ::testing::HasSubstr;

std::string TargetDir() { return testing::SourceDir() + "/tests/fixtures/models/tiny_llama_gqa"; }

std::vector<int32_t> Prompt(int i, int n = 6) {
  std::vector<int32_t> p;
  for (int k = 0; k < n; ++k) p.push_back((i * 31 + k * 7 + 3) % 125 + 3);
  return p;
}

// Greedy continuation by sequential decoding (LocalModel: prefill, then one
// token per forward pass).
std::vector<int32_t> Greedy(const std::vector<int32_t>& prompt, int n,
                            const std::string& dir = TargetDir()) {
  auto local = LocalModel::Load(dir, "cpu", 1, 512);
  EXPECT_TRUE(local.ok()) << local.status();
  std::vector<int32_t> out;
  EXPECT_TRUE((*local)
                  ->Generate({prompt}, SamplingParams{}, {0}, n, {},
                             [&](size_t, int32_t t) { out.push_back(t); })
                  .ok());
  return out;
}

class TargetRunnerTest : public ::testing::Test {
 protected:
  void Make(int64_t kv_blocks = 256,
            TargetRunnerOptions options = {.max_context = 256, .max_tree_nodes = 32}) {
    backend_ = CreateCpuBackend();
    SequenceModelOptions mo;
    mo.kv_blocks = kv_blocks;
    mo.kv_block_size = 16;
    auto m = LoadSequenceModel(TargetDir(), backend_.get(), nullptr, mo);
    ASSERT_TRUE(m.ok()) << m.status();
    model_ = std::move(*m);
    ASSERT_TRUE(options.Validate().ok());
    runner_ = std::make_unique<TargetRunner>(model_.get(), options);
  }
  void SetUp() override { Make(); }

  OpenOutcome OpenOne(uint64_t id, const std::vector<int32_t>& prompt, int64_t max_total = 64,
                      SamplingParams sampling = {}, uint64_t seed = 0) {
    std::vector<OpenOutcome> out = runner_->Open({{id, prompt, sampling, seed, max_total}});
    EXPECT_EQ(out.size(), 1u);
    return out[0];
  }
  StepOutcome StepOne(uint64_t id, uint64_t step, TokenTree tree) {
    StepSpec s;
    s.id = id;
    s.step = step;
    s.tree = std::move(tree);
    std::vector<StepOutcome> out = runner_->Verify({s}, nullptr);
    EXPECT_EQ(out.size(), 1u);
    return out[0];
  }

  std::unique_ptr<Backend> backend_;
  std::unique_ptr<SequenceModel> model_;
  std::unique_ptr<TargetRunner> runner_;
};

TEST_F(TargetRunnerTest, PlainStepsEqualSequentialDecoding) {
  for (int p = 0; p < 3; ++p) {
    const std::vector<int32_t> prompt = Prompt(p, 3 + 4 * p);
    const std::vector<int32_t> expected = Greedy(prompt, 30);
    OpenOutcome o = OpenOne(100 + p, prompt);
    ASSERT_TRUE(o.status.ok()) << o.status;
    std::vector<int32_t> got = {o.first_token};
    for (uint64_t step = 1; got.size() < expected.size(); ++step) {
      StepOutcome s = StepOne(100 + p, step, TokenTree::Root(got.back()));
      ASSERT_TRUE(s.status.ok()) << s.status << " step " << step;
      ASSERT_EQ(s.tokens.size(), 1u);
      EXPECT_EQ(s.num_accepted, 0);
      EXPECT_EQ(s.accepted_nodes, std::vector<int32_t>{0});
      got.push_back(s.tokens[0]);
    }
    EXPECT_EQ(got, expected) << "prompt " << p;
  }
}

TEST_F(TargetRunnerTest, BatchedPlainStepsEqualSequentialDecoding) {
  std::vector<std::vector<int32_t>> expected, got(4);
  std::vector<OpenSpec> specs;
  for (int p = 0; p < 4; ++p) {
    expected.push_back(Greedy(Prompt(p, 2 + 3 * p), 20));
    specs.push_back({static_cast<uint64_t>(p + 1), Prompt(p, 2 + 3 * p), {}, 0, 64});
  }
  std::vector<OpenOutcome> opened = runner_->Open(specs);
  for (int p = 0; p < 4; ++p) {
    ASSERT_TRUE(opened[p].status.ok()) << opened[p].status;
    got[p].push_back(opened[p].first_token);
  }
  for (uint64_t step = 1; step < 20; ++step) {
    std::vector<StepSpec> steps;
    for (int p = 0; p < 4; ++p) {
      StepSpec s;
      s.id = p + 1;
      s.step = step;
      s.tree = TokenTree::Root(got[p].back());
      steps.push_back(s);
    }
    std::vector<StepOutcome> out = runner_->Verify(steps, nullptr);
    for (int p = 0; p < 4; ++p) {
      ASSERT_TRUE(out[p].status.ok()) << out[p].status;
      got[p].push_back(out[p].tokens[0]);
    }
  }
  EXPECT_EQ(got, expected);
}

TEST_F(TargetRunnerTest, TreeWithTheGreedyContinuationIsAcceptedUpToItsFirstMistake) {
  const std::vector<int32_t> prompt = Prompt(7);
  const std::vector<int32_t> g = Greedy(prompt, 24);
  OpenOutcome o = OpenOne(1, prompt);
  ASSERT_TRUE(o.status.ok());
  ASSERT_EQ(o.first_token, g[0]);
  auto wrong = [](int32_t t) { return (t + 1) % 128; };
  // Step 1: root g0 with children {wrong, g1}; g1 has children {g2, wrong};
  // g2 has the single child wrong(g3). Accepted: g1, g2; bonus g3.
  TokenTree t = TokenTree::Root(g[0]);
  t.AddNode(0, wrong(g[1]));
  const int32_t n1 = t.AddNode(0, g[1]);
  const int32_t n2 = t.AddNode(n1, g[2]);
  t.AddNode(n1, wrong(g[2]));
  t.AddNode(n2, wrong(g[3]));
  StepOutcome s1 = StepOne(1, 1, t);
  ASSERT_TRUE(s1.status.ok()) << s1.status;
  EXPECT_EQ(s1.tokens, (std::vector<int32_t>{g[1], g[2], g[3]}));
  EXPECT_EQ(s1.num_accepted, 2);
  EXPECT_EQ(s1.accepted_nodes, (std::vector<int32_t>{0, n1, n2}));
  // Step 2: a whole correct chain of 4 is accepted (KV compaction kept the
  // right cache: decoding goes on exactly).
  StepOutcome s2 = StepOne(1, 2, TokenTree::Chain(g[3], {g[4], g[5], g[6], g[7]}));
  ASSERT_TRUE(s2.status.ok()) << s2.status;
  EXPECT_EQ(s2.tokens, (std::vector<int32_t>{g[4], g[5], g[6], g[7], g[8]}));
  // Step 3: all wrong: nothing accepted, the bonus is still right.
  StepOutcome s3 = StepOne(1, 3, TokenTree::Chain(g[8], {wrong(g[9]), g[10]}));
  ASSERT_TRUE(s3.status.ok()) << s3.status;
  EXPECT_EQ(s3.tokens, std::vector<int32_t>{g[9]});
  EXPECT_EQ(s3.num_accepted, 0);
  // And plain steps continue the same sequence.
  std::vector<int32_t> rest;
  int32_t root = g[9];
  for (uint64_t step = 4; step < 10; ++step) {
    StepOutcome s = StepOne(1, step, TokenTree::Root(root));
    ASSERT_TRUE(s.status.ok()) << s.status;
    root = s.tokens[0];
    rest.push_back(root);
  }
  EXPECT_EQ(rest, std::vector<int32_t>(g.begin() + 10, g.begin() + 16));
}

TEST_F(TargetRunnerTest, RepeatedAndOutOfOrderStepsAreAbortedAndChangeNothing) {
  const std::vector<int32_t> g = Greedy(Prompt(3), 6);
  ASSERT_TRUE(OpenOne(5, Prompt(3)).status.ok());
  StepOutcome s1 = StepOne(5, 1, TokenTree::Chain(g[0], {g[1]}));
  ASSERT_TRUE(s1.status.ok());
  ASSERT_EQ(s1.tokens, (std::vector<int32_t>{g[1], g[2]}));
  const int64_t used = runner_->Stats().kv_blocks_used;

  StepOutcome again = StepOne(5, 1, TokenTree::Chain(g[0], {g[1]}));
  EXPECT_EQ(again.status.code(), absl::StatusCode::kAborted);
  EXPECT_THAT(again.status.message(), HasSubstr("already committed"));
  EXPECT_TRUE(again.tokens.empty());
  StepOutcome retry_current_root = StepOne(5, 1, TokenTree::Root(g[2]));
  EXPECT_EQ(retry_current_root.status.code(), absl::StatusCode::kAborted);
  StepOutcome future = StepOne(5, 3, TokenTree::Root(g[2]));
  EXPECT_EQ(future.status.code(), absl::StatusCode::kAborted);
  EXPECT_THAT(future.status.message(), HasSubstr("out of order"));
  StepOutcome zero = StepOne(5, 0, TokenTree::Root(g[2]));
  EXPECT_EQ(zero.status.code(), absl::StatusCode::kAborted);
  EXPECT_EQ(runner_->Stats().kv_blocks_used, used);

  StepOutcome s2 = StepOne(5, 2, TokenTree::Root(g[2]));
  ASSERT_TRUE(s2.status.ok()) << s2.status;
  EXPECT_EQ(s2.tokens, std::vector<int32_t>{g[3]});
}

TEST_F(TargetRunnerTest, FailuresInOneBatchStayWithTheirSequence) {
  // Sequences 1..8 share a prompt; 9 has no room left for a step. Each
  // sequence appears once in the batch (but for the deliberate repeat of 1).
  const std::vector<int32_t> g = Greedy(Prompt(1), 3);
  for (uint64_t id = 1; id <= 8; ++id) ASSERT_TRUE(OpenOne(id, Prompt(1)).status.ok());
  const OpenOutcome full = OpenOne(9, Prompt(4), /*max_total=*/7);  // 6 + 1 tokens
  ASSERT_TRUE(full.status.ok()) << full.status;

  auto spec = [](uint64_t id, uint64_t step, TokenTree tree) {
    StepSpec s;
    s.id = id;
    s.step = step;
    s.tree = std::move(tree);
    return s;
  };
  TokenTree bad_parents = TokenTree::Root(g[0]);
  bad_parents.tokens.push_back(4);
  bad_parents.parents.push_back(5);
  TokenTree big = TokenTree::Root(g[0]);
  for (int i = 0; i < 40; ++i) big.AddNode(i, 3 + i);  // 41 nodes > max_tree_nodes 32
  StepSpec invalid = spec(5, 1, TokenTree::Root(g[0]));
  invalid.invalid = absl::InvalidArgumentError("steps.mode: unknown verification mode 9");
  StepSpec sampled_mode = spec(6, 1, TokenTree::Root(g[0]));
  sampled_mode.mode = VerifyMode::kTargetSampling;

  std::vector<StepSpec> batch = {
      spec(1, 1, TokenTree::Root(g[0])),              // 0 good
      spec(2, 1, TokenTree::Root((g[0] + 1) % 128)),  // 1 root is not the last token
      spec(3, 1, bad_parents),                        // 2 malformed tree
      spec(4, 1, big),                                // 3 too many nodes
      invalid,                                        // 4 rejected by the service
      sampled_mode,                                   // 5 sampling mode at temperature 0
      spec(99, 1, TokenTree::Root(1)),                // 6 unknown sequence
      spec(1, 1, TokenTree::Root(g[0])),              // 7 sequence 1 twice
      spec(9, 1, TokenTree::Root(full.first_token)),  // 8 reached max_total_tokens
      spec(7, 2, TokenTree::Root(g[0])),              // 9 out of order
      spec(8, 1, TokenTree::Chain(g[0], {g[1]})),     // 10 good, with an accepted draft
  };
  StepTimings timings;
  std::vector<StepOutcome> out = runner_->Verify(batch, &timings);
  ASSERT_EQ(out.size(), batch.size());
  EXPECT_TRUE(out[0].status.ok()) << out[0].status;
  EXPECT_EQ(out[0].tokens, std::vector<int32_t>{g[1]});
  EXPECT_EQ(out[1].status.code(), absl::StatusCode::kInvalidArgument) << out[1].status;
  EXPECT_THAT(out[1].status.message(), HasSubstr("tree.tokens[0]"));
  EXPECT_EQ(out[2].status.code(), absl::StatusCode::kInvalidArgument) << out[2].status;
  EXPECT_THAT(out[2].status.message(), HasSubstr("parents[1]"));
  EXPECT_EQ(out[3].status.code(), absl::StatusCode::kInvalidArgument) << out[3].status;
  EXPECT_THAT(out[3].status.message(), HasSubstr("41 nodes"));
  EXPECT_EQ(out[4].status.code(), absl::StatusCode::kInvalidArgument) << out[4].status;
  EXPECT_THAT(out[4].status.message(), HasSubstr("steps.mode"));
  EXPECT_EQ(out[5].status.code(), absl::StatusCode::kInvalidArgument) << out[5].status;
  EXPECT_EQ(out[6].status.code(), absl::StatusCode::kNotFound) << out[6].status;
  EXPECT_EQ(out[7].status.code(), absl::StatusCode::kInvalidArgument) << out[7].status;
  EXPECT_THAT(out[7].status.message(), HasSubstr("twice"));
  EXPECT_EQ(out[8].status.code(), absl::StatusCode::kOutOfRange) << out[8].status;
  EXPECT_EQ(out[9].status.code(), absl::StatusCode::kAborted) << out[9].status;
  EXPECT_TRUE(out[10].status.ok()) << out[10].status;
  EXPECT_EQ(out[10].tokens, (std::vector<int32_t>{g[1], g[2]}));
  EXPECT_GT(timings.forward_ns, 0);
  for (size_t i = 0; i < out.size(); ++i) {
    EXPECT_EQ(out[i].id, batch[i].id) << "result " << i;
    EXPECT_EQ(out[i].step, batch[i].step) << "result " << i;
    if (i > 0 && i < 10) {
      EXPECT_TRUE(out[i].tokens.empty()) << "result " << i;
    }
  }
  // The failed sequences are untouched: their step 1 still works and is right.
  for (uint64_t id = 2; id <= 7; ++id) {
    StepOutcome s = StepOne(id, 1, TokenTree::Root(g[0]));
    ASSERT_TRUE(s.status.ok()) << s.status << " sequence " << id;
    EXPECT_EQ(s.tokens, std::vector<int32_t>{g[1]}) << "sequence " << id;
  }
  StepOutcome a2 = StepOne(1, 2, TokenTree::Root(g[1]));
  ASSERT_TRUE(a2.status.ok()) << a2.status;
  EXPECT_EQ(a2.tokens, std::vector<int32_t>{g[2]});
}

TEST_F(TargetRunnerTest, OpenValidatesEachSequence) {
  ASSERT_TRUE(OpenOne(1, Prompt(0)).status.ok());
  std::vector<OpenOutcome> out = runner_->Open({
      {2, {}, {}, 0, 64},              // empty prompt
      {3, {5, 128}, {}, 0, 64},        // token outside the vocabulary
      {4, {5, -2}, {}, 0, 64},         // negative token
      {1, Prompt(1), {}, 0, 64},       // already open
      {5, Prompt(1), {}, 0, 300},      // beyond max_context 256
      {6, Prompt(1, 10), {}, 0, 10},   // prompt fills the budget
      {7, Prompt(1), {-1.0f}, 0, 64},  // bad sampling
      {8, Prompt(2), {}, 0, 64},       // good
      {8, Prompt(2), {}, 0, 64},       // the same id again in one request
  });
  ASSERT_EQ(out.size(), 9u);
  EXPECT_EQ(out[0].status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(out[0].status.message(), HasSubstr("prompt"));
  EXPECT_EQ(out[1].status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(out[1].status.message(), HasSubstr("prompt[1] = 128"));
  EXPECT_EQ(out[2].status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(out[3].status.code(), absl::StatusCode::kAlreadyExists);
  EXPECT_EQ(out[4].status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(out[4].status.message(), HasSubstr("max_total_tokens 300"));
  EXPECT_EQ(out[5].status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(out[6].status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(out[7].status.ok()) << out[7].status;
  EXPECT_EQ(out[7].first_token, Greedy(Prompt(2), 1)[0]);
  EXPECT_EQ(out[8].status.code(), absl::StatusCode::kAlreadyExists);
  EXPECT_EQ(runner_->Stats().num_sequences, 2);
  EXPECT_TRUE(runner_->HasSequence(1));
  EXPECT_TRUE(runner_->HasSequence(8));
  EXPECT_FALSE(runner_->HasSequence(2));
}

TEST_F(TargetRunnerTest, CapacityExhaustionNeverHarmsExistingSequences) {
  // 12 blocks of 16 tokens; a sequence reserves max_total + max_tree_nodes
  // (32): a budget of 64 takes 6 blocks, so two fit and a third does not.
  Make(12);
  const std::vector<int32_t> ga = Greedy(Prompt(1), 10);
  ASSERT_TRUE(OpenOne(1, Prompt(1)).status.ok());
  ASSERT_TRUE(OpenOne(2, Prompt(2)).status.ok());
  EXPECT_EQ(runner_->Stats().kv_blocks_free, 0);
  OpenOutcome third = OpenOne(3, Prompt(3));
  EXPECT_EQ(third.status.code(), absl::StatusCode::kResourceExhausted) << third.status;
  EXPECT_FALSE(runner_->HasSequence(3));
  EXPECT_EQ(runner_->Stats().num_sequences, 2);

  // Sequence 1 runs to its budget with full trees, never short of blocks.
  std::vector<int32_t> got = {ga[0]};
  for (uint64_t step = 1; got.size() < ga.size(); ++step) {
    TokenTree t = TokenTree::Root(got.back());
    for (int i = 0; i < 31; ++i) t.AddNode(0, (got.back() + 1 + i) % 128);  // 32 nodes
    StepOutcome s = StepOne(1, step, t);
    ASSERT_TRUE(s.status.ok()) << s.status << " step " << step;
    got.insert(got.end(), s.tokens.begin(), s.tokens.end());
  }
  got.resize(ga.size());
  EXPECT_EQ(got, ga);

  // Releasing gives the blocks back; unknown ids are ignored.
  EXPECT_EQ(runner_->Release({2, 77}), 1);
  EXPECT_TRUE(OpenOne(3, Prompt(3)).status.ok());
  EXPECT_EQ(runner_->Release({1, 3}), 2);
  EXPECT_EQ(runner_->Stats().kv_blocks_used, 0);
  EXPECT_EQ(runner_->Stats().num_sequences, 0);
}

TEST_F(TargetRunnerTest, SequenceLimitIsResourceExhausted) {
  Make(256, {.max_context = 256, .max_tree_nodes = 16, .max_sequences = 2});
  ASSERT_TRUE(OpenOne(1, Prompt(1)).status.ok());
  ASSERT_TRUE(OpenOne(2, Prompt(2)).status.ok());
  EXPECT_EQ(OpenOne(3, Prompt(3)).status.code(), absl::StatusCode::kResourceExhausted);
  const std::vector<int32_t> g = Greedy(Prompt(1), 2);
  StepOutcome s = StepOne(1, 1, TokenTree::Root(g[0]));
  ASSERT_TRUE(s.status.ok());
  EXPECT_EQ(s.tokens, std::vector<int32_t>{g[1]});
}

// Counter-based randomness: a seeded sampled sequence's tokens do not depend
// on what else is in its batch.
TEST_F(TargetRunnerTest, SeededSamplingIsIndependentOfTheBatch) {
  SamplingParams sampling;
  sampling.temperature = 0.8f;
  auto run = [&](int batch_size) {
    Make();
    std::vector<OpenSpec> specs;
    for (int i = 0; i < batch_size; ++i) {
      specs.push_back({static_cast<uint64_t>(i + 1), Prompt(i == 0 ? 9 : i), sampling,
                       i == 0 ? 4242u : static_cast<uint64_t>(i), 64});
    }
    std::vector<OpenOutcome> opened = runner_->Open(specs);
    std::vector<int32_t> roots;
    for (const auto& o : opened) {
      EXPECT_TRUE(o.status.ok()) << o.status;
      roots.push_back(o.first_token);
    }
    std::vector<int32_t> probe = {roots[0]};
    for (uint64_t step = 1; step <= 12; ++step) {
      std::vector<StepSpec> steps;
      for (int i = 0; i < batch_size; ++i) {
        StepSpec s;
        s.id = i + 1;
        s.step = step;
        // Trees of a few arbitrary children: verified by target sampling.
        s.tree = TokenTree::Root(roots[i]);
        for (int c = 0; c < 3; ++c) s.tree.AddNode(0, (roots[i] + 5 * c + 1) % 128);
        steps.push_back(s);
      }
      std::vector<StepOutcome> out = runner_->Verify(steps, nullptr);
      for (int i = 0; i < batch_size; ++i) {
        EXPECT_TRUE(out[i].status.ok()) << out[i].status;
        roots[i] = out[i].tokens.back();
        if (i == 0) probe.insert(probe.end(), out[i].tokens.begin(), out[i].tokens.end());
      }
    }
    return probe;
  };
  const std::vector<int32_t> alone = run(1);
  EXPECT_EQ(run(6), alone);
  EXPECT_EQ(run(1), alone);
}

TEST(TargetRunnerMambaTest, MambaTargetServesThroughTheRunner) {
  const std::string dir = testing::SourceDir() + "/tests/fixtures/models/tiny_mamba";
  std::unique_ptr<Backend> backend = CreateCpuBackend();
  SequenceModelOptions mo;
  mo.max_sequences = 4;
  mo.max_tail_nodes = 16;
  auto model = LoadSequenceModel(dir, backend.get(), nullptr, mo);
  ASSERT_TRUE(model.ok()) << model.status();
  TargetRunner runner(model->get(), {.max_context = 256, .max_tree_nodes = 16, .max_sequences = 4});
  const std::vector<int32_t> prompt = Prompt(4, 9);
  const std::vector<int32_t> g = Greedy(prompt, 12, dir);
  std::vector<OpenOutcome> opened = runner.Open({{1, prompt, {}, 0, 64}});
  ASSERT_TRUE(opened[0].status.ok()) << opened[0].status;
  ASSERT_EQ(opened[0].first_token, g[0]);
  auto step = [&](uint64_t n, TokenTree tree) {
    StepSpec s;
    s.id = 1;
    s.step = n;
    s.tree = std::move(tree);
    return runner.Verify({s}, nullptr)[0];
  };
  // A tree holding g1 g2 next to wrong siblings: accepted up to g2, bonus g3.
  TokenTree t = TokenTree::Root(g[0]);
  t.AddNode(0, (g[1] + 1) % 128);
  const int32_t n1 = t.AddNode(0, g[1]);
  t.AddNode(n1, (g[2] + 1) % 128);
  t.AddNode(n1, g[2]);
  StepOutcome s1 = step(1, t);
  ASSERT_TRUE(s1.status.ok()) << s1.status;
  EXPECT_EQ(s1.tokens, (std::vector<int32_t>{g[1], g[2], g[3]}));
  StepOutcome s2 = step(2, TokenTree::Chain(g[3], {g[4], g[5], (g[6] + 1) % 128}));
  ASSERT_TRUE(s2.status.ok()) << s2.status;
  EXPECT_EQ(s2.tokens, (std::vector<int32_t>{g[4], g[5], g[6]}));
  StepOutcome s3 = step(3, TokenTree::Root(g[6]));
  ASSERT_TRUE(s3.status.ok()) << s3.status;
  EXPECT_EQ(s3.tokens, std::vector<int32_t>{g[7]});
  EXPECT_EQ(runner.Release({1}), 1);
  EXPECT_EQ(runner.Stats().kv_blocks_used, 0);
}

// A dynamic-RoPE model runs exactly only below max_position_embeddings (64
// here): a sequence that could reach it is refused when opened, one that
// cannot is served.
TEST(TargetRunnerRopeTest, SequencesThatCouldPassTheExactRopeRangeAreRefused) {
  const std::string dir = testing::SourceDir() + "/tests/golden/data/configs/llama_dynamic";
  std::unique_ptr<Backend> backend = CreateCpuBackend();
  auto model = LoadSequenceModel(dir, backend.get(), nullptr, SequenceModelOptions{});
  ASSERT_TRUE(model.ok()) << model.status();
  EXPECT_EQ((*model)->info().max_positions, 64);
  TargetRunner runner(model->get(), {.max_context = 256, .max_tree_nodes = 8});
  const std::vector<int32_t> prompt = {1, 5, 9, 12};
  std::vector<OpenOutcome> too_long = runner.Open({{1, prompt, {}, 0, 60}});
  EXPECT_EQ(too_long[0].status.code(), absl::StatusCode::kInvalidArgument) << too_long[0].status;
  EXPECT_THAT(too_long[0].status.message(), ::testing::HasSubstr("exact position range 64"));
  std::vector<OpenOutcome> fits = runner.Open({{2, prompt, {}, 0, 56}});
  EXPECT_TRUE(fits[0].status.ok()) << fits[0].status;
}

TEST_F(TargetRunnerTest, ChunkedPrefillEqualsOnePass) {
  Make(256, {.max_context = 256, .max_tree_nodes = 16, .prefill_chunk_tokens = 3});
  const std::vector<int32_t> a = Prompt(5, 40), b = Prompt(6, 7);
  const std::vector<int32_t> ga = Greedy(a, 6), gb = Greedy(b, 6);
  std::vector<OpenOutcome> opened = runner_->Open({{1, a, {}, 0, 128}, {2, b, {}, 0, 128}});
  ASSERT_TRUE(opened[0].status.ok()) << opened[0].status;
  ASSERT_TRUE(opened[1].status.ok()) << opened[1].status;
  EXPECT_EQ(opened[0].first_token, ga[0]);
  EXPECT_EQ(opened[1].first_token, gb[0]);
  StepOutcome s = StepOne(1, 1, TokenTree::Chain(ga[0], {ga[1], ga[2]}));
  ASSERT_TRUE(s.status.ok()) << s.status;
  EXPECT_EQ(s.tokens, (std::vector<int32_t>{ga[1], ga[2], ga[3]}));
}

// A SequenceModel that passes every call through to a real one; the
// wrappers below change Forward only.
class ForwardingModel : public SequenceModel {
 public:
  explicit ForwardingModel(SequenceModel* inner) : inner_(inner) {}
  const ModelInfo& info() const override { return inner_->info(); }
  absl::StatusOr<int64_t> Open(int64_t capacity) override { return inner_->Open(capacity); }
  absl::Status Forward(const std::vector<ForwardSeq>& seqs, ForwardOutput* out,
                       const ForwardOptions& options) override {
    return inner_->Forward(seqs, out, options);
  }
  absl::Status Commit(int64_t h, int64_t n) override { return inner_->Commit(h, n); }
  absl::Status CommitPath(int64_t h, const std::vector<int32_t>& path) override {
    return inner_->CommitPath(h, path);
  }
  void Release(int64_t h) override { inner_->Release(h); }
  int64_t length(int64_t h) const override { return inner_->length(h); }
  SequenceModelStats stats() const override { return inner_->stats(); }

 protected:
  SequenceModel* const inner_;
};

// Passes calls through to a real model; chain passes (prefill chunks) are
// counted and slowed down once `slow` is set.
class SlowPrefill final : public ForwardingModel {
 public:
  explicit SlowPrefill(SequenceModel* inner) : ForwardingModel(inner) {}
  absl::Status Forward(const std::vector<ForwardSeq>& seqs, ForwardOutput* out,
                       const ForwardOptions& options) override {
    if (slow && !seqs.empty() && seqs[0].parents.empty()) {
      ++chunks;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return inner_->Forward(seqs, out, options);
  }

  std::atomic<bool> slow{false};
  std::atomic<int> chunks{0};
};

bool WaitFor(const std::function<bool()>& condition) {
  for (int i = 0; i < 2000 && !condition(); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return condition();
}

TEST_F(TargetRunnerTest, VerifyDuringALongOpenCompletesFirst) {
  SlowPrefill slow(model_.get());
  TargetRunner runner(&slow, {.max_context = 256, .max_tree_nodes = 16, .prefill_chunk_tokens = 4});
  const std::vector<int32_t> live = Prompt(1), long_prompt = Prompt(2, 160);
  const std::vector<int32_t> g = Greedy(live, 3), g_long = Greedy(long_prompt, 1);
  ASSERT_TRUE(runner.Open({{1, live, {}, 0, 64}})[0].status.ok());
  slow.slow = true;
  std::atomic<bool> open_done{false};
  OpenOutcome opened;
  std::thread opener([&] {
    opened = runner.Open({{2, long_prompt, {}, 0, 200}})[0];
    open_done = true;
  });
  ASSERT_TRUE(WaitFor([&] { return slow.chunks.load() >= 2; }));
  StepSpec s;
  s.id = 1;
  s.step = 1;
  s.tree = TokenTree::Chain(g[0], {g[1]});
  StepOutcome out = runner.Verify({s}, nullptr)[0];
  EXPECT_FALSE(open_done.load()) << "the Verify waited for the whole prompt";
  ASSERT_TRUE(out.status.ok()) << out.status;
  EXPECT_EQ(out.tokens, (std::vector<int32_t>{g[1], g[2]}));
  // The sequence being opened is invisible, but its id is taken.
  StepSpec early;
  early.id = 2;
  early.step = 1;
  early.tree = TokenTree::Root(5);
  EXPECT_EQ(runner.Verify({early}, nullptr)[0].status.code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(runner.Open({{2, live, {}, 0, 64}})[0].status.code(),
            absl::StatusCode::kAlreadyExists);
  EXPECT_FALSE(runner.HasSequence(2));
  opener.join();
  ASSERT_TRUE(opened.status.ok()) << opened.status;
  EXPECT_EQ(opened.first_token, g_long[0]);
  EXPECT_GE(slow.chunks.load(), 40) << "160 tokens in chunks of 4";
  EXPECT_TRUE(runner.HasSequence(2));
}

TEST_F(TargetRunnerTest, ReleaseDuringOpenCancelsIt) {
  SlowPrefill slow(model_.get());
  TargetRunner runner(&slow, {.max_context = 256, .max_tree_nodes = 16, .prefill_chunk_tokens = 4});
  slow.slow = true;
  OpenOutcome opened;
  std::thread opener([&] { opened = runner.Open({{7, Prompt(3, 160), {}, 0, 200}})[0]; });
  ASSERT_TRUE(WaitFor([&] { return slow.chunks.load() >= 2; }));
  EXPECT_EQ(runner.Release({7}), 1);
  opener.join();
  EXPECT_EQ(opened.status.code(), absl::StatusCode::kCancelled) << opened.status;
  EXPECT_LT(slow.chunks.load(), 40);
  EXPECT_EQ(runner.Stats().num_sequences, 0);
  EXPECT_EQ(runner.Stats().kv_blocks_used, 0);
}

// Passes calls through to a real model, recording what each Forward asked for
// and returned. With `host_logits`, ForwardOptions::row_sampling is dropped, so
// the model returns every logits row to the host (the path of models that do
// not keep rows on the device).
class RecordingModel final : public ForwardingModel {
 public:
  RecordingModel(SequenceModel* inner, bool host_logits)
      : ForwardingModel(inner), host_logits_(host_logits) {}
  absl::Status Forward(const std::vector<ForwardSeq>& seqs, ForwardOutput* out,
                       const ForwardOptions& options) override {
    ForwardOptions o = options;
    if (host_logits_) o.row_sampling.clear();
    bool has_tree = false, has_chain = false;
    for (const ForwardSeq& s : seqs) (s.parents.empty() ? has_chain : has_tree) = true;
    if (has_tree && has_chain) ++mixed_passes;
    absl::Status st = inner_->Forward(seqs, out, o);
    if (st.ok() && out->fetch_probs) {
      EXPECT_TRUE(out->logits.empty()) << "rows kept on the device must not come back whole";
      for (const ForwardSeq& s : seqs) {
        if (!s.parents.empty()) tree_rows += static_cast<int64_t>(s.tokens.size());
      }
      auto fetch = std::move(out->fetch_probs);
      out->fetch_probs = [this, fetch](int64_t row, float* probs) {
        ++fetched_rows;
        return fetch(row, probs);
      };
    }
    return st;
  }

  int64_t mixed_passes = 0;
  int64_t tree_rows = 0;     // tree rows of passes that kept their rows on the device
  int64_t fetched_rows = 0;  // rows brought back through fetch_probs

 private:
  const bool host_logits_;
};

TEST_F(TargetRunnerTest, DeviceProcessedRowsGiveTheHostTokens) {
  // Sequence i: its sampling, verify mode and a draft q on its trees.
  struct Case {
    SamplingParams sampling;
    std::optional<VerifyMode> mode;
  };
  std::vector<Case> cases = {{{0.8f, 0, 1.0f}, VerifyMode::kMultiRound},
                             {{1.3f, 20, 1.0f}, VerifyMode::kTargetSampling},
                             {{0.7f, 0, 0.9f}, VerifyMode::kMultiRound},
                             {{1.0f, 8, 0.8f}, std::nullopt},
                             {{0.0f, 0, 1.0f}, std::nullopt}};  // greedy in the same batch
  auto run = [&](bool host_logits, int64_t* fetched, int64_t* tree_rows) {
    Make();
    RecordingModel model(model_.get(), host_logits);
    TargetRunner runner(&model, {.max_context = 256, .max_tree_nodes = 32});
    std::vector<OpenSpec> specs;
    for (size_t i = 0; i < cases.size(); ++i) {
      specs.push_back({i + 1, Prompt(static_cast<int>(i) + 20), cases[i].sampling, 77 + i, 128});
    }
    std::vector<int32_t> roots;
    for (const OpenOutcome& o : runner.Open(specs)) {
      EXPECT_TRUE(o.status.ok()) << o.status;
      roots.push_back(o.first_token);
    }
    std::vector<std::vector<int32_t>> tokens(cases.size());
    for (uint64_t step = 1; step <= 15; ++step) {
      std::vector<StepSpec> steps;
      for (size_t i = 0; i < cases.size(); ++i) {
        StepSpec s;
        s.id = i + 1;
        s.step = step;
        s.mode = cases[i].mode;
        // Two levels of three children with a uniform q over 12 tokens.
        s.tree = TokenTree::Root(roots[i]);
        SparseDist q;
        for (int t = 0; t < 12; ++t) {
          q.tokens.push_back((roots[i] + 3 * t + static_cast<int>(step)) % 128);
          q.probs.push_back(1.0f / 12);
        }
        for (int c = 0; c < 3; ++c) {
          const int32_t child = s.tree.AddNode(0, q.tokens[c]);
          for (int g = 0; g < 3; ++g) s.tree.AddNode(child, q.tokens[3 + g]);
        }
        if (!cases[i].sampling.greedy()) {
          s.tree.draft.resize(s.tree.num_nodes());
          s.tree.draft[0] = q;
        }
        steps.push_back(s);
      }
      std::vector<StepOutcome> out = runner.Verify(steps, nullptr);
      for (size_t i = 0; i < cases.size(); ++i) {
        EXPECT_TRUE(out[i].status.ok()) << "sequence " << i << ": " << out[i].status;
        if (!out[i].status.ok()) continue;
        roots[i] = out[i].tokens.back();
        tokens[i].insert(tokens[i].end(), out[i].tokens.begin(), out[i].tokens.end());
        tokens[i].insert(tokens[i].end(), out[i].accepted_nodes.begin(),
                         out[i].accepted_nodes.end());
      }
    }
    *fetched = model.fetched_rows;
    *tree_rows = model.tree_rows;
    return tokens;
  };
  int64_t host_fetched = 0, host_rows = 0, device_fetched = 0, device_rows = 0;
  const auto host = run(/*host_logits=*/true, &host_fetched, &host_rows);
  const auto device = run(/*host_logits=*/false, &device_fetched, &device_rows);
  for (size_t i = 0; i < cases.size(); ++i) EXPECT_EQ(device[i], host[i]) << "sequence " << i;
  EXPECT_EQ(host_fetched, 0);
  EXPECT_GT(device_fetched, 0) << "the sampled sequences read their rows through fetch_probs";
  EXPECT_LT(device_fetched, device_rows / 2)
      << "only the rows on each accepted path come back, not every tree node";
}

TEST_F(TargetRunnerTest, PromptPiecesRideOnVerifyPasses) {
  SamplingParams sampled;
  sampled.temperature = 0.9f;
  const std::vector<int32_t> live = Prompt(1), long_prompt = Prompt(2, 120);
  const std::vector<int32_t> g = Greedy(live, 41);
  // The reference: the same sampled sequence opened with nothing else going on.
  OpenOutcome alone = OpenOne(9, long_prompt, 200, sampled, 31);
  ASSERT_TRUE(alone.status.ok()) << alone.status;

  Make(256, {.max_context = 256, .max_tree_nodes = 16, .prefill_chunk_tokens = 4});
  RecordingModel model(model_.get(), /*host_logits=*/false);
  TargetRunner runner(&model, {.max_context = 256, .max_tree_nodes = 16, .prefill_chunk_tokens = 4});
  ASSERT_TRUE(runner.Open({{1, live, {}, 0, 64}})[0].status.ok());
  uint64_t step = 1;
  int passes_with_prefill = 0;
  StepTimings last;
  auto verify_live = [&] {
    StepSpec s;
    s.id = 1;
    s.step = step;
    s.tree = TokenTree::Root(g[step - 1]);
    StepTimings timings;
    StepOutcome out = runner.Verify({s}, &timings)[0];
    EXPECT_TRUE(out.status.ok()) << out.status;
    EXPECT_EQ(out.tokens, std::vector<int32_t>{g[step]}) << "step " << step;
    EXPECT_GE(timings.prefill_ns, 0);
    EXPECT_GT(timings.forward_ns, 0);
    passes_with_prefill += timings.prefill_ns > 0;
    last = timings;
    ++step;
  };
  verify_live();  // the stream is live
  std::atomic<bool> open_done{false};
  OpenOutcome opened;
  std::thread opener([&] {
    opened = runner.Open({{2, long_prompt, sampled, 31, 200}})[0];
    open_done = true;
  });
  // The Open holds its (hidden) sequence once it has begun.
  ASSERT_TRUE(WaitFor([&] { return runner.Stats().num_sequences == 2; }));
  while (!open_done.load() && step + 1 < g.size()) verify_live();
  opener.join();
  ASSERT_TRUE(opened.status.ok()) << opened.status;
  EXPECT_EQ(opened.first_token, alone.first_token);
  EXPECT_GT(model.mixed_passes, 0) << "no prompt piece rode on a Verify pass";
  EXPECT_TRUE(runner.HasSequence(2));
  // The pieces' time is reported apart from the trees' (VerifyResponse.
  // prefill_ns), and a pass that carries none reports none.
  EXPECT_GT(passes_with_prefill, 0);
  verify_live();
  EXPECT_EQ(last.prefill_ns, 0);
}

TEST_F(TargetRunnerTest, AShortPromptIsNotQueuedBehindALongOne) {
  const std::vector<int32_t> live = Prompt(1), long_prompt = Prompt(2, 200),
                             short_prompt = Prompt(3, 4);
  const std::vector<int32_t> g = Greedy(live, 120);
  const OpenOutcome short_alone = OpenOne(9, short_prompt);
  ASSERT_TRUE(short_alone.status.ok()) << short_alone.status;

  Make(256, {.max_context = 256, .max_tree_nodes = 16, .prefill_chunk_tokens = 4});
  ASSERT_TRUE(runner_->Open({{1, live, {}, 0, 200}})[0].status.ok());
  uint64_t step = 1;
  auto verify_live = [&] {
    ASSERT_TRUE(StepOne(1, step, TokenTree::Root(g[step - 1])).status.ok());
    ++step;
  };
  verify_live();  // the stream is live
  std::atomic<bool> long_done{false}, short_done{false};
  std::atomic<bool> long_done_first{false};
  OpenOutcome long_opened, short_opened;
  std::thread long_opener([&] {
    long_opened = runner_->Open({{2, long_prompt, {}, 0, 240}})[0];
    long_done = true;
  });
  ASSERT_TRUE(WaitFor([&] { return runner_->Stats().num_sequences == 2; }));
  verify_live();  // the long prompt has begun riding on the passes
  std::thread short_opener([&] {
    short_opened = runner_->Open({{3, short_prompt, {}, 0, 64}})[0];
    long_done_first = long_done.load();
    short_done = true;
  });
  ASSERT_TRUE(WaitFor([&] { return runner_->Stats().num_sequences == 3; }));
  while (!(long_done.load() && short_done.load()) && step + 1 < g.size()) verify_live();
  long_opener.join();
  short_opener.join();
  ASSERT_TRUE(long_opened.status.ok()) << long_opened.status;
  ASSERT_TRUE(short_opened.status.ok()) << short_opened.status;
  EXPECT_EQ(short_opened.first_token, short_alone.first_token);
  // Fed shortest first, the 4-token prompt does not wait for the 200-token one.
  EXPECT_FALSE(long_done_first.load()) << "the short prompt was admitted after the long one";
}

TEST_F(TargetRunnerTest, AnOpenDoesNotWaitForAStreamThatWasReleased) {
  // A client's next request is opened right after its last one finished: a
  // Verify came moments ago, but its sequence is released, so no Verify pass
  // will carry the new prompt and the Open must prefill at once instead of
  // waiting for the idle timeout (10-100 ms: three verify intervals; 15 ms
  // of every request's first token at concurrency 1 on the CPU demo pair).
  const std::vector<int32_t> live = Prompt(1), next = Prompt(2, 4);
  const std::vector<int32_t> g = Greedy(live, 8);
  const OpenOutcome next_alone = OpenOne(9, next);
  ASSERT_TRUE(next_alone.status.ok()) << next_alone.status;
  Make();
  // Verify intervals of 40 ms make the idle timeout its 100 ms maximum.
  auto stream = [&](uint64_t id) {
    ASSERT_TRUE(OpenOne(id, live).status.ok());
    for (uint64_t step = 1; step <= 3; ++step) {
      if (step > 1) std::this_thread::sleep_for(std::chrono::milliseconds(40));
      ASSERT_TRUE(StepOne(id, step, TokenTree::Root(g[step - 1])).status.ok());
    }
  };
  using Clock = std::chrono::steady_clock;
  auto ms_since = [](Clock::time_point t) {
    return std::chrono::duration<double, std::milli>(Clock::now() - t).count();
  };
  // Released before the next Open arrives.
  stream(1);
  ASSERT_EQ(runner_->Release({1}), 1);
  const Clock::time_point t0 = Clock::now();
  const OpenOutcome opened = OpenOne(2, next);
  const double open_ms = ms_since(t0);
  ASSERT_TRUE(opened.status.ok()) << opened.status;
  EXPECT_EQ(opened.first_token, next_alone.first_token);
  EXPECT_LT(open_ms, 50) << "the Open waited for a Verify of a released sequence";
  ASSERT_EQ(runner_->Release({2}), 1);

  // Released while the next Open waits for it: the Release ends the wait.
  stream(3);
  const Clock::time_point last_verify = Clock::now();
  std::atomic<bool> done{false};
  OpenOutcome waited;
  std::thread opener([&] {
    waited = OpenOne(4, next);
    done = true;
  });
  ASSERT_TRUE(WaitFor([&] { return runner_->Stats().num_sequences == 2; }));
  // Within the idle timeout of the stream's last Verify the Open must wait
  // (a machine that stalled this thread past it lets the Open go, rightly).
  if (ms_since(last_verify) < 80) {
    EXPECT_FALSE(done.load()) << "the Open did not wait for the live stream's Verify";
  }
  const Clock::time_point t1 = Clock::now();
  ASSERT_EQ(runner_->Release({3}), 1);
  opener.join();
  const double after_release_ms = ms_since(t1);
  ASSERT_TRUE(waited.status.ok()) << waited.status;
  EXPECT_EQ(waited.first_token, next_alone.first_token);
  EXPECT_LT(after_release_ms, 50) << "the Open kept waiting after the stream was released";
}

// A target whose every forward pass takes fixed + per_token * tokens (the
// real pass, then a sleep for the rest), so that the pass times, and the
// runner's fit of them, are the test's and not the machine's.
class PacedModel final : public ForwardingModel {
 public:
  PacedModel(SequenceModel* inner, double fixed_ms, double per_token_ms)
      : ForwardingModel(inner), fixed_ms_(fixed_ms), per_token_ms_(per_token_ms) {}
  absl::Status Forward(const std::vector<ForwardSeq>& seqs, ForwardOutput* out,
                       const ForwardOptions& options) override {
    const auto t0 = std::chrono::steady_clock::now();
    size_t tokens = 0, piece_tokens = 0;
    bool trees = false;
    for (const ForwardSeq& s : seqs) {
      tokens += s.tokens.size();
      // Verify trees have parents; prompt pieces are chains.
      if (s.parents.empty()) piece_tokens += s.tokens.size();
      trees |= !s.parents.empty();
    }
    absl::Status st = inner_->Forward(seqs, out, options);
    std::this_thread::sleep_until(
        t0 + std::chrono::duration<double, std::milli>(fixed_ms_ + per_token_ms_ * tokens));
    if (trees) {
      absl::MutexLock lock(&mu_);
      pieces_.push_back(static_cast<int>(piece_tokens));
    }
    return st;
  }
  // Prompt tokens carried by each Verify pass so far.
  std::vector<int> pieces() {
    absl::MutexLock lock(&mu_);
    return pieces_;
  }

 private:
  const double fixed_ms_, per_token_ms_;
  absl::Mutex mu_;
  std::vector<int> pieces_ ABSL_GUARDED_BY(mu_);
};

// Live streams decoding plainly (root-only trees of their last token).
struct Streams {
  std::vector<uint64_t> ids;
  std::vector<int32_t> pending;
  std::vector<uint64_t> steps;

  void Open(TargetRunner* runner, uint64_t first_id, int n) {
    std::vector<OpenSpec> specs;
    for (int i = 0; i < n; ++i) specs.push_back({first_id + i, Prompt(i + 40), {}, 0, 240});
    for (const OpenOutcome& o : runner->Open(specs)) {
      ASSERT_TRUE(o.status.ok()) << o.status;
      ids.push_back(o.id);
      pending.push_back(o.first_token);
      steps.push_back(1);
    }
  }
  // One Verify call for the first `n` streams (all by default).
  void Verify(TargetRunner* runner, size_t n = SIZE_MAX) {
    std::vector<StepSpec> specs;
    for (size_t i = 0; i < std::min(n, ids.size()); ++i) {
      StepSpec s;
      s.id = ids[i];
      s.step = steps[i];
      s.tree = TokenTree::Root(pending[i]);
      specs.push_back(std::move(s));
    }
    std::vector<StepOutcome> out = runner->Verify(specs, nullptr);
    for (size_t i = 0; i < out.size(); ++i) {
      ASSERT_TRUE(out[i].status.ok()) << out[i].status;
      pending[i] = out[i].tokens.back();
      ++steps[i];
    }
  }
};

// Verify passes of `streams` until the prompts of `specs`, opened on another
// thread, are all prefilled (their sequences visible; the opening thread
// itself may return later, on a busy machine much later: the passes hold the
// lock); how many passes that took (at most `most`).
int PassesUntilOpened(TargetRunner* runner, Streams* streams, std::vector<OpenSpec> specs,
                      int most = 150) {
  std::vector<OpenOutcome> opened;
  const int64_t before = runner->Stats().num_sequences;
  std::thread opener([&] { opened = runner->Open(specs); });
  EXPECT_TRUE(WaitFor([&] {
    return runner->Stats().num_sequences == before + static_cast<int64_t>(specs.size());
  }));
  auto all_visible = [&] {
    return std::all_of(specs.begin(), specs.end(),
                       [&](const OpenSpec& o) { return runner->HasSequence(o.id); });
  };
  int passes = 0;
  while (!all_visible() && passes < most) {
    streams->Verify(runner);
    ++passes;
  }
  opener.join();
  for (const OpenOutcome& o : opened) EXPECT_TRUE(o.status.ok()) << o.status;
  return passes;
}

// The mean prompt tokens carried by Verify passes [from, to) of `paced`.
double MeanPiece(PacedModel* paced, size_t from, size_t to) {
  const std::vector<int> p = paced->pieces();
  EXPECT_GE(p.size(), to);
  double sum = 0;
  for (size_t i = from; i < std::min(to, p.size()); ++i) sum += p[i];
  return sum / static_cast<double>(std::max<size_t>(1, to - from));
}

// Sixteen streams on a paced model (1 ms a pass + 0.25 ms a token), whose
// usual pass is one or two of them (30 passes of 1.25-1.5 ms); a share of a
// quarter, not the default, so that a piece is several tokens.
struct SixteenPacedStreams {
  explicit SixteenPacedStreams(SequenceModel* model)
      : paced(model, /*fixed_ms=*/1.0, /*per_token_ms=*/0.25),
        runner(&paced, {.max_context = 256, .max_tree_nodes = 16, .prefill_share = 0.25}) {
    streams.Open(&runner, 1, 16);
    for (int i = 0; i < 30; ++i) streams.Verify(&runner, 1 + i % 2);
  }
  PacedModel paced;
  TargetRunner runner;
  Streams streams;
};

TEST_F(TargetRunnerTest, PromptPiecesGrowWithTheBatchTheyRideOn) {
  // The bound on a pass with a piece follows what the streams' trees take.
  // It once followed only the passes that carried no piece: while prompts
  // kept arriving none came, the bound stayed at a smaller batch's pass, and
  // every piece was one token (spec_bench, 64 clients: 25 of 64 sequences
  // live, 0.8 s to the first token).
  Make(1024);
  SixteenPacedStreams s(model_.get());
  PacedModel& paced = s.paced;
  TargetRunner& runner = s.runner;
  Streams& streams = s.streams;
  // Now all sixteen verify (5 ms passes) while a long prompt is admitted.
  // Once the bound has followed them (an EMA: 20 passes), a quarter of a
  // pass is 1.25 ms, about 4 prompt tokens of 0.25 ms; the old bound
  // (1.25 x 1.4 ms - 5 ms < 0) gave one token a pass.
  const size_t before = paced.pieces().size();
  std::thread opener(
      [&] { EXPECT_TRUE(runner.Open({{100, Prompt(7, 200), {}, 0, 230}})[0].status.ok()); });
  ASSERT_TRUE(WaitFor([&] { return runner.Stats().num_sequences == 17; }));
  for (int i = 0; i < 40; ++i) streams.Verify(&runner);
  const double mean = MeanPiece(&paced, before + 20, before + 40);
  // The rest of the prompt (the old code's one token a pass would need 160
  // more, past the streams' length).
  for (int i = 0; i < 120 && !runner.HasSequence(100); ++i) streams.Verify(&runner);
  EXPECT_TRUE(runner.HasSequence(100)) << "the prompt was not admitted in 160 passes";
  opener.join();
  EXPECT_GE(mean, 2.0) << "prompt tokens per pass once the batch had grown";
}

TEST_F(TargetRunnerTest, AShortPromptIsFedWholeWhenTheTreesAreAboveTheirUsualPass) {
  // A pass whose trees are above the streams' usual pass carries one token
  // of a long prompt (the usual-pass bound), but a prompt whose rest fits in
  // the share of the pass goes in whole. The batch grows exactly so while
  // prompts are admitted: at 64 clients on the CPU demo pair one token a
  // pass kept 40 of 64 sequences live, the first token at 330-450 ms with
  // the Mamba drafter.
  Make(1024);
  SixteenPacedStreams s(model_.get());
  // All sixteen now: a 5 ms pass, far above 1.25x the usual; a quarter of
  // it is 1.25 ms, 5 prompt tokens of 0.25 ms.
  EXPECT_EQ(PassesUntilOpened(&s.runner, &s.streams, {{100, Prompt(7, 4), {}, 0, 64}}), 1);
}

TEST_F(TargetRunnerTest, ManyWaitingPromptsAreAdmittedInAFewPasses) {
  // Twelve prompts waiting beside two streams: the pieces may add a quarter
  // of the pass for each waiting prompt per stream (six at first: about 8
  // tokens of 0.25 ms on a 1.5 ms pass), not a quarter in all, which fed one
  // token a pass (72 passes for the 72 tokens).
  PacedModel paced(model_.get(), /*fixed_ms=*/1.0, /*per_token_ms=*/0.25);
  TargetRunner runner(&paced, {.max_context = 256, .max_tree_nodes = 16});
  Streams streams;
  streams.Open(&runner, 1, 2);
  for (int i = 0; i < 20; ++i) streams.Verify(&runner, 1 + i % 2);  // passes of 1 and 2 tokens
  const size_t before = paced.pieces().size();
  std::vector<OpenSpec> specs;
  for (int i = 0; i < 12; ++i) specs.push_back({100u + i, Prompt(i + 60, 6), {}, 0, 64});
  const int passes = PassesUntilOpened(&runner, &streams, specs);
  const std::vector<int> p = paced.pieces();
  const int most = *std::max_element(p.begin() + before, p.end());
  EXPECT_GE(most, 4) << "the largest piece beside 12 waiting prompts";
  EXPECT_LT(passes, 72) << "12 prompts of 6 tokens took " << passes << " passes";
}

TEST(TargetRunnerOptionsTest, PrefillShareMustBePositiveAndAtMostFour) {
  for (double share : {0.0, -0.25, 4.5}) {
    TargetRunnerOptions o;
    o.prefill_share = share;
    const absl::Status st = o.Validate();
    EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << "share " << share;
    EXPECT_NE(st.message().find("prefill_share"), absl::string_view::npos) << st;
  }
  for (double share : {0.1, 0.25, 4.0}) {
    TargetRunnerOptions o;
    o.prefill_share = share;
    EXPECT_TRUE(o.Validate().ok()) << "share " << share;
  }
}

TEST_F(TargetRunnerTest, LeasesReleaseIdleSequences) {
  absl::Time now = absl::FromUnixSeconds(100);
  TargetRunner runner(model_.get(),
                      {.max_context = 256, .max_tree_nodes = 16, .sequence_lease = absl::Seconds(5)},
                      [&now] { return now; });
  const std::vector<int32_t> g = Greedy(Prompt(1), 2);
  ASSERT_TRUE(runner.Open({{1, Prompt(1), {}, 0, 64}, {2, Prompt(2), {}, 0, 64}})[0].status.ok());
  EXPECT_EQ(runner.ReleaseExpired(), 0);
  now += absl::Seconds(4);
  StepSpec s;
  s.id = 1;
  s.step = 1;
  s.tree = TokenTree::Root(g[0]);
  ASSERT_TRUE(runner.Verify({s}, nullptr)[0].status.ok());  // renews 1's lease
  now += absl::Seconds(2);
  EXPECT_EQ(runner.ReleaseExpired(), 1) << "sequence 2 was idle for 6 s";
  EXPECT_TRUE(runner.HasSequence(1));
  EXPECT_FALSE(runner.HasSequence(2));
  now += absl::Seconds(5);
  EXPECT_EQ(runner.ReleaseExpired(), 1);
  EXPECT_EQ(runner.Stats().num_sequences, 0);
  EXPECT_EQ(runner.Stats().kv_blocks_used, 0);
  s.step = 2;
  EXPECT_EQ(runner.Verify({s}, nullptr)[0].status.code(), absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace treespec
