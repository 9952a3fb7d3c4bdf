// C ABI between treespec and its SentencePiece plugin (libtreespec_spm.so).
//
// libsentencepiece bundles its own copy of protobuf-lite and exports it; in a
// process that also loads libprotobuf (every gRPC binary) the two copies
// interpose each other and static initialisation crashes. So libsentencepiece
// is never linked into treespec binaries: the plugin links it and is opened
// with dlopen(RTLD_LOCAL | RTLD_DEEPBIND), which keeps its symbols private and
// makes it resolve to its own copies. Only plain C types cross this boundary.
#pragma once

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct TsSpmApi {
  int version;  // kTsSpmApiVersion
  // Parses a serialized ModelProto. Returns a handle or NULL with a message in err.
  void* (*load)(const char* data, size_t size, char* err, size_t err_size);
  void (*free_model)(void* model);
  // Encodes UTF-8 text. *ids is malloc'ed (caller frees with free_buffer).
  int (*encode)(void* model, const char* text, size_t len, int** ids, size_t* num_ids, char* err,
                size_t err_size);
  // Decodes ids. *text is malloc'ed (caller frees with free_buffer).
  int (*decode)(void* model, const int* ids, size_t num_ids, char** text, size_t* len, char* err,
                size_t err_size);
  void (*free_buffer)(void* buffer);
  int (*vocab_size)(void* model);
  // Copies piece `id` into buf (truncated to buf_size); returns its full length.
  size_t (*id_to_piece)(void* model, int id, char* buf, size_t buf_size);
  int (*piece_to_id)(void* model, const char* piece, size_t len);
  int (*is_control)(void* model, int id);
  int (*is_unknown)(void* model, int id);
  int (*is_byte)(void* model, int id);
  int (*bos_id)(void* model);
  int (*eos_id)(void* model);
  int (*unk_id)(void* model);
} TsSpmApi;

#define TS_SPM_API_VERSION 1

// The one exported entry point.
const TsSpmApi* treespec_spm_api(void);

#ifdef __cplusplus
}
#endif
