#ifndef RATELIMIT_SERVER_ADMIN_AUTH_H_
#define RATELIMIT_SERVER_ADMIN_AUTH_H_

#include <optional>
#include <string>
#include "absl/strings/string_view.h"

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace ratelimit {

// Authorizes administrative calls (Reset) by a shared bearer token, sent by the caller as the
// gRPC metadata `authorization: Bearer <token>`. The comparison takes the same time whatever
// the presented token is, so timing does not reveal how much of it matched.
//
// Thread safety: immutable after construction; thread-safe.
class AdminAuthenticator {
 public:
  // An empty `token` disables administrative calls: every one is PERMISSION_DENIED.
  explicit AdminAuthenticator(std::string token) : token_(std::move(token)) {}

  // `authorization` is the metadata value, or nullopt when the caller sent none.
  // UNAUTHENTICATED: no credential, or not of the form "Bearer <token>".
  // PERMISSION_DENIED: wrong token, or administration disabled.
  absl::Status Authorize(std::optional<absl::string_view> authorization) const;

  bool enabled() const { return !token_.empty(); }

 private:
  const std::string token_;
};

// True when `a` equals `b`; the time taken depends only on the length of `b` (the secret).
bool ConstantTimeEquals(absl::string_view a, absl::string_view b);

// The admin token: the first line of `file` when given, else the environment variable `env`,
// else empty (administration disabled). Surrounding whitespace is trimmed. An unreadable or
// empty file is an error: an operator who names a file means to enable administration. A file
// that group or others may access is accepted with a logged warning (AdminTokenFileWarning).
absl::StatusOr<std::string> LoadAdminToken(const std::string& file, const char* env);

// A warning naming `file` and its mode when group or others have any access to it; empty when
// only its owner has (or it cannot be examined).
std::string AdminTokenFileWarning(const std::string& file);

}  // namespace ratelimit

#endif  // RATELIMIT_SERVER_ADMIN_AUTH_H_
