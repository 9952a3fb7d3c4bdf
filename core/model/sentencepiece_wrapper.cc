// No abseil or gRPC headers in this file: see sentencepiece_wrapper.h.
#include "core/model/sentencepiece_wrapper.h"

#include <sentencepiece_processor.h>

#include <cstdint>
#include <string_view>

namespace treespec::sp_internal {
namespace {

// Minimal protobuf wire-format reader, enough to pull two booleans out of
// ModelProto.normalizer_spec (field 3) and see whether denormalizer_spec
// (field 5) carries rules; the library does not expose them.
class WireReader {
 public:
  explicit WireReader(std::string_view data) : data_(data) {}
  bool done() const { return pos_ >= data_.size(); }
  bool Varint(uint64_t* v) {
    *v = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      if (pos_ >= data_.size()) return false;
      const uint8_t b = static_cast<uint8_t>(data_[pos_++]);
      *v |= static_cast<uint64_t>(b & 0x7F) << shift;
      if ((b & 0x80) == 0) return true;
    }
    return false;
  }
  // Reads one field; *bytes is set for length-delimited fields.
  bool Field(uint32_t* number, uint64_t* value, std::string_view* bytes) {
    uint64_t key;
    if (!Varint(&key)) return false;
    *number = static_cast<uint32_t>(key >> 3);
    *bytes = {};
    switch (key & 7) {
      case 0:
        return Varint(value);
      case 1:
        return Skip(8);
      case 5:
        return Skip(4);
      case 2: {
        uint64_t len;
        if (!Varint(&len) || len > data_.size() - pos_) return false;
        *bytes = data_.substr(pos_, len);
        pos_ += len;
        return true;
      }
      default:
        return false;
    }
  }

 private:
  bool Skip(size_t n) {
    if (n > data_.size() - pos_) return false;
    pos_ += n;
    return true;
  }
  std::string_view data_;
  size_t pos_ = 0;
};

NormalizerInfo ReadNormalizerInfo(std::string_view model) {
  NormalizerInfo info;
  WireReader r(model);
  uint32_t number;
  uint64_t value;
  std::string_view bytes;
  while (!r.done() && r.Field(&number, &value, &bytes)) {
    if (number == 3) {
      WireReader n(bytes);
      while (!n.done() && n.Field(&number, &value, &bytes)) {
        if (number == 3) info.add_dummy_prefix = value != 0;
        if (number == 4) info.remove_extra_whitespaces = value != 0;
      }
    } else if (number == 5) {
      WireReader n(bytes);
      while (!n.done() && n.Field(&number, &value, &bytes)) {
        if (number == 2 && !bytes.empty()) info.has_denormalizer = true;
      }
    }
  }
  return info;
}

}  // namespace

SentencePieceModel::~SentencePieceModel() = default;

std::unique_ptr<SentencePieceModel> SentencePieceModel::Load(const std::string& serialized,
                                                             std::string* error) {
  std::unique_ptr<SentencePieceModel> m(new SentencePieceModel());
  m->proc_ = std::make_unique<sentencepiece::SentencePieceProcessor>();
  const auto status = m->proc_->LoadFromSerializedProto(serialized);
  if (!status.ok()) {
    *error = status.ToString();
    return nullptr;
  }
  if (m->proc_->GetPieceSize() <= 0) {
    *error = "the model has no pieces";
    return nullptr;
  }
  m->normalizer_ = ReadNormalizerInfo(serialized);
  return m;
}

bool SentencePieceModel::Encode(const std::string& text, std::vector<int>* ids,
                                std::string* error) const {
  const auto status = proc_->Encode(text, ids);
  if (!status.ok()) *error = status.ToString();
  return status.ok();
}

bool SentencePieceModel::Decode(const std::vector<int>& ids, std::string* text,
                                std::string* error) const {
  const auto status = proc_->Decode(ids, text);
  if (!status.ok()) *error = status.ToString();
  return status.ok();
}

int SentencePieceModel::vocab_size() const { return proc_->GetPieceSize(); }
std::string SentencePieceModel::IdToPiece(int id) const { return proc_->IdToPiece(id); }
bool SentencePieceModel::IsControl(int id) const { return proc_->IsControl(id); }
bool SentencePieceModel::IsUnknown(int id) const { return proc_->IsUnknown(id); }
bool SentencePieceModel::IsByte(int id) const { return proc_->IsByte(id); }
int SentencePieceModel::bos_id() const { return proc_->bos_id(); }
int SentencePieceModel::eos_id() const { return proc_->eos_id(); }
int SentencePieceModel::unk_id() const { return proc_->unk_id(); }

int SentencePieceModel::PieceToId(const std::string& piece) const {
  const int id = proc_->PieceToId(piece);
  if (proc_->IsUnknown(id) && proc_->IdToPiece(id) != piece) return -1;
  return id;
}

}  // namespace treespec::sp_internal
