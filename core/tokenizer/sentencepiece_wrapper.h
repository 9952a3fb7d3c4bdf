// A thin wrapper over libsentencepiece's SentencePieceProcessor that exposes
// only standard types. The processor lives in a plugin library loaded with
// dlopen (core/tokenizer/spm_plugin/spm_plugin.h explains why). It exists because sentencepiece_processor.h declares
// `namespace absl { using std::string_view; }`, which clashes with Debian's
// abseil (TOOLCHAIN.md pitfall 3): this header, and sentencepiece_wrapper.cc,
// must include neither abseil nor gRPC. Immutable after Load; const methods are
// thread-safe.
#pragma once

#include <memory>
#include <string>
#include <vector>

struct TsSpmApi;

namespace treespec::sp_internal {

// NormalizerSpec fields that decoding depends on (defaults as in the proto).
struct NormalizerInfo {
  bool add_dummy_prefix = true;
  bool remove_extra_whitespaces = true;
  bool has_denormalizer = false;  // a denormalizer rewrites decoded text
};

class SentencePieceModel {
 public:
  // Parses a serialized ModelProto (the bytes of tokenizer.model); nullptr and
  // *error on failure.
  static std::unique_ptr<SentencePieceModel> Load(const std::string& serialized,
                                                  std::string* error);
  ~SentencePieceModel();

  bool Encode(const std::string& text, std::vector<int>* ids, std::string* error) const;
  // Ids must be in [0, vocab_size()).
  bool Decode(const std::vector<int>& ids, std::string* text, std::string* error) const;

  int vocab_size() const;
  std::string IdToPiece(int id) const;
  int PieceToId(const std::string& piece) const;  // -1 if not in the vocabulary
  bool IsControl(int id) const;
  bool IsUnknown(int id) const;
  bool IsByte(int id) const;
  int bos_id() const;  // -1 if none
  int eos_id() const;
  int unk_id() const;
  const NormalizerInfo& normalizer() const { return normalizer_; }

 private:
  SentencePieceModel() = default;
  const TsSpmApi* api_ = nullptr;  // the plugin (core/tokenizer/spm_plugin)
  void* handle_ = nullptr;
  NormalizerInfo normalizer_;
};

}  // namespace treespec::sp_internal
