#include "core/spec/stop.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"

namespace treespec {
namespace {

// Length of the UTF-8 sequence a lead byte starts; 0 for a continuation or an
// invalid byte.
int Utf8SequenceLength(unsigned char b) {
  if (b < 0x80) return 1;
  if (b >= 0xC2 && b <= 0xDF) return 2;
  if (b >= 0xE0 && b <= 0xEF) return 3;
  if (b >= 0xF0 && b <= 0xF4) return 4;
  return 0;
}

bool IsContinuation(unsigned char b) { return (b & 0xC0) == 0x80; }

}  // namespace

absl::string_view FinishReasonName(FinishReason reason) {
  switch (reason) {
    case FinishReason::kNone:
      return "";
    case FinishReason::kStopToken:
    case FinishReason::kStopString:
      return "stop";
    case FinishReason::kLength:
      return "length";
  }
  return "";
}

StopDecision ApplyStops(absl::Span<const int32_t> new_tokens,
                        absl::Span<const int32_t> stop_token_ids, int64_t remaining_tokens) {
  StopDecision d;
  const int64_t limit =
      std::clamp<int64_t>(remaining_tokens, 0, static_cast<int64_t>(new_tokens.size()));
  for (int64_t i = 0; i < limit; ++i) {
    if (std::find(stop_token_ids.begin(), stop_token_ids.end(), new_tokens[i]) !=
        stop_token_ids.end()) {
      d.num_emit = static_cast<int32_t>(i);
      d.num_counted = static_cast<int32_t>(i + 1);
      d.finish = FinishReason::kStopToken;
      return d;
    }
  }
  d.num_emit = d.num_counted = static_cast<int32_t>(limit);
  if (limit == remaining_tokens) d.finish = FinishReason::kLength;
  return d;
}

bool IsValidUtf8(absl::string_view text) {
  size_t i = 0;
  while (i < text.size()) {
    const auto b = static_cast<unsigned char>(text[i]);
    const int len = Utf8SequenceLength(b);
    if (len == 0 || i + len > text.size()) return false;
    for (int j = 1; j < len; ++j) {
      if (!IsContinuation(static_cast<unsigned char>(text[i + j]))) return false;
    }
    if (len >= 3) {
      const auto b1 = static_cast<unsigned char>(text[i + 1]);
      if (b == 0xE0 && b1 < 0xA0) return false;  // overlong
      if (b == 0xED && b1 >= 0xA0) return false;  // surrogate
      if (b == 0xF0 && b1 < 0x90) return false;  // overlong
      if (b == 0xF4 && b1 >= 0x90) return false;  // > U+10FFFF
    }
    i += len;
  }
  return true;
}

size_t IncompleteUtf8Suffix(absl::string_view text) {
  const size_t n = text.size();
  for (size_t back = 1; back <= std::min<size_t>(4, n); ++back) {
    const auto b = static_cast<unsigned char>(text[n - back]);
    if (IsContinuation(b)) continue;
    const int len = Utf8SequenceLength(b);
    return (len > 0 && static_cast<size_t>(len) > back) ? back : 0;
  }
  return 0;
}

absl::StatusOr<StopStringMatcher> StopStringMatcher::Create(std::vector<std::string> stops) {
  if (static_cast<int>(stops.size()) > kMaxStopStrings) {
    return absl::InvalidArgumentError(absl::StrCat("stop: ", stops.size(),
                                                   " stop strings, more than the limit of ",
                                                   kMaxStopStrings));
  }
  for (size_t i = 0; i < stops.size(); ++i) {
    if (stops[i].empty()) {
      return absl::InvalidArgumentError(absl::StrCat("stop[", i, "] is empty"));
    }
    if (static_cast<int>(stops[i].size()) > kMaxStopStringBytes) {
      return absl::InvalidArgumentError(absl::StrCat("stop[", i, "] is ", stops[i].size(),
                                                     " bytes, more than the limit of ",
                                                     kMaxStopStringBytes));
    }
    if (!IsValidUtf8(stops[i])) {
      return absl::InvalidArgumentError(absl::StrCat("stop[", i, "] is not valid UTF-8"));
    }
  }
  return StopStringMatcher(std::move(stops));
}

size_t StopStringMatcher::HeldForStops() const {
  size_t held = 0;
  for (const std::string& stop : stops_) {
    const size_t max_len = std::min(stop.size() - 1, pending_.size());
    for (size_t len = max_len; len > held; --len) {
      if (absl::string_view(pending_).substr(pending_.size() - len) ==
          absl::string_view(stop).substr(0, len)) {
        held = len;
        break;
      }
    }
  }
  return held;
}

// Why this is right: a stop string can only complete inside pending_, because
// any emitted byte was, when emitted, not part of a suffix that could begin a
// stop string. Valid UTF-8 stop strings start with a lead byte, so both a match
// and a held-back suffix start on a character boundary of valid text.
StopStringMatcher::Output StopStringMatcher::Feed(absl::string_view delta) {
  Output out;
  if (stopped_) return out;
  pending_.append(delta.data(), delta.size());
  size_t best_pos = std::string::npos;
  for (size_t i = 0; i < stops_.size(); ++i) {
    const size_t pos = pending_.find(stops_[i]);
    if (pos < best_pos) {
      best_pos = pos;
      out.stop_index = static_cast<int32_t>(i);
    }
  }
  if (best_pos != std::string::npos) {
    out.text = pending_.substr(0, best_pos);
    out.stopped = true;
    stopped_ = true;
    pending_.clear();
    return out;
  }
  const size_t held = std::max(HeldForStops(), IncompleteUtf8Suffix(pending_));
  out.text = pending_.substr(0, pending_.size() - held);
  pending_.erase(0, pending_.size() - held);
  return out;
}

std::string StopStringMatcher::Flush() {
  if (stopped_) return "";
  return std::exchange(pending_, std::string());
}

}  // namespace treespec
