#include "core/util/npy.h"

#include <cstring>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/numbers.h"
#include "absl/strings/strip.h"
#include "core/util/mapped_file.h"

namespace treespec {

int64_t NpyArray::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

namespace {

// Finds `'key': value` in the header dict and returns the raw value text.
std::string HeaderValue(const std::string& header, const std::string& key) {
  std::string needle = "'" + key + "':";
  size_t p = header.find(needle);
  if (p == std::string::npos) return "";
  p += needle.size();
  while (p < header.size() && header[p] == ' ') ++p;
  if (p < header.size() && header[p] == '(') {
    size_t e = header.find(')', p);
    return e == std::string::npos ? "" : header.substr(p, e - p + 1);
  }
  size_t e = header.find_first_of(",}", p);
  return header.substr(p, e == std::string::npos ? std::string::npos : e - p);
}

}  // namespace

absl::StatusOr<NpyArray> ReadNpy(const std::string& path) {
  auto file_or = ReadFileToString(path);
  if (!file_or.ok()) return file_or.status();
  const std::string& buf = *file_or;
  if (buf.size() < 10 || std::memcmp(buf.data(), "\x93NUMPY", 6) != 0) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": not a .npy file"));
  }
  int major = static_cast<uint8_t>(buf[6]);
  size_t header_len = 0, header_start = 0;
  if (major == 1) {
    header_len = static_cast<uint8_t>(buf[8]) | (static_cast<uint8_t>(buf[9]) << 8);
    header_start = 10;
  } else {
    if (buf.size() < 12) return absl::InvalidArgumentError(absl::StrCat(path, ": truncated"));
    uint32_t v;
    std::memcpy(&v, buf.data() + 8, 4);
    header_len = v;
    header_start = 12;
  }
  if (header_start + header_len > buf.size()) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": truncated header"));
  }
  std::string header = buf.substr(header_start, header_len);
  NpyArray arr;
  std::string descr = HeaderValue(header, "descr");
  arr.dtype = std::string(absl::StripSuffix(absl::StripPrefix(descr, "'"), "'"));
  if (HeaderValue(header, "fortran_order").find("False") == std::string::npos) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": fortran_order arrays unsupported"));
  }
  std::string shape = HeaderValue(header, "shape");
  shape = std::string(absl::StripSuffix(absl::StripPrefix(shape, "("), ")"));
  for (absl::string_view part : absl::StrSplit(shape, ',', absl::SkipWhitespace())) {
    int64_t d;
    if (!absl::SimpleAtoi(absl::StripAsciiWhitespace(part), &d)) {
      return absl::InvalidArgumentError(absl::StrCat(path, ": bad shape '", shape, "'"));
    }
    arr.shape.push_back(d);
  }
  size_t data_start = header_start + header_len;
  size_t n = static_cast<size_t>(arr.numel());
  if (arr.dtype == "<f4") {
    if (data_start + 4 * n > buf.size()) return absl::InvalidArgumentError(absl::StrCat(path, ": truncated data"));
    arr.f32.resize(n);
    std::memcpy(arr.f32.data(), buf.data() + data_start, 4 * n);
  } else if (arr.dtype == "<i4") {
    if (data_start + 4 * n > buf.size()) return absl::InvalidArgumentError(absl::StrCat(path, ": truncated data"));
    arr.i32.resize(n);
    std::memcpy(arr.i32.data(), buf.data() + data_start, 4 * n);
  } else {
    return absl::InvalidArgumentError(absl::StrCat(path, ": unsupported dtype '", arr.dtype, "'"));
  }
  return arr;
}

absl::Status WriteNpyF32(const std::string& path, const float* data,
                         const std::vector<int64_t>& shape) {
  std::string dims;
  int64_t n = 1;
  for (int64_t d : shape) {
    absl::StrAppend(&dims, d, ",");
    n *= d;
  }
  if (shape.size() > 1) dims.pop_back();
  std::string header = absl::StrCat("{'descr': '<f4', 'fortran_order': False, 'shape': (", dims, "), }");
  size_t total = 10 + header.size() + 1;
  header.append((64 - total % 64) % 64, ' ');
  header.push_back('\n');
  std::ofstream out(path, std::ios::binary);
  if (!out) return absl::PermissionDeniedError(absl::StrCat(path, ": cannot open for writing"));
  out.write("\x93NUMPY\x01\x00", 8);
  uint16_t hl = static_cast<uint16_t>(header.size());
  char hb[2] = {static_cast<char>(hl & 0xff), static_cast<char>(hl >> 8)};
  out.write(hb, 2);
  out.write(header.data(), header.size());
  out.write(reinterpret_cast<const char*>(data), 4 * n);
  if (!out) return absl::DataLossError(absl::StrCat(path, ": write failed"));
  return absl::OkStatus();
}

}  // namespace treespec
