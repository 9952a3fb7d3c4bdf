// Greedy speculative decoding is lossless on the trained demo Mamba-2 +
// attention hybrid (models/demo/hybrid-target, BambaForCausalLM) and pure
// Mamba-2 (models/demo/mamba2-target) targets, end to end (issue 15 point 6):
// the target runs as treespec-worker processes, TP = 1 (one process) and
// TP = 2 (two ranks over Gloo, prefilling in chunks of 3 tokens), and for
// every drafter that can serve them — the hybrid's own Mamba and transformer
// drafters, the demo Llama target's Mamba and transformer drafters (same
// vocabulary) and the model-free n-gram drafter — and every tree shape below
// ("auto": planned per step), one request alone and eight at once stream
// exactly the plain greedy output of the same group, which itself equals the
// target decoded in process by LocalModel. One worker group and one set of
// drafters serve all cases of a deployment; prompts are held-out story
// openings, so the trained drafters' tokens are accepted part of the way and
// activation replay stops inside trees. Afterwards the worker group and every
// drafter hold no sequence.
//
// The drafters that read the target's hidden features (EAGLE, EAGLE-3 and
// ReDrafter heads) are built on a Llama target's embedding, LM head and
// features: they cannot serve these targets, and both ends refuse it by name
// — the drafter when told to load a head against them, the coordinator when
// a head built for the Llama demo target is paired with their workers.
#include <cstdio>
#include <fstream>
#include <memory>
#include <ostream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "core/tokenizer/tokenizer.h"
#include "tests/integration/cluster.h"
#include "tests/integration/greedy_equivalence.h"
#include "tests/integration/worker_group.h"
#include "tests/testing/test_util.h"

