#include "core/util/gguf.h"

#include <algorithm>
#include <cstring>
#include <limits>

#include "absl/strings/str_cat.h"
#include "core/util/status_macros.h"

namespace treespec {
namespace {

constexpr uint32_t kMaxDims = 4;  // GGML_MAX_DIMS

// A cursor over the file image. Every read checks the remaining length first.
class Reader {
 public:
  Reader(const uint8_t* data, size_t size, const std::string& path)
      : data_(data), size_(size), path_(path) {}

  size_t pos() const { return pos_; }
  size_t remaining() const { return size_ - pos_; }

  absl::Status Truncated(const std::string& what, uint64_t need) const {
    return absl::DataLossError(absl::StrCat(path_, ": truncated at offset ", pos_, " reading ",
                                            what, " (needs ", need, " bytes, ", remaining(),
                                            " left)"));
  }
  absl::Status Invalid(size_t at, const std::string& what) const {
    return absl::InvalidArgumentError(absl::StrCat(path_, ": offset ", at, ": ", what));
  }

  template <typename T>
  absl::StatusOr<T> Read(const std::string& what) {
    if (remaining() < sizeof(T)) return Truncated(what, sizeof(T));
    T v;
    std::memcpy(&v, data_ + pos_, sizeof(T));
    pos_ += sizeof(T);
    return v;
  }

  absl::StatusOr<std::string> ReadString(const std::string& what) {
    const size_t at = pos_;
    TS_ASSIGN_OR_RETURN(uint64_t len, Read<uint64_t>(absl::StrCat(what, " length")));
    if (len > remaining()) {
      pos_ = at;
      return absl::DataLossError(absl::StrCat(path_, ": offset ", at, ": ", what, " length ", len,
                                              " exceeds the ", remaining() - 8,
                                              " bytes left in the file"));
    }
    std::string s(reinterpret_cast<const char*>(data_ + pos_), len);
    pos_ += len;
    return s;
  }

