// libFuzzer target: a safetensors file (8-byte length, JSON header, data) read
// by SafetensorsFile::Parse, the parser behind SafetensorsFile::Open. Every
// tensor it accepts must lie inside the input.
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <vector>

#include "core/model/safetensors.h"
#include "tests/fuzz/fuzz_input.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto owner = std::make_shared<std::vector<uint8_t>>(data, data + size);
  auto file = treespec::SafetensorsFile::Parse(owner, owner->data(), owner->size(),
                                               "model.safetensors");
  if (!file.ok()) return 0;
  const uint8_t* begin = owner->data();
  const uint8_t* end = begin + owner->size();
  for (const auto& [name, info] : file->tensors()) {
    if (info.nbytes > 0 && (info.data < begin || info.data + info.nbytes > end)) std::abort();
    // Touch the first and last byte: ASan reports any view outside the buffer.
    if (info.nbytes > 0) treespec::fuzz::Consume(info.data[0] + info.data[info.nbytes - 1]);
  }
  return 0;
}
