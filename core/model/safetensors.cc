#include "core/model/safetensors.h"

#include <algorithm>
#include <cstring>
#include <tuple>

#include "absl/strings/str_cat.h"
#include "core/util/json_fields.h"
#include "core/util/status_macros.h"

namespace treespec {

absl::StatusOr<DType> ParseSafetensorsDType(const std::string& s) {
  if (s == "F32") return DType::kF32;
  if (s == "F16") return DType::kF16;
  if (s == "BF16") return DType::kBF16;
  if (s == "I32") return DType::kI32;
  if (s == "I64") return DType::kI64;
  if (s == "U8") return DType::kU8;
  return absl::InvalidArgumentError(absl::StrCat("unsupported dtype '", s, "'"));
}

absl::StatusOr<SafetensorsFile> SafetensorsFile::Open(const std::string& path) {
  TS_ASSIGN_OR_RETURN(std::shared_ptr<MappedFile> file, MappedFile::Open(path));
  const uint8_t* data = file->data();
  const size_t size = file->size();
  return Parse(std::move(file), data, size, path);
}

absl::StatusOr<SafetensorsFile> SafetensorsFile::Parse(std::shared_ptr<const void> owner,
                                                       const uint8_t* bytes, size_t size,
                                                       const std::string& path) {
  if (size < 8) {
    return absl::DataLossError(absl::StrCat(path, ": truncated (", size, " bytes, no header)"));
  }
  uint64_t header_len;
  std::memcpy(&header_len, bytes, 8);
  if (header_len > kMaxSafetensorsHeader) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": JSON header of ", header_len,
                                                   " bytes exceeds the limit of ",
                                                   kMaxSafetensorsHeader));
  }
  if (header_len > size - 8) {
    return absl::DataLossError(absl::StrCat(path, ": truncated header (needs ", header_len,
                                            " bytes, file has ", size - 8, ")"));
  }
  std::string header(reinterpret_cast<const char*>(bytes + 8), header_len);
  nlohmann::json j = nlohmann::json::parse(header, nullptr, false);
  if (j.is_discarded() || !j.is_object()) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": corrupt JSON header"));
  }
  const uint8_t* data_start = bytes + 8 + header_len;
  const size_t data_size = size - 8 - header_len;
  SafetensorsFile out;
  out.path_ = path;
  std::vector<std::tuple<size_t, size_t, std::string>> ranges;
  for (auto it = j.begin(); it != j.end(); ++it) {
    const std::string& name = it.key();
    if (name == "__metadata__") continue;
    const auto& v = it.value();
    auto err = [&](const std::string& what) {
      return absl::InvalidArgumentError(absl::StrCat(path, ": tensor '", name, "': ", what));
    };
    if (!v.is_object() || !v.contains("dtype") || !v["dtype"].is_string() ||
        !v.contains("shape") || !v["shape"].is_array() || !v.contains("data_offsets") ||
        !v["data_offsets"].is_array() || v["data_offsets"].size() != 2) {
      return err("entry needs dtype, shape and data_offsets");
    }
    TensorInfo info;
    info.name = name;
    info.file = path;
    info.mapping = owner;
    auto dtype = ParseSafetensorsDType(v["dtype"].get<std::string>());
    if (!dtype.ok()) return err(std::string(dtype.status().message()));
    info.dtype = *dtype;
    uint64_t numel = 1;
    for (const auto& d : v["shape"]) {
      if (!d.is_number_unsigned()) return err("shape must hold non-negative integers");
      uint64_t dim = d.get<uint64_t>();
      if (dim > (1ull << 40) || (dim != 0 && numel > (1ull << 40) / dim)) return err("shape too large");
      numel *= dim;
      info.shape.push_back(static_cast<int64_t>(dim));
    }
    const auto& off = v["data_offsets"];
    if (!off[0].is_number_unsigned() || !off[1].is_number_unsigned()) {
      return err("data_offsets must be non-negative integers");
    }
    uint64_t b = off[0].get<uint64_t>(), e = off[1].get<uint64_t>();
    if (b > e) return err(absl::StrCat("data_offsets [", b, ", ", e, "] are reversed"));
    if (e > data_size) {
      return absl::DataLossError(absl::StrCat(path, ": tensor '", name, "': data [", b, ", ", e,
                                              ") runs past the end of the file (", data_size,
                                              " data bytes): truncated"));
    }
    if (e - b != numel * DTypeSize(info.dtype)) {
      return err(absl::StrCat("data_offsets span ", e - b, " bytes but shape ",
                              ShapeString(info.shape), " of ", v["dtype"].get<std::string>(),
                              " needs ", numel * DTypeSize(info.dtype)));
    }
    info.data = data_start + b;
    info.nbytes = e - b;
    ranges.emplace_back(b, e, name);
    out.tensors_[name] = std::move(info);
  }
  std::sort(ranges.begin(), ranges.end());
  for (size_t i = 1; i < ranges.size(); ++i) {
    const auto& [b0, e0, n0] = ranges[i - 1];
    const auto& [b1, e1, n1] = ranges[i];
    if (b1 < e0) {
      return absl::InvalidArgumentError(absl::StrCat(path, ": data of tensors '", n0, "' [", b0,
                                                     ", ", e0, ") and '", n1, "' [", b1, ", ", e1,
                                                     ") overlap"));
    }
  }
  return out;
}

