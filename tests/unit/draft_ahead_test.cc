// Draft-ahead on the drafter (Drafter::DraftAhead, drafter_service/
// tree_drafter.h) for both model kinds (tiny_mamba, tiny_llama_gqa):
//  - every candidate a step uses is exactly the tree a drafter that never
//    drafts ahead returns for the same request (tokens, parents, q), greedy
//    and sampled, over several steps of a batch in which some sequences take
//    a candidate (committed with the next call, as the coordinator does) and
//    others draft normally;
//  - ahead items commit nothing and are refused, naming why, for a wrong
//    step, an unknown sequence, one without a drafted tree, a bad count, and
//    by drafters that do not draft ahead; a repeated commit is ABORTED;
//  - releasing a sequence frees its candidates' forks.
#include <memory>
#include <string>
#include <vector>

#include "core/tensor/backend.h"
#include "drafter_service/drafter.h"
#include "gtest/gtest.h"
#include "tests/testing/test_util.h"

namespace treespec {
namespace {

struct Kind {
  std::string kind;
  std::string model;
};
void PrintTo(const Kind& k, std::ostream* os) { *os << k.kind; }

void ExpectSameTree(const TokenTree& a, const TokenTree& b, const std::string& where) {
  EXPECT_EQ(a.tokens, b.tokens) << where;
  EXPECT_EQ(a.parents, b.parents) << where;
  ASSERT_EQ(a.draft.size(), b.draft.size()) << where;
  for (size_t v = 0; v < a.draft.size(); ++v) {
    EXPECT_EQ(a.draft[v].tokens, b.draft[v].tokens) << where << " node " << v;
    EXPECT_EQ(a.draft[v].probs, b.draft[v].probs) << where << " node " << v;
  }
}

class DraftAheadTest : public ::testing::TestWithParam<Kind> {
 protected:
  void SetUp() override { backend_ = CreateCpuBackend(); }
  std::unique_ptr<Drafter> Make(int predraft, bool draft_ahead = true) {
    DrafterOptions o;
    o.kind = GetParam().kind;
    o.model_dir = testing::SourceDir() + "/tests/fixtures/models/" + GetParam().model;
    o.max_sequences = 4;
    o.max_tree_nodes = 32;
    o.max_context = 256;
    o.predraft = predraft;
    o.draft_ahead = draft_ahead;
    auto d = CreateDrafter(o, backend_.get());
    EXPECT_TRUE(d.ok()) << d.status();
    return d.ok() ? std::move(*d) : nullptr;
  }
  static DraftSpec Spec(uint64_t id, uint64_t step, std::vector<int32_t> new_tokens,
                        float temperature) {
    DraftSpec s;
    s.id = id;
    s.step = step;
    s.new_tokens = std::move(new_tokens);
    s.shape = *TreeShape::Parse(id == 1 ? "2,2,1" : "3,1,1");
    s.temperature = temperature;
    s.top_k = 8;
    s.seed = 1234 + id;
    return s;
  }
  static AheadSpec Ahead(const DraftSpec& s, int max_candidates = 2) {
    AheadSpec a;
    a.id = s.id;
    a.step = s.step + 1;
    a.shape = s.shape;
    a.temperature = s.temperature;
    a.top_k = s.top_k;
    a.seed = s.seed;
    a.max_candidates = max_candidates;
    return a;
  }
  // A bonus token after the root that no child and no candidate predicts.
  static int32_t Unpredicted(const TokenTree& t, const std::vector<AheadCandidate>& cands) {
    for (int32_t b = 3;; ++b) {
      bool taken = t.ChildWithToken(0, b) >= 0;
      for (const AheadCandidate& c : cands) taken |= c.new_tokens == std::vector<int32_t>{b};
      if (!taken) return b;
    }
  }

