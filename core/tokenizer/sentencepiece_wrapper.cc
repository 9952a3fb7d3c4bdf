// No abseil or gRPC headers in this file: see sentencepiece_wrapper.h.
#include "core/tokenizer/sentencepiece_wrapper.h"

#include <dlfcn.h>
#include <unistd.h>

#include <cstdlib>
#include <mutex>

#include "core/tokenizer/spm_plugin/spm_plugin.h"

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

// Opens the plugin so that libprotobuf cannot interpose the protobuf-lite
// bundled in libsentencepiece (spm_plugin.h): with RTLD_DEEPBIND, except in
// the sanitizer builds (TREESPEC_SANITIZER_BUILD, cmake/sanitize.cmake).
//
// ASan and TSan abort a dlopen with RTLD_DEEPBIND
// (github.com/google/sanitizers/issues/611), and rightly: a deep-bound
// library binds malloc, operator new and pthread_* to libc's and libstdc++'s
// own, not to the sanitizer's, while libstdc++'s out-of-line code (already
// bound) uses the sanitizer's, so one object can be allocated by one heap and
// freed by the other. So there the plugin links a copy of libsentencepiece
// whose DT_FLAGS carry DF_SYMBOLIC (tools/sanitizers/symbolic_copy.py, put
// next to the plugin, found through its $ORIGIN run path): the dynamic linker
// then resolves every reference libsentencepiece makes to a symbol it defines
// itself, its protobuf-lite included, within itself first, which is the part
// of DEEPBIND the plugin needs, while everything else (malloc, operator new,
// pthread_*) resolves through the global scope to the sanitizer, as it must.
// tests/unit/sentencepiece_plugin_test.cc loads a SentencePiece model in a
// process that links libprotobuf, in both builds.
void* OpenPlugin(const char* path) {
#ifdef TREESPEC_SANITIZER_BUILD
  return dlopen(path, RTLD_NOW | RTLD_LOCAL);
#else
  return dlopen(path, RTLD_NOW | RTLD_LOCAL | RTLD_DEEPBIND);
#endif
}

// Finds and opens the plugin once per process. Search order: $TREESPEC_SPM_PLUGIN,
// <dir of the executable>/../lib, <dir of the executable>, the loader's path.
const TsSpmApi* Api(std::string* error) {
  static const TsSpmApi* api = nullptr;
  static std::string load_error;
  static std::once_flag once;
  std::call_once(once, [] {
    std::vector<std::string> candidates;
    if (const char* env = std::getenv("TREESPEC_SPM_PLUGIN")) candidates.push_back(env);
    char exe[4096];
    const ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
    if (n > 0) {
      exe[n] = '\0';
      std::string dir(exe);
      dir = dir.substr(0, dir.find_last_of('/'));
      candidates.push_back(dir + "/../lib/libtreespec_spm.so");
      candidates.push_back(dir + "/libtreespec_spm.so");
    }
    candidates.push_back("libtreespec_spm.so");
    for (const std::string& path : candidates) {
      void* lib = OpenPlugin(path.c_str());
      if (lib == nullptr) {
        load_error += std::string(load_error.empty() ? "" : "; ") + dlerror();
        continue;
      }
      using Entry = const TsSpmApi* (*)();
      auto entry = reinterpret_cast<Entry>(dlsym(lib, "treespec_spm_api"));
      if (entry != nullptr && entry()->version == TS_SPM_API_VERSION) {
        api = entry();
        return;
      }
      load_error += "; " + path + ": not a treespec SentencePiece plugin of this version";
    }
  });
  if (api == nullptr) *error = "cannot load the SentencePiece plugin libtreespec_spm.so: " + load_error;
  return api;
}

}  // namespace

SentencePieceModel::~SentencePieceModel() {
  if (handle_ != nullptr) api_->free_model(handle_);
}

std::unique_ptr<SentencePieceModel> SentencePieceModel::Load(const std::string& serialized,
                                                             std::string* error) {
  const TsSpmApi* api = Api(error);
  if (api == nullptr) return nullptr;
  char err[1024] = {0};
  void* handle = api->load(serialized.data(), serialized.size(), err, sizeof(err));
  if (handle == nullptr) {
    *error = err;
    return nullptr;
  }
  std::unique_ptr<SentencePieceModel> m(new SentencePieceModel());
  m->api_ = api;
  m->handle_ = handle;
  if (api->vocab_size(handle) <= 0) {
    *error = "the model has no pieces";
    return nullptr;
  }
  m->normalizer_ = ReadNormalizerInfo(serialized);
  return m;
}

bool SentencePieceModel::Encode(const std::string& text, std::vector<int>* ids,
                                std::string* error) const {
  char err[1024] = {0};
  int* buf = nullptr;
  size_t n = 0;
  if (!api_->encode(handle_, text.data(), text.size(), &buf, &n, err, sizeof(err))) {
    *error = err;
    return false;
  }
  ids->assign(buf, buf + n);
  api_->free_buffer(buf);
  return true;
}

bool SentencePieceModel::Decode(const std::vector<int>& ids, std::string* text,
                                std::string* error) const {
  char err[1024] = {0};
  char* buf = nullptr;
  size_t n = 0;
  if (!api_->decode(handle_, ids.data(), ids.size(), &buf, &n, err, sizeof(err))) {
    *error = err;
    return false;
  }
  text->assign(buf, n);
  api_->free_buffer(buf);
  return true;
}

int SentencePieceModel::vocab_size() const { return api_->vocab_size(handle_); }

std::string SentencePieceModel::IdToPiece(int id) const {
  char buf[256];
  const size_t n = api_->id_to_piece(handle_, id, buf, sizeof(buf));
  if (n <= sizeof(buf)) return std::string(buf, n);
  std::string big(n, '\0');
  api_->id_to_piece(handle_, id, big.data(), big.size());
  return big;
}

bool SentencePieceModel::IsControl(int id) const { return api_->is_control(handle_, id) != 0; }
bool SentencePieceModel::IsUnknown(int id) const { return api_->is_unknown(handle_, id) != 0; }
bool SentencePieceModel::IsByte(int id) const { return api_->is_byte(handle_, id) != 0; }
int SentencePieceModel::bos_id() const { return api_->bos_id(handle_); }
int SentencePieceModel::eos_id() const { return api_->eos_id(handle_); }
int SentencePieceModel::unk_id() const { return api_->unk_id(handle_); }

int SentencePieceModel::PieceToId(const std::string& piece) const {
  const int id = api_->piece_to_id(handle_, piece.data(), piece.size());
  if (IsUnknown(id) && IdToPiece(id) != piece) return -1;
  return id;
}

}  // namespace treespec::sp_internal