absl::StatusOr<std::unique_ptr<Checkpoint>> Checkpoint::Open(const std::string& model_dir) {
  auto ckpt = std::unique_ptr<Checkpoint>(new Checkpoint());
  ckpt->dir_ = model_dir;
  const std::string single = model_dir + "/model.safetensors";
  const std::string index = model_dir + "/model.safetensors.index.json";
  std::vector<std::string> shards;
  std::map<std::string, std::string> weight_map;
  if (FileExists(index)) {
    TS_ASSIGN_OR_RETURN(std::string text, ReadFileToString(index));
    TS_ASSIGN_OR_RETURN(nlohmann::json j, ParseJson(text, index));
    if (!j.is_object() || !j.contains("weight_map") || !j["weight_map"].is_object()) {
      return absl::InvalidArgumentError(absl::StrCat(index, ": field 'weight_map' is missing"));
    }
    for (auto it = j["weight_map"].begin(); it != j["weight_map"].end(); ++it) {
      if (!it.value().is_string()) {
        return absl::InvalidArgumentError(
            absl::StrCat(index, ": weight_map entry '", it.key(), "' must be a file name"));
      }
      std::string shard = it.value().get<std::string>();
      if (shard.find('/') != std::string::npos) {
        return absl::InvalidArgumentError(
            absl::StrCat(index, ": weight_map entry '", it.key(), "' names '", shard,
                         "', which is outside the model directory"));
      }
      weight_map[it.key()] = shard;
      if (std::find(shards.begin(), shards.end(), shard) == shards.end()) shards.push_back(shard);
    }
  } else if (FileExists(single)) {
    shards.push_back("model.safetensors");
  } else {
    return absl::NotFoundError(absl::StrCat(model_dir,
                                            ": neither model.safetensors nor "
                                            "model.safetensors.index.json exists"));
  }
  for (const std::string& shard : shards) {
    if (!weight_map.empty() && !FileExists(model_dir + "/" + shard)) {
      std::string example;
      for (const auto& [name, file] : weight_map) {
        if (file == shard) {
          example = name;
          break;
        }
      }
      return absl::NotFoundError(absl::StrCat(index, ": shard '", shard, "' (holding tensor '",
                                              example, "') does not exist in ", model_dir));
    }
    TS_ASSIGN_OR_RETURN(SafetensorsFile f, SafetensorsFile::Open(model_dir + "/" + shard));
    for (const auto& [name, info] : f.tensors()) {
      if (!weight_map.empty()) {
        auto it = weight_map.find(name);
        if (it == weight_map.end() || it->second != shard) {
          return absl::InvalidArgumentError(absl::StrCat(
              f.path(), ": tensor '", name, "' is not listed for this shard in ", index));
        }
      }
      if (ckpt->tensors_.count(name)) {
        return absl::InvalidArgumentError(
            absl::StrCat(f.path(), ": tensor '", name, "' appears in more than one shard"));
      }
      ckpt->tensors_[name] = info;
    }
  }
  for (const auto& [name, shard] : weight_map) {
    if (!ckpt->tensors_.count(name)) {
      return absl::NotFoundError(absl::StrCat(model_dir, "/", shard, ": tensor '", name,
                                              "' listed in the index is missing"));
    }
  }
  return ckpt;
}