  // `steps` steps of 3 sequences. After step 1, sequence i takes candidate
  // (i + step) % 3 when there is one (0 and 1 exist for 2 candidates) and an
  // unpredicted outcome otherwise; candidates are committed with the call
  // that asks for the next ones, misses drafted first, as the coordinator
  // does. Every tree is checked against a drafter without draft-ahead.
  void Run(float temperature, int steps, int* hits) {
    std::unique_ptr<Drafter> pre = Make(2), plain = Make(0);
    ASSERT_NE(pre, nullptr);
    ASSERT_NE(plain, nullptr);
    const int kSeqs = 3;
    std::vector<DraftSpec> specs;
    for (int i = 0; i < kSeqs; ++i) {
      const uint64_t id = i + 1;
      std::vector<int32_t> prompt = {5 + i, 17, 33 + 2 * i};
      ASSERT_TRUE(pre->Open({{id, prompt, {}}})[0].ok());
      ASSERT_TRUE(plain->Open({{id, prompt, {}}})[0].ok());
      specs.push_back(Spec(id, 1, {9 + i}, temperature));
    }
    std::vector<DraftOutcome> trees = pre->Draft(specs);
    std::vector<std::vector<AheadCandidate>> cands(kSeqs);
    for (int step = 1;; ++step) {
      std::vector<DraftOutcome> want = plain->Draft(specs);
      for (int i = 0; i < kSeqs; ++i) {
        ASSERT_TRUE(trees[i].status.ok()) << trees[i].status;
        ASSERT_TRUE(want[i].status.ok()) << want[i].status;
        ExpectSameTree(trees[i].tree, want[i].tree,
                       "seq " + std::to_string(i) + " step " + std::to_string(step));
      }
      if (step == steps) break;
      // Beside the Verify of this step: ask for the next step's candidates
      // (the commits of this step's candidates ride along; see below).
      if (step % 2 == 0) pre->WaitIdle();  // the background may have prepared some
      std::vector<AheadSpec> ahead;
      for (const DraftSpec& s : specs) ahead.push_back(Ahead(s));
      std::vector<DraftSpec> commits = std::move(commits_);
      std::vector<DraftOutcome> committed;
      std::vector<AheadOutcome> got = pre->DraftAhead(commits, ahead, &committed);
      ASSERT_EQ(committed.size(), commits.size());
      for (const DraftOutcome& c : committed) {
        EXPECT_TRUE(c.status.ok()) << c.status;
        EXPECT_TRUE(c.is_predraft_hit) << "a commit adopts its candidate's fork";
      }
      ASSERT_EQ(got.size(), ahead.size());
      // The outcomes, and the next step's trees.
      std::vector<DraftSpec> next, misses;
      std::vector<int> miss_of(kSeqs, -1);
      for (int i = 0; i < kSeqs; ++i) {
        ASSERT_TRUE(got[i].status.ok()) << got[i].status;
        EXPECT_EQ(got[i].step, specs[i].step + 1);
        EXPECT_LE(got[i].candidates.size(), 2u);
        cands[i] = got[i].candidates;
        const size_t pick = (i + step) % 3;
        DraftSpec s = specs[i];
        s.step += 1;
        if (pick < cands[i].size()) {
          s.new_tokens = cands[i][pick].new_tokens;
          EXPECT_EQ(cands[i][pick].tree.tokens[0], s.new_tokens.back());
          commits_.push_back(s);
          *hits += 1;
        } else {
          s.new_tokens = {Unpredicted(trees[i].tree, cands[i])};
          miss_of[i] = static_cast<int>(misses.size());
          misses.push_back(s);
        }
        next.push_back(s);
      }
      std::vector<DraftOutcome> drafted = misses.empty() ? std::vector<DraftOutcome>{}
                                                         : pre->Draft(misses);
      for (int i = 0; i < kSeqs; ++i) {
        if (miss_of[i] >= 0) {
          trees[i] = drafted[miss_of[i]];
          EXPECT_FALSE(trees[i].is_predraft_hit);
          continue;
        }
        trees[i].status = absl::OkStatus();
        for (const AheadCandidate& c : cands[i]) {
          if (c.new_tokens == next[i].new_tokens) trees[i].tree = c.tree;
        }
      }
      specs = std::move(next);
    }
  }

