#include "core/spec/stop.h"

#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace treespec {
namespace {

using ::testing::HasSubstr;

constexpr int32_t kEos = 2;

TEST(ApplyStopsTest, NoStopKeepsEverything) {
  const StopDecision d = ApplyStops({5, 6, 7}, {kEos}, 100);
  EXPECT_EQ(d.num_emit, 3);
  EXPECT_EQ(d.num_counted, 3);
  EXPECT_EQ(d.finish, FinishReason::kNone);
}

TEST(ApplyStopsTest, EosInsideAnAcceptedRunTruncates) {
  // Accepted 5, EOS, 7 + bonus 8: only 5 is emitted; EOS counts in usage.
  const StopDecision d = ApplyStops({5, kEos, 7, 8}, {kEos}, 100);
  EXPECT_EQ(d.num_emit, 1);
  EXPECT_EQ(d.num_counted, 2);
  EXPECT_EQ(d.finish, FinishReason::kStopToken);
  EXPECT_EQ(FinishReasonName(d.finish), "stop");
}

TEST(ApplyStopsTest, FirstOfSeveralStopIdsWins) {
  const StopDecision d = ApplyStops({5, 9, kEos}, {kEos, 9}, 100);
  EXPECT_EQ(d.num_emit, 1);
  EXPECT_EQ(d.finish, FinishReason::kStopToken);
  const StopDecision first = ApplyStops({kEos, 5}, {kEos}, 100);
  EXPECT_EQ(first.num_emit, 0);
  EXPECT_EQ(first.num_counted, 1);
}

TEST(ApplyStopsTest, MaxTokensCuts) {
  StopDecision d = ApplyStops({5, 6, 7, 8}, {kEos}, 2);
  EXPECT_EQ(d.num_emit, 2);
  EXPECT_EQ(d.num_counted, 2);
  EXPECT_EQ(d.finish, FinishReason::kLength);
  EXPECT_EQ(FinishReasonName(d.finish), "length");
  // Exactly reaching the limit finishes with length.
  d = ApplyStops({5, 6}, {kEos}, 2);
  EXPECT_EQ(d.num_emit, 2);
  EXPECT_EQ(d.finish, FinishReason::kLength);
  // Nothing left.
  d = ApplyStops({5, 6}, {kEos}, 0);
  EXPECT_EQ(d.num_emit, 0);
  EXPECT_EQ(d.num_counted, 0);
  EXPECT_EQ(d.finish, FinishReason::kLength);
}

TEST(ApplyStopsTest, EosBeyondTheLimitIsNotGenerated) {
  StopDecision d = ApplyStops({5, 6, kEos}, {kEos}, 2);
  EXPECT_EQ(d.num_emit, 2);
  EXPECT_EQ(d.finish, FinishReason::kLength);
  // EOS as the last allowed token: a stop, counted once.
  d = ApplyStops({5, kEos, 7}, {kEos}, 2);
  EXPECT_EQ(d.num_emit, 1);
  EXPECT_EQ(d.num_counted, 2);
  EXPECT_EQ(d.finish, FinishReason::kStopToken);
}

TEST(ApplyStopsTest, NoStopIdsIgnoresEos) {
  const StopDecision d = ApplyStops({5, kEos, 7}, {}, 100);
  EXPECT_EQ(d.num_emit, 3);
  EXPECT_EQ(d.finish, FinishReason::kNone);
}

StopStringMatcher Matcher(std::vector<std::string> stops) {
  absl::StatusOr<StopStringMatcher> m = StopStringMatcher::Create(std::move(stops));
  EXPECT_TRUE(m.ok()) << m.status();
  return *std::move(m);
}

// Feeds deltas and returns everything emitted (plus the flush when no stop).
std::string FeedAll(StopStringMatcher& m, const std::vector<std::string>& deltas,
                    bool* stopped = nullptr) {
  std::string out;
  for (const std::string& d : deltas) out += m.Feed(d).text;
  if (stopped != nullptr) *stopped = m.stopped();
  out += m.Flush();
  return out;
}

TEST(StopStringMatcherTest, PassesTextThroughWithoutStops) {
  StopStringMatcher m = Matcher({});
  EXPECT_EQ(m.Feed("hello ").text, "hello ");
  EXPECT_EQ(m.Feed("world").text, "world");
  EXPECT_EQ(m.Flush(), "");
}

TEST(StopStringMatcherTest, StopInsideOneDelta) {
  StopStringMatcher m = Matcher({"END"});
  StopStringMatcher::Output o = m.Feed("abc END def");
  EXPECT_TRUE(o.stopped);
  EXPECT_EQ(o.text, "abc ");
  EXPECT_EQ(o.stop_index, 0);
  EXPECT_EQ(m.Feed("more").text, "");
  EXPECT_EQ(m.Flush(), "");
}

TEST(StopStringMatcherTest, StopSplitAcrossDeltas) {
  StopStringMatcher m = Matcher({"</s>"});
  StopStringMatcher::Output o = m.Feed("answer<");
  EXPECT_EQ(o.text, "answer");  // "<" could begin the stop: held
  EXPECT_FALSE(o.stopped);
  o = m.Feed("/");
  EXPECT_EQ(o.text, "");
  o = m.Feed("s> tail");
  EXPECT_TRUE(o.stopped);
  EXPECT_EQ(o.text, "");
}

TEST(StopStringMatcherTest, FalseStartIsReleased) {
  StopStringMatcher m = Matcher({"</s>"});
  EXPECT_EQ(m.Feed("a</").text, "a");
  EXPECT_EQ(m.num_held_bytes(), 2u);
  StopStringMatcher::Output o = m.Feed("b>");
  EXPECT_FALSE(o.stopped);
  EXPECT_EQ(o.text, "</b>");
}

TEST(StopStringMatcherTest, EarliestOfSeveralStopsWins) {
  StopStringMatcher m = Matcher({"world", "lo w"});
  StopStringMatcher::Output o = m.Feed("hello world");
  EXPECT_TRUE(o.stopped);
  EXPECT_EQ(o.text, "hel");
  EXPECT_EQ(o.stop_index, 1);
}

TEST(StopStringMatcherTest, HeldPrefixFlushedAtEnd) {
  StopStringMatcher m = Matcher({"STOP"});
  bool stopped = true;
  EXPECT_EQ(FeedAll(m, {"the ST", "O"}, &stopped), "the STO");
  EXPECT_FALSE(stopped);
}

TEST(StopStringMatcherTest, EveryByteSplitGivesTheSameResult) {
  const std::string text = "Grüße, 世界! stop→here ok";
  const std::string stop = "p→h";
  const std::string expected = text.substr(0, text.find(stop));
  for (size_t cut1 = 0; cut1 <= text.size(); ++cut1) {
    for (size_t cut2 = cut1; cut2 <= text.size(); cut2 += 3) {
      StopStringMatcher m = Matcher({stop});
      std::string out;
      for (const std::string& d : {text.substr(0, cut1), text.substr(cut1, cut2 - cut1),
                                   text.substr(cut2)}) {
        const StopStringMatcher::Output o = m.Feed(d);
        EXPECT_TRUE(IsValidUtf8(o.text)) << "cuts " << cut1 << "," << cut2;
        out += o.text;
      }
      EXPECT_TRUE(m.stopped()) << "cuts " << cut1 << "," << cut2;
      EXPECT_EQ(out, expected) << "cuts " << cut1 << "," << cut2;
    }
  }
}

TEST(StopStringMatcherTest, DeltaEndingInsideAUtf8Character) {
  // "é" = C3 A9 arrives split across deltas; the stop string is "é".
  StopStringMatcher m = Matcher({"\xC3\xA9"});
  StopStringMatcher::Output o = m.Feed("caf\xC3");
  EXPECT_EQ(o.text, "caf");
  o = m.Feed("\xA9 au lait");
  EXPECT_TRUE(o.stopped);
  EXPECT_EQ(o.text, "");

  // "ê" = C3 AA shares the lead byte but is not the stop: released whole.
  StopStringMatcher n = Matcher({"\xC3\xA9"});
  EXPECT_EQ(n.Feed("t\xC3").text, "t");
  o = n.Feed("\xAA" "te");
  EXPECT_FALSE(o.stopped);
  EXPECT_EQ(o.text, "\xC3\xAA" "te");
}

TEST(StopStringMatcherTest, IncompleteCharacterHeldEvenWithoutStops) {
  StopStringMatcher m = Matcher({"zz"});
  // "世" = E4 B8 96 split 1 + 2.
  EXPECT_EQ(m.Feed("a\xE4").text, "a");
  EXPECT_EQ(m.Feed("\xB8\x96" "b").text, "\xE4\xB8\x96" "b");
}

TEST(StopStringMatcherTest, StopAfterMultibyteTextKeepsCharactersWhole) {
  StopStringMatcher m = Matcher({"。"});  // E3 80 82
  StopStringMatcher::Output o = m.Feed("你好\xE3\x80");
  EXPECT_EQ(o.text, "你好");
  o = m.Feed("\x82");
  EXPECT_TRUE(o.stopped);
  EXPECT_EQ(o.text, "");
}

TEST(StopStringMatcherTest, CreateValidates) {
  EXPECT_THAT(std::string(StopStringMatcher::Create({"ok", ""}).status().message()),
              HasSubstr("stop[1] is empty"));
  EXPECT_THAT(std::string(StopStringMatcher::Create({"\xC3"}).status().message()),
              HasSubstr("stop[0] is not valid UTF-8"));
  EXPECT_THAT(std::string(
                  StopStringMatcher::Create({std::string(kMaxStopStringBytes + 1, 'a')})
                      .status()
                      .message()),
              HasSubstr("stop[0] is 257 bytes"));
  EXPECT_EQ(StopStringMatcher::Create(std::vector<std::string>(kMaxStopStrings + 1, "x"))
                .status()
                .code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(Utf8Test, ValidityAndIncompleteSuffix) {
  EXPECT_TRUE(IsValidUtf8("plain"));
  EXPECT_TRUE(IsValidUtf8("Grüße 世界 🙂"));
  EXPECT_FALSE(IsValidUtf8("\xC3"));
  EXPECT_FALSE(IsValidUtf8("\xA9"));
  EXPECT_FALSE(IsValidUtf8("\xC0\xAF"));          // overlong
  EXPECT_FALSE(IsValidUtf8("\xED\xA0\x80"));      // surrogate
  EXPECT_FALSE(IsValidUtf8("\xF4\x90\x80\x80"));  // > U+10FFFF
  EXPECT_EQ(IncompleteUtf8Suffix("ab"), 0u);
  EXPECT_EQ(IncompleteUtf8Suffix("a\xC3"), 1u);
  EXPECT_EQ(IncompleteUtf8Suffix("a\xF0\x9F\x99"), 3u);
  EXPECT_EQ(IncompleteUtf8Suffix("a\xF0\x9F\x99\x82"), 0u);
  EXPECT_EQ(IncompleteUtf8Suffix("\xC3\xA9"), 0u);
}

}  // namespace
}  // namespace treespec
