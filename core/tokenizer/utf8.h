// UTF-8 helpers for the tokenizers: decoding code points, validating, and
// classifying a (possibly incomplete) byte prefix the way streaming decoders
// need it. Strict RFC 3629: no overlong forms, no surrogates, nothing above
// U+10FFFF. Pure functions; thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace treespec {

inline constexpr char32_t kReplacementChar = 0xFFFD;
inline constexpr std::string_view kReplacementUtf8 = "\xEF\xBF\xBD";

// What the bytes at the start of a buffer are.
struct Utf8Prefix {
  enum class Kind {
    kComplete,    // `length` bytes form one valid character
    kIncomplete,  // all `length` bytes are a valid start of a longer character
    kInvalid,     // the first `length` bytes are a maximal invalid subpart
  };
  Kind kind;
  size_t length;
};

// Classifies the bytes at the start of `s` (non-empty). kInvalid lengths follow
// Unicode's "maximal subpart" practice, as Python's and Rust's lossy decoders do.
Utf8Prefix ClassifyUtf8Prefix(std::string_view s);

// True if `s` is entirely valid UTF-8. On failure, *error_offset (if given) is
// the offset of the first invalid byte.
bool IsValidUtf8(std::string_view s, size_t* error_offset = nullptr);

// Decodes valid UTF-8 (check with IsValidUtf8 first) into code points and the
// byte offset of each; offsets has one extra entry, s.size().
void DecodeUtf8(std::string_view s, std::vector<char32_t>* cps, std::vector<uint32_t>* offsets);

// Appends the UTF-8 encoding of `cp` (a valid scalar value).
void AppendUtf8(char32_t cp, std::string* out);

// Length in bytes of the valid UTF-8 character starting with `lead`.
inline size_t Utf8CharLength(uint8_t lead) {
  return lead < 0x80 ? 1 : lead < 0xE0 ? 2 : lead < 0xF0 ? 3 : 4;
}

}  // namespace treespec
