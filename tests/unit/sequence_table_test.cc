// SequenceTable (the worker's and drafters' table of open sequences) with a
// fake clock:
//  - a second Insert of an id is ALREADY_EXISTS, also while it is hidden;
//  - capacity counts hidden entries; beyond it Insert is RESOURCE_EXHAUSTED;
//  - Find of an unknown or hidden id is NOT_FOUND; Publish makes it visible;
//  - an id twice in one batch is INVALID_ARGUMENT;
//  - a repeated or out-of-order step is ABORTED, the next one is accepted;
//  - leases: untouched published entries expire, Find and Publish renew,
//    hidden entries never expire, a zero lease never expires anything.
#include "core/model/sequence_table.h"

#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace treespec {
namespace {

using ::testing::HasSubstr;

class FakeClock {
 public:
  absl::Time Now() const { return now_; }
  void Advance(absl::Duration d) { now_ += d; }
  SequenceTable<std::string>::Clock AsClock() {
    return [this] { return Now(); };
  }

 private:
  absl::Time now_ = absl::FromUnixSeconds(1000);
};

TEST(SequenceTableTest, DuplicateOpenIsAlreadyExists) {
  SequenceTable<std::string> t({.max_sequences = 4});
  ASSERT_TRUE(t.Insert(7, "a").ok());
  absl::Status st = t.Insert(7, "b");
  EXPECT_EQ(st.code(), absl::StatusCode::kAlreadyExists) << st;
  EXPECT_THAT(st.message(), HasSubstr("sequence_id 7"));
  ASSERT_TRUE(t.Insert(8, "c", /*visible=*/false).ok());
  EXPECT_EQ(t.Insert(8, "d").code(), absl::StatusCode::kAlreadyExists);
  EXPECT_EQ(**t.Find(7), "a") << "the first value is kept";
}

TEST(SequenceTableTest, CapacityIsResourceExhaustedAndCountsHiddenEntries) {
  SequenceTable<std::string> t({.max_sequences = 2});
  ASSERT_TRUE(t.Insert(1, "a").ok());
  ASSERT_TRUE(t.Insert(2, "b", /*visible=*/false).ok());
  absl::Status st = t.Insert(3, "c");
  EXPECT_EQ(st.code(), absl::StatusCode::kResourceExhausted) << st;
  EXPECT_THAT(st.message(), HasSubstr("2"));
  EXPECT_EQ(t.size(), 2);
  ASSERT_TRUE(t.Erase(1).has_value());
  EXPECT_TRUE(t.Insert(3, "c").ok()) << "room again after an Erase";
}

TEST(SequenceTableTest, UnknownAndHiddenAreNotFound) {
  SequenceTable<std::string> t({.max_sequences = 4});
  EXPECT_EQ(t.Find(5).status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(t.Find(5).status().message(), HasSubstr("sequence_id 5 is not open"));
  ASSERT_TRUE(t.Insert(5, "x", /*visible=*/false).ok());
  EXPECT_EQ(t.Find(5).status().code(), absl::StatusCode::kNotFound) << "still opening";
  EXPECT_FALSE(t.IsVisible(5));
  ASSERT_NE(t.FindAny(5), nullptr);
  t.Publish(5);
  ASSERT_TRUE(t.Find(5).ok());
  EXPECT_TRUE(t.IsVisible(5));
  ASSERT_TRUE(t.Erase(5).has_value());
  EXPECT_FALSE(t.Erase(5).has_value());
  EXPECT_EQ(t.Find(5).status().code(), absl::StatusCode::kNotFound);
}

TEST(SequenceTableTest, DuplicateInOneBatchIsInvalidArgument) {
  BatchIds ids;
  EXPECT_TRUE(ids.Add(1).ok());
  EXPECT_TRUE(ids.Add(2).ok());
  absl::Status st = ids.Add(1);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << st;
  EXPECT_THAT(st.message(), HasSubstr("sequence_id 1 appears twice"));
}

TEST(SequenceTableTest, StepsOutOfOrderOrRepeatedAreAborted) {
  SequenceTable<std::string> t({.max_sequences = 4});
  ASSERT_TRUE(t.Insert(3, "a").ok());
  EXPECT_TRUE(t.CheckStep(3, 1, "step", "committed").ok());
  absl::Status ahead = t.CheckStep(3, 2, "step", "committed");
  EXPECT_EQ(ahead.code(), absl::StatusCode::kAborted) << ahead;
  EXPECT_THAT(ahead.message(), HasSubstr("out of order (expected 1)"));
  t.AdvanceStep(3);
  absl::Status again = t.CheckStep(3, 1, "draft step", "drafted");
  EXPECT_EQ(again.code(), absl::StatusCode::kAborted) << again;
  EXPECT_THAT(again.message(), HasSubstr("draft step 1 of sequence 3 was already drafted"));
  EXPECT_TRUE(t.CheckStep(3, 2, "step", "committed").ok());
  EXPECT_EQ(t.CheckStep(4, 1, "step", "committed").code(), absl::StatusCode::kNotFound);
}

TEST(SequenceTableTest, LeasesExpireUntouchedSequencesOnly) {
  FakeClock clock;
  SequenceTable<std::string> t({.max_sequences = 8, .lease = absl::Seconds(10)}, clock.AsClock());
  ASSERT_TRUE(t.Insert(1, "idle").ok());
  ASSERT_TRUE(t.Insert(2, "busy").ok());
  ASSERT_TRUE(t.Insert(3, "opening", /*visible=*/false).ok());
  clock.Advance(absl::Seconds(6));
  ASSERT_TRUE(t.Find(2).ok());  // renews 2's lease to t+16
  EXPECT_TRUE(t.TakeExpired().empty());
  clock.Advance(absl::Seconds(5));  // t+11: 1 expired, 2 not, 3 hidden
  auto expired = t.TakeExpired();
  ASSERT_EQ(expired.size(), 1u);
  EXPECT_EQ(expired[0].first, 1u);
  EXPECT_EQ(expired[0].second, "idle");
  EXPECT_EQ(t.Find(1).status().code(), absl::StatusCode::kNotFound);
  clock.Advance(absl::Seconds(100));
  t.Publish(3);  // publishing starts a fresh lease
  expired = t.TakeExpired();
  ASSERT_EQ(expired.size(), 1u);
  EXPECT_EQ(expired[0].first, 2u);
  EXPECT_TRUE(t.Find(3).ok());
  EXPECT_EQ(t.size(), 1);
}

TEST(SequenceTableTest, ZeroLeaseNeverExpires) {
  FakeClock clock;
  SequenceTable<std::string> t({.max_sequences = 2}, clock.AsClock());
  ASSERT_TRUE(t.Insert(1, "a").ok());
  clock.Advance(absl::Hours(1000));
  EXPECT_TRUE(t.TakeExpired().empty());
  EXPECT_TRUE(t.Find(1).ok());
}

TEST(SequenceTableTest, OptionsAreValidated) {
  EXPECT_EQ(SequenceTableOptions{.max_sequences = 0}.Validate().code(),
            absl::StatusCode::kInvalidArgument);
  absl::Status st = SequenceTableOptions{.max_sequences = 1, .lease = absl::Seconds(-1)}.Validate();
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(st.message(), HasSubstr("lease"));
  EXPECT_TRUE(SequenceTableOptions{}.Validate().ok());
}

}  // namespace
}  // namespace treespec
