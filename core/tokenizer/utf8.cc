#include "core/tokenizer/utf8.h"

namespace treespec {
namespace {

// Number of bytes a character starting with `lead` needs, 0 if `lead` can
// never start one; *lo/*hi bound the second byte (Unicode Table 3-7).
int ExpectedLength(uint8_t lead, uint8_t* lo, uint8_t* hi) {
  *lo = 0x80;
  *hi = 0xBF;
  if (lead < 0x80) return 1;
  if (lead < 0xC2) return 0;
  if (lead < 0xE0) return 2;
  if (lead < 0xF0) {
    if (lead == 0xE0) *lo = 0xA0;
    if (lead == 0xED) *hi = 0x9F;
    return 3;
  }
  if (lead < 0xF5) {
    if (lead == 0xF0) *lo = 0x90;
    if (lead == 0xF4) *hi = 0x8F;
    return 4;
  }
  return 0;
}

}  // namespace

Utf8Prefix ClassifyUtf8Prefix(std::string_view s) {
  uint8_t lo, hi;
  const int need = ExpectedLength(static_cast<uint8_t>(s[0]), &lo, &hi);
  if (need == 0) return {Utf8Prefix::Kind::kInvalid, 1};
  for (int i = 1; i < need; ++i) {
    if (static_cast<size_t>(i) >= s.size()) return {Utf8Prefix::Kind::kIncomplete, s.size()};
    const uint8_t b = static_cast<uint8_t>(s[i]);
    const uint8_t min = i == 1 ? lo : 0x80;
    const uint8_t max = i == 1 ? hi : 0xBF;
    if (b < min || b > max) return {Utf8Prefix::Kind::kInvalid, static_cast<size_t>(i)};
  }
  return {Utf8Prefix::Kind::kComplete, static_cast<size_t>(need)};
}

bool IsValidUtf8(std::string_view s, size_t* error_offset) {
  size_t i = 0;
  while (i < s.size()) {
    if (static_cast<uint8_t>(s[i]) < 0x80) {
      ++i;
      continue;
    }
    const Utf8Prefix p = ClassifyUtf8Prefix(s.substr(i));
    if (p.kind != Utf8Prefix::Kind::kComplete) {
      if (error_offset != nullptr) *error_offset = i;
      return false;
    }
    i += p.length;
  }
  return true;
}

void DecodeUtf8(std::string_view s, std::vector<char32_t>* cps, std::vector<uint32_t>* offsets) {
  cps->clear();
  offsets->clear();
  size_t i = 0;
  while (i < s.size()) {
    const uint8_t b0 = static_cast<uint8_t>(s[i]);
    const size_t n = Utf8CharLength(b0);
    char32_t cp = n == 1 ? b0 : n == 2 ? (b0 & 0x1F) : n == 3 ? (b0 & 0x0F) : (b0 & 0x07);
    for (size_t k = 1; k < n && i + k < s.size(); ++k) {
      cp = (cp << 6) | (static_cast<uint8_t>(s[i + k]) & 0x3F);
    }
    cps->push_back(cp);
    offsets->push_back(static_cast<uint32_t>(i));
    i += n;
  }
  offsets->push_back(static_cast<uint32_t>(s.size()));
}

void AppendUtf8(char32_t cp, std::string* out) {
  if (cp < 0x80) {
    out->push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out->push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out->push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out->push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

}  // namespace treespec
