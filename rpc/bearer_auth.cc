#include "rpc/bearer_auth.h"

#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <iostream>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "core/util/mapped_file.h"

namespace treespec {
namespace {

constexpr char kMissing[] = "missing bearer token: send \"authorization: Bearer <token>\"";
constexpr char kInvalid[] = "invalid bearer token";

}  // namespace

absl::StatusOr<std::vector<std::string>> ParseTokenFile(absl::string_view text,
                                                        const std::string& path) {
  std::vector<std::string> tokens;
  int line_number = 0;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    ++line_number;
    line = absl::StripAsciiWhitespace(line);
    if (line.empty() || line.front() == '#') continue;
    for (char c : line) {
      const unsigned char u = static_cast<unsigned char>(c);
      if (u <= 0x20 || u == 0x7f) {
        return absl::InvalidArgumentError(absl::StrCat(
            path, ": line ", line_number,
            ": a token may not contain whitespace or control characters"));
      }
    }
    tokens.emplace_back(line);
  }
  if (tokens.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": no token (one per line; blank and '#' lines are ignored)"));
  }
  return tokens;
}

absl::StatusOr<std::vector<std::string>> ReadTokenFile(const std::string& path) {
  absl::StatusOr<std::string> text = ReadFileToString(path);
  if (!text.ok()) return text.status();
  return ParseTokenFile(*text, path);
}

bool ConstantTimeEquals(absl::string_view a, absl::string_view b) {
  // Walks the longer length whatever the contents; bytes past the end of the
  // shorter string compare against 0 and the length difference counts too.
  const size_t n = std::max(a.size(), b.size());
  unsigned int diff = a.size() == b.size() ? 0 : 1;
  for (size_t i = 0; i < n; ++i) {
    const unsigned char x = i < a.size() ? static_cast<unsigned char>(a[i]) : 0;
    const unsigned char y = i < b.size() ? static_cast<unsigned char>(b[i]) : 0;
    diff |= x ^ y;
  }
  // Read through volatile so that the compiler cannot turn the loop into an
  // early-exit comparison.
  volatile unsigned int result = diff;
  return result == 0;
}

bool MatchesAnyToken(const std::vector<std::string>& tokens, absl::string_view presented) {
  bool matched = false;
  for (const std::string& t : tokens) matched |= ConstantTimeEquals(t, presented);
  return matched;
}

absl::string_view BearerTokenOf(absl::string_view authorization) {
  absl::string_view v = absl::StripAsciiWhitespace(authorization);
  constexpr absl::string_view kScheme = "bearer";
  if (v.size() <= kScheme.size() || !absl::StartsWithIgnoreCase(v, kScheme) ||
      (v[kScheme.size()] != ' ' && v[kScheme.size()] != '\t')) {
    return {};
  }
  return absl::StripLeadingAsciiWhitespace(v.substr(kScheme.size()));
}

absl::StatusOr<std::string> ClientAuthorization(const std::string& flag, const std::string& path) {
  absl::StatusOr<std::vector<std::string>> tokens = ReadTokenFile(path);
  if (!tokens.ok()) {
    return absl::Status(tokens.status().code(),
                        absl::StrCat(flag, ": ", tokens.status().message()));
  }
  return absl::StrCat("Bearer ", tokens->front());
}

absl::Status BearerAuthOptions::Validate() const {
  if (token_file.empty()) return absl::InvalidArgumentError("--auth_token_file: empty path");
  if (reload_interval < absl::ZeroDuration()) {
    return absl::InvalidArgumentError("auth reload_interval must be >= 0");
  }
  return absl::OkStatus();
}

absl::StatusOr<BearerAuth::FileStamp> BearerAuth::Stat(const std::string& path) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) {
    return absl::NotFoundError(absl::StrCat(path, ": ", std::strerror(errno)));
  }
  FileStamp s;
  s.mtime_ns = static_cast<int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec;
  s.size = st.st_size;
  s.inode = st.st_ino;
  return s;
}

absl::StatusOr<std::unique_ptr<BearerAuth>> BearerAuth::Create(BearerAuthOptions options) {
  if (absl::Status st = options.Validate(); !st.ok()) return st;
  auto stamp = Stat(options.token_file);
  absl::StatusOr<std::vector<std::string>> tokens =
      stamp.ok() ? ReadTokenFile(options.token_file) : stamp.status();
  if (!tokens.ok()) {
    return absl::Status(tokens.status().code(),
                        absl::StrCat("--auth_token_file: ", tokens.status().message()));
  }
  auto auth = std::unique_ptr<BearerAuth>(new BearerAuth(std::move(options)));
  absl::MutexLock lock(&auth->mu_);
  auth->tokens_ = std::make_shared<const std::vector<std::string>>(std::move(*tokens));
  auth->stamp_ = *stamp;
  auth->next_look_ = absl::Now() + auth->options_.reload_interval;
  return auth;
}

void BearerAuth::MaybeReload() {
  absl::MutexLock lock(&mu_);
  const absl::Time now = absl::Now();
  if (now < next_look_) return;
  next_look_ = now + options_.reload_interval;
  absl::StatusOr<FileStamp> stamp = Stat(options_.token_file);
  if (stamp.ok() && *stamp == stamp_) return;
  absl::StatusOr<std::vector<std::string>> tokens =
      stamp.ok() ? ReadTokenFile(options_.token_file) : stamp.status();
  if (!tokens.ok()) {
    std::cerr << "treespec: warning: --auth_token_file: reload failed, keeping the previous "
              << tokens_->size() << " token(s): " << tokens.status().message() << std::endl;
    return;
  }
  tokens_ = std::make_shared<const std::vector<std::string>>(std::move(*tokens));
  stamp_ = *stamp;
  ++num_reloads_;
}

absl::Status BearerAuth::Check(absl::string_view authorization) {
  MaybeReload();
  const absl::string_view token = BearerTokenOf(authorization);
  if (token.empty()) return absl::UnauthenticatedError(kMissing);
  std::shared_ptr<const std::vector<std::string>> tokens;
  {
    absl::MutexLock lock(&mu_);
    tokens = tokens_;
  }
  if (!MatchesAnyToken(*tokens, token)) return absl::UnauthenticatedError(kInvalid);
  return absl::OkStatus();
}

grpc::Status BearerAuth::CheckGrpc(const grpc::ServerContext& ctx) {
  const auto& metadata = ctx.client_metadata();
  auto it = metadata.find("authorization");
  const absl::string_view value =
      it == metadata.end() ? absl::string_view()
                           : absl::string_view(it->second.data(), it->second.size());
  absl::Status st = Check(value);
  if (st.ok()) return grpc::Status::OK;
  return grpc::Status(grpc::StatusCode::UNAUTHENTICATED, std::string(st.message()));
}

int64_t BearerAuth::num_reloads() const {
  absl::MutexLock lock(&mu_);
  return num_reloads_;
}

}  // namespace treespec
