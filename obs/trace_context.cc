#include "obs/trace_context.h"

#include <chrono>
#include <random>
#include <thread>

#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace treespec {
namespace {

int HexDigit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  return -1;  // uppercase is invalid in traceparent
}

template <size_t N>
bool ParseHex(absl::string_view s, std::array<uint8_t, N>* out) {
  if (s.size() != 2 * N) return false;
  for (size_t i = 0; i < N; ++i) {
    const int hi = HexDigit(s[2 * i]), lo = HexDigit(s[2 * i + 1]);
    if (hi < 0 || lo < 0) return false;
    (*out)[i] = static_cast<uint8_t>(hi * 16 + lo);
  }
  return true;
}

template <size_t N>
bool AllZero(const std::array<uint8_t, N>& a) {
  for (uint8_t b : a) {
    if (b != 0) return false;
  }
  return true;
}

// splitmix64: a tiny, well-mixed generator; one per thread.
class IdGenerator {
 public:
  IdGenerator() {
    std::random_device rd;
    state_ = (static_cast<uint64_t>(rd()) << 32) ^ rd() ^
             static_cast<uint64_t>(
                 std::chrono::steady_clock::now().time_since_epoch().count()) ^
             std::hash<std::thread::id>()(std::this_thread::get_id());
  }
  uint64_t Next() {
    uint64_t z = (state_ += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
  }

 private:
  uint64_t state_;
};

IdGenerator& Generator() {
  thread_local IdGenerator gen;
  return gen;
}

void Fill(uint8_t* out, size_t n) {
  while (true) {
    for (size_t i = 0; i < n; i += 8) {
      uint64_t v = Generator().Next();
      for (size_t k = 0; k < 8 && i + k < n; ++k) out[i + k] = static_cast<uint8_t>(v >> (8 * k));
    }
    for (size_t i = 0; i < n; ++i) {
      if (out[i] != 0) return;  // all-zero ids are invalid
    }
  }
}

thread_local const OutgoingTrace* current_outgoing = nullptr;

}  // namespace

bool SpanContext::valid() const { return !AllZero(trace_id) && !AllZero(span_id); }

std::optional<SpanContext> ParseTraceparent(absl::string_view h) {
  h = absl::StripAsciiWhitespace(h);
  if (h.size() < 55 || h[2] != '-' || h[35] != '-' || h[52] != '-') return std::nullopt;
  std::array<uint8_t, 1> version{}, flags{};
  if (!ParseHex(h.substr(0, 2), &version) || version[0] == 0xff) return std::nullopt;
  if (version[0] == 0 && h.size() != 55) return std::nullopt;
  if (version[0] != 0 && h.size() > 55 && h[55] != '-') return std::nullopt;
  SpanContext ctx;
  if (!ParseHex(h.substr(3, 32), &ctx.trace_id) || !ParseHex(h.substr(36, 16), &ctx.span_id) ||
      !ParseHex(h.substr(53, 2), &flags)) {
    return std::nullopt;
  }
  if (!ctx.valid()) return std::nullopt;
  ctx.flags = flags[0];
  return ctx;
}

std::string HexId(const uint8_t* bytes, size_t n) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out(2 * n, '0');
  for (size_t i = 0; i < n; ++i) {
    out[2 * i] = kHex[bytes[i] >> 4];
    out[2 * i + 1] = kHex[bytes[i] & 15];
  }
  return out;
}

std::string FormatTraceparent(const SpanContext& ctx) {
  std::string out = "00-";
  out += HexId(ctx.trace_id.data(), 16);
  out += '-';
  out += HexId(ctx.span_id.data(), 8);
  out += '-';
  out += HexId(&ctx.flags, 1);
  return out;
}

std::vector<SpanContext> ParseTraceLinks(absl::string_view header) {
  std::vector<SpanContext> out;
  for (absl::string_view part : absl::StrSplit(header, ',', absl::SkipEmpty())) {
    if (out.size() >= static_cast<size_t>(kMaxTraceLinks)) break;
    if (std::optional<SpanContext> c = ParseTraceparent(part)) out.push_back(*c);
  }
  return out;
}

std::string FormatTraceLinks(const std::vector<SpanContext>& links) {
  std::string out;
  int n = 0;
  for (const SpanContext& c : links) {
    if (!c.valid() || n == kMaxTraceLinks) continue;
    if (n++ > 0) out += ',';
    out += FormatTraceparent(c);
  }
  return out;
}

std::array<uint8_t, 16> NewTraceId() {
  std::array<uint8_t, 16> id;
  Fill(id.data(), id.size());
  return id;
}

std::array<uint8_t, 8> NewSpanId() {
  std::array<uint8_t, 8> id;
  Fill(id.data(), id.size());
  return id;
}

const OutgoingTrace* CurrentOutgoingTrace() { return current_outgoing; }

OutgoingTraceScope::OutgoingTraceScope(OutgoingTrace trace)
    : trace_(std::move(trace)), previous_(current_outgoing) {
  current_outgoing = &trace_;
}

OutgoingTraceScope::~OutgoingTraceScope() { current_outgoing = previous_; }

}  // namespace treespec
