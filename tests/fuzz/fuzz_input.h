// Helpers the libFuzzer targets share: the fuzzer's bytes as a string, split
// into parts at a separator byte, and a sink that keeps results observable so
// that the compiler cannot drop the code under test. Header-only.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace treespec::fuzz {

inline std::string Bytes(const uint8_t* data, size_t size) {
  return std::string(reinterpret_cast<const char*>(data), size);
}

// Splits `text` at the first `sep`: {before, after}; after is "" without one.
inline std::pair<std::string, std::string> SplitOnce(const std::string& text, char sep) {
  const size_t at = text.find(sep);
  if (at == std::string::npos) return {text, std::string()};
  return {text.substr(0, at), text.substr(at + 1)};
}

// Folds a value into a global the optimiser must keep.
inline void Consume(size_t v) {
  static volatile size_t sink = 0;
  sink = sink + v;
}

}  // namespace treespec::fuzz
