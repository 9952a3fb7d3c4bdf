// The SentencePiece plugin: the only code that includes sentencepiece headers
// and links libsentencepiece (see spm_plugin.h for why). No abseil or gRPC here
// either (TOOLCHAIN.md pitfall 3).
#include "core/tokenizer/spm_plugin/spm_plugin.h"

#include <sentencepiece_processor.h>

#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace {

using sentencepiece::SentencePieceProcessor;

void SetError(const std::string& msg, char* err, size_t err_size) {
  if (err == nullptr || err_size == 0) return;
  std::strncpy(err, msg.c_str(), err_size - 1);
  err[err_size - 1] = '\0';
}

SentencePieceProcessor* P(void* m) { return static_cast<SentencePieceProcessor*>(m); }

void* Load(const char* data, size_t size, char* err, size_t err_size) {
  auto* p = new SentencePieceProcessor();
  const auto status = p->LoadFromSerializedProto(std::string(data, size));
  if (!status.ok()) {
    SetError(status.ToString(), err, err_size);
    delete p;
    return nullptr;
  }
  return p;
}

void FreeModel(void* m) { delete P(m); }

int Encode(void* m, const char* text, size_t len, int** ids, size_t* num_ids, char* err,
           size_t err_size) {
  std::vector<int> out;
  const auto status = P(m)->Encode(std::string(text, len), &out);
  if (!status.ok()) {
    SetError(status.ToString(), err, err_size);
    return 0;
  }
  *num_ids = out.size();
  *ids = static_cast<int*>(std::malloc(sizeof(int) * (out.empty() ? 1 : out.size())));
  if (!out.empty()) std::memcpy(*ids, out.data(), sizeof(int) * out.size());
  return 1;
}

int Decode(void* m, const int* ids, size_t num_ids, char** text, size_t* len, char* err,
           size_t err_size) {
  std::string out;
  const auto status = P(m)->Decode(std::vector<int>(ids, ids + num_ids), &out);
  if (!status.ok()) {
    SetError(status.ToString(), err, err_size);
    return 0;
  }
  *len = out.size();
  *text = static_cast<char*>(std::malloc(out.size() + 1));
  std::memcpy(*text, out.data(), out.size());
  (*text)[out.size()] = '\0';
  return 1;
}

void FreeBuffer(void* b) { std::free(b); }
int VocabSize(void* m) { return P(m)->GetPieceSize(); }

size_t IdToPiece(void* m, int id, char* buf, size_t buf_size) {
  const std::string piece = P(m)->IdToPiece(id);
  if (buf_size > 0) {
    const size_t n = piece.size() < buf_size ? piece.size() : buf_size;
    std::memcpy(buf, piece.data(), n);
  }
  return piece.size();
}

int PieceToId(void* m, const char* piece, size_t len) {
  return P(m)->PieceToId(std::string(piece, len));
}
int IsControl(void* m, int id) { return P(m)->IsControl(id) ? 1 : 0; }
int IsUnknown(void* m, int id) { return P(m)->IsUnknown(id) ? 1 : 0; }
int IsByte(void* m, int id) { return P(m)->IsByte(id) ? 1 : 0; }
int BosId(void* m) { return P(m)->bos_id(); }
int EosId(void* m) { return P(m)->eos_id(); }
int UnkId(void* m) { return P(m)->unk_id(); }

const TsSpmApi kApi = {TS_SPM_API_VERSION, Load, FreeModel, Encode, Decode, FreeBuffer,
                       VocabSize, IdToPiece, PieceToId, IsControl, IsUnknown, IsByte,
                       BosId, EosId, UnkId};

}  // namespace

extern "C" __attribute__((visibility("default"))) const TsSpmApi* treespec_spm_api(void) {
  return &kApi;
}