namespace treespec::testing {
namespace {

using ::testing::HasSubstr;

constexpr int kAloneTokens = 32;
constexpr int kConcurrentTokens = 24;
constexpr int kConcurrency = 8;

std::string Demo(const std::string& name) { return SourceDir() + "/models/demo/" + name; }


// Token drafters of the demo vocabulary: name, kind, model directory.
struct TokenDrafter {
  std::string name, kind, dir;
};
const std::vector<TokenDrafter> kDrafters = {
    {"hybrid-mamba", "mamba", "hybrid-mamba-drafter"},
    {"hybrid-transformer", "transformer", "hybrid-transformer-drafter"},
    {"mamba", "mamba", "mamba-drafter"},
    {"transformer", "transformer", "transformer-drafter"},
};
const std::vector<std::string> kTrees = {"chain:4", "3,2,2,1,1", "auto"};

struct Deployment {
  std::string target;  // models/demo/<target>
  int tp;
};
void PrintTo(const Deployment& d, std::ostream* os) { *os << d.target << " tp " << d.tp; }

// The first kConcurrency held-out prompts, BOS first.
std::vector<std::vector<int32_t>> Prompts(const std::string& target) {
  auto tokenizer = LoadTokenizer(Demo(target));
  EXPECT_TRUE(tokenizer.ok()) << tokenizer.status();
  std::vector<std::vector<int32_t>> out;
  if (!tokenizer.ok()) return out;
  std::ifstream in(Demo("heldout_prompts.txt"));
  std::string line;
  while (static_cast<int>(out.size()) < kConcurrency && std::getline(in, line)) {
    auto ids = (*tokenizer)->Encode(line, /*add_special=*/true);
    EXPECT_TRUE(ids.ok()) << ids.status();
    if (ids.ok()) out.push_back(*ids);
  }
  EXPECT_EQ(static_cast<int>(out.size()), kConcurrency);
  return out;
}

class HybridEquivalenceTest : public ::testing::TestWithParam<Deployment> {};

TEST_P(HybridEquivalenceTest, EveryDrafterAndShapeEqualsPlainGreedy) {
  const Deployment& dep = GetParam();
  auto group = WorkerGroup::Start(dep.tp, 30, Demo(dep.target));
  ASSERT_TRUE(group.ok()) << group.status();
  ClusterConfig config;
  config.worker_addresses = {(*group)->address};
  config.worker.model = Demo(dep.target);  // the n-gram drafter's vocabulary
  config.mamba = config.self = config.garbage = false;
  for (const TokenDrafter& d : kDrafters) {
    DrafterConfig dc;
    dc.kind = d.kind;
    dc.model = Demo(d.dir);
    config.extra_drafters.push_back({d.name, dc});
  }
  auto cluster = Cluster::Start(config);
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  Cluster& c = **cluster;

  const std::vector<std::vector<int32_t>> prompts = Prompts(dep.target);
  ASSERT_EQ(static_cast<int>(prompts.size()), kConcurrency);
  // The reference: the group's plain greedy output (all prompts at once)
  // equals sequential in-process greedy decoding of the target.
  const std::vector<std::vector<int32_t>> want =
      GreedyReference(prompts, kAloneTokens, Demo(dep.target));
  {
    std::vector<v1::GenerateRequest> plain;
    for (const auto& p : prompts) plain.push_back(MakeRequest(p, kAloneTokens, "none"));
    std::vector<GenerateResult> rs = RunConcurrently(c.stub(), plain);
    for (int i = 0; i < kConcurrency; ++i) {
      ASSERT_TRUE(rs[i].status.ok()) << "plain " << i << ": " << rs[i].status.error_message();
      ASSERT_EQ(rs[i].ids, want[i]) << "plain decoding of prompt " << i;
    }
  }
  auto prefix = [](const std::vector<int32_t>& ids, int n) {
    return std::vector<int32_t>(ids.begin(), ids.begin() + n);
  };

  std::vector<std::string> drafters;
  for (const TokenDrafter& d : kDrafters) drafters.push_back(d.name);
  drafters.push_back("ngram");
  int case_index = 0;
  for (const std::string& drafter : drafters) {
    for (const std::string& tree : kTrees) {
      const std::string what = absl::StrCat(dep.target, " tp ", dep.tp, " ", drafter, " ", tree);
      const bool is_auto = tree == "auto";
      // Concurrency 1: one request alone (a different prompt per case).
      const int i = case_index++ % kConcurrency;
      GenerateResult alone = c.Generate(MakeRequest(prompts[i], kAloneTokens, drafter, tree));
      ASSERT_TRUE(alone.status.ok()) << what << ": " << alone.status.error_message();
      EXPECT_EQ(alone.ids, want[i]) << what << " alone, prompt " << i;
      CheckSpeculationStats(alone, drafter, kAloneTokens, what + " alone", is_auto);
      // Concurrency 8: every prompt at once, one batch per step.
      std::vector<v1::GenerateRequest> reqs;
      for (const auto& p : prompts) {
        reqs.push_back(MakeRequest(p, kConcurrentTokens, drafter, tree));
      }
      std::vector<GenerateResult> rs = RunConcurrently(c.stub(), reqs);
      int64_t accepted = 0, steps = 0;
      for (int k = 0; k < kConcurrency; ++k) {
        ASSERT_TRUE(rs[k].status.ok()) << what << " request " << k << ": "
                                       << rs[k].status.error_message();
        EXPECT_EQ(rs[k].ids, prefix(want[k], kConcurrentTokens)) << what << " request " << k;
        CheckSpeculationStats(rs[k], drafter, kConcurrentTokens,
                              absl::StrCat(what, " request ", k), is_auto);
        accepted += rs[k].final_chunk.speculation().accepted_tokens();
        steps += rs[k].final_chunk.speculation().steps();
      }
      std::printf("[ measured ] %s: tokens per step alone %.2f, 8 at once %.2f\n", what.c_str(),
                  alone.final_chunk.speculation().mean_accepted_length(),
                  steps > 0 ? static_cast<double>(accepted + steps) / steps : 0.0);
      // The trained drafters' drafts are accepted (n-gram's too: stories
      // repeat themselves), so replay runs inside trees, not only at roots.
      if (!is_auto) {
        EXPECT_GT(accepted, 0) << what;
      }
    }
  }
  auto worker = v1::Worker::NewStub(MakeChannel((*group)->address, {}));
  EXPECT_TRUE(Eventually([&] { return WorkerSequences(worker.get()) == 0; },
                         std::chrono::milliseconds(5000)))
      << "the worker group still holds sequences";
  for (const std::string& drafter : drafters) {
    auto stub = c.drafter(drafter)->NewStub();
    EXPECT_TRUE(Eventually([&] { return DrafterSequences(stub.get()) == 0; },
                           std::chrono::milliseconds(5000)))
        << "drafter " << drafter << " still holds sequences";
  }
}

INSTANTIATE_TEST_SUITE_P(Targets, HybridEquivalenceTest,
                         ::testing::Values(Deployment{"hybrid-target", 1},
                                           Deployment{"hybrid-target", 2},
                                           Deployment{"mamba2-target", 1},
                                           Deployment{"mamba2-target", 2}),
                         [](const ::testing::TestParamInfo<Deployment>& p) {
                           return absl::StrCat(p.param.target == "hybrid-target" ? "hybrid"
                                                                                  : "mamba2",
                                               "_tp", p.param.tp);
                         });

// treespec-drafter --kind eagle|eagle3|redrafter --target <hybrid or Mamba-2>:
// the head reads a Llama target's embedding, LM head and features, so the
// drafter refuses to start and says why.
TEST(HybridEquivalenceRefusals, FeatureHeadsRefuseANonLlamaTarget) {
  for (const char* target : {"hybrid-target", "mamba2-target"}) {
    for (const char* kind : {"eagle", "eagle3", "redrafter"}) {
      DrafterConfig dc;
      dc.kind = kind;
      dc.model = Demo(absl::StrCat(kind, "-head"));
      dc.target = Demo(target);
      auto d = InProcessDrafter::Start(dc);
      ASSERT_FALSE(d.ok()) << kind << " against " << target;
      EXPECT_THAT(d.status().message(), HasSubstr("needs a Llama-family target, not "))
          << d.status();
      EXPECT_THAT(d.status().message(),
                  HasSubstr(std::string(target) == "hybrid-target" ? "BambaForCausalLM"
                                                                   : "Mamba2ForCausalLM"))
          << d.status();
    }
  }
}

// A head built for the Llama demo target (same vocabulary; the hybrid even
// has its hidden size and depth) paired with a hybrid or Mamba-2 worker: the
// coordinator refuses to start, naming the drafter and both model kinds,
// instead of drafting from features of a model the head never saw.
TEST(HybridEquivalenceRefusals, CoordinatorRefusesAFeatureHeadOfAnotherTarget) {
  for (const char* target : {"hybrid-target", "mamba2-target"}) {
    WorkerConfig wc;
    wc.model = Demo(target);
    wc.runner.max_context = 256;
    auto worker = InProcessWorker::Start(wc);
    ASSERT_TRUE(worker.ok()) << worker.status();
    for (const char* kind : {"eagle", "redrafter"}) {
      DrafterConfig dc;
      dc.kind = kind;
      dc.model = Demo(absl::StrCat(kind, "-head"));
      dc.target = Demo("target");
      auto head = InProcessDrafter::Start(dc);
      ASSERT_TRUE(head.ok()) << head.status();
      CoordinatorConfig cc;
      cc.workers = {(*worker)->address()};
      cc.drafters = {{kind, (*head)->address()}};
      auto coordinator = InProcessCoordinator::Start(std::move(cc));
      ASSERT_FALSE(coordinator.ok()) << kind << " on " << target;
      EXPECT_EQ(coordinator.status().code(), absl::StatusCode::kFailedPrecondition);
      EXPECT_THAT(coordinator.status().message(),
                  HasSubstr(absl::StrCat("drafter ", kind, " at ")));
      EXPECT_THAT(coordinator.status().message(),
                  HasSubstr("reads the target's hidden features and was built for a llama target"));
      EXPECT_THAT(coordinator.status().message(),
                  HasSubstr(std::string(target) == "hybrid-target" ? "a hybrid model"
                                                                   : "a mamba2 model"));
    }
  }
}

}  // namespace
}  // namespace treespec::testing
