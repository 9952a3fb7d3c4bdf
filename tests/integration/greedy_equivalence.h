// The greedy-equivalence suites' common part (speculative_equivalence_test
// for the model drafters, head_equivalence_test for the feature-reading
// heads, hybrid_equivalence_test for the Mamba-2 and hybrid targets): the
// invariants of a speculative stream's statistics, a cluster shared by a
// suite, each prompt's plain greedy output (drafter "none") memoised, and the two checks every (drafter, tree shape)
// case runs — two requests alone and eight at once, each streaming exactly
// the plain tokens.
//
// A suite derives GreedyEquivalenceSuite<Suite> and provides
//   static std::vector<int32_t> PromptFor(int i);
//   static void CheckStats(const GenerateResult&, const std::string& drafter,
//                          int max_tokens, const std::string& what, bool is_auto);
// and starts its cluster in SetUpTestSuite (UseCluster).
#pragma once

#include <map>
#include <memory>
#include <ostream>
#include <string>
#include <utility>
#include <vector>

#include "gtest/gtest.h"
#include "tests/integration/cluster.h"

namespace treespec::testing {

struct ShapeCase {
  std::string drafter;
  std::string tree;
};
inline void PrintTo(const ShapeCase& c, std::ostream* os) { *os << c.drafter << " " << c.tree; }
inline std::string ShapeCaseName(const ::testing::TestParamInfo<ShapeCase>& info) {
  std::string name = info.param.drafter + "_" + info.param.tree;
  for (char& ch : name) {
    if (ch == ',' || ch == ':' || ch == '-') ch = '_';
  }
  return name;
}

// Checks the final chunk of a greedy speculative request of `max_tokens`
// tokens (EOS ignored) against the invariants every healthy speculative
// stream satisfies. With tree "auto" the planner may decode plainly when no
// tree pays (it must only draft during its first probe steps per lane), so a
// stream may draft nothing; every step is then planned.
inline void CheckSpeculationStats(const GenerateResult& r, const std::string& drafter,
                                  int max_tokens, const std::string& what, bool is_auto) {
  ASSERT_TRUE(r.has_final) << what;
  const v1::GenerateResponse& f = r.final_chunk;
  EXPECT_EQ(f.finish_reason(), v1::FINISH_REASON_LENGTH) << what;
  EXPECT_EQ(f.usage().completion_tokens(), max_tokens) << what;
  const v1::SpeculationStats& s = f.speculation();
  EXPECT_EQ(s.drafter(), drafter) << what;
  EXPECT_GT(s.steps(), 0) << what;
  EXPECT_EQ(s.fallback_steps(), 0) << what;
  if (is_auto) {
    EXPECT_EQ(s.planned_steps(), s.steps()) << what << " " << s.ShortDebugString();
  } else {
    EXPECT_GT(s.drafted_tokens(), 0) << what << " " << s.ShortDebugString();
  }
  EXPECT_LE(s.accepted_tokens(), s.drafted_tokens()) << what;
  // The first token comes from the prefill; every step commits its accepted
  // drafts plus one bonus token, and no step overshoots max_tokens.
  EXPECT_EQ(s.accepted_tokens() + s.steps(), max_tokens - 1) << what;
  EXPECT_NEAR(s.mean_accepted_length(),
              static_cast<double>(s.accepted_tokens() + s.steps()) / s.steps(), 1e-9)
      << what;
  EXPECT_LE(s.draft_ahead_hits(), s.draft_ahead_steps()) << what;
  EXPECT_LE(s.draft_ahead_steps(), s.steps()) << what;
}

template <typename Suite>
class GreedyEquivalenceSuite : public ::testing::Test {
 protected:
  static constexpr int kMaxTokens = 48;            // single requests
  static constexpr int kConcurrentMaxTokens = 40;  // each of kConcurrency requests
  static constexpr int kConcurrency = 8;

  static void UseCluster(absl::StatusOr<std::unique_ptr<Cluster>> c) {
    ASSERT_TRUE(c.ok()) << c.status();
    cluster_ = c->release();
  }
  static void TearDownTestSuite() {
    delete cluster_;
    cluster_ = nullptr;
    plain_.clear();
  }

  // Plain greedy output of Suite::PromptFor(i), memoised.
  static const std::vector<int32_t>& Plain(int i, int max_tokens) {
    const auto key = std::make_pair(i, max_tokens);
    auto it = plain_.find(key);
    if (it != plain_.end()) return it->second;
    GenerateResult r = cluster_->Generate(MakeRequest(Suite::PromptFor(i), max_tokens, "none"));
    EXPECT_TRUE(r.status.ok()) << r.status.error_message();
    EXPECT_EQ(r.ids.size(), static_cast<size_t>(max_tokens));
    return plain_[key] = r.ids;
  }

  static void AloneEqualsPlain(const ShapeCase& c) {
    for (int i : {0, 1}) {
      GenerateResult r =
          cluster_->Generate(MakeRequest(Suite::PromptFor(i), kMaxTokens, c.drafter, c.tree));
      ASSERT_TRUE(r.status.ok()) << r.status.error_message();
      EXPECT_EQ(r.ids, Plain(i, kMaxTokens)) << c.drafter << " tree " << c.tree << " prompt " << i;
      Suite::CheckStats(r, c.drafter, kMaxTokens, c.drafter + " " + c.tree, c.tree == "auto");
    }
  }

  static void ConcurrentEqualsPlain(const ShapeCase& c) {
    std::vector<v1::GenerateRequest> reqs;
    for (int i = 0; i < kConcurrency; ++i) {
      reqs.push_back(MakeRequest(Suite::PromptFor(i), kConcurrentMaxTokens, c.drafter, c.tree));
    }
    std::vector<GenerateResult> rs = RunConcurrently(cluster_->stub(), reqs);
    for (int i = 0; i < kConcurrency; ++i) {
      ASSERT_TRUE(rs[i].status.ok()) << "request " << i << ": " << rs[i].status.error_message();
      EXPECT_EQ(rs[i].ids, Plain(i, kConcurrentMaxTokens))
          << c.drafter << " tree " << c.tree << " request " << i;
      Suite::CheckStats(rs[i], c.drafter, kConcurrentMaxTokens,
                        c.drafter + " " + c.tree + " request " + std::to_string(i),
                        c.tree == "auto");
    }
  }

  static inline Cluster* cluster_ = nullptr;
  static inline std::map<std::pair<int, int>, std::vector<int32_t>> plain_;
};

}  // namespace treespec::testing