std::unique_ptr<Checkpoint> Checkpoint::FromTensors(std::string origin,
                                                   std::map<std::string, TensorInfo> tensors) {
  auto ckpt = std::make_unique<Checkpoint>();
  ckpt->dir_ = std::move(origin);
  ckpt->tensors_ = std::move(tensors);
  return ckpt;
}

absl::StatusOr<const TensorInfo*> Checkpoint::Find(const std::string& name,
                                                   const Shape& expected) {
  auto it = tensors_.find(name);
  if (it == tensors_.end()) {
    return absl::NotFoundError(absl::StrCat(dir_, ": tensor '", name, "' is missing"));
  }
  if (it->second.shape != expected) {
    return absl::InvalidArgumentError(absl::StrCat(it->second.file, ": tensor '", name,
                                                   "' has shape ", ShapeString(it->second.shape),
                                                   ", expected ", ShapeString(expected)));
  }
  if (it->second.dtype != DType::kF32 && it->second.dtype != DType::kF16 &&
      it->second.dtype != DType::kBF16 && !IsQuantized(it->second.dtype)) {
    return absl::InvalidArgumentError(absl::StrCat(it->second.file, ": tensor '", name,
                                                   "' has dtype ", DTypeName(it->second.dtype),
                                                   "; weights must be F32, F16 or BF16"));
  }
  used_.insert(name);
  return &it->second;
}

absl::StatusOr<HostSlice> Checkpoint::Slice(const std::string& name, const Shape& expected,
                                            int64_t r0, int64_t r1, int64_t c0, int64_t c1) {
  TS_ASSIGN_OR_RETURN(const TensorInfo* info, Find(name, expected));
  HostSlice out;
  out.dtype = info->dtype;
  out.mapping = info->mapping;
  const size_t es = DTypeSize(info->dtype);
  const int64_t rows = info->shape.empty() ? 1 : info->shape[0];
  TS_CHECK(0 <= r0 && r0 <= r1 && r1 <= rows);
  if (info->shape.size() <= 1) {
    out.shape = {r1 - r0};
    out.data = info->data + DTypeBytes(info->dtype, r0);
    return out;
  }
  int64_t cols = 1;
  for (size_t i = 1; i < info->shape.size(); ++i) cols *= info->shape[i];
  if (info->shape.size() > 2) {
    TS_CHECK(c0 == 0 && c1 == info->shape[1]);
    out.shape = info->shape;
    out.shape[0] = r1 - r0;
    out.data = info->data + DTypeBytes(info->dtype, r0 * cols);
    return out;
  }
  TS_CHECK(0 <= c0 && c0 <= c1 && c1 <= cols);
  out.shape = {r1 - r0, c1 - c0};
  if (c0 == 0 && c1 == cols) {
    out.data = info->data + DTypeBytes(info->dtype, r0 * cols);
    return out;
  }
  if (IsQuantized(info->dtype)) {
    return absl::InvalidArgumentError(absl::StrCat(
        info->file, ": tensor '", name, "' is ", DTypeName(info->dtype),
        "; quantised tensors can be split by rows only, not columns [", c0, ", ", c1, ")"));
  }
  out.owned.resize((r1 - r0) * (c1 - c0) * es);
  for (int64_t r = r0; r < r1; ++r) {
    std::memcpy(out.owned.data() + (r - r0) * (c1 - c0) * es, info->data + (r * cols + c0) * es,
                (c1 - c0) * es);
  }
  out.data = out.owned.data();
  return out;
}

absl::Status Checkpoint::CheckAllUsed() const {
  for (const auto& [name, info] : tensors_) {
    if (!used_.count(name)) {
      return absl::InvalidArgumentError(
          absl::StrCat(info.file, ": unexpected tensor '", name, "' (not used by the model)"));
    }
  }
  return absl::OkStatus();
}

}  // namespace treespec
