#ifndef RATELIMIT_SERVER_ADMIN_AUTH_H_
#define RATELIMIT_SERVER_ADMIN_AUTH_H_

#include <optional>
#include <string>
#include "absl/strings/string_view.h"

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "storage/admin_token.h"

namespace ratelimit {

// Authorizes administrative calls (Reset) by a shared bearer token, sent by the caller as the
// gRPC metadata `authorization: Bearer <token>`. The comparison takes the same time whatever
// the presented token is, so timing does not reveal how much of it matched.
//
// Ownership: keeps its own copy of the token.
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

// The admin token by the rule of ReadAdminToken (storage/admin_token.h: first line of `file`,
// trimmed, else the environment variable `env`, else empty = administration disabled), with its
// warning about a group- or other-readable file logged. Errors as ReadAdminToken.
absl::StatusOr<std::string> LoadAdminToken(const std::string& file, const char* env);

}  // namespace ratelimit

#endif  // RATELIMIT_SERVER_ADMIN_AUTH_H_