 private:
  const uint8_t* data_;
  size_t size_;
  size_t pos_ = 0;
  const std::string& path_;
};

size_t ScalarSize(GgufValueType t) {
  switch (t) {
    case GgufValueType::kUint8:
    case GgufValueType::kInt8:
    case GgufValueType::kBool:
      return 1;
    case GgufValueType::kUint16:
    case GgufValueType::kInt16:
      return 2;
    case GgufValueType::kUint32:
    case GgufValueType::kInt32:
    case GgufValueType::kFloat32:
      return 4;
    case GgufValueType::kUint64:
    case GgufValueType::kInt64:
    case GgufValueType::kFloat64:
      return 8;
    case GgufValueType::kString:
      return 8;  // at least the length
    case GgufValueType::kArray:
      return 12;
  }
  return 0;
}

template <typename T>
absl::Status ReadInt(Reader* r, const std::string& what, int64_t* out) {
  TS_ASSIGN_OR_RETURN(T v, r->Read<T>(what));
  *out = static_cast<int64_t>(v);
  return absl::OkStatus();
}

template <typename T>
absl::Status ReadFloat(Reader* r, const std::string& what, double* out) {
  TS_ASSIGN_OR_RETURN(T v, r->Read<T>(what));
  *out = static_cast<double>(v);
  return absl::OkStatus();
}

// Reads one scalar of type `t` as an integer, float, bool or string.
absl::Status ReadScalar(Reader* r, GgufValueType t, const std::string& what, int64_t* i, double* f,
                        bool* b, std::string* s) {
  switch (t) {
    case GgufValueType::kUint8:
      return ReadInt<uint8_t>(r, what, i);
    case GgufValueType::kInt8:
      return ReadInt<int8_t>(r, what, i);
    case GgufValueType::kUint16:
      return ReadInt<uint16_t>(r, what, i);
    case GgufValueType::kInt16:
      return ReadInt<int16_t>(r, what, i);
    case GgufValueType::kUint32:
      return ReadInt<uint32_t>(r, what, i);
    case GgufValueType::kInt32:
      return ReadInt<int32_t>(r, what, i);
    case GgufValueType::kInt64:
      return ReadInt<int64_t>(r, what, i);
    case GgufValueType::kFloat32:
      return ReadFloat<float>(r, what, f);
    case GgufValueType::kFloat64:
      return ReadFloat<double>(r, what, f);
    case GgufValueType::kUint64: {
      const size_t at = r->pos();
      TS_ASSIGN_OR_RETURN(uint64_t v, r->Read<uint64_t>(what));
      if (v > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
        return r->Invalid(at, absl::StrCat(what, ": uint64 value ", v, " is out of range"));
      }
      *i = static_cast<int64_t>(v);
      return absl::OkStatus();
    }
    case GgufValueType::kBool: {
      const size_t at = r->pos();
      TS_ASSIGN_OR_RETURN(uint8_t v, r->Read<uint8_t>(what));
      if (v > 1) {
        return r->Invalid(at, absl::StrCat(what, ": bool byte is ", int{v}, ", not 0 or 1"));
      }
      *b = v != 0;
      return absl::OkStatus();
    }
    case GgufValueType::kString: {
      TS_ASSIGN_OR_RETURN(*s, r->ReadString(what));
      return absl::OkStatus();
    }
    case GgufValueType::kArray:
      break;
  }
  return absl::InternalError("ReadScalar on an array");
}

absl::StatusOr<GgufValueType> ReadType(Reader* r, const std::string& what) {
  const size_t at = r->pos();
  TS_ASSIGN_OR_RETURN(uint32_t t, r->Read<uint32_t>(what));
  if (t > static_cast<uint32_t>(GgufValueType::kFloat64)) {
    return r->Invalid(at, absl::StrCat(what, " ", t, " is not a GGUF value type (0..12)"));
  }
  return static_cast<GgufValueType>(t);
}

absl::StatusOr<GgufValue> ReadValue(Reader* r, const std::string& key) {
  GgufValue v;
  TS_ASSIGN_OR_RETURN(v.type, ReadType(r, absl::StrCat("type of '", key, "'")));
  if (v.type != GgufValueType::kArray) {
    int64_t i = 0;
    double f = 0;
    bool b = false;
    std::string s;
    TS_RETURN_IF_ERROR(ReadScalar(r, v.type, absl::StrCat("value of '", key, "'"), &i, &f, &b, &s));
    if (GgufIsIntType(v.type)) {
      v.scalar = i;
    } else if (v.type == GgufValueType::kFloat32 || v.type == GgufValueType::kFloat64) {
      v.scalar = f;
    } else if (v.type == GgufValueType::kBool) {
      v.scalar = b;
    } else {
      v.scalar = std::move(s);
    }
    return v;
  }
  const size_t at = r->pos();
  TS_ASSIGN_OR_RETURN(v.elem_type, ReadType(r, absl::StrCat("element type of '", key, "'")));
  if (v.elem_type == GgufValueType::kArray) {
    return r->Invalid(at, absl::StrCat("'", key, "': nested arrays are not supported"));
  }
  const size_t count_at = r->pos();
  TS_ASSIGN_OR_RETURN(uint64_t n, r->Read<uint64_t>(absl::StrCat("length of '", key, "'")));
  const size_t min_size = ScalarSize(v.elem_type);
  if (n > r->remaining() / min_size) {
    return absl::DataLossError(absl::StrCat(
        r->Invalid(count_at, "").message(), "array '", key, "' has ", n, " elements of ", min_size,
        "+ bytes but only ", r->remaining(), " bytes are left"));
  }
  for (uint64_t k = 0; k < n; ++k) {
    int64_t i = 0;
    double f = 0;
    bool b = false;
    std::string s;
    TS_RETURN_IF_ERROR(
        ReadScalar(r, v.elem_type, absl::StrCat("'", key, "'[", k, "]"), &i, &f, &b, &s));
    if (GgufIsIntType(v.elem_type)) {
      v.ints.push_back(i);
    } else if (v.elem_type == GgufValueType::kFloat32 || v.elem_type == GgufValueType::kFloat64) {
      v.floats.push_back(f);
    } else if (v.elem_type == GgufValueType::kBool) {
      v.bools.push_back(b);
    } else {
      v.strings.push_back(std::move(s));
    }
  }
  return v;
}

}  // namespace

const char* GgufValueTypeName(GgufValueType t) {
  static const char* kNames[] = {"uint8",  "int8",    "uint16", "int16",  "uint32",
                                 "int32",  "float32", "bool",   "string", "array",
                                 "uint64", "int64",   "float64"};
  const auto i = static_cast<uint32_t>(t);
  return i < 13 ? kNames[i] : "unknown";
}

bool GgufIsIntType(GgufValueType t) {
  switch (t) {
    case GgufValueType::kUint8:
    case GgufValueType::kInt8:
    case GgufValueType::kUint16:
    case GgufValueType::kInt16:
    case GgufValueType::kUint32:
    case GgufValueType::kInt32:
    case GgufValueType::kUint64:
    case GgufValueType::kInt64:
      return true;
    default:
      return false;
  }
}

size_t GgufValue::array_size() const {
  return ints.size() + floats.size() + strings.size() + bools.size();
}

bool GgmlTypeLayout(uint32_t type, size_t* block_bytes, int64_t* block_elems) {
  switch (static_cast<GgmlType>(type)) {
    case GgmlType::kF32:
      *block_bytes = 4;
      *block_elems = 1;
      return true;
    case GgmlType::kF16:
      *block_bytes = 2;
      *block_elems = 1;
      return true;
    case GgmlType::kBF16:
      *block_bytes = 2;
      *block_elems = 1;
      return true;
    case GgmlType::kQ4_0:
      *block_bytes = 18;
      *block_elems = 32;
      return true;
    case GgmlType::kQ4_1:
      *block_bytes = 20;
      *block_elems = 32;
      return true;
    case GgmlType::kQ5_0:
      *block_bytes = 22;
      *block_elems = 32;
      return true;
    case GgmlType::kQ5_1:
      *block_bytes = 24;
      *block_elems = 32;
      return true;
    case GgmlType::kQ8_0:
      *block_bytes = 34;
      *block_elems = 32;
      return true;
    case GgmlType::kQ4_K:
      *block_bytes = 144;
      *block_elems = 256;
      return true;
    case GgmlType::kQ5_K:
      *block_bytes = 176;
      *block_elems = 256;
      return true;
    case GgmlType::kQ6_K:
      *block_bytes = 210;
      *block_elems = 256;
      return true;
  }
  return false;
}

const char* GgmlTypeName(uint32_t type) {
  switch (type) {
    case 0:
      return "F32";
    case 1:
      return "F16";
    case 2:
      return "Q4_0";
    case 3:
      return "Q4_1";
    case 6:
      return "Q5_0";
    case 7:
      return "Q5_1";
    case 8:
      return "Q8_0";
    case 9:
      return "Q8_1";
    case 10:
      return "Q2_K";
    case 11:
      return "Q3_K";
    case 12:
      return "Q4_K";
    case 13:
      return "Q5_K";
    case 14:
      return "Q6_K";
    case 15:
      return "Q8_K";
    case 30:
      return "BF16";
    default:
      return "unknown";
  }
}

absl::StatusOr<std::shared_ptr<const GgufFile>> GgufFile::Open(const std::string& path) {
  TS_ASSIGN_OR_RETURN(std::shared_ptr<MappedFile> m, MappedFile::Open(path));
  const uint8_t* data = m->data();
  const size_t size = m->size();
  return Parse(std::move(m), data, size, path);
}

absl::StatusOr<std::shared_ptr<const GgufFile>> GgufFile::Parse(std::shared_ptr<const void> owner,
                                                                const uint8_t* data, size_t size,
                                                                const std::string& path) {
  auto f = std::shared_ptr<GgufFile>(new GgufFile());
  f->path_ = path;
  f->owner_ = std::move(owner);
  Reader r(data, size, f->path_);
  TS_ASSIGN_OR_RETURN(uint32_t magic, r.Read<uint32_t>("magic"));
  if (std::memcmp(&magic, "GGUF", 4) != 0) {
    return r.Invalid(0, "not a GGUF file (magic is not \"GGUF\")");
  }
  TS_ASSIGN_OR_RETURN(f->version_, r.Read<uint32_t>("version"));
  if (f->version_ != 2 && f->version_ != 3) {
    return r.Invalid(
        4, absl::StrCat("GGUF version ", f->version_, " is not supported (only 2 and 3)"));
  }
  TS_ASSIGN_OR_RETURN(uint64_t num_tensors, r.Read<uint64_t>("tensor_count"));
  TS_ASSIGN_OR_RETURN(uint64_t num_kv, r.Read<uint64_t>("kv_count"));
  // Each KV needs at least 8 (key length) + 4 (type) + 1 bytes; each tensor info 8+4+4+8.
  if (num_kv > r.remaining() / 13) {
    return absl::DataLossError(absl::StrCat(path, ": offset 16: kv_count ", num_kv,
                                            " cannot fit in the ", r.remaining(), " bytes left"));
  }
  if (num_tensors > r.remaining() / 24) {
    return absl::DataLossError(absl::StrCat(path, ": offset 8: tensor_count ", num_tensors,
                                            " cannot fit in the ", r.remaining(), " bytes left"));
  }
  for (uint64_t k = 0; k < num_kv; ++k) {
    const size_t at = r.pos();
    TS_ASSIGN_OR_RETURN(std::string key, r.ReadString(absl::StrCat("key of metadata entry ", k)));
    TS_ASSIGN_OR_RETURN(GgufValue v, ReadValue(&r, key));
    if (!f->kv_.emplace(key, std::move(v)).second) {
      return r.Invalid(at, absl::StrCat("duplicate metadata key '", key, "'"));
    }
  }
  if (const GgufValue* a = f->Find("general.alignment")) {
    const int64_t* v = std::get_if<int64_t>(&a->scalar);
    if (a->is_array() || v == nullptr || *v <= 0 || (*v & (*v - 1)) != 0 || *v > (1 << 20)) {
      return absl::InvalidArgumentError(absl::StrCat(
          path, ": metadata 'general.alignment' must be a power-of-two integer, got type ",
          GgufValueTypeName(a->type), v ? absl::StrCat(" value ", *v) : std::string()));
    }
    f->alignment_ = static_cast<uint64_t>(*v);
  }
  for (uint64_t k = 0; k < num_tensors; ++k) {
    const size_t at = r.pos();
    GgufTensor t;
    TS_ASSIGN_OR_RETURN(t.name, r.ReadString(absl::StrCat("name of tensor ", k)));
    TS_ASSIGN_OR_RETURN(uint32_t n_dims,
                        r.Read<uint32_t>(absl::StrCat("n_dims of '", t.name, "'")));
    if (n_dims == 0 || n_dims > kMaxDims) {
      return r.Invalid(at, absl::StrCat("tensor '", t.name, "' has n_dims ", n_dims,
                                        " (must be 1..", kMaxDims, ")"));
    }
    uint64_t numel = 1;
    for (uint32_t d = 0; d < n_dims; ++d) {
      TS_ASSIGN_OR_RETURN(uint64_t dim,
                          r.Read<uint64_t>(absl::StrCat("dim ", d, " of '", t.name, "'")));
      if (dim == 0 || dim > (1ull << 40) || __builtin_mul_overflow(numel, dim, &numel) ||
          numel > (1ull << 48)) {
        return r.Invalid(at, absl::StrCat("tensor '", t.name, "' dim ", d, " = ", dim,
                                          " is zero or makes the tensor too large"));
      }
      t.dims.push_back(static_cast<int64_t>(dim));
    }
    t.numel = static_cast<int64_t>(numel);
    t.shape.assign(t.dims.rbegin(), t.dims.rend());
    const size_t type_at = r.pos();
    TS_ASSIGN_OR_RETURN(uint32_t type, r.Read<uint32_t>(absl::StrCat("type of '", t.name, "'")));
    size_t block_bytes = 0;
    int64_t block_elems = 0;
    if (!GgmlTypeLayout(type, &block_bytes, &block_elems)) {
      return absl::UnimplementedError(absl::StrCat(
          path, ": offset ", type_at, ": tensor '", t.name, "' has ggml type ", type, " (",
          GgmlTypeName(type),
          "), which is not supported (F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K, "
          "Q5_K, Q6_K are)"));
    }
    t.type = static_cast<GgmlType>(type);
    if (t.dims[0] % block_elems != 0) {
      return r.Invalid(at, absl::StrCat("tensor '", t.name, "' row length ", t.dims[0],
                                        " is not a multiple of the ", GgmlTypeName(type),
                                        " block size ", block_elems));
    }
    t.nbytes = static_cast<size_t>(numel / block_elems) * block_bytes;
    const size_t off_at = r.pos();
    TS_ASSIGN_OR_RETURN(t.offset, r.Read<uint64_t>(absl::StrCat("offset of '", t.name, "'")));
    if (t.offset % f->alignment_ != 0) {
      return r.Invalid(off_at, absl::StrCat("tensor '", t.name, "' offset ", t.offset,
                                            " is not a multiple of the alignment ", f->alignment_));
    }
    if (!f->by_name_.emplace(t.name, f->tensors_.size()).second) {
      return r.Invalid(at, absl::StrCat("duplicate tensor name '", t.name, "'"));
    }
    f->tensors_.push_back(std::move(t));
  }
  const uint64_t pad = (f->alignment_ - r.pos() % f->alignment_) % f->alignment_;
  f->data_offset_ = r.pos() + pad;
  if (f->data_offset_ > size) {
    return absl::DataLossError(absl::StrCat(path, ": data section would start at ", f->data_offset_,
                                            ", past the end of the file (", size, " bytes)"));
  }
  const uint64_t data_size = size - f->data_offset_;
  std::vector<const GgufTensor*> order;
  for (GgufTensor& t : f->tensors_) {
    if (t.offset > data_size || t.nbytes > data_size - t.offset) {
      return absl::DataLossError(
          absl::StrCat(path, ": tensor '", t.name, "' data [", f->data_offset_ + t.offset, ", ",
                       f->data_offset_ + t.offset + t.nbytes, ") runs past the end of the file (",
                       size, " bytes)"));
    }
    t.data = data + f->data_offset_ + t.offset;
    order.push_back(&t);
  }
  std::sort(order.begin(), order.end(),
            [](const GgufTensor* a, const GgufTensor* b) { return a->offset < b->offset; });
  for (size_t i = 1; i < order.size(); ++i) {
    if (order[i - 1]->offset + order[i - 1]->nbytes > order[i]->offset) {
      return absl::InvalidArgumentError(absl::StrCat(path, ": tensors '", order[i - 1]->name,
                                                     "' and '", order[i]->name,
                                                     "' overlap in the data section"));
    }
  }
  return std::shared_ptr<const GgufFile>(std::move(f));
}

const GgufTensor* GgufFile::FindTensor(const std::string& name) const {
  auto it = by_name_.find(name);
  return it == by_name_.end() ? nullptr : &tensors_[it->second];
}

const GgufValue* GgufFile::Find(const std::string& key) const {
  auto it = kv_.find(key);
  return it == kv_.end() ? nullptr : &it->second;
}

}  // namespace treespec