  std::unique_ptr<Backend> backend_;
  std::vector<DraftSpec> commits_;
};

TEST_P(DraftAheadTest, GreedyCandidatesAreTheTreesOfANormalDraft) {
  int hits = 0;
  Run(0.0f, 7, &hits);
  EXPECT_GT(hits, 4);
}

TEST_P(DraftAheadTest, SampledCandidatesAreTheTreesOfANormalDraft) {
  int hits = 0;
  Run(0.8f, 7, &hits);
  EXPECT_GT(hits, 4);
}

TEST_P(DraftAheadTest, AheadItemsCommitNothingAndNameWhatIsWrong) {
  std::unique_ptr<Drafter> d = Make(2);
  ASSERT_NE(d, nullptr);
  EXPECT_EQ(d->max_ahead_candidates(), 2);
  ASSERT_TRUE(d->Open({{1, {4, 5, 6}, {}}, {2, {4, 5, 7}, {}}})[0].ok());
  const DraftSpec s = Spec(1, 1, {7}, 0.0f);
  std::vector<DraftOutcome> drafted;
  // Nothing drafted yet for sequence 1.
  std::vector<AheadOutcome> a = d->DraftAhead({}, {Ahead(Spec(1, 0, {7}, 0.0f))}, &drafted);
  EXPECT_EQ(a[0].status.code(), absl::StatusCode::kFailedPrecondition) << a[0].status;
  ASSERT_TRUE(d->Draft({s})[0].status.ok());
  AheadSpec wrong_step = Ahead(s);
  wrong_step.step = 3;
  AheadSpec unknown = Ahead(s);
  unknown.id = 9;
  AheadSpec none = Ahead(s);
  none.max_candidates = 0;
  a = d->DraftAhead({}, {wrong_step, unknown, none}, &drafted);
  EXPECT_EQ(a[0].status.code(), absl::StatusCode::kAborted) << a[0].status;
  EXPECT_NE(a[0].status.message().find("out of order"), std::string::npos) << a[0].status;
  EXPECT_EQ(a[1].status.code(), absl::StatusCode::kNotFound) << a[1].status;
  EXPECT_EQ(a[2].status.code(), absl::StatusCode::kInvalidArgument) << a[2].status;
  // Asking twice gives the same candidates and commits nothing: the step
  // after can still be drafted normally.
  a = d->DraftAhead({}, {Ahead(s)}, &drafted);
  ASSERT_TRUE(a[0].status.ok()) << a[0].status;
  ASSERT_EQ(a[0].candidates.size(), 2u);
  std::vector<AheadOutcome> again = d->DraftAhead({}, {Ahead(s)}, &drafted);
  ASSERT_EQ(again[0].candidates.size(), 2u);
  EXPECT_EQ(again[0].candidates[1].new_tokens, a[0].candidates[1].new_tokens);
  EXPECT_EQ(again[0].candidates[1].tree.tokens, a[0].candidates[1].tree.tokens);
  DraftSpec commit = s;
  commit.step = 2;
  commit.new_tokens = a[0].candidates[1].new_tokens;
  std::vector<AheadOutcome> none_asked = d->DraftAhead({commit}, {}, &drafted);
  EXPECT_TRUE(none_asked.empty());
  ASSERT_TRUE(drafted[0].status.ok()) << drafted[0].status;
  EXPECT_TRUE(drafted[0].is_predraft_hit);
  EXPECT_EQ(drafted[0].tree.tokens, a[0].candidates[1].tree.tokens);
  // The same commit again: refused, nothing changes.
  d->DraftAhead({commit}, {}, &drafted);
  EXPECT_EQ(drafted[0].status.code(), absl::StatusCode::kAborted) << drafted[0].status;
  commit.step = 3;
  commit.new_tokens = {3};
  ASSERT_TRUE(d->Draft({commit})[0].status.ok()) << "the drafter is at step 3";
}

TEST_P(DraftAheadTest, DraftersThatDoNotDraftAheadSayUnimplemented) {
  for (bool predraft_off : {true, false}) {
    std::unique_ptr<Drafter> d = predraft_off ? Make(0) : Make(2, /*draft_ahead=*/false);
    ASSERT_NE(d, nullptr);
    EXPECT_EQ(d->max_ahead_candidates(), 0);
    ASSERT_TRUE(d->Open({{1, {4, 5, 6}, {}}})[0].ok());
    const DraftSpec s = Spec(1, 1, {7}, 0.0f);
    std::vector<DraftOutcome> drafted;
    std::vector<AheadOutcome> a = d->DraftAhead({s}, {Ahead(s)}, &drafted);
    ASSERT_TRUE(drafted[0].status.ok()) << "its drafts are answered";
    EXPECT_EQ(a[0].status.code(), absl::StatusCode::kUnimplemented) << a[0].status;
  }
}

TEST_P(DraftAheadTest, ReleaseFreesTheCandidatesForks) {
  std::unique_ptr<Drafter> d = Make(2);
  ASSERT_NE(d, nullptr);
  const DrafterStats before = d->Stats();
  ASSERT_TRUE(d->Open({{1, {4, 5, 6}, {}}})[0].ok());
  const DraftSpec s = Spec(1, 1, {7}, 0.8f);  // sampled: no background pre-drafting
  ASSERT_TRUE(d->Draft({s})[0].status.ok());
  std::vector<DraftOutcome> drafted;
  ASSERT_EQ(d->DraftAhead({}, {Ahead(s)}, &drafted)[0].candidates.size(), 2u);
  EXPECT_LT(d->Stats().slots_free, before.slots_free);
  EXPECT_EQ(d->Release({1}), 1);
  EXPECT_EQ(d->Stats().slots_free, before.slots_free);
}

INSTANTIATE_TEST_SUITE_P(Kinds, DraftAheadTest,
                         ::testing::Values(Kind{"mamba", "tiny_mamba"},
                                           Kind{"transformer", "tiny_llama_gqa"}),
                         [](const ::testing::TestParamInfo<Kind>& info) {
                           return info.param.kind;
                         });

}  // namespace
}  // namespace treespec
