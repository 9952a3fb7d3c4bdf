// Bearer-token authentication of the coordinator's public APIs: the gRPC
// Generation service (`authorization: Bearer <token>` metadata) and the
// OpenAI HTTP API (`Authorization: Bearer <token>` header) share one
// BearerAuth, built from --auth_token_file.
//
// Token file: one token per line; blank lines and lines starting with '#' are
// ignored, surrounding whitespace is trimmed. Several tokens may be valid at
// once, so that a rotation can overlap: add the new token, move the clients,
// remove the old one.
//
// Reload: there is no background thread. A check that arrives at least
// `reload_interval` (1 s) after the last look stat()s the file and re-reads it
// when its modification time, size or inode changed (an editor's rename or a
// Kubernetes Secret's symlink swap gives a new inode). A reload that fails (the
// file is gone, unreadable or holds no token) keeps the previous tokens and
// logs the reason on stderr once per failed attempt.
//
// Comparison: every accepted token is compared with the presented one over
// their whole length, with no early exit on the first differing byte nor on
// the first matching token, so the time taken does not tell how much of a
// guess was right. Messages never contain a token.
//
// Why not a gRPC interceptor or an AuthMetadataProcessor: gRPC 1.51's
// experimental server interceptors cannot end a call with a status before the
// handler runs, and an AuthMetadataProcessor only runs on TLS ports (the
// insecure credentials abort on it). So the Generation service calls
// CheckGrpc first thing in each method (coordinator/generation_service.cc).
//
// Thread-safe.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "grpcpp/grpcpp.h"

namespace treespec {

// The tokens in a token file's `text`; INVALID_ARGUMENT naming `path` and the
// line for a token with whitespace or control characters inside, and when
// there is no token at all.
absl::StatusOr<std::vector<std::string>> ParseTokenFile(absl::string_view text,
                                                        const std::string& path);

// ParseTokenFile of the file at `path` (NOT_FOUND etc. naming it).
absl::StatusOr<std::vector<std::string>> ReadTokenFile(const std::string& path);

// a == b, taking time that depends on the lengths only.
bool ConstantTimeEquals(absl::string_view a, absl::string_view b);

// Whether `presented` equals one of `tokens`; compares with every one of them.
bool MatchesAnyToken(const std::vector<std::string>& tokens, absl::string_view presented);

// The token of an `Authorization` value "Bearer <token>" (scheme
// case-insensitive, RFC 6750); empty if the value is not of that form.
absl::string_view BearerTokenOf(absl::string_view authorization);

// "Bearer <first token of the file at path>", the value a client sends;
// errors name `flag` and the path.
absl::StatusOr<std::string> ClientAuthorization(const std::string& flag, const std::string& path);

struct BearerAuthOptions {
  std::string token_file;  // --auth_token_file
  absl::Duration reload_interval = absl::Seconds(1);
  absl::Status Validate() const;
};

class BearerAuth {
 public:
  // Reads the file; an error (naming --auth_token_file and the path) when it
  // cannot be read or holds no token.
  static absl::StatusOr<std::unique_ptr<BearerAuth>> Create(BearerAuthOptions options);

  // OK, or UNAUTHENTICATED "missing bearer token" / "invalid bearer token"
  // for the value of an Authorization header (empty: none was sent).
  absl::Status Check(absl::string_view authorization);
  // Check of the call's `authorization` metadata, as a grpc::Status.
  grpc::Status CheckGrpc(const grpc::ServerContext& ctx);

  // Successful reloads since Create (for tests and logs).
  int64_t num_reloads() const;

 private:
  struct FileStamp {
    int64_t mtime_ns = -1;
    int64_t size = -1;
    uint64_t inode = 0;
    bool operator==(const FileStamp& o) const {
      return mtime_ns == o.mtime_ns && size == o.size && inode == o.inode;
    }
  };
  explicit BearerAuth(BearerAuthOptions options) : options_(std::move(options)) {}
  static absl::StatusOr<FileStamp> Stat(const std::string& path);
  // Re-reads the file if it is time to look and it changed.
  void MaybeReload();

  const BearerAuthOptions options_;
  mutable absl::Mutex mu_;
  std::shared_ptr<const std::vector<std::string>> tokens_ ABSL_GUARDED_BY(mu_);
  FileStamp stamp_ ABSL_GUARDED_BY(mu_);
  absl::Time next_look_ ABSL_GUARDED_BY(mu_);
  int64_t num_reloads_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace treespec
