#ifndef RATELIMIT_STORAGE_ADMIN_TOKEN_H_
#define RATELIMIT_STORAGE_ADMIN_TOKEN_H_

// The one rule for finding the admin token, used by the server (which checks it) and by the
// `ratelimit` tool (which presents it). Part of the `ratelimit_file_util` target.
//
// Thread safety: the functions keep no state and are safe to call from any thread.

#include <string>

#include "absl/status/statusor.h"

namespace ratelimit {

struct AdminTokenSource {
  // The token; empty means none was configured (administration disabled / no credential).
  std::string token;
  // Non-empty when the token file may be read by group or others (see AdminTokenFileWarning);
  // the caller reports it (log line, stderr) and goes on.
  std::string warning;
};

// The admin token: the first line of `file` when `file` is non-empty, else the environment
// variable `env` (when non-null and set), else empty. Surrounding whitespace is trimmed.
// NOT_FOUND: `file` cannot be read or has no line. INVALID_ARGUMENT: its first line is blank
// (an operator who names a file means to use a token). Nothing is logged.
absl::StatusOr<AdminTokenSource> ReadAdminToken(const std::string& file, const char* env);

// A warning naming `file` and its mode when group or others have any access to it; empty when
// only its owner has (or it cannot be examined).
std::string AdminTokenFileWarning(const std::string& file);

}  // namespace ratelimit

#endif  // RATELIMIT_STORAGE_ADMIN_TOKEN_H_
